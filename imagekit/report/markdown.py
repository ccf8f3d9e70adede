"""Markdown: the report a release engineer reads in a merge request or a terminal."""

from __future__ import annotations

import re

from imagekit.report import glance
from imagekit.report.decision import (
    count_text,
    derive,
    gate_lines,
    line_key,
    serves_image,
    short,
    short_ref,
)
from imagekit.report.models import Decision, EvidenceLine, ImageReport
from imagekit.results import Status

_MARK = {"PASS": "PASS", "FAIL": "**FAIL**", "ERROR": "**ERROR**", "DEFERRED": "_DEFERRED_"}


def _cell(text: object) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:g} {unit}" if unit == "B" else f"{n:.4g} {unit}"
        n /= 1024
    return str(n)


def render(report: ImageReport) -> str:
    decision = derive(report)   # the first line: what the user may do, and why
    out: list[str] = [f"**{_cell(decision.summary)}**\n"]
    facts = report.facts
    title = facts.name or report.requested
    out.append(f"# Image report: {_cell(short_ref(title))}\n")
    out += _at_a_glance(report, decision)
    out.append(f"- **Digest:** `{report.subject}`")
    if report.aliases:
        out.append(f"- **Also known as:** {', '.join(f'`{a}`' for a in report.aliases)}")
    if report.resolution:
        out.append(f"- **Resolved:** {_cell(report.resolution)}")
    out.append(f"- **Checks:** {checks_line(report, decision)}")
    if facts.base_digest:
        out.append(f"- **Base digest:** `{facts.base_digest}`")
    if report.profile:
        out.append(f"- **Profile:** {_cell(report.profile)}")
    out.append(f"- **Evidence root:** `{report.evidence_root}`")
    out.append(f"- **Generated:** {report.generated:%Y-%m-%d %H:%M:%S} UTC\n")
    skipped = glance.not_run(report)
    if skipped:
        out += [f"- {_cell(line)}" for line in skipped] + [""]

    gate = report.gate       # computed once, when the report was built
    out.append("## Promotion gate\n")
    out.append(f"**{gate_line(report, decision)}**")
    out += [f"- refused: {_cell(r)}" for r in gate.reasons]
    out += [f"- warning: {_cell(w)}" for w in gate.warnings]
    out += [f"- source: {_cell(x)}" for x in gate.sources]
    out += [f"- ignored: {_cell(x)}" for x in gate.ignored]
    out += _chain_section(report)

    if report.checks:
        out.append("\n## Summary by evidence kind\n")
        out.append("| kind | PASS | FAIL | DEFERRED | ERROR | accepted | latest evidence |\n"
                   "|---|---|---|---|---|---|---|")
    for row in report.summary():
        out.append(f"| {_cell(row['kind'])} | {row['PASS']} | {row['FAIL']} | "
                   f"{row['DEFERRED']} | {row['ERROR']} | {row['accepted']} | "
                   f"`{row['evidence']}` |")

    if facts.versions:
        out.append("\n## Final versions\n")
        out.append("| package | version |\n|---|---|")
        out += [f"| {_cell(k)} | {_cell(v)} |" for k, v in sorted(facts.versions.items())]
        if facts.source:
            out.append(f"\nFrom `{facts.source}`.")
    if facts.fix_layers:
        out.append("\n## Fix layers\n")
        out += [f"{i}. `{_cell(layer)}`" for i, layer in enumerate(facts.fix_layers, 1)]

    out.append("\n## Required checks\n")
    if signed_only(report):
        out.append(required_line(report, decision) + "\n")
    if decision.required:
        out.append("| requirement | satisfied | status | reason |\n|---|---|---|---|")
        for o in decision.required:
            mark = _MARK[o.status.value] if o.status else "**missing**"
            if o.satisfied and o.status not in (None, Status.PASS):
                mark += " (accepted)"
            out.append(f"| {_cell(o.requirement)} | {'yes' if o.satisfied else '**no**'} | "
                       f"{mark} | {_cell(o.reason)} |")
    else:
        out.append("None configured.")
    out += _signed_lines(report, decision)

    if report.checks:
        out.append("\n## Checks (current)\n")
        out.append("| kind | check | status | detail | evidence |\n|---|---|---|---|---|")
    for line in report.checks:
        mark = _MARK[line.status.value] + (" (accepted)" if line.accepted else "")
        detail = _cell(line.detail)[:300] + (f" — accepted: {_cell(line.accepted)}"
                                             if line.accepted else "")
        out.append(f"| {_cell(line.kind)} | {_cell(line.name)} | {mark} | {detail} | "
                   f"`{line.evidence}` |")
    if report.history:
        out.append("\n<details><summary>Earlier attempts (superseded, kept)</summary>\n")
        out.append("| kind | check | status | detail | evidence |\n|---|---|---|---|---|")
        for line in report.history:
            out.append(f"| {_cell(line.kind)} | {_cell(line.name)} | "
                       f"{_MARK[line.status.value]} | {_cell(line.detail)[:200]} | "
                       f"`{line.evidence}` |")
        out.append("\n</details>")

    if report.endpoints:
        out.append("\n## Promotion endpoints (in hop order)\n")
        out.append("| endpoint | reference | digest | verified | bytes moved |\n"
                   "|---|---|---|---|---|")
        for e in glance.promotion_path(report):
            verified = {True: "yes", False: "**no**", None: "not read back"}[e.verified]
            moved = "" if e.bytes_moved is None else _size(e.bytes_moved)
            differs = "" if e.digest in (report.subject, *report.aliases) else \
                " **(not the image digest)**"
            out.append(f"| {_cell(e.endpoint)} | `{_cell(e.reference)}` | `{e.digest}`{differs} "
                       f"| {verified} | {moved} |")

    if report.preflight:
        out.append("\n## GPU preflight\n")
        for p in report.preflight:
            out.append(f"{_MARK[p.status.value]} — world size {_known(p.world_size)}, backend "
                       f"{_known(p.backend)} (`{p.evidence}`)\n")
            out.append("| message size | algbw GB/s | busbw GB/s |\n|---|---|---|")
            for s in p.sizes:
                out.append(f"| {_size(s.bytes)} | {_fmt(s.algbw_GBps)} | {_fmt(s.busbw_GBps)} |")
            out.append("")
            if p.timed:
                out.append("Timed checks, judged on the median of repeated cycles and its "
                           "interval (FAIL only when the whole interval is past the bound):\n")
                out.append("| check | item | verdict | median | interval | bound | repeats | "
                           "every cycle |\n|---|---|---|---|---|---|---|---|")
                for t in p.timed:
                    span = f"[{_fmt(t.low)}, {_fmt(t.high)}]" if t.low is not None else \
                        _cell(t.why or "none")
                    ref = f" (vs {', '.join(_fmt(x) for x in t.baseline_samples)})" \
                        if t.baseline_samples else ""
                    out.append(f"| {_cell(t.check)} | {_cell(t.item)} | {t.band} | "
                               f"{_fmt(t.statistic)} | {span} | {_fmt(t.bound)} | "
                               f"{len(t.samples)} | {', '.join(_fmt(x) for x in t.samples)}"
                               f"{_cell(ref)} |")
                out.append("")

    if report.latency:
        out.append("\n## Acceptance latency\n")
        keys = sorted({k for s in report.latency for k in s.percentiles},
                      key=lambda k: float(k[1:]))
        out.append("| kind | series | metric | status | unit | " + " | ".join(keys) + " |")
        out.append("|---|---|---|---|---|" + "---|" * len(keys))
        for series in report.latency:
            out.append(f"| {_cell(series.kind)} | {_cell(series.label)} | "
                       f"{_cell(series.metric)} | {_MARK[series.status.value]} | "
                       f"{series.unit} | "
                       + " | ".join(_fmt(series.percentiles.get(k)) for k in keys) + " |")

    if report.overrides:
        out.append("\n## Gate overrides\n")
        for override in report.overrides:
            out.append(f"- {override.finished:%Y-%m-%d %H:%M:%S} by {_cell(override.user)}: "
                       f"\"{_cell(override.reason)}\" — refused for: "
                       f"{_cell('; '.join(override.refused_for)) or 'nothing'} "
                       f"(`{override.evidence}`)")
    out += _previous_section(report)  # base, versions, checks since the previous build
    out += _sbom_section(report)  # SBOM diff against the previous build
    return once_in_full("\n".join(out) + "\n")


