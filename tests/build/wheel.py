"""The wheel as a user installs it, for tests/build/test_wheel.py and the benches
(bench/installed.py): a copy of this tree as git sees it, built with `python -m build`, and
`pip install <wheel>[media]` into a venv offline from a cached wheelhouse
($IMAGEKIT_TEST_WHEELHOUSE, default ~/.cache/imagekit-test/wheelhouse), which `pip download`
fills once when a requirement is missing. Each step returns pip's or build's CompletedProcess;
the caller judges it (a test asserts, a bench stops with one line)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXTRAS = "[media]"


def run(argv: list[str], *, cwd: Path, env: dict[str, str] | None = None,
        timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def source_copy(dest: Path) -> Path:
    """The tree's files as git sees them (tracked, and new files not ignored): no build/,
    no machine-local lock, no __pycache__."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], cwd=REPO, capture_output=True, check=True)
    for name in sorted(set(listed.stdout.decode().split("\0"))):
        source = REPO / name
        if name and source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


def wheelhouse() -> Path:
    default = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    path = Path(os.environ.get("IMAGEKIT_TEST_WHEELHOUSE") or
                default / "imagekit-test" / "wheelhouse")
    path.mkdir(parents=True, exist_ok=True)
    return path


def build(source: Path, dist: Path) -> subprocess.CompletedProcess:
    """`python -m build --wheel` of `source` into `dist` (no isolation: offline)."""
    return run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir",
                str(dist), str(source)], cwd=dist.parent)


def install(wheel: Path, venv: Path, *, env: dict[str, str] | None,
            compile_bytecode: bool) -> subprocess.CompletedProcess:
    """`pip install <wheel>[media]` into `venv` (made with `python -m venv`), offline
    from the wheelhouse; a wheelhouse that lacks a requirement is filled by `pip download`
    once, then the install is tried again. Returns the run that decides: the fill when it
    failed, else the last install."""
    house = wheelhouse()
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python")]
    argv = [*pip, "install", *([] if compile_bytecode else ["--no-compile"]), "--no-index",
            "--find-links", str(house), f"{wheel}{EXTRAS}"]
    done = run(argv, cwd=venv, env=env)
    if done.returncode != 0:
        fill = run([sys.executable, "-m", "pip", "download", "--dest", str(house),
                    f"{wheel}{EXTRAS}"], cwd=venv, env=env, timeout=1200)
        if fill.returncode != 0:
            return fill
        for own in house.glob("imagekit-*.whl"):
            own.unlink()
        done = run(argv, cwd=venv, env=env)
    return done
