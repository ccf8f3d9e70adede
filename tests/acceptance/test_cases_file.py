"""Semantic cases as data: the two shipped sets load, the record's set is today's cases
unchanged, each match kind judges, and a bad cases file is one line naming the field, exit 2,
before any request."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from imagekit.acceptance import cases, needle
from imagekit.acceptance.suite import SuiteOptions
from imagekit.cli import app
from imagekit.errors import InvalidInput


def test_shipped_sets_load_and_record_is_the_default() -> None:
    record, text = cases.load("record")
    assert record.name == "record" and record.calibrated_on == "MiniMax-M3"
    assert "240" in text and record.arithmetic.expected == "240"
    assert record.needle.wrappers == {"original": needle.ORIGINAL_TEMPLATE,
                                      "explicit": needle.EXPLICIT_TEMPLATE}
    assert record.needle.max_tokens == 31_000 and record.needle.control
    assert SuiteOptions().cases == record
    standin, _ = cases.load("stand-in")
    assert standin.calibrated_on.startswith("SmolLM2-135M-Instruct")
    assert set(standin.needle.wrappers) == {"original", "explicit"}
    assert cases.shipped_path("stand-in").is_file()


@pytest.mark.parametrize(("match", "expected", "answer", "right"), [
    ("integer", "12", "7 + 5 = 12.", True),
    ("integer", "240", "264", False),
    ("integers", "1 2 3", "1 2 3 4", True),
    ("integers", "1 2 3", "1 3 2", False),
    ("contains", "BLUE-HERON-42", "it is blue-heron-42", True),
    ("exact", "Paris", " Paris ", True),
    ("exact", "Paris", "Paris.", False),
    ("regex", r"^Par", "Paris", True),
])
def test_each_match_kind_judges(match: str, expected: str, answer: str, right: bool) -> None:
    case = cases.Streaming(prompt="x", expected=expected, match=match)
    correct, why = case.judge(answer)
    assert correct is right and why


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cases.toml"
    path.write_text(text)
    return path


def test_a_bad_cases_file_names_the_field(tmp_path: Path) -> None:
    text = cases.shipped_path("stand-in").read_text()
    bad = _write(tmp_path, text.replace('expected = "12"', 'expected = "twelve"'))
    with pytest.raises(InvalidInput, match=r"cases file field arithmetic: expected 'twelve' is "
                                           r"not one integer"):
        cases.load(bad)
    bad = _write(tmp_path, text.replace("positions = [0.1, 0.5, 0.9]", "positions = [1.5]"))
    with pytest.raises(InvalidInput, match=r"needle.positions: position 1.5 is outside"):
        cases.load(bad)
    bad = _write(tmp_path, text.replace("{document}", "{doc}", 1))
    with pytest.raises(InvalidInput, match=r"needle.wrappers: wrapper 'original' has no "
                                           r"\{document\}"):
        cases.load(bad)
    bad = _write(tmp_path, "surprise = 1\n" + text)
    with pytest.raises(InvalidInput, match=r"field surprise: Extra inputs are not permitted"):
        cases.load(bad)
    with pytest.raises(InvalidInput, match=r"no cases set named 'nonesuch'"):
        cases.load("nonesuch")


def test_accept_refuses_a_bad_cases_file_in_one_line_before_any_request(
        tmp_path: Path) -> None:
    bad = _write(tmp_path, "name = 'x'\n")
    # nothing listens on port 9: the file is refused before the server is asked
    result = CliRunner().invoke(app, ["accept", "--base-url", "http://127.0.0.1:9",
                                      "--cases", str(bad)])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("imagekit: error: cases file field ")
    assert "Traceback" not in result.output
    result = CliRunner().invoke(app, ["accept", "--base-url", "http://127.0.0.1:9",
                                      "--cases", "stand-in", "--needle-wrapper", "nonesuch"])
    assert result.exit_code == 2 and "the stand-in cases have original, explicit" in \
        result.output