_DIGEST = re.compile(r"\b(sha256):([0-9a-f]{64})\b")


def once_in_full(text: str) -> str:
    """Every long digest in full where it first appears, short (`sha256:abcd1234ef56…`)
    after that."""
    seen: set[str] = set()

    def one(match: re.Match[str]) -> str:
        if match.group(0) in seen:
            return short(match.group(0))
        seen.add(match.group(0))
        return match.group(0)
    return _DIGEST.sub(one, text)


def _known(value: object) -> str:
    return "not recorded" if value is None else str(value)


def signed_only(report: ImageReport) -> bool:
    """The gate decided from the signed statements alone: this store measured no image."""
    return bool(report.chain) and not glance.phases_run(report)["image"]


def required_line(report: ImageReport, decision: Decision) -> str:
    """The required checks as the gate judged them from the signed statements."""
    if not decision.required:
        return "None configured."
    names = ", ".join(o.requirement for o in decision.required)
    missing = [o for o in decision.required if not o.satisfied]
    return (f"Judged from the signed statements: {names} — "
            + (f"{len(missing)} not satisfied (see Promotion gate)" if missing
               else "satisfied"))


def gate_line(report: ImageReport, decision: Decision) -> str:
    """The gate section's status line, the same decision as the first line."""
    if not decision.may_promote:
        return "Refused: " + decision.summary.removeprefix("not promotable: ")
    return "Allowed" + (" (overridden)" if report.gate.overridden else "") + \
        f": {decision.verdict}"


