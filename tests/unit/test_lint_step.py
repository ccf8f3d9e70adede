"""`make test` lints before it tests: `ruff check imagekit`, then `mypy`,
then pytest, so a finding fails CI before a test runs; `make lint` is those two alone. And the
ruff configuration in pyproject.toml is the one the issue asks for: line length 100, undefined
names found, typer's call-in-default (B008) allowed."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# a venv path that does not exist, its stamp never remade: `make -n` prints the recipes only
NO_VENV = "/nonexistent-imagekit-venv"


def _dry_run(target: str) -> list[str]:
    make = shutil.which("make")
    assert make is not None, "make is needed (CI runs `make test`)"
    # --no-print-directory: under `make test` (MAKELEVEL set) make would add its own
    # "Entering directory" lines to what it prints
    done = subprocess.run([make, "-n", "--no-print-directory", "-o", f"{NO_VENV}/.stamp",
                           f"VENV={NO_VENV}", target],
                          cwd=REPO, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def _index(lines: list[str], needle: str) -> int:
    found = [i for i, line in enumerate(lines) if needle in line]
    assert found, f"no {needle!r} in {lines}"
    return found[0]


def test_make_test_runs_ruff_then_mypy_then_pytest() -> None:
    lines = _dry_run("test")
    ruff = _index(lines, f"{NO_VENV}/bin/python -m ruff check imagekit")
    mypy = _index(lines, f"{NO_VENV}/bin/python -m mypy")
    tests = _index(lines, f"{NO_VENV}/bin/python -m pytest")
    assert ruff < mypy < tests, lines


def test_make_lint_is_ruff_and_mypy_alone() -> None:
    lines = _dry_run("lint")
    assert [line.split(" -m ")[-1].split()[0] for line in lines] == ["ruff", "mypy"], lines


def test_the_ruff_configuration_finds_what_the_issue_names(tmp_path: Path) -> None:
    """The failing case: an undefined name and a 101-character line are findings (exit 1);
    a `typer.Option(...)` default is not (B008 ignored)."""
    bad = tmp_path / "bad.py"
    bad.write_text("import typer\n\n\n"
                   "def command(names: list[str] = typer.Option([])) -> object:\n"
                   "    return undefined_name\n\n\n"
                   f"LONG = '{'x' * 92}'\n")  # 101 characters
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--config",
                           str(REPO / "pyproject.toml"), "--output-format", "concise", str(bad)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stdout + done.stderr
    codes = {line.split(": ")[1].split()[0] for line in done.stdout.splitlines()
             if line.startswith(str(bad))}
    assert codes == {"F821", "E501"}, done.stdout
