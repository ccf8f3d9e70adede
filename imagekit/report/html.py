"""A self-contained HTML page: the report's tables plus inline SVG plots (all-reduce bus
bandwidth vs message size, acceptance latency percentiles). No external asset of any kind: the
page is opened from an archive years later, offline.

The page is the jinja2 template `templates/report.html.j2` (package data), rendered with
autoescape on: every value from evidence (check names, details, image names, reasons) is
HTML-escaped by jinja2; only the SVG plots of `imagekit.report.svg`, which escape their own
text, are handed over as markup.

A small inline script marks each plot that the browser actually laid out (non-empty bounding
box) in `data-rendered`, so a headless browser can prove the plots render, not only exist; and
on the body the first line a person sees (`data-first`, the decision) and whether the page is
wider than the window (`data-overflow`).
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

from imagekit.report import glance, svg
from imagekit.report.decision import derive, line_key, serves_image, short_ref
from imagekit.report.markdown import (
    _PHASES,
    checks_line,
    gate_line,
    required_line,
    signed_only,
)
from imagekit.report.markdown import once_in_full as in_text
from imagekit.report.models import ImageReport, LatencySeries

if TYPE_CHECKING:
    import jinja2

TEMPLATE = "report.html.j2"


@functools.cache
def environment(autoescape: bool = True) -> jinja2.Environment:
    """The templates' environment. `autoescape=False` exists only so a test can show what the
    page would be without it (the hostile-string test fails then)."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.PackageLoader("imagekit.report", "templates"),
                             autoescape=autoescape, trim_blocks=True, lstrip_blocks=True,
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters["num"] = _num
    env.filters["known"] = lambda x: "not recorded" if x is None else str(x)
    env.filters["line_key"] = line_key   # which signed lines are not required
    return env


def _num(x: float | None) -> str:
    return "—" if x is None else f"{x:.4g}"


def _markup(text: str) -> object:
    """SVG built by imagekit.report.svg (its text escaped there) goes in as it is."""
    from markupsafe import Markup

    return Markup(text) if text else ""


def busbw_plot(report: ImageReport) -> str:
    """Bus bandwidth vs message size, one line per preflight. busbw is 0 by definition at world
    size 1 (no link is driven); with no non-zero busbw anywhere the plot shows algbw instead and
    says so in its title and id."""
    def series_of(metric: str) -> list[tuple[str, list[tuple[float, float]]]]:
        found: list[tuple[str, list[tuple[float, float]]]] = []
        for p in report.preflight:
            points: list[tuple[float, float]] = [
                (s.bytes, getattr(s, f"{metric}_GBps")) for s in p.sizes
                if getattr(s, f"{metric}_GBps") is not None]
            if points:
                label = f"{p.backend or 'backend not recorded'} ×{p.world_size or 'n'}"
                if len(report.preflight) > 1:
                    label += f" {p.attempt_id[:15]}"
                found.append((label, points))
        return found

    series = series_of("busbw")
    if any(y > 0 for _, points in series for _, y in points):
        return svg.line_plot_log2("plot-allreduce-busbw", "all-reduce busbw vs message size",
                                  "message size (bytes)", "busbw (GB/s)", series)
    series = series_of("algbw")
    if not series:
        return ""
    return svg.line_plot_log2("plot-allreduce-algbw",
                              "all-reduce algbw vs message size (busbw is 0 at world size 1)",
                              "message size (bytes)", "algbw (GB/s)", series)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", text).strip("-") or "x"


def latency_plots(report: ImageReport) -> list[str]:
    """One bar plot per metric (ttft, e2e, …) and unit: a group per series, a bar per
    percentile."""
    by_metric: dict[tuple[str, str], list[LatencySeries]] = {}
    for series in report.latency:
        by_metric.setdefault((series.metric, series.unit), []).append(series)
    plots = []
    for (metric, unit), group in by_metric.items():
        keys = sorted({k for s in group for k in s.percentiles}, key=lambda k: float(k[1:]))
        suffix = f" ({unit})" if unit else ""
        plot = svg.grouped_bars(
            f"plot-latency-{_slug(metric)}{'-' + _slug(unit) if unit else ''}",
            f"{metric.upper()} percentiles per round / suite{suffix}", "series",
            f"{metric}{suffix}",
            [s.label if s.label != s.kind else s.kind for s in group], keys,
            [[s.percentiles.get(k) for k in keys] for s in group])
        if plot:
            plots.append(plot)
    return plots


def _href(report: ImageReport, evidence: str, base: Path | None, file: str = "attempt.json"
          ) -> str:
    """A link that opens from where the page is: relative to `base` (the page's directory)
    when known, else an absolute file: URL. Never a network address."""
    target = Path(report.evidence_root) / evidence / file
    if base is not None:
        return quote(os.path.relpath(target, Path(base).resolve()))
    return "file://" + quote(str(target.resolve()))