def checks_line(report: ImageReport, decision: Decision) -> str:
    """`12 PASS, 1 accepted (torch_arch FAIL), 1 DEFERRED (warning)`: the decision's counts
    of the lines it read (no raw worst status that a profile's acceptance would contradict)."""
    if not [*gate_lines(report), *report.signed_phases]:
        return "none measured by this store" + (" (the signed statements decide)"
                                                 if report.chain else "")
    text = count_text(decision.counts, decision.accepted, decision.not_required)
    signers = sorted({x.signer for x in [*report.signed_checks, *report.signed_phases]
                      if x.signer})
    return text + (f" (signed by {', '.join(signers)})" if signers and not report.checks
                   else "")


def counts(report: ImageReport) -> str:
    """checks_line of the report's own decision (the index tables' column)."""
    return checks_line(report, derive(report))


def _signed_lines(report: ImageReport, decision: Decision) -> list[str]:
    """`## Checks signed by trusted keys`: the lines the gate read from trusted statements
    (the newest test-result, the later phases this store did not measure), each with its
    signer, and whether it refuses, is accepted, or is not required."""
    lines = [*report.signed_checks, *report.signed_phases]
    if not lines:
        return []
    apart = {line_key(x) for x in decision.not_required}
    out = ["\n## Checks signed by trusted keys\n",
           "| kind | check | status | signed by | detail |\n|---|---|---|---|---|"]
    for line in lines:
        out.append(f"| {_cell(line.kind)} | {_cell(line.name)} | {_status_of(line, apart)} | "
                   f"{_cell(line.signer or '')} | {_cell(line.detail)[:300]} |")
    return out


def _status_of(line: EvidenceLine, apart: set[tuple[str, str]]) -> str:
    mark = _MARK[line.status.value]
    if line.accepted:
        return mark + " (accepted)"
    if line_key(line) in apart:
        return mark + " (not required)"
    return mark


_ICON = {"go": "✅", "caution": "⚠️", "stop": "⛔"}


def _at_a_glance(report: ImageReport, decision: Decision) -> list[str]:
    """The verdict banner (the decision, said as the next step), each probe once across its
    phases, the promotion path, acceptance verdicts apart."""
    out = [f"> {_ICON[decision.level]} Next: `{decision.next_step}`"]
    out += [f"> - {_cell(p)[:400]}" for p in decision.points]
    names, rows = glance.probe_matrix(report)
    if names:
        out.append("\n## Checks × phase\n")
        out.append("| check | " + " | ".join(glance.PHASES) + " |\n|---|"
                   + "---|" * len(glance.PHASES))
        for name in names:
            cells = []
            for phase in glance.PHASES:
                line = rows[name].get(phase)
                cells.append("—" if line is None else _MARK[line.status.value]
                             + (" (accepted)" if line.accepted else ""))
            out.append(f"| {_cell(name)} | " + " | ".join(cells) + " |")
    path = glance.promotion_path(report)
    if path:
        hops = []
        for e in path:
            state = ("serves ANOTHER digest" if not serves_image(report, e) else
                     "verified" if e.verified else
                     "read back: NOT as sent" if e.verified is False else "not read back")
            hops.append(f"{glance.endpoint_name(e)} `{short(e.digest)}` ({state})")
        out.append("\n**Promotion path (in hop order):** " + " → ".join(hops))
    if report.acceptance:
        out.append("\n## Acceptance: protocol and semantic verdicts\n")
        for j in report.judged_on:
            files = ", ".join(f"`{_cell(name)}` sha256:{digest[:12]}…"
                              for name, digest in sorted(j.model_files.items()))
            out.append(f"- {_cell(j.kind)}: answers judged on **{_cell(j.model or 'unknown')}**"
                       f" ({_cell(j.engine or '')}) by the `{_cell(j.cases or '')}` cases "
                       f"(calibrated on {_cell(j.calibrated_on or 'unknown')}); model files: "
                       f"{files or 'not hashed by this run'}")
        if report.judged_on:
            out.append("")
        out.append("| suite | check | status | protocol | semantic | answer judged | expected |"
                   "\n|---|---|---|---|---|---|---|")
        for a in report.acceptance:
            out.append(f"| {_cell(a.kind)} | {_cell(a.name)} | {_MARK[a.status.value]} | "
                       f"{_MARK[a.protocol.value] if a.protocol else 'not judged'} | "
                       f"{_MARK[a.semantic.value] if a.semantic else 'not judged'} | "
                       f"{_cell(a.answer) or '—'} | {_cell(a.expected) or '—'} |")
    if report.cluster_starts:
        out.append("\n## Engine starts on the cluster (cluster accept)\n")
        out.append("| engine Pod | outcome | startupProbe budget | phases (s since start) | "
                   "controller |\n|---|---|---|---|---|")
        for c in report.cluster_starts:
            phases = ", ".join(f"{k} {v:.1f}" for k, v in c.phases.items()) or "none"
            out.append(f"| {_cell(c.pod)} | {_cell(c.state or 'not submitted')} | "
                       f"{c.budget_seconds} s ({_cell(c.budget_source[:40])}) | "
                       f"{_cell(phases)} | {c.controller.value if c.controller else '—'} |")
    if report.goodput:
        out.append("\n**Goodput per bench round:** " + ", ".join(
            f"{_cell(g.label)} {g.goodput:.0%}" + (f" (floor {g.floor:.0%})" if g.floor
                                                    is not None else "")
            for g in report.goodput))
    out.append("")
    return out


