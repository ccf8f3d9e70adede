"""A line that carries a reference, a digest or a path is printed whole, never broken at 80
columns, when stdout is a pipe (a CI log): `$IMAGE` is copied from one line.

The failing case (before the consoles were made soft-wrapping): rich broke such a line at the
80th column, so no line of the output held the whole path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _piped(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """The CLI with stdout a pipe and an 80-column terminal width, as a CI runner has."""
    return subprocess.run([sys.executable, "-m", "imagekit", *args], capture_output=True,
                          text=True, timeout=120, check=False, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "80"})


def _long_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "a-folder-name-long-enough" / "that-every-line-naming-it-passes-80"
    assert len(str(folder)) > 80
    return folder


def test_a_path_line_is_one_line_on_a_pipe(tmp_path: Path) -> None:
    folder = _long_folder(tmp_path)
    folder.mkdir(parents=True)
    done = _piped("schemas", "export", str(folder), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    [line] = done.stdout.splitlines()
    assert line.endswith(f" schemas in {folder}"), done.stdout


def test_the_next_command_after_init_is_one_line_on_a_pipe(tmp_path: Path) -> None:
    folder = _long_folder(tmp_path)
    elsewhere = tmp_path / "elsewhere"       # not above the folder: its paths print in full
    elsewhere.mkdir()
    done = _piped("init", str(folder), cwd=elsewhere)
    assert done.returncode == 0, done.stderr
    assert f"next: imagekit pin --spec {folder}/images.toml" in done.stdout.splitlines()
    assert f"wrote {folder}/standins/vllm-base/vllm-0.32.0.dist-info/METADATA" in \
        done.stdout.splitlines()
