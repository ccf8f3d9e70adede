"""imagekit as a user has it, for the benches: the wheel built from this tree, installed by pip
(bytecode compiled, as pip does by default) into a fresh venv with no test extra.

Why the benches need it: the checkout's venv carries the test extra, whose uvicorn brings
click; httpx's package then imports its own command-line client (click, rich, pygments) at every
start, ~0.05-0.07 s of CPU a user's install never pays (imagekit/registry/__init__.py). A start-up
figure taken there is the developer's, not the user's.

Built and installed by the same steps as tests/build/test_wheel.py (tests/build/wheel.py: its
source copy, its build, its wheelhouse).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def install(where: Path) -> Path:
    """The `imagekit` program of a fresh venv under `where`, installed from this tree's wheel."""
    sys.path.insert(0, str(ROOT))
    from tests.build import wheel

    build_root = Path(tempfile.mkdtemp(prefix="imagekit-bench-wheel-"))
    try:
        built = wheel.build(wheel.source_copy(build_root / "src"), build_root / "dist")
        if built.returncode != 0:
            raise SystemExit(f"bench: the wheel did not build: {built.stderr[-1500:]}")
        [package] = (build_root / "dist").glob("imagekit-*.whl")
        shutil.rmtree(where, ignore_errors=True)
        made = wheel.run([sys.executable, "-m", "venv", "--without-pip", str(where)],
                         cwd=build_root)
        if made.returncode != 0:
            raise SystemExit(f"bench: no venv at {where}: {made.stderr[-500:]}")
        done = wheel.install(package, where, env=None, compile_bytecode=True)
        if done.returncode != 0:
            raise SystemExit(f"bench: the wheel did not install: {done.stderr[-1500:]}")
    finally:
        shutil.rmtree(build_root, ignore_errors=True)
    program = where / "bin" / "imagekit"
    checked = wheel.run([str(program), "--version"], cwd=Path(tempfile.gettempdir()))
    if checked.returncode != 0:
        raise SystemExit(f"bench: the installed imagekit does not start: {checked.stderr}")
    return program
