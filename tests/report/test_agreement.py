"""Every format says the same thing: markdown, HTML, JSON and JUnit of one report lead with the
same decision and count the same lines the same way — for a clean image, a failing one, one
whose FAIL and DEFERRED the profile accepts, and the auditor's image whose operator signed a
FAIL of `cluster accept`, not required by the policy and then required by it.

The inputs are made as the product makes them: a rehearsal's evidence through the real
EvidenceStore, the test-result statement `imagekit attest` signs from the CI store's report,
a cluster-accept phase predicate as `cluster accept --key` builds it, each signed with a real
key, verified with the trust policy and filed as a pull does.
"""

from __future__ import annotations

import html as htmllib
import json
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import pytest

from imagekit.attest import keys
from imagekit.attest.phase import phase_predicate
from imagekit.attest.statements import CLUSTER_ACCEPT_TYPE
from imagekit.attest.statements import test_result_statement as ci_statement
from imagekit.evidence import EvidenceStore
from imagekit.oci.digest import Digest
from imagekit.report import build_report, check_promotable, render
from imagekit.report.accepted import Accepted
from imagekit.report.chain import report_with_trust
from imagekit.report.decision import count_text, derive, evaluate_required
from imagekit.report.models import Decision, ImageReport
from imagekit.report.required import parse_requirements
from imagekit.results import CheckReport, CheckResult, Status
from imagekit.trust import load_trust
from tests.report.conftest import write_rehearsal
from tests.report.test_decision import PROMO, _sign_into


@dataclass
class Rendered:
    md: str
    html: str
    json: dict
    junit: ET.Element


def _render(report: ImageReport) -> Rendered:
    return Rendered(render(report, "md"), render(report, "html"),
                    json.loads(render(report, "json")), ET.fromstring(render(report, "junit")))


def _page_text(page: str, pattern: str) -> str:
    found = re.search(pattern, page, re.S)
    assert found, pattern
    return " ".join(htmllib.unescape(re.sub(r"<[^>]+>", " ", found.group(1))).split())


def _md_line(md: str, prefix: str) -> str:
    [line] = [x for x in md.splitlines() if x.startswith(prefix)]
    return line.removeprefix(prefix).strip()


