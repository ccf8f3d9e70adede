"""in-toto Statement v1 with the test-result predicate, one subject per promotion endpoint.

The subjects are what a verifier pulls: the digest at each endpoint (name = that endpoint's
reference). Without promotion evidence the image digest itself is the one subject. The
configuration lists every attempt record the verdict was read from, each with the sha256 of its
attempt.json, so the attestation binds to the exact evidence.
"""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

from imagekit.report.models import ImageReport
from imagekit.results import Status

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
TEST_RESULT_TYPE = "https://in-toto.io/attestation/test-result/v0.1"


def subjects(report: ImageReport) -> list[dict]:
    found: list[dict] = []
    for endpoint in report.endpoints:
        algorithm, _, hex_part = endpoint.digest.partition(":")
        entry = {"name": endpoint.reference, "digest": {algorithm: hex_part}}
        if entry not in found:
            found.append(entry)
    if not found:
        algorithm, _, hex_part = report.subject.partition(":")
        found.append({"name": report.facts.name or report.requested or report.subject,
                      "digest": {algorithm: hex_part}})
    return found


def result_of(report: ImageReport) -> str:
    """PASSED: every check passed and every required check is there; WARNED: only DEFERRED or
    spec-accepted lines stand between it and PASSED; FAILED: any other FAIL/ERROR or an unmet
    required check."""
    if report.status is Status.PASS:
        return "PASSED"
    if report.status is Status.DEFERRED and all(o.satisfied for o in report.required):
        return "WARNED"
    return "FAILED"


def _configuration(report: ImageReport) -> list[dict]:
    seen: dict[str, dict] = {}
    for line in report.checks:
        if line.evidence in seen:
            continue
        record = Path(report.evidence_root) / line.evidence / "attempt.json"
        try:
            digest = {"sha256": hashlib.sha256(record.read_bytes()).hexdigest()}
        except OSError:
            continue
        seen[line.evidence] = {"name": f"{line.evidence}/attempt.json", "digest": digest,
                               "mediaType": "application/json",
                               "annotations": {"kind": line.kind, "key": line.key}}
    # ResourceDescriptor.content is bytes: base64 in JSON (the spec's protobuf JSON mapping)
    listed = (",".join(o.requirement for o in report.required) or "none").encode()
    required = {"name": "required-checks", "content": base64.b64encode(listed).decode(),
                "digest": {"sha256": hashlib.sha256(listed).hexdigest()},
                "mediaType": "text/plain"}
    return [required, *seen.values()]


def statement(report: ImageReport) -> dict:
    passed, warned, failed = [], [], []
    for line in report.checks:
        bucket = warned if line.accepted else \
            {Status.PASS: passed, Status.DEFERRED: warned}.get(line.status, failed)
        bucket.append(line.test_name)
    for outcome in report.required:
        if not outcome.satisfied:
            failed.append(f"required:{outcome.requirement}")
    return {
        "_type": STATEMENT_TYPE,
        "subject": subjects(report),
        "predicateType": TEST_RESULT_TYPE,
        "predicate": {
            "result": result_of(report),
            "configuration": _configuration(report),
            "passedTests": passed,
            "warnedTests": warned,
            "failedTests": failed,
        },
    }
