"""The wheel as a user installs it: built from this tree, installed into a FRESH venv
with `pip install imagekit-*.whl[media]`, then run from an empty folder outside the
checkout against the real registries and cluster:

- `imagekit --version` is `imagekit.__version__`, then what the release supports;
- the user's own spec (`mine/my-images.toml`, its Dockerfile and build context beside it, the
  commands run from the folder above it): `imagekit pin` writes the lock beside the spec and
  `imagekit images verify` builds from the spec's folder, pushes to staging and probes: PASS;
- `imagekit probe REF` and `imagekit cluster probe REF` of that image: PASS, with the packaged
  probes (the cluster probe's ConfigMap holds exactly the installed package's probe files);
- every attempt in evidence names imagekit.__version__;
- every packaged file resolves under the fresh venv's site-packages, and no output or evidence
  names the checkout (the source copy the wheel was built from is deleted before the runs);
- the failing case: the same install with its package data removed fails, one line naming the
  site-packages path (a wheel without package data fails this test).

The fresh venv's dependencies come from a wheelhouse cached outside the checkout
($IMAGEKIT_TEST_WHEELHOUSE, default ~/.cache/imagekit-test/wheelhouse), filled by `pip download`
the first time (or when the requirements change); the install itself is `--no-index`.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import uuid
from pathlib import Path

import pytest

import imagekit
from tests.build.wheel import install
from tests.build.wheel import run as _run

pytestmark = [pytest.mark.docker, pytest.mark.registry, pytest.mark.cluster, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
#: env that would point the installed package back into a checkout: never passed to the user's
#: commands (the user has none of them)
CHECKOUT_ENV = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "IMAGEKIT_IMAGES_SPEC",
                "IMAGEKIT_PROBES_DIR", "IMAGEKIT_MANIFESTS_DIR", "IMAGEKIT_EVIDENCE_DIR")


def _clean_env(venv: Path) -> dict[str, str]:
    """The user's environment: this session's, less what points into a checkout, with the
    fresh venv's bin first on PATH."""
    env = {k: v for k, v in os.environ.items() if k not in CHECKOUT_ENV}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return env


@pytest.fixture(scope="module")
def installed(built_wheel, tmp_path_factory):
    """(venv, site-packages, deleted source copy): the session's wheel (tests/conftest.py
    `built_wheel`, built from a copy of this tree, the copy deleted afterwards) installed into a
    fresh venv."""
    wheel, source = built_wheel
    root = tmp_path_factory.mktemp("wheel")
    venv = root / "venv"
    made = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=root)
    assert made.returncode == 0, made.stderr
    done = install(wheel, venv, env=_clean_env(venv), compile_bytecode=False)
    assert done.returncode == 0, done.stderr[-3000:]
    [site] = (venv / "lib").glob("python3*/site-packages")
    return venv, site, source


@pytest.fixture(scope="module")
def user_env(installed):
    return _clean_env(installed[0])


@pytest.fixture(scope="module")
def base_image(infra):
    """A small image with sh and python3 (tests/cluster/images.py), pushed to staging by tag:
    the user's base."""
    from imagekit.registry import RegistryClient, RegistryOptions

    spec = importlib.util.spec_from_file_location("wheel_test_images",
                                                  REPO / "tests" / "cluster" / "images.py")
    assert spec is not None and spec.loader is not None
    images = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = images  # its dataclass looks its module up
    spec.loader.exec_module(images)
    staging = infra.registry("staging")
    with RegistryClient(staging.address, RegistryOptions(
            ca_file=staging.ca_file or infra.ca_file, docker_config=infra.docker_config_dir,
            insecure=frozenset({staging.address}))) as client:
        return images.push_image(client, staging.address, "imagekit-test/python", "wheel-base",
                                 images.build_layer())


USER_SPEC = """\
# my own images spec: every path is relative to this file
version = 1
default_profile = "mine"

[images.tiny]
engine = "vllm"
dockerfile = "tiny/Dockerfile"
repository = "imagekit-wheel/tiny"
probes = ["find_spec"]
find_spec = ["json"]
promotion = ["staging"]

[images.tiny.base]
mine = "{base}"

[profiles.mine]
lock = "my-images.lock"
staging = "{staging}"
production = "{production}"
target = "{target}"
"""


