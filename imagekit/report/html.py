"""A self-contained HTML page: the report's tables plus inline SVG plots (all-reduce bus
bandwidth vs message size, acceptance latency percentiles). No external asset of any kind: the
page is opened from an archive years later, offline.

A small inline script marks each plot that the browser actually laid out (non-empty bounding
box) in `data-rendered`, so a headless browser can prove the plots render, not only exist.
"""

from __future__ import annotations

import re
from html import escape

from imagekit.report import svg
from imagekit.report.models import ImageReport, LatencySeries

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem;color:#222;
max-width:1500px}
table{border-collapse:collapse;margin:.5rem 0 1rem}td,th{border:1px solid #ccc;padding:.25rem .5rem;
font-size:.9rem;text-align:left;vertical-align:top}th{background:#f3f3f3}
code{font-size:.85rem}td{overflow-wrap:anywhere}td:nth-child(-n+2){white-space:nowrap}code.ev{display:inline-block;min-width:26em}.PASS{color:#176b17}.FAIL,.ERROR,.missing{color:#b00020;font-weight:bold}
.DEFERRED{color:#8a6d00;font-style:italic}.none{color:#777}figure{margin:1rem 0}
"""

_SCRIPT = """
(function(){var out=[];document.querySelectorAll('svg.plot').forEach(function(s){
var b=s.getBBox();var ok=b.width>0&&b.height>0&&s.querySelectorAll('.point,.bar').length>0;
s.setAttribute('data-rendered',ok?'yes':'no');out.push(s.id+':'+(ok?'yes':'no'));});
document.body.setAttribute('data-plots',out.join(','));})();
"""


def _status(value: str | None) -> str:
    value = value or "missing"
    return f'<span class="{escape(value)}">{escape(value)}</span>'


def _table(headers: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _none(text: str = "No evidence.") -> str:
    return f'<p class="none">{escape(text)}</p>'


def busbw_plot(report: ImageReport) -> str:
    """Bus bandwidth vs message size, one line per preflight. busbw is 0 by definition at world
    size 1 (no link is driven); with no non-zero busbw anywhere the plot shows algbw instead and
    says so in its title and id."""
    def series_of(metric: str) -> list[tuple[str, list[tuple[float, float]]]]:
        found = []
        for p in report.preflight:
            points = [(s.bytes, getattr(s, f"{metric}_GBps")) for s in p.sizes
                      if getattr(s, f"{metric}_GBps") is not None]
            if points:
                label = f"{p.backend or '?'} ×{p.world_size or '?'}"
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
            f"acceptance latency: {metric} percentiles{suffix}", "series",
            f"{metric}{suffix}",
            [s.label if s.label != s.kind else s.kind for s in group], keys,
            [[s.percentiles.get(k) for k in keys] for s in group])
        if plot:
            plots.append(plot)
    return plots


def render(report: ImageReport) -> str:
    facts = report.facts
    title = facts.name or report.requested
    parts = [f"<h1>Image report: {escape(title)}</h1>",
             _table(["", ""], [
                 ["digest", f"<code>{escape(report.subject)}</code>"],
                 ["also known as", ", ".join(f"<code>{escape(a)}</code>" for a in report.aliases)
                  or "—"],
                 ["resolved", escape(report.resolution or "—")],
                 ["overall", _status(report.status.value)],
                 ["base digest", f"<code>{escape(facts.base_digest)}</code>" if facts.base_digest
                  else '<span class="none">no evidence</span>'],
                 ["profile", escape(report.profile or "—")],
                 ["evidence root", f"<code>{escape(report.evidence_root)}</code>"],
                 ["generated", f"{report.generated:%Y-%m-%d %H:%M:%S} UTC"]])]

    decision = report.gate       # computed once, when the report was built
    parts.append("<h2>Promotion gate</h2>")
    parts.append(f'<p class="gate">{_status("PASS" if decision.allowed else "FAIL")} '
                 f'{"allowed" if decision.allowed else "refused"}</p>')
    if decision.reasons or decision.warnings:
        parts.append("<ul>" + "".join(f'<li><span class="FAIL">refused</span>: {escape(r)}</li>'
                                      for r in decision.reasons)
                     + "".join(f'<li><span class="DEFERRED">warning</span>: {escape(w)}</li>'
                               for w in decision.warnings) + "</ul>")
    parts.append("<h2>Summary by evidence kind</h2>")
    parts.append(_table(["kind", "PASS", "FAIL", "DEFERRED", "ERROR", "accepted",
                         "latest evidence"], [
        [escape(r["kind"])] + [f'<span class="{k}">{r[k]}</span>' if r[k] else "0"
                               for k in ("PASS", "FAIL", "DEFERRED", "ERROR")]
        + [str(r["accepted"]), f'<code class="ev">{escape(r["evidence"])}</code>']
        for r in report.summary()]))
    parts.append("<h2>Final versions</h2>")
    parts.append(_table(["package", "version"],
                        [[escape(k), f"<code>{escape(v)}</code>"]
                         for k, v in sorted(facts.versions.items())])
                 if facts.versions else _none())
    parts.append("<h2>Fix layers</h2>")
    parts.append("<ol>" + "".join(f"<li><code>{escape(x)}</code></li>" for x in facts.fix_layers)
                 + "</ol>" if facts.fix_layers else _none())

    parts.append("<h2>Required checks</h2>")
    parts.append(_table(["requirement", "satisfied", "status", "reason"], [
        [escape(o.requirement), "yes" if o.satisfied else '<span class="FAIL">no</span>',
         _status(o.status.value if o.status else None)
         + (" (accepted)" if o.satisfied and o.status and o.status.value != "PASS" else ""),
         escape(o.reason)]
        for o in report.required]) if report.required else _none("None configured."))

    parts.append("<h2>Checks</h2>")
    parts.append(_table(["kind", "check", "status", "detail", "evidence"], [
        [escape(c.kind), escape(c.name),
         _status(c.status.value) + (" (accepted)" if c.accepted else ""),
         escape(c.detail[:400]) + (f"<br><em>accepted: {escape(c.accepted)}</em>"
                                   if c.accepted else ""),
         f'<code class="ev">{escape(c.evidence)}</code>'] for c in report.checks]))
    if report.history:
        parts.append("<details><summary>Earlier attempts (superseded, kept)</summary>")
        parts.append(_table(["kind", "check", "status", "detail", "evidence"], [
            [escape(c.kind), escape(c.name), _status(c.status.value), escape(c.detail[:300]),
             f'<code class="ev">{escape(c.evidence)}</code>'] for c in report.history]))
        parts.append("</details>")

    parts.append("<h2>Promotion endpoints</h2>")
    parts.append(_table(["endpoint", "reference", "digest", "verified", "bytes moved"], [
        [escape(e.endpoint), f"<code>{escape(e.reference)}</code>",
         f"<code>{escape(e.digest)}</code>"
         + ("" if e.digest in (report.subject, *report.aliases)
            else ' <span class="FAIL">(not the image digest)</span>'),
         {True: "yes", False: '<span class="FAIL">no</span>', None: "unknown"}[e.verified],
         "" if e.bytes_moved is None else str(e.bytes_moved)] for e in report.endpoints])
        if report.endpoints else _none("No evidence (not promoted)."))

    parts.append("<h2>GPU preflight</h2>")
    plot = busbw_plot(report)
    if report.preflight:
        for p in report.preflight:
            parts.append(f"<p>{_status(p.status.value)} world size {p.world_size}, backend "
                         f"{escape(str(p.backend))} — <code>{escape(p.evidence)}</code></p>")
        parts.append(f"<figure>{plot}</figure>" if plot else _none("No bandwidth figures."))
    else:
        parts.append(_none())

    parts.append("<h2>Acceptance latency</h2>")
    plots = latency_plots(report)
    if report.latency:
        parts.extend(f"<figure>{p}</figure>" for p in plots)
        keys = sorted({k for s in report.latency for k in s.percentiles},
                      key=lambda k: float(k[1:]))
        parts.append(_table(["kind", "series", "metric", "status", "unit", *keys], [
            [escape(s.kind), escape(s.label), escape(s.metric), _status(s.status.value),
             escape(s.unit)]
            + [f"{s.percentiles[k]:.4g}" if k in s.percentiles else "" for k in keys]
            for s in report.latency]))
    else:
        parts.append(_none())

    if report.overrides:
        parts.append("<h2>Gate overrides</h2>")
        parts.append(_table(["when", "user", "reason", "refused for", "evidence"], [
            [f"{o.finished:%Y-%m-%d %H:%M:%S}", escape(o.user), escape(o.reason),
             escape("; ".join(o.refused_for)), f"<code>{escape(o.evidence)}</code>"]
            for o in report.overrides]))

    body = "\n".join(parts)
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>imagekit report {escape(report.subject)}</title>"
            f"<style>{_CSS}</style></head>\n<body>\n{body}\n<script>{_SCRIPT}</script>\n"
            f"</body></html>\n")
