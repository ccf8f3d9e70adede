"""The record's wrong fix (`pip uninstall -y nixl` on top of the FIXED sglang image), pushed to
staging and probed BY REFERENCE — with and without `--engine sglang`, in the spec's repository
and outside it: find_spec FAILs naming nixl every way. The fixed image
probed the same way passes, so the check can tell the two apart. And the spec NAME `sglang`
resolves to its latest verified build for `cluster probe` and `promote`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from imagekit.build import build_image

pytestmark = [pytest.mark.docker, pytest.mark.registry]
REPO = Path(__file__).resolve().parents[2]


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "imagekit", *args], capture_output=True,
                          text=True, timeout=600, check=False, cwd=REPO, env=env)


@pytest.fixture(scope="module")
def fixed(spec, engine, session_store):
    """The fixed sglang image, built from its stand-in (only sglang's: these tests need no
    vllm) and pushed to staging."""
    from imagekit.standins import build_standins

    only_sglang = spec.model_copy(update={"images": {"sglang": spec.images["sglang"]}})
    build_standins(only_sglang, engine, session_store, "local")
    return build_image(spec, "sglang", engine, session_store, profile="local")


@pytest.fixture(scope="module")
def wrong_fix(infra, fixed, tmp_path_factory):
    """The wrong fix built ON TOP of the fixed image, pushed under the spec's repository and
    under a repository no spec image owns."""
    context = tmp_path_factory.mktemp("wrong-fix-on-fixed")
    (context / "Dockerfile").write_text(
        f"FROM {fixed.local_tag}\nRUN python3 -m pip uninstall -y nixl && python3 -m pip check\n")
    tag = uuid.uuid4().hex[:8]
    staging = infra.registries["staging"].address
    refs = {"spec_repo": f"{staging}/imagekit/sglang:wrongfix-{tag}",
            "other_repo": f"{staging}/imagekit-candidates/sgl:wrongfix-{tag}"}
    docker = str(infra.docker_client)
    env = {**os.environ, "DOCKER_CONFIG": str(infra.docker_config_dir), "DOCKER_BUILDKIT": "0"}
    subprocess.run([docker, "build", "-q", "--network", "none", "-t", refs["spec_repo"], "-t",
                    refs["other_repo"], str(context)], check=True, capture_output=True, env=env)
    for ref in refs.values():
        subprocess.run([docker, "push", "-q", ref], check=True, capture_output=True, env=env)
    yield refs
    subprocess.run([docker, "rmi", *refs.values()], capture_output=True, env=env, check=False)


def probe(ref: str, evidence: Path, *extra: str) -> tuple[int, dict]:
    done = cli("probe", ref, "--json", "--evidence-dir", str(evidence), *extra)
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, json.loads(done.stdout)


def checks(report: dict) -> dict:
    return {c["name"]: c for c in report["checks"]}


@pytest.mark.parametrize("extra", [[], ["--engine", "sglang"]], ids=["no-engine", "engine"])
def test_wrong_fix_in_the_spec_repository_fails_find_spec_naming_nixl(spec, wrong_fix, extra,
                                                                       tmp_path):
    code, report = probe(wrong_fix["spec_repo"], tmp_path, *extra)
    found = checks(report)
    assert code == 1 and report["status"] == "FAIL"
    # the spec image's probes, not just find_spec of the engine's package
    assert list(found) == spec.images["sglang"].probes
    assert found["find_spec"]["status"] == "FAIL"
    assert "nixl" in found["find_spec"]["data"]["missing"]
    assert "nixl" in found["find_spec"]["detail"]
    assert found["pip_check"]["status"] == "PASS"  # the record's trap: pip check is fine


def test_wrong_fix_outside_the_spec_fails_on_the_engines_builtin_list(wrong_fix, tmp_path):
    code, report = probe(wrong_fix["other_repo"], tmp_path, "--engine", "sglang",
                         "--probe", "pip_check", "--probe", "find_spec")
    found = checks(report)
    assert code == 1 and found["pip_check"]["status"] == "PASS"
    assert found["find_spec"]["status"] == "FAIL"
    assert {"nixl", "nixl._api"} <= set(found["find_spec"]["data"]["missing"])


def test_fixed_image_by_reference_passes_find_spec(fixed, tmp_path):
    """The same probe by reference on the fixed image: nixl and nixl._api are found."""
    code, report = probe(str(fixed.reference), tmp_path, "--probe", "find_spec")
    found = checks(report)
    assert code == 0 and report["status"] == "PASS", report
    assert found["find_spec"]["status"] == "PASS", found["find_spec"]
    assert found["find_spec"]["data"]["modules"]["nixl"].endswith("nixl/__init__.py")
    code, report = probe(str(fixed.reference), tmp_path, "--engine", "sglang", "--probe",
                         "find_spec", "--find-spec", "nixl._api")
    assert code == 0 and checks(report)["find_spec"]["status"] == "PASS", report


def test_promote_by_spec_name(fixed, session_store, infra, tmp_path):
    staging = infra.registries["staging"].address
    dest = f"{staging}/imagekit-relays/sglang:{uuid.uuid4().hex[:8]}"
    done = cli("promote", "sglang", "--to", dest, "--json", "--evidence-dir",
               str(session_store.root), "--force", "--reason", "test: name resolution")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["digest"] == str(fixed.digest)
    assert data["source"] == str(fixed.reference)
    assert data["hops"][0]["endpoint"] == dest and data["hops"][0]["verified"]


@pytest.mark.cluster
def test_cluster_probe_by_spec_name(fixed, session_store, infra):
    """`cluster probe sglang` resolves the spec name (the staging repository pinned by the
    build's digest). An unmatched --expect-digest stops it before any Pod is started, which
    shows what the name resolved to without a Pod run."""
    wrong = "sha256:" + "0" * 64
    done = cli("cluster", "probe", "sglang", "--json", "--expect-digest", wrong,
               "--evidence-dir", str(session_store.root))
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert "docker.io" not in done.stdout + done.stderr
    expected = next(c for c in report["checks"] if c["name"] == "expected_digest")
    assert expected["data"]["resolved"] == str(fixed.digest)
    assert str(fixed.reference.repository) in json.dumps(report)