def assert_agree(report: ImageReport, out: Rendered | None = None) -> Decision:
    """Every format renders the one decision: the same sentence, may-promote, next step,
    counts (accepted apart from PASS), required checks, and JUnit's failures + errors are
    the decision's blocking reasons, one each."""
    out = out or _render(report)
    decision = derive(report)
    # the decision is consistent in itself: allowed exactly when nothing blocks, and then
    # every required check is satisfied
    assert decision.may_promote == (decision.counts.blocking == 0) == (not decision.blocking)
    if decision.may_promote:
        assert all(o.satisfied for o in decision.required), decision.required
    # JSON: the decision is its first key, the same record
    assert next(iter(out.json)) == "decision"
    assert Decision.model_validate(out.json["decision"]) == decision
    # the first line a person reads, in each format
    assert out.md.splitlines()[0] == f"**{decision.summary}**"
    assert _page_text(out.html, r'<h2 id="decision">(.*?)</h2>') == decision.summary
    suites = out.junit.findall("testsuite")
    assert suites and {p.get("value") for s in suites
                       for p in s.iter("property") if p.get("name") == "decision"} \
        == {decision.summary}
    # may promote, and the next step
    allowed = 'data-allowed="yes"' in out.html
    assert allowed == decision.may_promote == ("**Allowed" in out.md)
    assert ("**Refused: " in out.md) == (not decision.may_promote)
    assert f'data-blocking="{decision.counts.blocking}"' in out.html
    assert ("Next: `deploy " in out.md) == decision.next_step.startswith("deploy ")
    assert ("Next: <code>deploy " in out.html) == decision.next_step.startswith("deploy ")
    # the counts: md and HTML say the decision's count text; JUnit counts the same lines
    said = count_text(decision.counts, decision.accepted, decision.not_required)
    assert _md_line(out.md, "- **Checks:**").startswith(said)
    assert _page_text(out.html, r"<tr><td>checks</td><td>(.*?)</td></tr>").startswith(said)
    line_cases = [c for s in suites if s.get("name") not in ("required", "decision")
                  for c in s.findall("testcase")]
    judged = [c for c in line_cases if not any(
        x.get("message", "").startswith(("FAIL (not blocking", "ERROR (not blocking"))
        for x in c)]
    passed = [c for c in judged if not any(x.tag in ("failure", "error", "skipped") for x in c)]
    accepted = [c for c in line_cases for x in c.findall("skipped")
                if "(accepted by the gate: " in x.get("message", "")]
    assert len(passed) == decision.counts.passed + sum(
        1 for x in report.checks if x.kind in ("promote", "gate-override")
        and x.status is Status.PASS)
    assert len(accepted) == decision.counts.accepted
    # JUnit's failures and errors are the decision's blocking reasons, one each
    failures = int(out.junit.get("failures")) + int(out.junit.get("errors"))
    assert failures == decision.counts.blocking == len(out.json["decision"]["blocking"])
    assert int(out.junit.get("failures")) == sum(1 for b in decision.blocking
                                                 if b.status != "ERROR")
    # the required checks: the same set satisfied in every format
    unmet = {o.requirement for o in decision.required if not o.satisfied}
    required = next((s for s in suites if s.get("name") == "required"), None)
    failing = {c.get("name") for c in required.findall("testcase")
               if c.find("failure") is not None or c.find("error") is not None} \
        if required is not None else set()
    assert failing == unmet
    rows = dict(re.findall(r"^\| ([\w:.-]+) \| (yes|\*\*no\*\*) \|", out.md, re.M))
    assert {r for r, ok in rows.items() if ok != "yes"} == unmet
    assert set(rows) == {o.requirement for o in decision.required}
    assert {o["requirement"] for o in out.json["decision"]["required"]
            if not o["satisfied"]} == unmet
    return decision


# -- the five outcomes -------------------------------------------------------------------------

def test_all_pass_agrees_everywhere(store) -> None:
    r = write_rehearsal(store)
    decision = assert_agree(build_report(store, r.digest))
    assert decision.verdict == "promoted" and decision.level == "go"
    assert decision.counts.blocking == decision.counts.accepted == decision.counts.failed == 0


def test_a_fail_agrees_everywhere(store) -> None:
    r = write_rehearsal(store, media_fail=True)
    report = build_report(store, r.digest)
    out = _render(report)
    decision = assert_agree(report, out)
    assert decision.verdict == "not promotable" and decision.counts.failed == 1
    [blocker] = decision.blocking
    assert blocker.source == "check" and blocker.test == "accept-media:corrupted-media-status"
    [case] = [c for c in out.junit.iter("testcase") if c.find("failure") is not None]
    assert case.get("name") == "corrupted-media-status"


def test_accepted_fail_and_deferred_are_counted_apart_everywhere(store) -> None:
    r = write_rehearsal(store, torch_arch=Status.FAIL, promote=False)
    with store.attempt(r.image_id, "probe") as a:          # cli_help again: DEFERRED now
        a.add_check(CheckResult(name="cli_help", status=Status.DEFERRED,
                                detail="no engine in the stand-in"))
    report = build_report(store, r.digest, accepted=[
        Accepted(check="torch_arch", status=Status.FAIL, reason="stand-in CPU torch",
                 source="images.toml"),
        Accepted(check="cli_help", status=Status.DEFERRED, reason="stand-in has no engine",
                 source="images.toml")])
    out = _render(report)
    decision = assert_agree(report, out)
    assert decision.verdict == "promotable" and decision.level == "caution"
    assert decision.counts.accepted == 2 and decision.counts.blocking == 0
    assert decision.counts.failed == decision.counts.deferred == 0
    passing = sum(1 for x in report.checks if x.status is Status.PASS and x.kind != "promote")
    assert _md_line(out.md, "- **Checks:**") == \
        f"{passing} PASS, 2 accepted (torch_arch FAIL, cli_help DEFERRED)"
    assert int(out.junit.get("failures")) == 0 and int(out.junit.get("errors")) == 0


