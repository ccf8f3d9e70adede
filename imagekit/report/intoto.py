"""in-toto Statement v1 with the test-result predicate, one subject per promotion endpoint.

Its tests are the lines the decision read (`imagekit.report.decision.derive`: this store's and
those trusted keys signed), by their real status: a FAIL the profile accepts is a failed test
(the acceptance is the gate's policy, in the configuration), never a softer one.

The subjects are what a verifier pulls: the digest at each endpoint (name = that endpoint's
reference). Without promotion evidence the image digest itself is the one subject. The
configuration lists every attempt record the verdict was read from, each with the sha256 of its
attempt.json, so the attestation binds to the exact evidence.
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

from imagekit import __version__
from imagekit.report.decision import derive
from imagekit.report.models import EvidenceLine, ImageReport
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
    """The statuses' one meaning (docs/design/evidence.md): PASSED: every check PASS and every
    required check there; WARNED: only DEFERRED (not run here, not required) stands between it and
    PASSED; FAILED: any FAIL or ERROR — also one a profile accepts (the acceptance is the
    gate's policy, listed in the configuration, never a softer test result) — or an unmet
    required check."""
    decision = derive(report)
    statuses = {line.status for line in lines_of(report)}
    if not statuses or statuses & {Status.FAIL, Status.ERROR} or decision.blocking or \
            not all(o.satisfied for o in decision.required):
        return "FAILED"
    if Status.DEFERRED in statuses:
        return "WARNED"
    return "PASSED"


def lines_of(report: ImageReport) -> list[EvidenceLine]:
    """The lines the decision read: this store's, then those trusted keys signed."""
    return [*report.checks, *report.signed_checks, *report.signed_phases]


def _configuration(report: ImageReport) -> list[dict]:
    seen: dict[str, dict] = {}
    for line in lines_of(report):
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
    listed = (",".join(o.requirement for o in derive(report).required) or "none").encode()
    required = {"name": "required-checks", "content": base64.b64encode(listed).decode(),
                "digest": {"sha256": hashlib.sha256(listed).hexdigest()},
                "mediaType": "text/plain"}
    # what the gate accepted, and why: policy, not a softer status
    accepted = [{"test": line.test_name, "status": line.status.value, "reason": line.accepted}
                for line in lines_of(report) if line.accepted]
    descriptors = [required, *seen.values()]
    if accepted:
        text = json.dumps(accepted, sort_keys=True).encode()
        descriptors.insert(1, {"name": "gate-acceptances",
                               "content": base64.b64encode(text).decode(),
                               "digest": {"sha256": hashlib.sha256(text).hexdigest()},
                               "mediaType": "application/json",
                               "annotations": {"gate": "allowed" if report.gate.allowed
                                               else "refused"}})
    # the imagekit that judged (a package URL, as ResourceDescriptor.uri)
    descriptors.append({"name": "imagekit", "uri": f"pkg:pypi/imagekit@{__version__}"})
    return descriptors


def statement(report: ImageReport) -> dict:
    passed: list[str] = []
    warned: list[str] = []
    failed: list[str] = []
    for line in lines_of(report):
        # the status decides, never an acceptance: an accepted FAIL is still a failed test
        bucket = {Status.PASS: passed, Status.DEFERRED: warned}.get(line.status, failed)
        bucket.append(line.test_name)
    for outcome in derive(report).required:
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