def path_diagram(report: ImageReport) -> str:
    """Endpoints in promotion order with the digest each serves, then the cluster Pod."""
    nodes = []
    attest = glance.attestations(report)
    note = ("attestations: " + ", ".join(sorted({a.kind for a in attest}))
            if attest else "no attestation evidence")
    for e in glance.promotion_path(report):
        state = ("wrong" if not serves_image(report, e) else
                 "verified" if e.verified else
                 "not-verified" if e.verified is False else "unverified")
        nodes.append({"name": glance.endpoint_name(e),
                      "where": e.reference.split("/", 1)[0], "digest": e.digest[:19] + "…",
                      "state": state, "note": _attested(e.referrers, note),
                      "title": f"{e.reference} → {e.digest}"})
    pinned = [c for c in report.checks if c.kind == "cluster-probe" and c.name == "image_id"]
    if pinned:
        nodes.append({"name": "cluster Pod", "where": "imageID of the running Pod",
                      "digest": report.subject[:19] + "…",
                      "state": "pass" if pinned[0].status.value == "PASS" else "fail",
                      "note": pinned[0].detail[:36], "title": pinned[0].detail})
    if not nodes:
        return ""      # the template says "No evidence (not pushed, not promoted)."
    return svg.promotion_diagram("promotion-path", nodes)


def _attested(referrers: int | None, note: str) -> str:
    if referrers:
        return f"{referrers} attestation(s) carried, read back"
    if referrers == 0:
        return "no attestations (0 referrers)"
    return note


def goodput_plot(report: ImageReport) -> str:
    return svg.hbars("plot-goodput", "bench goodput per round (share of requests within SLO; "
                     "dashed: floor)",
                     [(g.label + (" (past saturation: floor not judged)" if g.saturated else ""),
                       g.goodput, g.floor, g.status.value) for g in report.goodput])


def _sbom_lines(report: ImageReport) -> list[str] | None:
    """The packages the SBOMs show changed since the previous build (imagekit.sbom.history),
    None when there is no such diff."""
    from imagekit.errors import InvalidInput
    from imagekit.evidence import EvidenceStore
    from imagekit.sbom.history import diff_for_digest

    try:
        diff = diff_for_digest(EvidenceStore(report.evidence_root), report.subject)
    except (OSError, ValueError, InvalidInput):
        return None
    return None if diff is None else list(diff.lines())


def render(report: ImageReport, base: Path | None = None,
           env: jinja2.Environment | None = None) -> str:
    """The page; `base` is the directory it is written to (links to evidence are relative
    to it), None for absolute file: links."""
    decision = derive(report)
    names, rows = glance.probe_matrix(report)
    facts = report.facts
    template = (env or environment()).get_template(TEMPLATE)
    return once_in_full(template.render(
        report=report, facts=facts, title=short_ref(facts.name or report.requested),
        decision=decision, not_run=glance.not_run(report),
        counts=checks_line(report, decision), gate_line=gate_line(report, decision),
        required_line=required_line(report, decision) if signed_only(report) else "",
        signed_lines=[*report.signed_checks, *report.signed_phases],
        not_required={line_key(x) for x in decision.not_required},
        image_run=glance.phases_run(report)["image"],
        endpoints=glance.promotion_path(report),
        unsigned=[t for ph, t in _PHASES.items()
                  if ph != "other" and not any(s.phase == ph for s in report.chain)],
        phases=glance.PHASES,
        matrix={"names": names, "rows": rows},
        path_diagram=_markup(path_diagram(report)),
        busbw=_markup(busbw_plot(report)), goodput=_markup(goodput_plot(report)),
        latency_plots=[_markup(p) for p in latency_plots(report)],
        percentile_keys=sorted({k for s in report.latency for k in s.percentiles},
                               key=lambda k: float(k[1:])),
        summary=report.summary(), versions=sorted(facts.versions.items()),
        sbom_lines=_sbom_lines(report),
        image_digests=(report.subject, *report.aliases),
        href=lambda evidence: _href(report, evidence, base)))


_TAG = re.compile(r"(<[^>]*>)")


def once_in_full(page: str) -> str:
    """Each long digest in full where the page first shows it, short after that: only the
    text a person reads changes (tags and their attributes, links included, keep theirs)."""
    head, sep, body = page.partition("<body>")
    if not sep:
        return page
    parts = _TAG.split(body)
    text = "\x00".join(parts[0::2])    # the text between tags, in page order
    shortened = in_text(text).split("\x00")
    parts[0::2] = shortened
    return head + sep + "".join(parts)
