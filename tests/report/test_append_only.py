"""Evidence is append-only: a rerun adds an attempt and leaves every earlier file byte-identical,
also when reports are rendered, the gate is asked and an override is recorded in between."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from imagekit.errors import EvidenceError
from imagekit.report import FORMATS, build_report, check_promotable, enforce, render
from imagekit.results import CheckResult, Status
from tests.report.conftest import write_rehearsal


def _snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_rerun_adds_attempt_and_keeps_earlier_bytes(store, tmp_path) -> None:
    r = write_rehearsal(store, media_fail=True)
    before = _snapshot(store.root)
    index_before = (store.root / "index.jsonl").read_bytes()
    attempts_before = len(store.attempts(r.digest, "accept-media"))

    for fmt in FORMATS:                                     # reading paths write nothing
        (tmp_path / f"report.{fmt}").write_text(render(build_report(store, r.digest), fmt))
    check_promotable(store, r.digest)
    assert _snapshot(store.root) == before

    enforce(store, r.digest, force=True, reason="rehearsal: known media status issue")
    with store.attempt(r.digest, "accept-media", rerun=True) as a:   # the rerun
        a.write_text("requests.log", "POST /v1/chat/completions 400\n")
        a.add_check(CheckResult(name="corrupted-media-status", status=Status.PASS,
                                detail="400 for both after the fix"))

    after = _snapshot(store.root)
    for path, digest in before.items():
        if path == "index.jsonl":
            continue
        assert after[path] == digest, f"{path} changed"
    new = set(after) - set(before)
    assert any("/gate-override/" in p and p.endswith("attempt.json") for p in new)
    assert any("/accept-media/" in p and p.endswith("requests.log") for p in new)
    assert (store.root / "index.jsonl").read_bytes().startswith(index_before)
    assert len(store.attempts(r.digest, "accept-media")) == attempts_before + 1

    report = build_report(store, r.digest)              # the rerun decides, the failure stays
    [current] = [c for c in report.checks if c.name == "corrupted-media-status"]
    assert current.status is Status.PASS
    assert [h.status for h in report.history if h.name == "corrupted-media-status"] == \
        [Status.FAIL]
    assert check_promotable(store, r.digest).allowed


def test_finished_attempt_files_cannot_be_rewritten(store) -> None:
    r = write_rehearsal(store)
    [record] = store.attempts(r.digest, "images-verify")
    path = store.path_of(record) / "attempt.json"
    assert path.stat().st_mode & 0o222 == 0              # read-only
    attempt = store.begin(r.digest, "images-verify")
    attempt.write_text("note.txt", "x")
    with pytest.raises(EvidenceError):
        attempt.write_text("note.txt", "y")


def test_recorded_report_is_archived_not_judged(store) -> None:
    from imagekit.report.render import SUFFIXES, record_report

    r = write_rehearsal(store, media_fail=True)
    before = _snapshot(store.root)
    first = build_report(store, r.digest)
    path = record_report(store, first)
    assert sorted(p.name for p in path.iterdir()) == sorted(
        ["attempt.json", *(f"report{s}" for s in SUFFIXES.values())])
    after = _snapshot(store.root)
    assert all(after[p] == d for p, d in before.items() if p != "index.jsonl")
    again = build_report(store, r.digest)
    assert [c.test_name for c in again.checks] == [c.test_name for c in first.checks]
    assert again.status is first.status is Status.FAIL
    assert "report" not in {c.kind for c in again.checks + again.history}
