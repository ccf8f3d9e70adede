"""Statuses the images spec accepts (`[profiles.X.accept]`) turn into warnings with their
reason — only for the profile the evidence names, only for the exact status, and the real
status stays visible in every format."""

from __future__ import annotations

import json

import pytest

from imagekit.report import build_report, check_promotable, render
from imagekit.results import Status
from tests.report.conftest import write_rehearsal

@pytest.fixture(autouse=True)
def _spec(spec_file) -> None:
    """Acceptances come from the test's own small spec (tests/report/conftest.py)."""


def test_accepted_fail_is_a_warning_with_its_reason(store) -> None:
    r = write_rehearsal(store, torch_arch=Status.FAIL, profile="local")
    decision = check_promotable(store, r.digest)
    assert decision.allowed, decision.reasons
    [warning] = [w for w in decision.warnings if "torch_arch" in w]
    assert "accepted: the stand-in carries the machine's CPU torch build" in warning
    report = build_report(store, r.digest)
    # only the gate applies acceptances: the report's status stays the real one
    assert report.profile == "local" and report.status is Status.FAIL
    assert report.gate.allowed and report.gate == decision
    [line] = [c for c in report.checks if c.name == "torch_arch"]
    assert line.status is Status.FAIL and line.accepted          # the real status is kept
    statement = json.loads(render(report, "intoto"))
    assert statement["predicate"]["result"] == "FAILED"
    assert "probe:torch_arch" in statement["predicate"]["failedTests"]
    assert "probe:torch_arch" not in statement["predicate"]["warnedTests"]
    junit = render(report, "junit")
    assert 'message="FAIL (accepted by the gate: the stand-in carries' in junit
    assert "**FAIL** (accepted)" in render(report, "md")


def test_other_profile_does_not_accept(store) -> None:
    r = write_rehearsal(store, torch_arch=Status.FAIL, profile="production")
    decision = check_promotable(store, r.digest)
    assert not decision.allowed
    assert any("probe:torch_arch FAIL" in reason for reason in decision.reasons)


def test_unknown_profile_is_never_guessed(store) -> None:
    r = write_rehearsal(store, torch_arch=Status.FAIL)             # evidence names no profile
    assert not check_promotable(store, r.digest).allowed
    assert check_promotable(store, r.digest, profile="local").allowed   # the caller may say


def test_acceptance_needs_the_exact_status(store) -> None:
    r = write_rehearsal(store, torch_arch=Status.ERROR, profile="local")
    decision = check_promotable(store, r.digest)
    assert not decision.allowed
    assert any("probe:torch_arch ERROR" in reason for reason in decision.reasons)