# -- the auditor: statements signed by CI and by the operator ---------------------------------

@pytest.fixture(scope="module")
def ci_pair(tmp_path_factory):
    return keys.generate(tmp_path_factory.mktemp("ci"))


@pytest.fixture(scope="module")
def operator_pair(tmp_path_factory):
    return keys.generate(tmp_path_factory.mktemp("operator"))


def _auditor(tmp_path: Path, ci_pair, operator_pair, spec_file, **required
             ) -> tuple[EvidenceStore, str, object]:
    """CI's store measures the stand-in (torch_arch FAIL, accepted by profile local) and signs
    its test-result; the image is promoted; the operator's `cluster accept` FAILs
    launch_parsed and signs that. The auditor's store holds only what it pulled."""
    ci_store = EvidenceStore(tmp_path / "ci-evidence")
    r = write_rehearsal(ci_store, "sglang", torch_arch=Status.FAIL, profile="local",
                        promote=False, preflight=False)
    ci_report = build_report(ci_store, r.digest, spec_path=spec_file)
    assert ci_report.gate.allowed, ci_report.gate.reasons
    digest = Digest.parse(r.digest)
    name = "127.0.0.1:5002/imagekit/sglang"
    tested = ci_statement(ci_report, digest, name)
    accept = CheckReport.of(f"{name}@{digest}", [
        CheckResult(name="engine_start", status=Status.PASS, detail="ready in 41 s"),
        CheckResult(name="launch_parsed", status=Status.FAIL,
                    detail="vllm serve rejected --max-num-seqs=0")])
    accepted = phase_predicate("cluster-accept", accept, digest=digest, reference=name,
                               cluster="https://127.0.0.1:6443")
    store = EvidenceStore(tmp_path / "auditor")
    publics = []
    for key_name, pair in (("ci", ci_pair), ("operator", operator_pair)):
        public = tmp_path / f"{key_name}.pub"
        public.write_bytes(pair[1].read_bytes())
        publics.append(public)
    trust = load_trust(publics, env={})
    subject = [{"name": name, "digest": {"sha256": digest.hex}}]
    hops = [{"endpoint": f"{name}:rehearsal", "digest": str(digest), "verified": True,
             "read_back": "hashed"}]
    _sign_into(store, tested, ci_pair, trust, 1, str(digest))
    _sign_into(store, {"_type": "https://in-toto.io/Statement/v1", "subject": subject,
                       "predicateType": PROMO, "predicate": {
                           "digest": str(digest), "media_type": "x", "hops": hops,
                           "links": [{"name": "hops", "status": "PASS"}],
                           "required": ["hops"], "generated": tested["predicate"]["timestamp"]}},
               ci_pair, trust, 2, str(digest))
    _sign_into(store, {"_type": "https://in-toto.io/Statement/v1", "subject": subject,
                       "predicateType": CLUSTER_ACCEPT_TYPE,
                       "predicate": accepted.model_dump(mode="json")},
               operator_pair, trust, 3, str(digest))
    return store, str(digest), trust


def _operator(trust) -> str:
    return next(k.label for k in trust.keys if k.name == "operator")


