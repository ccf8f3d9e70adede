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


# -- the evidence contract: subjects with roles, one typed result per kind ---------------

from imagekit.evidence import Role, Subject, judged, model_for, registered  # noqa: E402
from imagekit.evidence.kinds import (  # noqa: E402
    AcceptResult, BuildResult, ProbeResult, VerifyCopyEvidence)

OFFICIAL = Digest.parse("sha256:" + "1" * 64)
COPY = Digest.parse("sha256:" + "2" * 64)


def test_a_result_round_trips_as_its_model(tmp_path: Path) -> None:
    store = EvidenceStore(tmp_path)
    written = ProbeResult(image="imagekit-local/x:1", probes=["pip_check"],
                          versions={"torch": "2.13.0", "av": None})
    with store.attempt(OFFICIAL, "probe") as attempt:
        attempt.write_result(written)
        attempt.add_check(CheckResult(name="pip_check", status=Status.PASS))
    [record] = store.attempts(OFFICIAL, "probe")
    assert record.layout == 2 and store.result(record) == written
    assert store.subjects(record) == [Subject(digest=OFFICIAL, role=Role.SUBJECT)]


def test_the_wrong_model_or_a_second_result_is_refused(tmp_path: Path) -> None:
    store = EvidenceStore(tmp_path)
    with store.attempt(OFFICIAL, "build") as attempt:
        with pytest.raises(EvidenceError, match="not the result model of kind 'build'"):
            attempt.write_result(ProbeResult(image="x"))
        attempt.write_result(BuildResult(name="x"))
        with pytest.raises(EvidenceError, match="one result"):
            attempt.write_result(BuildResult(name="y"))
        attempt.add_check(CheckResult(name="build", status=Status.PASS))


def test_verify_copy_subjects_have_roles(tmp_path: Path) -> None:
    store = EvidenceStore(tmp_path)
    subjects = [Subject.of(COPY, Role.SUBJECT, "r/copy"),
                Subject.of(OFFICIAL, Role.COMPARED_WITH, "r/official")]
    with store.attempt(COPY, "verify-copy", subjects=subjects) as attempt:
        attempt.write_result(VerifyCopyEvidence(official="r/official", copy_ref="r/copy",
                                                verdict="different"))
        attempt.add_check(CheckResult(name="layer-content", status=Status.FAIL))
    [record] = store.attempts(COPY)
    assert judged(store.subjects(record)) == {str(COPY)}     # the official is not judged
    assert store.attempts(OFFICIAL) == []


def test_a_kind_family_has_one_model() -> None:
    assert model_for("accept-media") is AcceptResult is model_for("accept-functional")
    assert model_for("no-such-kind") is None
    assert {"build", "probe", "verify-copy", "promote", "report", "accept-*"} <= set(
        registered())
    with pytest.raises(ValueError):
        AcceptResult(kind="bench", suite="x")


def test_stored_result_that_does_not_match_its_model_is_an_error(tmp_path: Path) -> None:
    store = EvidenceStore(tmp_path)
    with store.attempt(OFFICIAL, "probe") as attempt:
        attempt.write_result(ProbeResult(image="x"))
        attempt.add_check(CheckResult(name="c", status=Status.PASS))
    [record] = store.attempts(OFFICIAL)
    broken = record.model_copy(update={"result": {"kind": "probe", "schema_version": 9,
                                                  "image": "x"}})
    with pytest.raises(EvidenceError, match="does not match ProbeResult"):
        store.result(broken)


def test_previous_layout_reads_as_todays_models() -> None:
    """The committed store made by the code before the layout changed (tests/report/legacy)."""
    from tests.report.legacy.inputs import COPY_DIGEST, DIGEST, STORE

    store = EvidenceStore(STORE)
    [copy] = store.attempts(DIGEST, "verify-copy")       # old layout: filed under the official
    assert copy.layout == 1
    roles = {s.role: str(s.digest) for s in store.subjects(copy)}
    assert roles == {Role.SUBJECT: str(COPY_DIGEST), Role.COMPARED_WITH: str(DIGEST)}
    result = store.result(copy)
    assert isinstance(result, VerifyCopyEvidence) and result.verdict == "different"
    [build] = store.attempts(DIGEST, "build")
    assert store.result(build).image_id is not None


def test_an_attempt_written_through_the_file_api_alone_still_reads(tmp_path: Path) -> None:
    """While producers move over: no write_result, the old files -> the kind's model."""
    store = EvidenceStore(tmp_path)
    with store.attempt("image-x", "build", image_id=str(COPY), registry_digest=str(OFFICIAL)
                       ) as attempt:
        attempt.add_check(CheckResult(name="build", status=Status.PASS))
    [record] = store.attempts("image-x")
    assert record.layout == 2 and record.result is None
    assert judged(store.subjects(record)) == {str(COPY), str(OFFICIAL)}
    result = store.result(record)
    assert isinstance(result, BuildResult) and result.digest == str(OFFICIAL)
