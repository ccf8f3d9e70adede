"""One entry point for every output format of a report."""

from __future__ import annotations

import json

from imagekit.errors import InvalidInput
from imagekit.report import html, intoto, junit, markdown
from imagekit.report.models import ImageReport

FORMATS = ("md", "json", "junit", "intoto", "html")


def render(report: ImageReport, fmt: str) -> str:
    if fmt == "md":
        return markdown.render(report)
    if fmt == "json":
        return report.model_dump_json(indent=2) + "\n"
    if fmt == "junit":
        return junit.render(report)
    if fmt == "intoto":
        return json.dumps(intoto.statement(report), indent=2) + "\n"
    if fmt == "html":
        return html.render(report)
    raise InvalidInput(f"unknown report format {fmt!r} (one of {', '.join(FORMATS)})")