def _status_word(status: Status | None) -> str:
    return "absent" if status is None else _MARK[status.value]


def _previous_section(report: ImageReport) -> list[str]:
    """`## Since the previous build`: base digest, versions the probes saw, checks whose
    status changed (imagekit.report.previous)."""
    out = ["\n## Since the previous build\n"]
    p = report.previous
    if p is None and not glance.phases_run(report)["image"]:
        return []
    if p is None:
        out.append("No earlier build of this image in evidence.")
        return out
    out.append(f"Previous build `{p.digest}` ({p.built:%Y-%m-%d %H:%M} UTC, `{p.evidence}`).\n")
    before, after = p.base_before or "not recorded", p.base_after or "not recorded"
    out.append(f"- base: `{before}` → `{after}`" if p.base_changed
               else f"- base: unchanged (`{after}`)")
    if not p.probed:
        out.append("- versions: not known for both builds (one was not probed yet)")
    elif p.versions:
        out.append("- versions: " + ", ".join(
            f"`{_cell(v.package)}` {v.before or 'absent'} → {v.after or 'absent'}"
            for v in p.versions))
    else:
        out.append("- versions: unchanged")
    for label, group in (("not run on this build (yet)", p.not_run),
                         ("new on this build", p.new)):
        if group:
            out.append(f"- {label}: {len(group)} check(s): "
                       + ", ".join(f"`{_cell(c.check)}`" for c in group[:12])
                       + (" …" if len(group) > 12 else ""))
    if p.changed:
        out.append("\n| check whose status changed | before | now | evidence |\n"
                   "|---|---|---|---|")
        out += [f"| {_cell(c.check)} | {_status_word(c.before)} | {_status_word(c.after)} | "
                f"{'`' + c.evidence + '`' if c.evidence else ''} |" for c in p.changed]
    else:
        out.append("- checks both builds ran: no status changed")
    return out


def _sbom_section(report: ImageReport) -> list[str]:
    from imagekit.sbom.history import markdown_section

    if not glance.phases_run(report)["image"]:
        return []   # the image phase's not-run line says it

    section = markdown_section(report.evidence_root, report.subject)
    said = [line for line in section if line.strip() and not line.lstrip().startswith("#")]
    if len(said) == 1 and said[0].startswith("No evidence"):
        return []   # no SBOM of two builds: nothing to compare, no empty heading
    return section


def _fmt(value: float | None) -> str:
    return "" if value is None else f"{value:.4g}"


_PHASES = {"image": "Image phase", "hops": "Hops (promotion chain)", "cluster": "Cluster phase",
           "other": "Other signed statements"}


def _chain_section(report: ImageReport) -> list[str]:
    """`## Signed chain (from the registry)`: every statement a trusted key signed, by phase,
    each naming its signer — what other machines proved, apart from what this one measured."""
    if not report.chain:
        return []
    out = ["\n## Signed chain (from the registry)\n"]
    unsigned = [title for phase, title in _PHASES.items()
                if phase != "other" and not any(s.phase == phase for s in report.chain)]
    if unsigned:
        out.append("No statement signed by a trusted key for: " + ", ".join(unsigned) + "\n")
    for phase, title in _PHASES.items():
        mine = [s for s in report.chain if s.phase == phase]
        if not mine:
            continue
        out.append(f"### {title}\n")
        for item in mine:
            state = "" if item.current else " (superseded by a newer one)"
            out.append(f"- **{_cell(item.name)}** signed by {_cell(item.signer)} at "
                       f"{_cell(item.signed_at or 'an undated time')}, "
                       f"{_cell(item.registry)}/{_cell(item.repository)} (referrer "
                       f"`{short(item.referrer)}`, `{item.evidence}`){state}")
            out += [f"  - {_cell(line)}" for line in item.summary]
        out.append("")
    return out
