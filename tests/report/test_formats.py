"""in-toto Statement v1 (test-result predicate) validated against the spec's structure, JUnit
parsed by junitparser."""

from __future__ import annotations

import base64
import hashlib
import json

import jsonschema
import junitparser

from imagekit.report import build_report, render
from imagekit.results import CheckResult, Status
from tests.report.conftest import write_rehearsal

# Checked twice: by in-toto's own bindings (`_official_validate`) and by this JSON Schema of the
# in-toto Statement v1 and ResourceDescriptor v1 rules (attestation spec/v1), and the
# test-result v0.1 predicate (spec/predicates/test-result.md), as a JSON Schema.
_DIGEST_SET = {"type": "object", "minProperties": 1,
               "additionalProperties": {"type": "string", "pattern": "^[0-9a-f]+$"}}
_RESOURCE = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "uri": {"type": "string"},
                   "digest": _DIGEST_SET, "content": {"type": "string"},
                   "downloadLocation": {"type": "string"}, "mediaType": {"type": "string"},
                   "annotations": {"type": "object"}},
    "additionalProperties": False,
    "anyOf": [{"required": ["uri"]}, {"required": ["digest"]}, {"required": ["content"]}],
}
STATEMENT_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["_type", "subject", "predicateType", "predicate"],
    "additionalProperties": False,
    "properties": {
        "_type": {"const": "https://in-toto.io/Statement/v1"},
        "subject": {"type": "array", "minItems": 1, "items": {
            "type": "object", "required": ["name", "digest"], "additionalProperties": False,
            "properties": {"name": {"type": "string", "minLength": 1},
                           "digest": {**_DIGEST_SET, "required": ["sha256"],
                                      "properties": {"sha256": {"pattern": "^[0-9a-f]{64}$"}}}}}},
        "predicateType": {"const": "https://in-toto.io/attestation/test-result/v0.1"},
        "predicate": {
            "type": "object", "required": ["result", "configuration"],
            "additionalProperties": False,
            "properties": {
                "result": {"enum": ["PASSED", "WARNED", "FAILED"]},
                "configuration": {"type": "array", "items": _RESOURCE},
                "url": {"type": "string"},
                "passedTests": {"type": "array", "items": {"type": "string"}},
                "warnedTests": {"type": "array", "items": {"type": "string"}},
                "failedTests": {"type": "array", "items": {"type": "string"}},
            }},
    },
}


def _official_validate(text: str) -> None:
    """in-toto's own Python bindings (protobuf): strict JSON parse of the Statement and of the
    test-result predicate (unknown fields and wrong types are errors), then their validate()."""
    from google.protobuf import json_format
    from in_toto_attestation.predicates.test_result.v0 import test_result_pb2
    from in_toto_attestation.v1 import statement_pb2
    from in_toto_attestation.v1.resource_descriptor import ResourceDescriptor
    from in_toto_attestation.v1.statement import Statement

    Statement.copy_from_pb(json_format.Parse(text, statement_pb2.Statement())).validate()
    predicate = json_format.ParseDict(json.loads(text)["predicate"],
                                      test_result_pb2.TestResult())
    for descriptor in predicate.configuration:
        ResourceDescriptor.copy_from_pb(descriptor).validate()


def _statement(store, digest, **kw) -> dict:
    text = render(build_report(store, digest, **kw), "intoto")
    statement = json.loads(text)
    jsonschema.validate(statement, STATEMENT_SCHEMA)
    _official_validate(text)
    return statement


def test_official_bindings_reject_a_broken_statement(rehearsal) -> None:
    import pytest
    from google.protobuf import json_format

    text = render(build_report(rehearsal.store, rehearsal.digest), "intoto")
    _official_validate(text)
    broken = json.loads(text)
    broken["predicate"]["configuration"][0]["content"] = "not base64!"
    with pytest.raises(json_format.ParseError):
        _official_validate(json.dumps(broken))
    broken = json.loads(text)
    broken["subject"] = []
    with pytest.raises(ValueError):
        _official_validate(json.dumps(broken))


def test_intoto_subjects_are_endpoint_digests(rehearsal) -> None:
    statement = _statement(rehearsal.store, rehearsal.digest)
    assert statement["subject"] == [
        {"name": reference, "digest": {"sha256": digest.removeprefix("sha256:")}}
        for reference, digest in rehearsal.endpoints.values()]
    predicate = statement["predicate"]
    assert predicate["result"] == "PASSED"
    assert "probe:pip_check" in predicate["passedTests"]
    assert predicate["warnedTests"] == [] and predicate["failedTests"] == []


