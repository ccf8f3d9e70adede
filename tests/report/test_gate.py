"""The promotion gate refuses FAIL/ERROR and missing or non-passing required checks, allows a
clean digest, and records a forced promotion with its reason."""

from __future__ import annotations

import pytest

from imagekit.errors import CheckFailed, InvalidInput
from imagekit.report import build_report, check_promotable, enforce, record_override
from imagekit.results import CheckResult, Status
from tests.report.conftest import fake_digest, write_rehearsal


def test_clean_digest_is_allowed(rehearsal) -> None:
    decision = check_promotable(rehearsal.store, rehearsal.digest)
    assert decision.allowed, decision.reasons
    assert decision.reasons == [] and decision.required == ["probe", "images-verify"]


def test_fail_is_refused_with_the_check_named(store) -> None:
    r = write_rehearsal(store, media_fail=True)
    decision = check_promotable(store, r.digest)
    assert not decision.allowed
    [reason] = decision.reasons
    assert "accept-media:corrupted-media-status FAIL" in reason and "500" in reason


def test_error_is_refused(store) -> None:
    r = write_rehearsal(store)
    with store.attempt(r.digest, "accept-needle") as a:
        a.add_check(CheckResult(name="needle-32k", status=Status.ERROR, detail="client crashed"))
    decision = check_promotable(store, r.digest)
    assert not decision.allowed
    assert any("accept-needle:needle-32k ERROR" in reason for reason in decision.reasons)


def test_missing_required_check_is_refused(rehearsal) -> None:
    decision = check_promotable(rehearsal.store, rehearsal.digest,
                                required=["probe", "accept-needle"])
    assert not decision.allowed
    assert decision.reasons == [
        "required check accept-needle is missing: no evidence: a missing required check is "
        "not a pass"]


def test_deferred_required_refused_deferred_optional_warned(store) -> None:
    r = write_rehearsal(store, torch_arch=Status.DEFERRED)
    strict = check_promotable(store, r.digest, required=["probe"])
    assert not strict.allowed
    assert any("required check probe is DEFERRED" in reason for reason in strict.reasons)
    lenient = check_promotable(store, r.digest, required=["probe:pip_check"])
    assert lenient.allowed
    assert any("probe:torch_arch DEFERRED" in w for w in lenient.warnings)


def test_unknown_digest_is_refused(store) -> None:
    decision = check_promotable(store, fake_digest("never built"))
    assert not decision.allowed and "no evidence" in decision.reasons[0]


def test_a_failed_promote_hop_does_not_block_a_retry(rehearsal) -> None:
    with rehearsal.store.attempt(rehearsal.digest, "promote") as a:
        a.add_check(CheckResult(name="hop-target", status=Status.FAIL, detail="queued only"))
    assert check_promotable(rehearsal.store, rehearsal.digest).allowed


def test_a_passing_rerun_supersedes_a_failed_check(store) -> None:
    r = write_rehearsal(store, media_fail=True)
    assert not check_promotable(store, r.digest).allowed
    with store.attempt(r.digest, "accept-media") as a:
        a.add_check(CheckResult(name="corrupted-media-status", status=Status.PASS,
                                detail="400 after the fix"))
    assert check_promotable(store, r.digest).allowed
    report = build_report(store, r.digest)
    assert [h.status for h in report.history if h.name == "corrupted-media-status"] == \
        [Status.FAIL]                                          # the failure stays on record


def test_enforce_refuses_then_force_records_reason(store) -> None:
    r = write_rehearsal(store, media_fail=True)
    with pytest.raises(CheckFailed) as refused:
        enforce(store, r.digest)
    assert "corrupted-media-status" in refused.value.one_line()
    with pytest.raises(InvalidInput):
        enforce(store, r.digest, force=True, reason="   ")
    assert store.attempts(r.digest, "gate-override") == []
    decision = enforce(store, r.digest, force=True,
                       reason="media 500 is a known engine issue (record #11)",
                       target="production")
    assert decision.overridden and not decision.allowed
    [record] = store.attempts(r.digest, "gate-override")
    assert record.context["reason"] == "media 500 is a known engine issue (record #11)"
    assert record.context["target"] == "production"
    assert any("corrupted-media-status" in x for x in record.context["refused_for"])
    assert decision.override_evidence and \
        (store.root / decision.override_evidence / "decision.json").is_file()
    report = build_report(store, r.digest)
    [override] = report.overrides
    assert override.reason.startswith("media 500")
    assert all(line.kind != "gate-override" for line in report.checks)
    assert not check_promotable(store, r.digest).allowed     # an override is not a pass


def test_enforce_allows_clean_digest_without_recording(rehearsal) -> None:
    decision = enforce(rehearsal.store, rehearsal.digest, force=True, reason="not needed")
    assert decision.allowed and not decision.overridden
    assert rehearsal.store.attempts(rehearsal.digest, "gate-override") == []


def test_record_override_needs_reason(rehearsal) -> None:
    with pytest.raises(InvalidInput):
        record_override(rehearsal.store, rehearsal.digest, "")


def test_report_shows_the_gate_verdict(store) -> None:
    from imagekit.report import render

    r = write_rehearsal(store, media_fail=True, torch_arch=Status.DEFERRED)
    report = build_report(store, r.digest, required=["probe:pip_check"])
    text = render(report, "md")
    assert "## Promotion gate\n\n**Refused: accept-media:corrupted-media-status FAIL" in text
    assert text.startswith("**not promotable: accept-media:corrupted-media-status FAIL")
    assert "- refused: accept-media:corrupted-media-status FAIL" in text
    assert "- warning: probe:torch_arch DEFERRED" in text
    assert "refused</span>: accept-media:corrupted-media-status" in render(report, "html")
