"""JUnit XML for CI: one testsuite per evidence kind, one testcase per line the decision read
(this store's, and those signed by trusted keys), rendered from the one derivation
(`imagekit.report.decision.derive`).

A `failure` or `error` is exactly one of the decision's blocking reasons, so the counts CI
shows are the decision's: a FAIL or ERROR that refuses, a required check missing or not
passing (suite `required`, so a missing one fails the build though no attempt exists to
report it), and any other refusal (suite `decision`). What does not refuse is `skipped`,
never a pass: a DEFERRED (its reason), a status the profile accepts ("FAIL (accepted by the
gate: reason)"), a signed phase the policy does not require. Every suite carries the decision
line as a property.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from imagekit.report.decision import NOT_REQUIRED, derive, line_key
from imagekit.report.models import Blocker, Decision, EvidenceLine, ImageReport
from imagekit.results import Status


def _case(suite: ET.Element, classname: str, name: str, outcome: str | None, message: str,
          evidence: str, kind: str = "") -> None:
    """`outcome`: None (passed), "failure", "error" or "skipped"."""
    case = ET.SubElement(suite, "testcase", classname=classname, name=name, time="0.000")
    if outcome in ("failure", "error"):
        ET.SubElement(case, outcome, message=message[:1000], type=kind).text = message
    elif outcome == "skipped":
        ET.SubElement(case, "skipped", message=message[:1000])
    if evidence:
        ET.SubElement(case, "system-out").text = f"evidence: {evidence}"


def _suite(root: ET.Element, name: str, report: ImageReport, decision: Decision,
           timestamp: str | None = None) -> ET.Element:
    suite = ET.SubElement(root, "testsuite", name=name)
    if timestamp:
        suite.set("timestamp", timestamp)
    properties = ET.SubElement(suite, "properties")
    ET.SubElement(properties, "property", name="subject", value=report.subject)
    ET.SubElement(properties, "property", name="decision", value=decision.summary)
    return suite


def _count(suite: ET.Element) -> None:
    cases = suite.findall("testcase")
    suite.set("tests", str(len(cases)))
    for attribute, element in (("failures", "failure"), ("errors", "error"),
                               ("skipped", "skipped")):
        suite.set(attribute, str(sum(1 for c in cases if c.find(element) is not None)))


def _line_case(line: EvidenceLine, blocker: Blocker | None, apart: set[tuple[str, str]]
               ) -> tuple[str | None, str, str]:
    """(outcome, message, type) of one line, as the decision judged it."""
    detail = line.detail
    if blocker is not None:
        return ("error" if line.status is Status.ERROR else "failure", detail or
                line.status.value, line.status.value)
    if line.status is Status.PASS:
        return None, "", ""
    if line.accepted:   # the status stays; the gate's acceptance is said beside it
        why = f"accepted by the gate: {line.accepted}"
    elif line_key(line) in apart:
        why = NOT_REQUIRED
    elif line.status is Status.DEFERRED:
        return "skipped", f"DEFERRED: {detail or 'no reason recorded'}", ""
    else:               # promotion's own record, or a gate that allowed it
        why = "not blocking: the gate does not refuse for it"
    return "skipped", f"{line.status.value} ({why})" + (f": {detail}" if detail else ""), ""


def render(report: ImageReport) -> str:
    decision = derive(report)
    root = ET.Element("testsuites", name=f"imagekit report {report.subject}")
    lines = [*report.checks, *report.signed_checks, *report.signed_phases]
    apart = {line_key(x) for x in decision.not_required}
    open_ = list(decision.blocking)

    def take(source: str, test: str, evidence: str = "") -> Blocker | None:
        for blocker in open_:
            if blocker.source == source and blocker.test == test and \
                    (source != "check" or blocker.evidence == evidence):
                open_.remove(blocker)
                return blocker
        return None

    by_kind: dict[str, list[EvidenceLine]] = {}
    for line in lines:
        by_kind.setdefault(line.kind, []).append(line)
    for kind, mine in by_kind.items():
        suite = _suite(root, kind, report, decision,
                       min(line.finished for line in mine).strftime("%Y-%m-%dT%H:%M:%S"))
        for line in mine:
            outcome, message, status = _line_case(
                line, take("check", line.test_name, line.evidence), apart)
            _case(suite, kind, line.name, outcome, message, line.evidence, status)
        _count(suite)
    if decision.required:
        suite = _suite(root, "required", report, decision)
        for o in decision.required:
            blocker = take("required", o.requirement)
            if blocker is not None:
                message = o.reason if o.status is not None else \
                    f"required check {o.requirement} has no evidence"
                _case(suite, "required", o.requirement,
                      "error" if o.status is Status.ERROR else "failure", message, "",
                      blocker.status)
            elif o.satisfied:
                _case(suite, "required", o.requirement, None, "", "")
            else:
                _case(suite, "required", o.requirement, "skipped",
                      f"not satisfied, not blocking: {o.reason}", "")
        _count(suite)
    if open_:   # the gate's other reasons: no evidence, a changed signed statement…
        suite = _suite(root, "decision", report, decision)
        for n, blocker in enumerate(open_, 1):
            _case(suite, "decision", blocker.test or f"refused-{n}",
                  "error" if blocker.status == "ERROR" else "failure", blocker.reason,
                  blocker.evidence, blocker.status)
        _count(suite)
    for attribute in ("tests", "failures", "errors", "skipped"):
        root.set(attribute, str(sum(int(s.get(attribute, "0")) for s in root.findall("testsuite"))))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
