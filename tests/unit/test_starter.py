"""`imagekit init`: the packaged spec and every file it names, copied into a folder of one's own;
locks go beside the spec used, and the spec inside an installed wheel is never written beside.

The failing cases: a second `init` over the files is refused in one line (exit 2) and changes
nothing; `pin` and `standins build` with the installed package's spec are refused before any
registry or engine is asked (before, the lock went into site-packages)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from imagekit import packaged
from imagekit.errors import SpecError

SHIPPED = packaged.path("dockerfiles")
REPO = Path(__file__).resolve().parents[2]


def _cli(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "imagekit", *args], capture_output=True,
                          text=True, timeout=120, check=False, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": str(REPO), **env})


def test_init_writes_a_spec_that_loads_with_every_file_it_names(tmp_path: Path) -> None:
    from imagekit.spec import load_spec

    done = _cli("init", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    spec = load_spec(tmp_path / "images.toml")            # every Dockerfile it names is there
    for name in spec.images:
        assert spec.dockerfile_path(name).read_bytes() == \
            (SHIPPED / spec.images[name].dockerfile).read_bytes()
    assert (tmp_path / "standins" / "vllm-base" / "Dockerfile").is_file()  # local: stand-ins
    # the production lock travels (placeholders only); a machine's resolved lock never does
    assert "placeholder = true" in (tmp_path / "images.lock").read_text()
    assert not (tmp_path / "images.local.lock").exists()
    lines = done.stdout.splitlines()
    assert "wrote images.toml" in lines and "wrote vllm/Dockerfile" in lines
    assert "next: imagekit pin" in lines
    # the locks are the spec's neighbours
    assert spec.lock_path("local") == (tmp_path / "images.local.lock").resolve()
    assert spec.writable_lock_path("local") == spec.lock_path("local")


def test_init_refuses_to_overwrite_in_one_line_unless_forced(tmp_path: Path) -> None:
    assert _cli("init", "ci", cwd=tmp_path).returncode == 0
    mine = tmp_path / "ci" / "images.toml"
    mine.write_text(mine.read_text() + "\n# edited\n")
    again = _cli("init", "ci", cwd=tmp_path)
    assert again.returncode == 2
    [line] = again.stderr.splitlines()
    assert line.startswith("imagekit: error: images.toml and ") and "--overwrite" in line, line
    assert again.stdout == ""
    assert mine.read_text().endswith("# edited\n")       # nothing was written
    forced = _cli("init", "ci", "--overwrite", cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr
    assert "next: imagekit pin --spec ci/images.toml" in forced.stdout.splitlines()
    assert not mine.read_text().endswith("# edited\n")


def test_init_refuses_a_folder_in_a_files_place(tmp_path: Path) -> None:
    (tmp_path / "images.toml").mkdir()
    done = _cli("init", "--overwrite", cwd=tmp_path)
    assert done.returncode == 2 and "something other than a file" in done.stderr
    assert not (tmp_path / "vllm").exists()


@pytest.fixture
def installed_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The shipped dockerfiles/ as an installed wheel has them (imagekit/data/dockerfiles in
    site-packages): what `default_spec_path` returns in an empty folder."""
    installed = tmp_path / "site-packages" / "imagekit" / "data" / "dockerfiles"
    shutil.copytree(SHIPPED, installed, ignore=shutil.ignore_patterns("images.local.lock"))
    monkeypatch.setitem(packaged.FOLDERS, "dockerfiles",
                        (installed, packaged.FOLDERS["dockerfiles"][1]))
    monkeypatch.chdir(tmp_path)
    return installed


class _NoRegistry:
    def get(self, registry: str):  # noqa: ANN201
        raise AssertionError(f"a registry was asked ({registry}) before the refusal")


def test_pin_never_writes_a_lock_into_the_installed_package(installed_spec: Path) -> None:
    from imagekit.build import pin
    from imagekit.spec import default_spec_path, load_spec

    assert default_spec_path() == installed_spec / "images.toml"
    spec = load_spec()
    with pytest.raises(SpecError, match=r"packaged spec is read-only .* `imagekit init`"):
        pin(spec, pool=_NoRegistry())  # type: ignore[arg-type]
    assert not (installed_spec / "images.local.lock").exists()
    with pytest.raises(AssertionError, match="a registry was asked"):   # --check only reads
        pin(spec, check=True, pool=_NoRegistry())  # type: ignore[arg-type]


def test_standins_build_never_writes_a_lock_into_the_installed_package(
        installed_spec: Path) -> None:
    from imagekit.spec import load_spec
    from imagekit.standins import build_standins

    class NoEngine:
        def ping(self) -> None:
            raise AssertionError("the engine was asked before the refusal")

    with pytest.raises(SpecError, match="imagekit init"):
        build_standins(load_spec(), NoEngine(), None, "local")  # type: ignore[arg-type]


def test_init_copies_the_installed_spec_into_a_folder_that_pins(installed_spec: Path,
                                                                 tmp_path: Path) -> None:
    from imagekit.spec import load_spec
    from imagekit.spec.starter import write_starter

    done = write_starter(tmp_path / "mine")
    assert done.spec == tmp_path / "mine" / "images.toml"
    copy = load_spec(done.spec)
    assert copy.writable_lock_path("local") == tmp_path / "mine" / "images.local.lock"
    assert all(not packaged.in_installed_package(p) for p in done.written)


def test_the_rehearsal_works_on_a_copy_of_the_installed_spec(installed_spec: Path,
                                                             tmp_path: Path) -> None:
    """`imagekit rehearsal` from a wheel: its `standins build` step pins into a copy beside
    the reports, never into the installed package (a checkout's spec is used as it is)."""
    from imagekit.rehearsal.flow import writable_spec
    from imagekit.spec import load_spec

    out = tmp_path / "reports"
    spec = writable_spec(load_spec(), out)
    assert spec.root == out / "spec"
    assert spec.writable_lock_path("local") == out / "spec" / "images.local.lock"
    again = writable_spec(load_spec(), out)          # a second run over the same reports
    assert again.root == out / "spec"
    mine = write_starter_into(tmp_path / "mine")
    assert writable_spec(mine, out) is mine


def write_starter_into(folder: Path):  # noqa: ANN201 - an ImagesSpec
    from imagekit.spec import load_spec
    from imagekit.spec.starter import write_starter

    return load_spec(write_starter(folder).spec)
