"""The rehearsal's closing table on a pipe: whole lines, never cut at 80 columns."""

from __future__ import annotations

from imagekit.rehearsal import closing_lines
from imagekit.results import CheckResult, Status


def test_closing_lines_keep_the_whole_detail() -> None:
    long = ("DEFERRED (stand-in model: answers are not judged) " * 6).strip()
    checks = [CheckResult(name="vllm-cluster-accept", status=Status.PASS, detail=long),
              CheckResult(name="report", status=Status.DEFERRED, detail="line one\nline two")]
    lines = closing_lines(checks)
    assert lines[0].endswith(long) and len(lines[0]) > 200
    assert lines[1] == f"{'report':<19}  DEFERRED  line one line two"
