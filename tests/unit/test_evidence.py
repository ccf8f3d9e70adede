"""The evidence store only ever adds: reruns make new attempts, earlier bytes stay identical."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from imagekit.errors import EvidenceError
from imagekit.evidence import EvidenceStore
from imagekit.oci import Digest
from imagekit.results import CheckResult, Status

DIGEST = Digest.parse("sha256:" + "c" * 64)


def _snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in root.rglob("*") if p.is_file() and p.name != "index.jsonl"}


def test_rerun_adds_an_attempt_and_keeps_earlier_files_byte_identical(tmp_path: Path) -> None:
    store = EvidenceStore(tmp_path)
    with store.attempt(DIGEST, "probe") as first:
        first.write_text("logs/pip_check.log", "No broken requirements found.\n")
        first.add_check(CheckResult(name="pip_check", status=Status.PASS))
    before = _snapshot(tmp_path)
    with store.attempt(DIGEST, "probe") as second:
        second.write_text("logs/pip_check.log", "something else\n")
        second.add_check(CheckResult(name="pip_check", status=Status.FAIL))
    after = _snapshot(tmp_path)
    assert {k: after[k] for k in before} == before
    records = store.attempts(DIGEST, "probe")
    assert [r.status for r in records] == [Status.PASS, Status.FAIL]
    assert records[0].attempt_id != records[1].attempt_id
    assert len(store.index()) == 2


def test_files_cannot_be_overwritten_within_an_attempt(tmp_path: Path) -> None:
    store = EvidenceStore(tmp_path)
    attempt = store.begin(DIGEST, "build")
    attempt.write_text("build.log", "one")
    with pytest.raises(EvidenceError):
        attempt.write_text("build.log", "two")
    with pytest.raises(EvidenceError):
        attempt.write_text("../escape.log", "x")
    record = attempt.finish(Status.PASS)
    assert (store.path_of(record) / "build.log").read_text() == "one"


def test_an_exception_is_recorded_as_error_with_its_traceback(tmp_path: Path) -> None:
    store = EvidenceStore(tmp_path)
    with pytest.raises(RuntimeError):
        with store.attempt("sglang-build", "build") as attempt:
            attempt.write_text("build.log", "step 3 failed")
            raise RuntimeError("exit code 1")
    [record] = store.attempts("sglang-build", "build")
    assert record.status is Status.ERROR
    assert "exit code 1" in record.summary
    assert (store.path_of(record) / "error.log").exists()
    assert (store.path_of(record) / "build.log").read_text() == "step 3 failed"


def test_no_checks_is_not_a_pass(tmp_path: Path) -> None:
    store = EvidenceStore(tmp_path)
    with store.attempt(DIGEST, "empty"):
        pass
    assert store.latest(DIGEST, "empty").status is Status.ERROR


def test_every_listed_key_reads_back_its_attempts(tmp_path: Path) -> None:
    store = EvidenceStore(tmp_path)
    for subject in (DIGEST, "sglang-build"):
        with store.attempt(subject, "build") as attempt:
            attempt.add_check(CheckResult(name="build", status=Status.PASS))
    assert sorted(store.keys()) == sorted([str(DIGEST), "name:sglang-build"])
    for key in store.keys():
        [record] = store.attempts(key)
        assert record.key == key
        assert (store.path_of(record) / "attempt.json").is_file()
