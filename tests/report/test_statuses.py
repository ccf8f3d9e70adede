"""One meaning of each status (docs/design/evidence.md): a single non-required check of each status
gives the same answer in the exit code, the gate, JUnit and in-toto — and a FAIL the profile
accepts changes only the decision (the gate, and JUnit which renders it), never the status."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from imagekit.evidence import kinds
from imagekit.report import build_report, render
from imagekit.results import MEANING, CheckResult, Status, exit_code_for
from tests.report.conftest import fake_digest

#: status -> (exit code, gate allowed, gate warns, JUnit element, in-toto bucket, result)
TABLE = {
    Status.PASS: (0, True, False, None, "passedTests", "PASSED"),
    Status.DEFERRED: (1, True, True, "skipped", "warnedTests", "WARNED"),
    Status.FAIL: (1, False, False, "failure", "failedTests", "FAILED"),
    Status.ERROR: (2, False, False, "error", "failedTests", "FAILED"),
}


def _one_check(store, status: Status, name: str = "x") -> str:
    digest = fake_digest(f"statuses-{status.value}-{name}")
    with store.attempt(digest, "probe") as attempt:
        attempt.write_result(kinds.ProbeResult(image=name))
        attempt.add_check(CheckResult(name="only", status=status, detail="why"))
    return digest


@pytest.mark.parametrize("status", list(Status))
def test_each_status_means_one_thing_everywhere(store, status: Status) -> None:
    assert MEANING[status]
    code, allowed, warns, element, bucket, result = TABLE[status]
    report = build_report(store, _one_check(store, status), required=[])
    assert exit_code_for([CheckResult(name="only", status=status)]) == code
    assert report.gate.allowed is allowed and bool(report.gate.warnings) is warns
    case = ET.fromstring(render(report, "junit")).find(".//testcase[@name='only']")
    assert [child.tag for child in case if child.tag != "system-out"] == \
        ([element] if element else [])
    predicate = json.loads(render(report, "intoto"))["predicate"]
    assert predicate[bucket] == ["probe:only"] and predicate["result"] == result


def test_a_required_deferred_is_refused_and_failed(store) -> None:
    report = build_report(store, _one_check(store, Status.DEFERRED), required=["probe"])
    assert not report.gate.allowed
    assert json.loads(render(report, "intoto"))["predicate"]["result"] == "FAILED"


def test_an_accepted_fail_changes_only_the_gate(store, spec_file) -> None:
    digest = fake_digest("statuses-accepted")
    with store.attempt(digest, "images-verify") as attempt:
        attempt.write_result(kinds.ImagesVerifyResult(image="sglang", profile="local",
                                                      verdict=Status.PASS))
        attempt.add_check(CheckResult(name="torch_arch", status=Status.FAIL, detail="no sm_90"))
    report = build_report(store, digest, required=[])
    assert report.gate.allowed and report.gate.warnings          # the gate's policy
    assert report.status is Status.FAIL                          # the status stays
    # JUnit shows the decision: accepted, not a failure (counted apart), its status and reason
    # said; the real FAIL stays in in-toto
    case = ET.fromstring(render(report, "junit")).find(".//testcase[@name='torch_arch']")
    assert case.find("failure") is None and case.find("skipped") is not None
    assert case.find("skipped").get("message").startswith("FAIL (accepted by the gate: ")
    predicate = json.loads(render(report, "intoto"))["predicate"]
    assert predicate["failedTests"] == ["images-verify:torch_arch"]
    assert predicate["result"] == "FAILED" and predicate["warnedTests"] == []
