"""The project speaks of itself only: no file in the tree names how it was developed.

No text names development sessions or stops, issue numbers, the machines borrowed to run it or
the tool that handed them out: a sample says what hardware and software ran it, a comment says
what was measured. Raw device outputs kept as samples (`gpu_checks/samples/*.log|txt|json`) may keep what
they printed. The patterns are precise so that the ordinary words stay free: a pytest fixture of
`scope="session"`, an upload session, "stop the registry", "issue a token".
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
THIS = Path(__file__).resolve().relative_to(ROOT).as_posix()

#: What the project never says of itself, each with why it is refused.
FORBIDDEN: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (why, re.compile(pattern, re.IGNORECASE)) for why, pattern in (
        ("a development session", r"\bsessions? [0-9]+\b"),
        ("a development session", r"\bsession(?:'s)? (?:start|machine)\b"),
        ("a development stop", r"\bstops? [0-9]+\b"),
        ("an issue number", r"\bissues? #?[0-9]+\b"),
        ("the tool that handed out machines", r"\bdevice[- ]tool\b"),
        ("where it was developed", r"\bthis workplace\b"),
        ("a borrowed machine", r"\blent\b"),
        ("a machine kind withheld from us", r"\bwithheld\b"),
        ("a development wave", r"\b(?:this|last|next|the) wave\b"),
        ("who developed it", r"\bthe lead(?:'s)?\b"),
    ))

#: One pass over a whole file first: most files hold none of the phrases.
ANY = re.compile("|".join(f"(?:{pattern.pattern})" for _, pattern in FORBIDDEN), re.IGNORECASE)

#: Folders never part of the tree when it is walked without git.
SKIP_DIRS = {".git", ".venv", "venv", "__pycache__", ".mypy_cache", ".ruff_cache",
             ".pytest_cache", "node_modules", "build", "dist", ".evidence"}


def is_raw_sample(path: str) -> bool:
    """A device's own output, kept as it printed it (the notes beside it are not raw)."""
    return path.startswith("gpu_checks/samples/") and path.endswith((".log", ".txt", ".json"))


def findings(text: str) -> list[tuple[int, str, str]]:
    """(line number, why, the words) for each forbidden phrase in `text`."""
    found: list[tuple[int, str, str]] = []
    if not ANY.search(text):
        return found
    for number, line in enumerate(text.splitlines(), start=1):
        for why, pattern in FORBIDDEN:
            for match in pattern.finditer(line):
                found.append((number, why, match.group(0)))
    return found


def file_findings(path: Path) -> list[tuple[int, str, str]]:
    """As `findings`, for a file; a binary file (NUL bytes, not UTF-8) holds no prose."""
    data = path.read_bytes()
    if b"\0" in data:
        return []
    try:
        return findings(data.decode("utf-8"))
    except UnicodeDecodeError:
        return []


def tree_files(root: Path) -> list[str]:
    """The tree's files, relative to `root`: git's list where there is one, else a walk."""
    try:
        listed = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], capture_output=True,
                                check=True, timeout=60).stdout.decode().split("\0")
        return [p for p in listed if p and (root / p).is_file()]
    except (OSError, subprocess.SubprocessError):
        files = []
        for folder, dirs, names in os.walk(root):
            dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info")]
            files += [(Path(folder) / n).relative_to(root).as_posix() for n in names]
        return files


def test_no_file_in_the_tree_speaks_of_how_it_was_developed() -> None:
    files = tree_files(ROOT)
    assert len(files) > 100, f"the tree was not found at {ROOT}"
    bad = [f"{path}:{line}: {words!r} ({why})"
           for path in sorted(files) if path != THIS and not is_raw_sample(path)
           for line, why, words in file_findings(ROOT / path)]
    assert not bad, "the project speaks of itself only:\n" + "\n".join(bad)


@pytest.mark.parametrize("line", [
    "measured in session 7 on the 2-core machine",
    "Session 8: the idle-machine run",
    "what stop 34 changed",
    "the gate refuses it (issue 25)",
    "see issue #12",
    "run through the device tool",
    "one device-tool call",
    "this workplace cannot reach Docker Hub",
    "as read on the lent H200",
    "the multi-GPU kinds were withheld",
    "the surfaces of the last wave",
    "an idle-machine run is the lead's",
    "withheld at the session's start",
])
def test_each_way_of_speaking_of_the_development_is_found(line: str, tmp_path: Path) -> None:
    """The check can fail: a file holding any one of these phrases is flagged, naming the line."""
    page = tmp_path / "page.md"
    page.write_text(f"# A page\n\nclean words\n{line}\n")
    [(number, _why, _words), *_] = file_findings(page)
    assert number == 4


@pytest.mark.parametrize("line", [
    '@pytest.fixture(scope="session")',
    "installed once per session and started by the test session",
    "a failed source cancels the upload session",
    "stop the registry, then start it again",
    "the run stops at the first failure; it stopped 2 processes",
    "the token service can issue a token; issues are tracked upstream",
    "the H200 (NVIDIA H200, 143771 MiB) measured 790 TFLOP/s",
    "a lead, not a reading; it leads the page",
    "a microwave or a waveform",
])
def test_ordinary_words_are_not_flagged(line: str) -> None:
    assert findings(line) == []


def test_without_git_the_tree_is_walked_less_what_is_not_the_tree(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text("session 8\n")
    for junk in (".venv", ".git", "imagekit.egg-info"):
        (tmp_path / junk).mkdir()
        (tmp_path / junk / "x.txt").write_text("session 8\n")
    assert tree_files(tmp_path) == ["docs/page.md"]


def test_raw_device_outputs_may_keep_what_they_printed() -> None:
    assert is_raw_sample("gpu_checks/samples/2026-12-02-h200x1-package.json")
    assert is_raw_sample("gpu_checks/samples/2026-11-29-h200x1.log")
    assert not is_raw_sample("gpu_checks/samples/2026-11-29-h200x1.md")
    assert not is_raw_sample("gpu_checks/README.md")
