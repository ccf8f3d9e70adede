"""imagekit as a user has it, for the benches: the wheel built from this tree, installed by pip
(bytecode compiled, as pip does by default) into a fresh venv with no test extra.

Why the benches need it: the checkout's venv carries the test extra, whose uvicorn brings
click; httpx's package then imports its own command-line client (click, rich, pygments) at every
start, ~0.05-0.07 s of CPU a user's install never pays (imagekit/registry/__init__.py). A start-up
figure taken there is the developer's, not the user's.

The dependencies come from the wheelhouse tests/build/test_wheel.py keeps
($IMAGEKIT_TEST_WHEELHOUSE, default ~/.cache/imagekit-test/wheelhouse), filled by
`pip download` the first time.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXTRAS = "[cluster,media]"


def _run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, check=False, **kwargs)  # type: ignore[call-overload]


def install(where: Path) -> Path:
    """The `imagekit` program of a fresh venv under `where`, installed from this tree's wheel."""
    sys.path.insert(0, str(ROOT))
    from tests.build.test_wheel import _source_copy, _wheelhouse

    build_root = Path(tempfile.mkdtemp(prefix="imagekit-bench-wheel-"))
    try:
        source = _source_copy(build_root / "src")
        built = _run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir",
                      str(build_root / "dist"), str(source)], cwd=build_root)
        if built.returncode != 0:
            raise SystemExit(f"bench: the wheel did not build: {built.stderr[-1500:]}")
        [wheel] = (build_root / "dist").glob("imagekit-*.whl")
        shutil.rmtree(where, ignore_errors=True)
        made = _run([sys.executable, "-m", "venv", "--without-pip", str(where)])
        if made.returncode != 0:
            raise SystemExit(f"bench: no venv at {where}: {made.stderr[-500:]}")
        house = _wheelhouse()
        pip = [sys.executable, "-m", "pip", "--python", str(where / "bin" / "python")]
        install_argv = [*pip, "install", "-q", "--no-index", "--find-links", str(house),
                        f"{wheel}{EXTRAS}"]
        done = _run(install_argv)
        if done.returncode != 0:
            fill = _run([sys.executable, "-m", "pip", "download", "-q", "--dest", str(house),
                         f"{wheel}{EXTRAS}"], timeout=1200)
            if fill.returncode != 0:
                raise SystemExit(f"bench: the wheelhouse could not be filled: "
                                 f"{fill.stderr[-1500:]}")
            for own in house.glob("imagekit-*.whl"):
                own.unlink()
            done = _run(install_argv)
        if done.returncode != 0:
            raise SystemExit(f"bench: the wheel did not install: {done.stderr[-1500:]}")
    finally:
        shutil.rmtree(build_root, ignore_errors=True)
    program = where / "bin" / "imagekit"
    checked = _run([str(program), "--version"], cwd=tempfile.gettempdir())
    if checked.returncode != 0:
        raise SystemExit(f"bench: the installed imagekit does not start: {checked.stderr}")
    return program
