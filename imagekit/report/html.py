"""A self-contained HTML page: the report's tables plus inline SVG plots (all-reduce bus
bandwidth vs message size, acceptance latency percentiles). No external asset of any kind: the
page is opened from an archive years later, offline.

A small inline script marks each plot that the browser actually laid out (non-empty bounding
box) in `data-rendered`, so a headless browser can prove the plots render, not only exist.
"""

from __future__ import annotations

import os
import re
from html import escape
from pathlib import Path
from urllib.parse import quote

from imagekit.report import glance, svg
from imagekit.report.models import ImageReport, LatencySeries

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem;color:#222;
max-width:1500px}
table{border-collapse:collapse;margin:.5rem 0 1rem}td,th{border:1px solid #ccc;padding:.25rem .5rem;
font-size:.9rem;text-align:left;vertical-align:top}th{background:#f3f3f3;white-space:nowrap}
code{font-size:.85rem}td{overflow-wrap:anywhere}td:nth-child(-n+2){white-space:nowrap}td code.ref{white-space:normal;overflow-wrap:anywhere}code.ev{display:inline-block;min-width:16em;overflow-wrap:anywhere}.PASS{color:#176b17}.FAIL,.ERROR,.missing{color:#b00020;font-weight:bold}
.DEFERRED{color:#8a6d00;font-style:italic}.none{color:#777}figure{margin:1rem 0}
.banner{border-radius:8px;padding:.8rem 1.2rem;margin:1rem 0;border:2px solid}
.banner h2{margin:.1rem 0 .4rem;font-size:1.35rem}.banner p{margin:.2rem 0}
.banner ul{margin:.3rem 0 0;padding-left:1.2rem;font-size:.9rem}
.banner.go{background:#e9f6e9;border-color:#176b17}.banner.caution{background:#fff7dd;
border-color:#b08900}.banner.stop{background:#fdecee;border-color:#b00020}
.banner .next{font-weight:bold}.banner code{font-size:.9rem}
table.matrix td.cell{text-align:center;white-space:nowrap}table.matrix td.cell a{text-decoration:none}
.acc{font-size:.8rem;color:#555}a code.ev{color:#0645ad}
.glance{display:flex;flex-wrap:wrap;gap:2rem;align-items:flex-start}
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
    thead = f"<thead><tr>{head}</tr></thead>" if any(headers) else ""
    return f"<table>{thead}<tbody>{body}</tbody></table>"


def _none(text: str = "No evidence.") -> str:
    return f'<p class="none">{escape(text)}</p>'


def previous_section(report: ImageReport, ev) -> str:
    """`Since the previous build`: base digest, versions, checks whose status changed
    (imagekit.report.previous) and the packages the SBOMs show (imagekit.sbom.history)."""
    from imagekit.errors import InvalidInput
    from imagekit.evidence import EvidenceStore
    from imagekit.sbom.history import diff_for_digest

    parts = ['<h2 id="previous">Since the previous build</h2>']
    p = report.previous
    if p is None:
        parts.append(_none("No earlier build of this image in evidence."))
    else:
        parts.append(f"<p>Previous build <code>{escape(p.digest)}</code> "
                     f"({p.built:%Y-%m-%d %H:%M} UTC) {ev(p.evidence)}</p>")
        rows = [["base", f"<code>{escape(str(p.base_before))}</code>",
                 f"<code>{escape(str(p.base_after))}</code>"
                 + ("" if p.base_changed else ' <span class="none">(unchanged)</span>')]]
        rows += [[escape(v.package), f"<code>{escape(v.before or 'absent')}</code>",
                  f"<code>{escape(v.after or 'absent')}</code>"] for v in p.versions]
        if not p.probed:
            rows.append(["versions", '<span class="none">not known for both builds</span>',
                         '<span class="none">(one was not probed yet)</span>'])
        parts.append(_table(["version", "before", "now"], rows))
        parts.append(_table(["check whose status changed", "before", "now", "evidence"], [
            [escape(c.check), _status(c.before.value), _status(c.after.value),
             ev(c.evidence) if c.evidence else ""] for c in p.changed])
            if p.changed else _none("No check both builds ran changed status."))
        for label, group in (("Not run on this build (yet)", p.not_run),
                             ("New on this build", p.new)):
            if group:
                parts.append(f"<p>{escape(label)}: " + ", ".join(
                    f"<code>{escape(c.check)}</code>" for c in group) + "</p>")
    try:
        diff = diff_for_digest(EvidenceStore(report.evidence_root), report.subject)
    except (OSError, ValueError, InvalidInput):
        diff = None
    if diff is not None:
        lines = diff.lines()
        parts.append("<p>Packages (SBOM) since the previous build:</p>"
                     + ("<ul>" + "".join(f"<li><code>{escape(x)}</code></li>" for x in lines)
                        + "</ul>" if lines else _none("No package changed.")))
    return "\n".join(parts)


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


def banner(report: ImageReport) -> str:
    """The verdict of the stored gate decision, said as what to do next."""
    v = glance.verdict(report)
    points = "".join(f"<li>{escape(p[:400])}</li>" for p in v.points)
    return (f'<section id="verdict" class="banner {v.level}" data-allowed='
            f'"{"yes" if report.gate.allowed else "no"}"><h2>{escape(v.headline)}</h2>'
            f'<p class="next">Next: <code>{escape(v.next_step)}</code></p>'
            + (f"<ul>{points}</ul>" if points else "") + "</section>")


def matrix(report: ImageReport, base: Path | None = None) -> str:
    """Each probe once, its current status in each phase (a cell links its evidence)."""
    names, rows = glance.probe_matrix(report)
    if not names:
        return _none("No probe evidence.")
    head = "".join(f"<th>{escape(p)}</th>" for p in glance.PHASES)
    body = []
    for name in names:
        cells = []
        for phase in glance.PHASES:
            line = rows[name].get(phase)
            if line is None:
                cells.append('<td class="cell none">—</td>')
                continue
            acc = ' <span class="acc" title="{}">(accepted)</span>'.format(
                escape(line.accepted)) if line.accepted else ""
            cells.append(f'<td class="cell" title="{escape(line.detail[:300])}">'
                         f'<a href="{_href(report, line.evidence, base)}">'
                         f'{_status(line.status.value)}</a>{acc}</td>')
        body.append(f"<tr><td>{escape(name)}</td>{''.join(cells)}</tr>")
    return (f'<table id="check-matrix" class="matrix"><thead><tr><th>check</th>{head}</tr>'
            f'</thead><tbody>{"".join(body)}</tbody></table>')


def path_diagram(report: ImageReport) -> str:
    """Endpoints in promotion order with the digest each serves, then the cluster Pod."""
    nodes = []
    attest = glance.attestations(report)
    note = ("attestations: " + ", ".join(sorted({a.kind for a in attest}))
            if attest else "no attestation evidence")
    for e in glance.promotion_path(report):
        state = ("wrong" if not glance.serves_image(report, e) else
                 "verified" if e.verified else "unverified")
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
        return _none("No evidence (not pushed, not promoted).")
    return svg.promotion_diagram("promotion-path", nodes)


def _attested(referrers: int | None, note: str) -> str:
    if referrers:
        return f"{referrers} attestation(s) carried, read back"
    if referrers == 0:
        return "no attestations (0 referrers)"
    return note


def acceptance(report: ImageReport, base: Path | None = None) -> str:
    if not report.acceptance:
        return _none()
    def aspect(status, detail: str) -> str:
        if status is None:
            return '<span class="none">not judged</span>'
        return _status(status.value) + (f" {escape(detail[:200])}" if detail else "")
    return _table(["suite", "check", "status", "protocol", "semantic", "evidence"], [
        [escape(a.kind), escape(a.name), _status(a.status.value),
         aspect(a.protocol, a.protocol_detail), aspect(a.semantic, a.semantic_detail),
         f'<a href="{_href(report, a.evidence, base)}"><code class="ev">'
         f'{escape(a.evidence)}</code></a>'] for a in report.acceptance])


def goodput_plot(report: ImageReport) -> str:
    return svg.hbars("plot-goodput", "bench goodput per round (share of requests within SLO; "
                     "dashed: floor)",
                     [(g.label, g.goodput, g.floor, g.status.value) for g in report.goodput])


def render(report: ImageReport, base: Path | None = None) -> str:
    """The page; `base` is the directory it is written to (links to evidence are relative
    to it), None for absolute file: links."""
    facts = report.facts
    title = facts.name or report.requested

    def ev(evidence: str) -> str:
        return (f'<a href="{_href(report, evidence, base)}"><code class="ev">'
                f'{escape(evidence)}</code></a>')

    parts = [f"<h1>Image report: {escape(title)}</h1>", banner(report),
             '<h2>At a glance</h2><div class="glance"><div><h3>Checks × phase</h3>',
             matrix(report, base), '</div><div><h3>Promotion path</h3>',
             path_diagram(report), "</div></div>", "<h2>Image</h2>",
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
    parts.append("<h2>Acceptance: protocol and semantic verdicts</h2>")
    parts.append(acceptance(report, base))
    if report.cluster_starts:
        parts.append("<h2>Engine starts on the cluster</h2>")
        parts.append(_table(["engine Pod", "outcome", "startupProbe budget", "phases (s)",
                             "controller", "evidence"], [
            [escape(c.pod), escape(c.state or "not submitted"),
             escape(f"{c.budget_seconds} s ({c.budget_source[:60]})"),
             escape(", ".join(f"{k} {v:.1f}" for k, v in c.phases.items()) or "none"),
             _status(c.controller.value) if c.controller else "—",
             f'<a href="{_href(report, c.evidence, base)}"><code class="ev">'
             f'{escape(c.evidence)}</code></a>'] for c in report.cluster_starts]))

    parts.append("<h2>GPU preflight</h2>")
    plot = busbw_plot(report)
    if report.preflight:
        for p in report.preflight:
            parts.append(f"<p>{_status(p.status.value)} world size {p.world_size}, backend "
                         f"{escape(str(p.backend))} — {ev(p.evidence)}</p>")
            if p.timed:
                def num(x: float | None) -> str:
                    return "—" if x is None else f"{x:.4g}"
                parts.append("<p>Timed checks, judged on the median of repeated cycles and "
                             "its interval (FAIL only when the whole interval is past the "
                             "bound):</p>")
                parts.append(_table(
                    ["check", "item", "verdict", "median", "interval", "bound", "repeats",
                     "every cycle"],
                    [[escape(t.check), escape(t.item), escape(t.band), num(t.statistic),
                      (f"[{num(t.low)}, {num(t.high)}]" if t.low is not None
                       else escape(t.why or "none")), num(t.bound), str(len(t.samples)),
                      escape(", ".join(num(x) for x in t.samples)
                             + (f" (vs {', '.join(num(x) for x in t.baseline_samples)})"
                                if t.baseline_samples else ""))] for t in p.timed]))
        parts.append(f"<figure>{plot}</figure>" if plot else _none("No bandwidth figures."))
    else:
        parts.append(_none())

    parts.append("<h2>Load and acceptance latency</h2>")
    plots = latency_plots(report)
    goodput = goodput_plot(report)
    if goodput:
        parts.append(f"<figure>{goodput}</figure>")
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
        + [str(r["accepted"]), ev(r["evidence"])]
        for r in report.summary()]))
    parts.append("<h2>Final versions</h2>")
    parts.append(_table(["package", "version"],
                        [[escape(k), f"<code>{escape(v)}</code>"]
                         for k, v in sorted(facts.versions.items())])
                 if facts.versions else _none())
    parts.append(previous_section(report, ev))
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
         ev(c.evidence)] for c in report.checks]))
    if report.history:
        parts.append("<details><summary>Earlier attempts (superseded, kept)</summary>")
        parts.append(_table(["kind", "check", "status", "detail", "evidence"], [
            [escape(c.kind), escape(c.name), _status(c.status.value), escape(c.detail[:300]),
             ev(c.evidence)] for c in report.history]))
        parts.append("</details>")

    parts.append("<h2>Promotion endpoints</h2>")
    parts.append(_table(["endpoint", "reference", "digest", "verified", "bytes moved",
                         "evidence"], [
        [escape(e.endpoint), f'<code class="ref">{escape(e.reference)}</code>',
         f"<code>{escape(e.digest)}</code>"
         + ("" if e.digest in (report.subject, *report.aliases)
            else ' <span class="FAIL">(not the image digest)</span>'),
         {True: "yes", False: '<span class="FAIL">no</span>', None: "unknown"}[e.verified],
         "" if e.bytes_moved is None else str(e.bytes_moved), ev(e.evidence)]
        for e in report.endpoints])
        if report.endpoints else _none("No evidence (not promoted)."))

    if report.overrides:
        parts.append("<h2>Gate overrides</h2>")
        parts.append(_table(["when", "user", "reason", "refused for", "evidence"], [
            [f"{o.finished:%Y-%m-%d %H:%M:%S}", escape(o.user), escape(o.reason),
             escape("; ".join(o.refused_for)), ev(o.evidence)]
            for o in report.overrides]))

    body = "\n".join(parts)
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>imagekit report {escape(report.subject)}</title>"
            f"<style>{_CSS}</style></head>\n<body>\n{body}\n<script>{_SCRIPT}</script>\n"
            f"</body></html>\n")