def test_intoto_configuration_binds_the_evidence(rehearsal) -> None:
    statement = _statement(rehearsal.store, rehearsal.digest)
    records = [c for c in statement["predicate"]["configuration"] if "annotations" in c]
    assert records, "every attempt the verdict came from is listed"
    for entry in records:
        data = (rehearsal.store.root / entry["name"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == entry["digest"]["sha256"]
    [required] = [c for c in statement["predicate"]["configuration"]
                  if c["name"] == "required-checks"]
    assert base64.b64decode(required["content"]) == b"probe,images-verify"
    from imagekit import __version__  # which imagekit judged: one place

    assert {"name": "imagekit", "uri": f"pkg:pypi/imagekit@{__version__}"} in \
        statement["predicate"]["configuration"]


def test_intoto_warned_and_failed(store) -> None:
    r = write_rehearsal(store, torch_arch=Status.DEFERRED, promote=False)
    warned = _statement(store, r.digest, required=["probe:pip_check"])
    assert warned["predicate"]["result"] == "WARNED"
    assert warned["predicate"]["warnedTests"] == ["probe:torch_arch"]
    # not promoted: the image digest itself is the subject
    assert warned["subject"][0]["digest"]["sha256"] == r.digest.removeprefix("sha256:")
    failed = _statement(store, r.digest, required=["probe", "accept-needle"])
    assert failed["predicate"]["result"] == "FAILED"
    assert set(failed["predicate"]["failedTests"]) == {"required:probe", "required:accept-needle"}


def test_junit_one_suite_per_kind_and_statuses(store, tmp_path) -> None:
    r = write_rehearsal(store, media_fail=True, torch_arch=Status.DEFERRED)
    with store.attempt(r.digest, "accept-needle") as a:
        a.add_check(CheckResult(name="needle-32k", status=Status.ERROR, detail="client crashed"))
    report = build_report(store, r.digest, required=["probe:pip_check", "accept-functional",
                                                     "cluster-probe"])
    path = tmp_path / "report.xml"
    path.write_text(render(report, "junit"))
    xml = junitparser.JUnitXml.fromfile(str(path))
    suites = {suite.name: suite for suite in xml}
    assert set(suites) == {"build", "probe", "images-verify", "promote", "gpu-preflight",
                           "accept-functional", "accept-media", "bench", "accept-needle",
                           "required"}
    cases = {(s, case.name): case for s, suite in suites.items() for case in suite}

    def result(key):
        return [type(x).__name__ for x in cases[key].result]

    assert result(("probe", "pip_check")) == []                         # passed
    assert cases[("probe", "pip_check")].is_passed
    assert result(("probe", "torch_arch")) == ["Skipped"]              # DEFERRED, not a pass
    assert "DEFERRED" in cases[("probe", "torch_arch")].result[0].message
    assert "CPU torch build" in cases[("probe", "torch_arch")].result[0].message
    assert not cases[("probe", "torch_arch")].is_passed
    assert result(("accept-media", "corrupted-media-status")) == ["Failure"]
    assert "500" in cases[("accept-media", "corrupted-media-status")].result[0].message
    assert result(("accept-needle", "needle-32k")) == ["Error"]
    assert result(("required", "cluster-probe")) == ["Failure"]          # missing
    assert result(("required", "accept-functional")) == []
    assert suites["probe"].tests == 5 and suites["probe"].skipped == 1
    assert suites["accept-media"].failures == 1 and suites["accept-needle"].errors == 1
    assert "evidence: " in cases[("probe", "pip_check")].system_out


def test_intoto_accepted_fail_stays_failed(store, spec_file) -> None:
    """A FAIL the profile accepts is a failed test (the gate's acceptance and its reason are in
    the configuration), validated with in-toto's own bindings; never WARNED."""
    r = write_rehearsal(store, torch_arch=Status.FAIL, profile="local")
    statement = _statement(store, r.digest)
    predicate = statement["predicate"]
    assert predicate["result"] == "FAILED"
    assert "probe:torch_arch" in predicate["failedTests"]
    assert "probe:torch_arch" not in predicate["warnedTests"]
    [accepted] = [c for c in predicate["configuration"] if c["name"] == "gate-acceptances"]
    entries = json.loads(base64.b64decode(accepted["content"]))
    assert {e["test"] for e in entries} == {"probe:torch_arch"}
    assert entries[0]["status"] == "FAIL" and "CPU torch build" in entries[0]["reason"]
    assert accepted["annotations"] == {"gate": "allowed"}
