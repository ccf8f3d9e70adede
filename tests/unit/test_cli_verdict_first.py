"""Every command prints its verdict first: `cluster precheck` and `cluster accept` (both end
through imagekit.cli.common.finish) lead with the verdict line, then each check, then where
the evidence is — a reader of the first line knows the outcome."""

from __future__ import annotations

import contextlib

import pytest
import typer

from imagekit.cli.app import console
from imagekit.cli.common import finish
from imagekit.results import CheckReport, CheckResult, Status


def _printed(report: CheckReport) -> list[str]:
    with console.capture() as captured, contextlib.suppress(typer.Exit):
        finish(report, False)
    return captured.get().splitlines()


@pytest.mark.parametrize("last", [Status.FAIL, Status.PASS])
def test_the_verdict_is_the_first_line(last: Status) -> None:
    report = CheckReport.of("node-1", [
        CheckResult(name="gpus", status=Status.PASS, detail="8 allocatable"),
        CheckResult(name="launch_parsed", status=last, detail="vllm serve took the command")],
        evidence="/evidence/sha256/ab/cluster-accept/1")
    lines = _printed(report)
    assert lines[0] == f"{last.value} node-1", lines
    assert lines[1].startswith("PASS     gpus:") and lines[2].startswith(f"{last.value:8} launch")
    assert lines[-1] == "evidence: /evidence/sha256/ab/cluster-accept/1"