def test_the_installed_wheel_works_from_an_empty_folder(installed, user_env, base_image, infra,
                                                        tmp_path) -> None:
    venv, site, source = installed
    cwd = tmp_path / "empty"
    cwd.mkdir()
    ik = str(venv / "bin" / "imagekit")

    # the package and its data are the installed ones; the version is the one place's
    where = _run([str(venv / "bin" / "python"), "-c",
                  "import json, imagekit, imagekit.packaged as a; print(json.dumps("
                  "[imagekit.__file__, str(a.path('probes')), imagekit.__version__]))"],
                 cwd=cwd, env=user_env)
    assert where.returncode == 0, where.stderr
    package_file, probes_dir, version = json.loads(where.stdout)
    assert Path(package_file).is_relative_to(site) and Path(probes_dir).is_relative_to(site)
    assert version == imagekit.__version__
    shown = _run([ik, "--version"], cwd=cwd, env=user_env)
    first, supports = shown.stdout.splitlines()
    assert shown.returncode == 0 and first == f"imagekit {imagekit.__version__}", shown.stdout
    assert supports.startswith("supports: Kubernetes "), shown.stdout
    data = site / "imagekit" / "data"   # the repository's top-level folders, mapped in
    assert Path(probes_dir) == data / "probes"
    packaged_probes = sorted(p.name for p in (data / "probes").glob("*.py"))
    assert {"find_spec.py", "versions.py", "_common.py"} <= set(packaged_probes)
    for name in ("manifests/probe-pod.yaml.j2", "manifests/launch.sh",
                 "manifests/controller/controller.py", "manifests/probe/probe-runner.sh",
                 "dockerfiles/images.toml", "dockerfiles/controller/Dockerfile",
                 "dockerfiles/standins/vllm-base/Dockerfile",
                 "dockerfiles/standins/vllm-base/vllm-0.32.0.dist-info/METADATA"):
        assert (data / name).is_file(), name
    # the GPU preflight: the top-level package `preflight`, run as `python -m preflight`
    assert (site / "preflight" / "__main__.py").is_file()
    assert not (site / "imagekit" / "assets").exists()
    preflight_help = _run([str(venv / "bin" / "python"), "-c",
                           "import preflight.fit, preflight.stats; print(preflight.__file__)"],
                          cwd=cwd, env=user_env)
    assert preflight_help.returncode == 0, preflight_help.stderr
    assert Path(preflight_help.stdout.strip()).is_relative_to(site / "preflight")

    # the user's spec, Dockerfile and build context in a folder of their own; the commands run
    # from the folder above it, so only the spec's folder can resolve `tiny/Dockerfile`
    token = uuid.uuid4().hex
    mine = cwd / "mine"
    (mine / "tiny").mkdir(parents=True)
    registries = {role: infra.registry(role).address
                  for role in ("staging", "production", "target")}
    (mine / "my-images.toml").write_text(USER_SPEC.format(base=base_image.reference,
                                                          **registries))
    (mine / "tiny" / "Dockerfile").write_text(
        "ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nCOPY hello.txt /hello.txt\n")
    (mine / "tiny" / "hello.txt").write_text(token + "\n")
    spec = "mine/my-images.toml"

    pinned = _run([ik, "pin", "--spec", spec, "--json"], cwd=cwd, env=user_env)
    assert pinned.returncode == 0, pinned.stdout + pinned.stderr
    assert str(base_image.digest) in (mine / "my-images.lock").read_text()
    assert not (cwd / "my-images.lock").exists()

    verified = _run([ik, "images", "verify", "--spec", spec, "--json"], cwd=cwd, env=user_env)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    report = json.loads(verified.stdout)
    [image] = report["images"]
    assert image["verdict"] == "PASS", image
    assert {c["name"]: c["status"] for c in image["checks"]} == {"find_spec": "PASS"}
    reference = image["reference"]          # registry/repo@sha256:… in staging
    digest = image["digest"]
    assert reference.startswith(registries["staging"] + "/imagekit-wheel/tiny@")
    # built from the spec's folder: this run's file is in the image
    docker = str(infra.docker_client)
    shown_file = _run([docker, "run", "--rm", "--network", "none", reference, "cat",
                       "/hello.txt"], cwd=cwd, env={**user_env,
                                                    "DOCKER_CONFIG": str(infra.docker_config_dir)})
    assert shown_file.stdout.strip() == token, shown_file.stderr

    probed = _run([ik, "probe", reference, "--engine", "vllm", "--probe", "find_spec",
                   "--find-spec", "json", "--json"], cwd=cwd, env=user_env)
    assert probed.returncode == 0, probed.stdout + probed.stderr
    probe = json.loads(probed.stdout)
    assert probe["status"] == "PASS" and probe["digest"] == digest, probe
    assert Path(probe["evidence"]).is_relative_to(cwd / ".evidence")

    in_cluster = _run([ik, "cluster", "probe", reference, "--probe", "find_spec=json",
                       "--probe", "versions", "--json"], cwd=cwd, env=user_env)
    assert in_cluster.returncode == 0, in_cluster.stdout + in_cluster.stderr
    result = json.loads(in_cluster.stdout)
    checks = {c["name"]: c["status"] for c in result["checks"]}
    assert checks["image_id"] == "PASS" and checks["probe:find_spec"] == "PASS", checks
    assert checks["cleanup"] == "PASS", checks
    [files] = (cwd / ".evidence" / "sha256" / digest.split(":")[1]).glob(
        "cluster-probe/*/probe-files.json")
    # the plan is ours; _cudafit.py is the packaged preflight/fit.py under the probes' name
    mounted = set(json.loads(files.read_text())) - {"probe-plan.txt"}
    assert mounted == {*packaged_probes, "probe-runner.sh", "_cudafit.py"}, mounted

    # every attempt names the version that made it (the one place: imagekit.__version__)
    attempts = list((cwd / ".evidence").rglob("attempt.json"))
    kinds = {json.loads(a.read_text())["kind"] for a in attempts}
    assert {"build", "probe", "images-verify", "cluster-probe"} <= kinds, kinds
    assert {json.loads(a.read_text())["context"]["imagekit_version"] for a in attempts} == \
        {imagekit.__version__}

    # no path into the checkout (or the deleted source copy) anywhere the user sees
    outputs = [pinned, verified, probed, in_cluster]
    seen = "".join(o.stdout + o.stderr for o in outputs) + "".join(
        p.read_text(errors="replace") for p in (cwd / ".evidence").rglob("*") if p.is_file())
    for checkout in (str(REPO), str(source)):
        assert checkout not in seen, checkout

    # the failing case: the same install without its package data fails, naming site-packages
    shutil.rmtree(data / "probes")
    broken = _run([ik, "cluster", "probe", reference, "--json"], cwd=cwd, env=user_env)
    assert broken.returncode == 2, broken.stdout + broken.stderr
    line = broken.stderr.strip()
    assert line.startswith("imagekit: error: the installed package has no probes"), line
    assert str(data / "probes") in line and "\n" not in line
