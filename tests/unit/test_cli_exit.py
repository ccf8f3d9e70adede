"""`imagekit.cli.leave`: a finished run ends without the interpreter's teardown, yet loses
nothing an ordinary exit would do: exit handlers run, buffered output arrives, the status is the
command's, and a thread that is not a daemon is still waited for."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _child(code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                          text=True, timeout=60, check=False)


def test_handlers_run_output_is_flushed_and_the_status_kept(tmp_path: Path) -> None:
    # stdout is a pipe here, so block-buffered: without the flush, os._exit would drop "out"
    done = _child("""
        import atexit, sys, tempfile
        from imagekit.cli import leave
        kept = tempfile.TemporaryDirectory(dir=".")  # its finalizer is an exit handler
        atexit.register(lambda: print("handler ran", end=""))
        sys.stdout.write("out ")
        sys.stderr.write("err")
        leave(3)
        print("never")
    """, tmp_path)
    assert done.returncode == 3, done
    assert done.stdout == "out handler ran" and done.stderr == "err", done
    assert list(tmp_path.iterdir()) == [], "the temporary directory's finalizer did not run"


def test_text_status_and_none(tmp_path: Path) -> None:
    done = _child("from imagekit.cli import leave\nleave('imagekit: gone')", tmp_path)
    assert (done.returncode, done.stderr) == (1, "imagekit: gone\n"), done
    done = _child("from imagekit.cli import leave\nleave(None)", tmp_path)
    assert done.returncode == 0, done


def test_a_running_thread_is_waited_for(tmp_path: Path) -> None:
    done = _child("""
        import threading, time
        from pathlib import Path
        from imagekit.cli import leave
        def late():
            time.sleep(0.5)
            Path("late").write_text("written")
        threading.Thread(target=late).start()
        leave(4)
    """, tmp_path)
    assert done.returncode == 4, done
    assert (tmp_path / "late").read_text() == "written"


def test_the_cli_as_a_process_keeps_its_status_and_output(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "imagekit", "--version"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stdout.split()[0]) == (0, "imagekit"), done
    done = subprocess.run([sys.executable, "-m", "imagekit", "promote", "a::b", "--to", "x/y"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 2 and done.stderr.startswith("imagekit: error: "), done


def test_every_command_module_is_registered() -> None:
    """The static list of command modules is the package's modules (less `app`): a new
    command module missing from it would be a command that does not exist."""
    import imagekit.cli

    package = Path(imagekit.cli.__file__).parent
    found = sorted(p.stem for p in package.glob("*.py") if p.stem not in {"__init__", "app"})
    assert sorted(imagekit.cli.COMMAND_MODULES) == found
