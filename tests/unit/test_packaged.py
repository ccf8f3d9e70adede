"""The shipped folders: every default lookup reads the repository's top-level dockerfiles/,
probes/, manifests/ and gpu_checks/preflight/ through imagekit.packaged (the wheel maps them in),
never the working directory; the env overrides still win; a missing probes folder is one line,
exit 2, before anything runs; no code lives under a folder named assets."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from imagekit import packaged
from imagekit.errors import InvalidInput

#: a checkout: the folders sit at the repository's top (an installed wheel: imagekit/data/)
ASSETS = Path(packaged.__file__).resolve().parents[1]


def test_the_design_cards_layout() -> None:
    """dockerfiles/, probes/, manifests/ and gpu_checks/preflight/ at the top hold those files,
    and nothing under imagekit/ is a folder called assets."""
    assert (ASSETS / "dockerfiles" / "images.toml").is_file()
    assert (ASSETS / "dockerfiles" / "sglang" / "Dockerfile").is_file()
    assert (ASSETS / "probes" / "pip_check.py").is_file()
    assert (ASSETS / "manifests" / "probe-pod.yaml.j2").is_file()
    assert (ASSETS / "gpu_checks" / "preflight" / "__main__.py").is_file()
    assert not [p for p in (ASSETS / "imagekit").rglob("assets") if p.is_dir()]
    for folder in packaged.FOLDERS:
        assert packaged.path(folder).is_dir(), folder
    assert packaged.path("preflight") == ASSETS / "gpu_checks" / "preflight"
    with pytest.raises(ValueError, match="no shipped folder named 'assets'"):
        packaged.path("assets")


def test_pyproject_lists_every_package_and_maps_every_folder() -> None:
    """The wheel's packages are listed (the mapped folders live outside imagekit/, so setuptools
    cannot find them): a new imagekit subpackage missing from the list fails here."""
    import tomllib

    setup = tomllib.loads((ASSETS / "pyproject.toml").read_text())["tool"]["setuptools"]
    on_disk = {".".join(p.parent.relative_to(ASSETS).parts)
               for p in (ASSETS / "imagekit").rglob("__init__.py")}
    listed = set(setup["packages"])
    assert on_disk <= listed, sorted(on_disk - listed)
    assert setup["package-dir"] == {"imagekit.data.dockerfiles": "dockerfiles",
                                    "imagekit.data.probes": "probes",
                                    "imagekit.data.manifests": "manifests",
                                    "preflight": "gpu_checks/preflight"}
    assert listed - on_disk == set(setup["package-dir"])


def test_every_default_lookup_is_under_the_package(monkeypatch, tmp_path: Path) -> None:
    from imagekit.cluster import manifests
    from imagekit.clusteraccept import controller_image, rehearsal
    from imagekit.probe.runner import probes_dir
    from imagekit.spec.loader import default_spec_path

    for name in ("IMAGEKIT_IMAGES_SPEC", "IMAGEKIT_PROBES_DIR", "IMAGEKIT_MANIFESTS_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)            # an empty folder: no ./dockerfiles/images.toml
    assert default_spec_path() == ASSETS / "dockerfiles" / "images.toml"
    assert probes_dir() == ASSETS / "probes"
    assert controller_image.DOCKERFILE_DIR == ASSETS / "dockerfiles" / "controller"
    assert Path(rehearsal.MATRIX) == ASSETS / "manifests" / "acceptance" / "matrix-standin.toml"
    assert Path(rehearsal.MATRIX).is_file()
    assert manifests.manifests_dir() == ASSETS / "manifests"
    for path in (default_spec_path(), probes_dir() / "find_spec.py",
                 controller_image.DOCKERFILE_DIR / "Dockerfile",
                 ASSETS / "manifests" / "probe-pod.yaml.j2", ASSETS / "manifests" / "launch.sh"):
        assert path.is_file(), path


def test_env_overrides_win(monkeypatch, tmp_path: Path) -> None:
    from imagekit.probe.runner import probes_dir
    from imagekit.settings import load
    from imagekit.spec.loader import default_spec_path

    (tmp_path / "p.py").write_text("print(1)\n")
    monkeypatch.chdir(tmp_path)                # an empty folder: no ./dockerfiles/images.toml
    monkeypatch.setenv("IMAGEKIT_PROBES_DIR", str(tmp_path / "ignored"))  # read only at the CLI
    monkeypatch.setenv("IMAGEKIT_IMAGES_SPEC", str(tmp_path / "ignored.toml"))  # the same
    assert probes_dir() == ASSETS / "probes"
    assert probes_dir(load({"IMAGEKIT_PROBES_DIR": str(tmp_path)}).probes_dir) == tmp_path
    assert default_spec_path() == ASSETS / "dockerfiles" / "images.toml"
    given = load({"IMAGEKIT_IMAGES_SPEC": "mine.toml"}).images_spec
    assert default_spec_path(given) == tmp_path / "mine.toml"     # made absolute, as before
    assert default_spec_path(None) == default_spec_path("") == default_spec_path()


def test_the_manifests_folder_is_an_argument(monkeypatch, tmp_path: Path) -> None:
    """$IMAGEKIT_MANIFESTS_DIR is read by the CLI (settings) and passed down: the library
    renders from the folder it is given, else the packaged one, whatever the process carries."""
    from imagekit.cluster import manifests
    from imagekit.settings import load

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "x.yaml.j2").write_text("apiVersion: v1\nkind: ConfigMap\n"
                                    "metadata: {name: {{ name | tojson }}}\n")
    (mine / "s.sh").write_text("echo mine\n")
    monkeypatch.setenv("IMAGEKIT_MANIFESTS_DIR", str(tmp_path / "ignored"))
    assert manifests.manifests_dir() == ASSETS / "manifests"
    given = load({"IMAGEKIT_MANIFESTS_DIR": str(mine)}).manifests_dir
    assert manifests.manifests_dir(given) == mine
    assert manifests.render("x.yaml.j2", template_dir=given, name="n")["metadata"]["name"] == "n"
    assert manifests.script_files("s.sh", template_dir=given) == {"s.sh": "echo mine\n"}
    with pytest.raises(InvalidInput) as caught:                       # not in the packaged one
        manifests.render("x.yaml.j2", name="n")
    assert caught.value.where == str(ASSETS / "manifests" / "x.yaml.j2")


def test_probes_version_is_the_same_key_whoever_names_the_folder(tmp_path: Path) -> None:
    """The probe cache keys stay byte-identical: the packaged probes give the same
    probes_version by default, named, or copied elsewhere (the key is of names and bytes)."""
    import shutil

    from imagekit.probe.runner import probes_dir, probes_version

    shipped = probes_version()
    assert shipped == probes_version(probes_dir()) == probes_version(ASSETS / "probes")
    shutil.copytree(ASSETS / "probes", tmp_path / "copy")
    assert probes_version(probes_dir(tmp_path / "copy")) == shipped
    (tmp_path / "copy" / "extra.py").write_text("print(2)\n")       # the case that differs
    assert probes_version(probes_dir(tmp_path / "copy")) != shipped


def test_a_missing_or_empty_probes_folder_is_bad_input(tmp_path: Path) -> None:
    from imagekit.probe.runner import probes_dir

    with pytest.raises(InvalidInput, match="IMAGEKIT_PROBES_DIR names no folder"):
        probes_dir(tmp_path)                                           # empty
    with pytest.raises(InvalidInput) as caught:
        probes_dir(tmp_path / "gone")
    assert caught.value.where == str(tmp_path / "gone")
    assert not (tmp_path / "gone").exists()


def test_cluster_probe_refuses_an_empty_probes_folder_in_one_line(tmp_path: Path) -> None:
    env = {**os.environ, "IMAGEKIT_PROBES_DIR": str(tmp_path),
           "IMAGEKIT_EVIDENCE_DIR": str(tmp_path / "ev")}
    done = subprocess.run([sys.executable, "-m", "imagekit", "cluster", "probe",
                           "127.0.0.1:1/x@sha256:" + "a" * 64], capture_output=True, text=True,
                          timeout=60, check=False, env=env, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip() == ("imagekit: error: $IMAGEKIT_PROBES_DIR names no folder of "
                                   f"probes (*.py) ({tmp_path})")
    assert not (tmp_path / "ev").exists()


def test_the_spec_init_writes_is_found_without_spec(monkeypatch, tmp_path: Path) -> None:
    """After `imagekit init`, the folder's images.toml is the default, before a checkout's
    dockerfiles/images.toml and the packaged one."""
    from imagekit.spec.loader import default_spec_path

    monkeypatch.chdir(tmp_path)
    (tmp_path / "dockerfiles").mkdir()
    (tmp_path / "dockerfiles" / "images.toml").write_text("")
    assert default_spec_path() == tmp_path / "dockerfiles" / "images.toml"
    (tmp_path / "images.toml").write_text("")
    assert default_spec_path() == tmp_path / "images.toml"
