"""The HTML report escapes what evidence says: a hostile image name, check detail, matrix title
or gate reason comes out as text, never as markup (jinja2 autoescape). The same page rendered
with autoescape off carries the live <script>: the case that makes this test fail."""

from __future__ import annotations

from html.parser import HTMLParser

from imagekit.report import build_report, html
from imagekit.report.models import ImageReport

HOSTILE = '<script>alert("owned")</script>'
BREAKOUT = '" onmouseover="alert(1)'


class _Elements(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.scripts = 0
        self.handlers: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.scripts += tag == "script"
        self.handlers += [name for name, _ in attrs if name.startswith("on")]


def _hostile(report: ImageReport) -> ImageReport:
    checks = [c.model_copy(update={"detail": BREAKOUT, "name": HOSTILE})
              for c in report.checks]
    gate = report.gate.model_copy(update={"reasons": [HOSTILE], "warnings": [BREAKOUT]})
    return report.model_copy(update={
        "facts": report.facts.model_copy(update={"name": HOSTILE}),
        "requested": HOSTILE, "checks": checks, "gate": gate})


def _parse(page: str) -> _Elements:
    parser = _Elements()
    parser.feed(page)
    return parser


def test_hostile_evidence_is_escaped(rehearsal) -> None:
    report = _hostile(build_report(rehearsal.store, rehearsal.digest))
    page = html.render(report)
    parsed = _parse(page)
    assert parsed.scripts == 1             # the page's own plot-marking script, nothing else
    assert parsed.handlers == []           # no attribute broke out of its quotes
    assert "<h1>Image report: &lt;script&gt;alert(&#34;owned&#34;)&lt;/script&gt;</h1>" in page
    assert page.count("&lt;script&gt;alert(") >= 1 + len(report.checks)
    assert HOSTILE not in page


def test_without_autoescape_the_same_page_is_injectable(rehearsal) -> None:
    """The check above can fail: with autoescape off the hostile strings are markup."""
    report = _hostile(build_report(rehearsal.store, rehearsal.digest))
    page = html.render(report, env=html.environment(autoescape=False))
    parsed = _parse(page)
    assert HOSTILE in page
    assert parsed.scripts > 1 and "onmouseover" in parsed.handlers


def test_template_ships_as_package_data() -> None:
    from importlib.resources import files

    assert files("imagekit.report").joinpath("templates", html.TEMPLATE).is_file()
    assert html.environment().autoescape is True
