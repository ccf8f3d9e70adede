"""JUnit XML for CI: one testsuite per evidence kind, one testcase per current check.

DEFERRED is `skipped` with its reason (never a pass), ERROR is `error`, FAIL is `failure` —
also a FAIL the profile accepts (its message says so and why; only the gate applies
acceptances, docs/design/evidence.md).
Required checks get a suite of their own, so a missing one fails the build even though no
attempt exists to report it.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from imagekit.report.models import EvidenceLine, ImageReport
from imagekit.results import Status


def _case(suite: ET.Element, classname: str, name: str, status: Status | None, message: str,
          evidence: str, seconds: float = 0.0) -> None:
    case = ET.SubElement(suite, "testcase", classname=classname, name=name,
                         time=f"{seconds:.3f}")
    message = message or (status.value if status else "missing")
    if status is Status.FAIL or status is None:
        ET.SubElement(case, "failure", message=message[:1000],
                      type=status.value if status else "MISSING").text = message
    elif status is Status.ERROR:
        ET.SubElement(case, "error", message=message[:1000], type="ERROR").text = message
    elif status is Status.DEFERRED:
        ET.SubElement(case, "skipped", message=f"DEFERRED: {message}"[:1000])
    if evidence:
        ET.SubElement(case, "system-out").text = f"evidence: {evidence}"


def _count(suite: ET.Element) -> None:
    cases = suite.findall("testcase")
    suite.set("tests", str(len(cases)))
    suite.set("failures", str(sum(1 for c in cases if c.find("failure") is not None)))
    suite.set("errors", str(sum(1 for c in cases if c.find("error") is not None)))
    suite.set("skipped", str(sum(1 for c in cases if c.find("skipped") is not None)))


def render(report: ImageReport) -> str:
    root = ET.Element("testsuites", name=f"imagekit report {report.subject}")
    by_kind: dict[str, list[EvidenceLine]] = {}
    for line in report.checks:
        by_kind.setdefault(line.kind, []).append(line)
    for kind, lines in by_kind.items():
        suite = ET.SubElement(root, "testsuite", name=kind,
                              timestamp=min(line.finished for line in lines)
                              .strftime("%Y-%m-%dT%H:%M:%S"))
        properties = ET.SubElement(suite, "properties")
        ET.SubElement(properties, "property", name="subject", value=report.subject)
        for line in lines:
            detail = line.detail
            if line.accepted:   # the status stays; the gate's acceptance is said beside it
                detail = f"{line.status.value} (accepted by the gate: {line.accepted})" + \
                    (f": {detail}" if detail else "")
            _case(suite, kind, line.name, line.status, detail, line.evidence)
        _count(suite)
    if report.required:
        suite = ET.SubElement(root, "testsuite", name="required")
        for outcome in report.required:
            status: Status | None = Status.PASS if outcome.satisfied else (
                Status.FAIL if outcome.status in (None, Status.DEFERRED) else outcome.status)
            message = outcome.reason if outcome.status is not None else \
                f"required check {outcome.requirement} has no evidence"
            if outcome.status is None:
                status = None
            _case(suite, "required", outcome.requirement, status, message, "")
        _count(suite)
    for attribute in ("tests", "failures", "errors", "skipped"):
        root.set(attribute, str(sum(int(s.get(attribute, "0")) for s in root.findall("testsuite"))))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