def test_a_trusted_fail_the_policy_does_not_require_is_named_not_blocking(
        tmp_path, ci_pair, operator_pair, spec_file) -> None:
    store, digest, trust = _auditor(tmp_path, ci_pair, operator_pair, spec_file)
    report = report_with_trust(store, digest, trust, None, requested=digest,
                               spec_path=spec_file)
    out = _render(report)
    decision = assert_agree(report, out)
    operator = _operator(trust)
    assert decision.verdict == "promoted" and decision.may_promote
    assert decision.level == "caution"
    assert (f"cluster-accept FAIL (signed by {operator}): launch_parsed — not required by "
            "the policy") in decision.summary
    assert "1 accepted FAIL (torch_arch" in decision.summary
    assert decision.next_step.startswith("deploy ")
    assert decision.counts.not_required == 1 and decision.counts.blocking == 0
    # the signed FAIL itself: named in each format as not required, never a JUnit failure
    [case] = [c for c in out.junit.iter("testcase") if c.get("name") == "launch_parsed"]
    assert case.find("skipped").get("message").startswith(
        "FAIL (not required by the policy): vllm serve rejected --max-num-seqs=0")
    assert re.search(r"\| cluster-accept \| launch_parsed \| \*\*FAIL\*\* \(not required\) \| "
                     + re.escape(operator), out.md)
    assert "FAIL</span> (not required)" in out.html
    # the required checks are satisfied by the signed lines, in JUnit too (no "no evidence")
    assert all(o.satisfied for o in decision.required)
    assert "has no evidence" not in render(report, "junit")
    # one signer naming everywhere: the key's name and fingerprint
    for text in (out.md, out.html, json.dumps(out.json, ensure_ascii=False),
                 render(report, "junit")):
        assert operator in htmllib.unescape(text)
        assert "key hint" not in text
    # `imagekit gate` reaches the same decision
    gate = check_promotable(store, digest, trust=trust, spec_path=spec_file)
    assert gate == report.gate and gate.allowed
    assert any("launch_parsed FAIL" in w and "not required by the policy" in w
               and operator in w for w in gate.warnings), gate.warnings


def test_a_trusted_fail_in_a_required_phase_blocks_everywhere(
        tmp_path, ci_pair, operator_pair, spec_file) -> None:
    store, digest, trust = _auditor(tmp_path, ci_pair, operator_pair, spec_file)
    required = ["probe", "images-verify", "cluster-accept"]
    report = report_with_trust(store, digest, trust, None, requested=digest,
                               required=required, spec_path=spec_file)
    out = _render(report)
    decision = assert_agree(report, out)
    operator = _operator(trust)
    assert decision.verdict == "not promotable" and not decision.may_promote
    assert decision.summary.startswith(
        f"not promotable: cluster-accept FAIL (signed by {operator}): launch_parsed — "
        "required by the policy;"), decision.summary
    assert "do not deploy" in decision.summary and not decision.next_step.startswith("deploy")
    [blocker] = decision.blocking
    assert blocker.source == "required" and blocker.test == "cluster-accept"
    assert blocker.signer == operator
    [case] = [c for c in out.junit.iter("testcase") if c.find("failure") is not None]
    assert case.get("name") == "cluster-accept" and "launch_parsed FAIL" in \
        case.find("failure").get("message")
    gate = check_promotable(store, digest, required, trust=trust, spec_path=spec_file)
    assert gate == report.gate and not gate.allowed


# -- the checker itself fails on a contradiction ----------------------------------------------

def test_the_agreement_check_fails_on_the_contradictions_it_is_for(
        tmp_path, ci_pair, operator_pair, spec_file) -> None:
    """What the formats used to say of the auditor's image: JUnit failed the required checks
    for want of local evidence while the gate judged them satisfied from the signed lines;
    and a JUnit with one failure more than the decision blocks for."""
    store, digest, trust = _auditor(tmp_path, ci_pair, operator_pair, spec_file)
    report = report_with_trust(store, digest, trust, None, requested=digest,
                               spec_path=spec_file)
    local_only = report.model_copy(update={"required": evaluate_required(
        report.checks, parse_requirements(None))})
    with pytest.raises(AssertionError):
        assert_agree(local_only)
    out = _render(report)
    suite = out.junit.find("testsuite")
    case = ET.SubElement(suite, "testcase", name="extra")
    ET.SubElement(case, "failure", message="required check probe has no evidence")
    out.junit.set("failures", str(int(out.junit.get("failures")) + 1))
    with pytest.raises(AssertionError):
        assert_agree(report, out)
