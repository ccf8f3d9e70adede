"""One entry point for every output format of a report.

Each format's module is imported when that format is rendered: `imagekit.report` is also the
promotion gate's package, and `promote` must not pay for xml.etree (junit, ~30 ms) or the HTML
page's modules at every start (bench/bench_parity.py)."""

from __future__ import annotations

import json
from pathlib import Path

from imagekit.errors import InvalidInput
from imagekit.evidence import EvidenceStore
from imagekit.evidence.kinds import ReportResult
from imagekit.report.decision import derive
from imagekit.report.models import ImageReport

FORMATS = ("md", "json", "junit", "intoto", "html")


def render(report: ImageReport, fmt: str, base: Path | None = None) -> str:
    """`base`: the directory the output is written to (the HTML page links evidence relative
    to it)."""
    if fmt == "md":
        from imagekit.report import markdown

        return markdown.render(report)
    if fmt == "json":   # the decision first, then the report it is derived from
        body = {"decision": derive(report).model_dump(mode="json"),
                **report.model_dump(mode="json")}
        return json.dumps(body, indent=2, ensure_ascii=False) + "\n"
    if fmt == "junit":
        from imagekit.report import junit

        return junit.render(report)
    if fmt == "intoto":
        from imagekit.report import intoto

        return json.dumps(intoto.statement(report), indent=2) + "\n"
    if fmt == "html":
        from imagekit.report import html

        return html.render(report, base)
    raise InvalidInput(f"unknown report format {fmt!r} (one of {', '.join(FORMATS)})")


#: File suffix of each format when every format is written at once.
SUFFIXES = {"md": ".md", "json": ".json", "junit": ".junit.xml", "intoto": ".intoto.json",
            "html": ".html"}


def write_all(report: ImageReport, directory: Path | str, stem: str | None = None
              ) -> dict[str, Path]:
    """Every format into `directory` as `<stem><suffix>` (stem: the image name and the digest's
    first 12 hex). Existing files are replaced: reports are derived, evidence is not."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if stem is None:
        hex_part = report.subject.partition(":")[2][:12]
        stem = f"{report.facts.name}-{hex_part}" if report.facts.name else hex_part
    written = {}
    for fmt, suffix in SUFFIXES.items():
        target = directory / f"{stem}{suffix}"
        target.write_text(render(report, fmt, directory))
        written[fmt] = target
    return written


REPORT_KIND = "report"


def record_report(store: EvidenceStore, report: ImageReport) -> Path:
    """Archive every format of `report` as a new evidence attempt of kind `report`, keyed by the
    digest (append-only like all evidence; never a check, never gate input). Returns its
    directory."""
    with store.attempt(report.subject, REPORT_KIND, status=report.status.value,
                       requested=report.requested, profile=report.profile) as attempt:
        for fmt, suffix in SUFFIXES.items():
            attempt.write_text(f"report{suffix}", render(report, fmt, attempt.path))
        attempt.write_result(ReportResult(subject=report.subject, requested=report.requested,
                                          status=report.status, profile=report.profile,
                                          gate=report.gate, formats=list(SUFFIXES)))
        attempt.finish(report.status, summary=f"report of {report.subject}: "
                                               f"{report.status.value}")
    return attempt.path
