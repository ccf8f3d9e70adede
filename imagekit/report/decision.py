"""The one derivation every report format renders: what may be done with the image, why, and
the counts behind it — computed here, once, from an `ImageReport`; markdown, HTML, JSON, JUnit
and in-toto only format it.

Two parts, both pure functions of records (`imagekit.report.models`), never of a renderer:

- the gate's rules over evaluated lines (`evaluate_required`, `gate_of`): what refuses, what
  warns. `build_report`, the trusted-statement gate and `imagekit gate` all judge with these;
- `derive(report)`: the stored gate decision (`ImageReport.gate`, never recomputed here) said
  as a `Decision` — verdict, summary, next step, counts (PASS, accepted, FAIL … each line in
  one bucket), required checks, and every blocking reason typed by what it is about.

A trusted statement of a later phase (cluster-probe, cluster-accept, gpu-preflight…) that
this store did not measure itself gives `ImageReport.signed_phases` lines: a non-PASS there
refuses where a required check covers it, and is named in the decision (with its signer and
"not required by the policy") where none does.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from imagekit.evidence.kinds import GateDecision
from imagekit.report.models import (
    AcceptedCheck,
    Blocker,
    Counts,
    Decision,
    EndpointDigest,
    EvidenceLine,
    ImageReport,
    RequiredOutcome,
)
from imagekit.report.required import Requirement
from imagekit.results import Status

#: Evidence kinds the gate does not judge (they are written by promotion itself).
NOT_GATE_INPUT = frozenset({"promote", "gate-override"})
#: Kinds measured after the image phase (on a cluster, by promotion): a store holding only
#: these lacks the image's own evidence, which then comes from the registry's statements.
LATER_KIND_PREFIXES = ("cluster-", "accept-", "bench", "engine-startup", "gpu-", "promote",
                       "gate-override")
NOT_REQUIRED = "not required by the policy"

_ORDER = [Status.ERROR, Status.FAIL, Status.DEFERRED, Status.PASS]


def rank(status: Status | None) -> int:
    return _ORDER.index(status) if status in _ORDER else len(_ORDER)


def worst(statuses: Iterable[Status]) -> Status | None:
    found = list(statuses)
    return min(found, key=rank) if found else None


def image_phase_measured(lines: Iterable[EvidenceLine]) -> bool:
    """Whether these lines hold any image-phase evidence (build, probe, images-verify…)."""
    return any(not line.kind.startswith(LATER_KIND_PREFIXES) for line in lines)


# -- the gate's rules over lines ------------------------------------------------------------

def line_reason(line: EvidenceLine) -> str:
    """A line as the gate names it: `probe:torch_arch FAIL: detail (evidence dir)`."""
    return f"{line.test_name} {line.status.value}" + \
        (f": {line.detail}" if line.detail else "") + f" ({line.evidence})"


def required_reason(outcome: RequiredOutcome) -> str:
    state = outcome.status.value if outcome.status else "missing"
    return f"required check {outcome.requirement} is {state}: {outcome.reason}"


def accepted_reason(line: EvidenceLine) -> str:
    return f"{line_reason(line)} — accepted: {line.accepted}"


def not_required_reason(line: EvidenceLine) -> str:
    return f"{line_reason(line)} — {NOT_REQUIRED}"


def evaluate_required(lines: Sequence[EvidenceLine], requirements: Iterable[Requirement]
                      ) -> list[RequiredOutcome]:
    """Each requirement against the lines: missing evidence is never a pass; a non-PASS the
    profile accepts satisfies it (the status kept in `status`)."""
    outcomes = []
    for requirement in requirements:
        matching = [line for line in lines if requirement.matches(line.kind, line.name)]
        if not matching:
            outcomes.append(RequiredOutcome(
                requirement=str(requirement), satisfied=False, status=None,
                reason="no evidence: a missing required check is not a pass"))
            continue
        bad = [line for line in matching if line.status is not Status.PASS]
        reason = "; ".join(f"{line.test_name} {line.status.value}"
                           + (f" (accepted: {line.accepted})" if line.accepted else
                              f": {line.detail}" if line.detail else "") for line in bad)
        outcomes.append(RequiredOutcome(requirement=str(requirement),
                                        satisfied=not [x for x in bad if not x.accepted],
                                        status=worst(line.status for line in matching),
                                        reason=reason[:500]))
    return outcomes


def overall_status(current: Sequence[EvidenceLine], required: Sequence[RequiredOutcome]
                   ) -> Status:
    """Worst current status — the real one: a FAIL the profile accepts is still a FAIL here
    (only the gate applies acceptances, docs/design/evidence.md); a missing or non-passing
    required check makes it at least FAIL (DEFERRED on a required check is not a pass). No
    evidence at all is ERROR."""
    if not current:
        return Status.ERROR
    status = worst(line.status for line in current) or Status.ERROR
    if any(not outcome.satisfied for outcome in required) and rank(status) > rank(Status.FAIL):
        status = Status.FAIL
    return status


def covered(line: EvidenceLine, required: Iterable[RequiredOutcome | str]) -> bool:
    """Whether a required check names this line (its kind, or its kind and name)."""
    return any(Requirement.parse(r.requirement if isinstance(r, RequiredOutcome) else r)
               .matches(line.kind, line.name) for r in required)


def gate_of(subject: str, lines: Sequence[EvidenceLine], required: Sequence[RequiredOutcome],
            signed_phases: Sequence[EvidenceLine] = ()) -> GateDecision:
    """The gate's verdict (docs/design/evidence.md, "Statuses"): a FAIL or ERROR refuses,
    unless the profile accepts that exact status (then a warning with the reason); a required
    check missing or not PASS refuses; a DEFERRED that is not required warns; no check
    evidence at all refuses. Promotion's own evidence is not gate input. `signed_phases`:
    lines of trusted later-phase statements — judged through the required checks that cover
    them (`required` must be evaluated over them too), otherwise a warning that names them."""
    reasons = [required_reason(o) for o in required if not o.satisfied]
    warnings = []
    for line in lines:
        if line.kind in NOT_GATE_INPUT:
            continue
        if line.accepted:
            warnings.append(accepted_reason(line))
        elif line.status in (Status.FAIL, Status.ERROR):
            reasons.append(line_reason(line))
        elif line.status is Status.DEFERRED:
            warnings.append(line_reason(line))
    for line in signed_phases:
        if line.status is Status.PASS:
            continue
        if line.accepted:
            warnings.append(accepted_reason(line))
        elif not covered(line, required):
            warnings.append(not_required_reason(line))
    if not any(line.kind not in NOT_GATE_INPUT for line in lines):
        reasons.append(f"no check evidence for {subject}")
    return GateDecision(digest=subject, allowed=not reasons, reasons=reasons,
                        warnings=warnings, required=[o.requirement for o in required])


# -- what the decision reads from a report ---------------------------------------------------

def gate_lines(report: ImageReport) -> list[EvidenceLine]:
    """The current lines the gate judges: this store's (promotion's own hops are drawn, not
    judged) and the trusted test-result's."""
    return [x for x in report.checks if x.kind not in NOT_GATE_INPUT] + list(report.signed_checks)


def serves_image(report: ImageReport, endpoint: EndpointDigest) -> bool:
    return endpoint.digest in (report.subject, *report.aliases)


def short(digest: str) -> str:
    """`sha256:abcd1234ef56…`: a digest after its one full appearance on the page."""
    algo, _, hexpart = digest.partition(":")
    return f"{algo}:{hexpart[:12]}…" if len(hexpart) > 12 else digest


def short_ref(reference: str) -> str:
    """`host/repo@sha256:<64 hex>` → `host/repo@sha256:abcd1234ef56…` (a bare digest too)."""
    if reference.startswith("sha256:"):
        return short(reference)
    head, at, digest = reference.partition("@")
    return f"{head}@{short(digest)}" if at else reference


def hops(report: ImageReport) -> list[str]:
    """The references the image was promoted to, read back and verified, in hop order: from
    this store's promotion evidence, else from the newest signed promotion statement."""
    local = [e.reference for e in report.endpoints
             if e.verified and serves_image(report, e)]
    if local:
        return local
    signed = [s for s in report.chain if s.name == "promotion" and s.current and s.hops]
    return list(signed[0].hops) if signed else []


def destination(report: ImageReport) -> str | None:
    """The final promotion destination pinned by digest (the last hop; never a relay)."""
    found = hops(report)
    return _pinned(found[-1], report.subject) if found else None


def _pinned(reference: str, digest: str) -> str:
    """`host:port/repo:tag` → `host:port/repo@digest`."""
    repo = reference.split("@", 1)[0]
    head, _, tail = repo.rpartition("/")
    if ":" in tail:
        tail = tail.split(":", 1)[0]
    return f"{head}/{tail}@{digest}" if head else f"{tail}@{digest}"


def line_key(line: EvidenceLine) -> tuple[str, str]:
    """A line's identity in a report: its check and the attempt it came from."""
    return line.test_name, line.evidence


# -- counting ---------------------------------------------------------------------------------

def counts_of(lines: Sequence[EvidenceLine], not_required: Sequence[EvidenceLine] = (),
              blocking: int = 0) -> Counts:
    """Each line in exactly one bucket: PASS; accepted (whatever its status); FAIL, ERROR,
    DEFERRED not accepted; not required (signed, uncovered)."""
    apart = {line_key(x) for x in not_required}
    judged = [x for x in lines if line_key(x) not in apart]
    plain = [x for x in judged if not x.accepted]
    return Counts(passed=sum(1 for x in judged if x.status is Status.PASS),
                  accepted=sum(1 for x in judged if x.accepted and x.status is not Status.PASS),
                  failed=sum(1 for x in plain if x.status is Status.FAIL),
                  errors=sum(1 for x in plain if x.status is Status.ERROR),
                  deferred=sum(1 for x in plain if x.status is Status.DEFERRED),
                  not_required=len(not_required), blocking=blocking)


def count_text(counts: Counts, accepted: Sequence[AcceptedCheck] = (),
               not_required: Sequence[EvidenceLine] = ()) -> str:
    """`4 PASS, 2 accepted (torch_arch FAIL, cli_help DEFERRED), 1 FAIL, 1 DEFERRED
    (warning)`: what every format and `verify-attestations` say of the lines."""
    parts = [f"{counts.passed} PASS"] if counts.passed or not (
        counts.accepted or counts.failed or counts.errors or counts.deferred) else []
    if counts.accepted:
        names = list(dict.fromkeys(f"{a.test.split(':', 1)[-1].removeprefix('probe:')} "
                                   f"{a.status.value}" for a in accepted))
        parts.append(f"{counts.accepted} accepted" + (f" ({', '.join(names)})" if names else ""))
    if counts.failed:
        parts.append(f"{counts.failed} FAIL")
    if counts.errors:
        parts.append(f"{counts.errors} ERROR")
    if counts.deferred:
        parts.append(f"{counts.deferred} DEFERRED (warning)")
    if counts.not_required:
        names = list(dict.fromkeys(f"{x.test_name} {x.status.value}" for x in not_required))
        parts.append(f"{counts.not_required} {NOT_REQUIRED}"
                     + (f" ({', '.join(names)})" if names else ""))
    return ", ".join(parts)


def accepted_of(lines: Iterable[EvidenceLine]) -> list[AcceptedCheck]:
    return [AcceptedCheck(test=x.test_name, status=x.status, reason=x.accepted or "",
                          signer=x.signer)
            for x in lines if x.accepted and x.status is not Status.PASS]


# -- the decision -----------------------------------------------------------------------------

def derive(report: ImageReport) -> Decision:
    """The one decision every format leads with: the stored gate verdict, what was promoted
    where (hops read back, or the signed promotion statement), and the evaluated lines."""
    gate = report.gate
    lines = gate_lines(report)
    phases = list(report.signed_phases)
    required = list(report.required)
    unrequired = [x for x in phases if x.status is not Status.PASS and not x.accepted
                  and not covered(x, required or gate.required)]
    blocking = _blockers(gate, [*lines, *phases], required)
    accepted = accepted_of([*lines, *phases])
    counts = counts_of([*lines, *phases], unrequired, len(blocking))
    where = destination(report)
    common = dict(destination=where, counts=counts, required=required, blocking=blocking,
                  accepted=accepted, not_required=unrequired)
    if not gate.allowed:
        first = _said(blocking[0], report) if blocking else "the gate refuses it"
        more = f" (+{len(blocking) - 1} more)" if len(blocking) > 1 else ""
        summary = f"not promotable: {first}{more}"
        points = list(gate.reasons)
        if where and report.overrides:
            o = report.overrides[-1]
            summary += f"; promoted anyway to {short_ref(where)}, forced by {o.user or 'someone'}"
            points.append(f"forced anyway by {o.user}: \"{o.reason}\" (an override is not a "
                          "pass; see Gate overrides)")
        elif where:
            summary += f"; it is at {short_ref(where)}: do not deploy it"
        return Decision(verdict="not promotable", may_promote=False, level="stop",
                        summary=summary, next_step=_fix_step(blocking), points=points,
                        reasons=list(gate.reasons), **common)
    why: list[str] = []
    passing = [x for x in [*lines, *phases] if x.status is Status.PASS]
    signers = sorted({x.signer for x in passing if x.signer})
    if lines:
        why.append(f"{counts.passed} check{'s' if counts.passed != 1 else ''} pass"
                   + (f" in statements signed by {', '.join(signers)}" if signers and
                      all(x.signer for x in passing) else ""))
    elif report.chain:
        signed = sorted({s.signer for s in report.chain if s.current})
        why.append("statements signed by " + ", ".join(signed) + " pass the gate")
    why += _accepted_parts(accepted)
    deferred = [x for x in lines if x.status is Status.DEFERRED and not x.accepted]
    if deferred:
        why.append(f"{len(deferred)} DEFERRED (a warning, never a pass)")
    why += _not_required_parts(unrequired)
    wrong = [e for e in report.endpoints if not serves_image(report, e)]
    why += [f"{e.reference} serves another digest ({short(e.digest)})" for e in wrong]
    if gate.overridden:
        why.append("gate overridden")
    head = f"promoted to {short_ref(where)}" if where else "promotable"
    level = "stop" if wrong else "caution" if gate.warnings or unrequired else "go"
    if where:
        step = f"deploy {where} (pinned by digest)"
    else:
        start = report.endpoints[-1].reference if report.endpoints else report.subject
        step = f"imagekit promote {short_ref(start)} --to REF"
    return Decision(verdict="promoted" if where else "promotable", may_promote=True,
                    level=level, summary=f"{head}: {', '.join(why) or 'the gate allows it'}",
                    next_step=step, points=_points(report, accepted, deferred, unrequired),
                    reasons=[*gate.warnings, *gate.sources], **common)


def _blockers(gate: GateDecision, lines: Sequence[EvidenceLine],
              required: Sequence[RequiredOutcome]) -> list[Blocker]:
    """Every reason the stored gate refuses for, typed by what it is about (the texts are
    made by the same functions the gate used: line_reason, required_reason)."""
    by_line = {line_reason(x): x for x in lines}
    by_required = {required_reason(o): o for o in required}
    found = []
    for reason in gate.reasons:
        if reason in by_line:
            x = by_line[reason]
            found.append(Blocker(source="check", test=x.test_name, status=x.status.value,
                                 reason=reason, evidence=x.evidence, signer=x.signer))
        elif reason in by_required:
            o = by_required[reason]
            bad = [x for x in lines if x.status is not Status.PASS and not x.accepted
                   and Requirement.parse(o.requirement).matches(x.kind, x.name)]
            signers = sorted({x.signer for x in bad if x.signer})
            found.append(Blocker(source="required", test=o.requirement,
                                 status=o.status.value if o.status else "MISSING",
                                 reason=reason, signer=", ".join(signers) or None))
        else:
            found.append(Blocker(source="gate", status="FAIL", reason=reason))
    return found


def _said(blocker: Blocker, report: ImageReport) -> str:
    """A blocker as the decision line says it: a signed phase with its signer, the check that
    failed and the policy that requires it; anything else the gate's reason, plain."""
    if blocker.source == "required" and blocker.signer:
        bad = [x for x in report.signed_phases if x.status is not Status.PASS
               and not x.accepted and Requirement.parse(blocker.test).matches(x.kind, x.name)]
        if bad:
            kind = bad[0].kind
            names = ", ".join(dict.fromkeys(x.name for x in bad))
            which = f" ({blocker.test})" if blocker.test != kind else ""
            return (f"{kind} {blocker.status} (signed by {blocker.signer}): {names} — required "
                    f"by the policy{which}")
    return _plain(blocker.reason)


def _plain(reason: str) -> str:
    """A gate reason as a person reads it: without the evidence directory at its end,
    shortened."""
    text = " ".join(reason.split())
    if text.endswith(")") and " (" in text and "/" in text.rsplit(" (", 1)[1]:
        text = text.rsplit(" (", 1)[0]
    return text if len(text) <= 120 else text[:119] + "…"


def _fix_step(blocking: Sequence[Blocker]) -> str:
    missing = [b for b in blocking if b.source == "required"]
    failing = [b for b in blocking if b.source != "required"]
    return "Fix or re-run: " + "; ".join(
        ([f"{len(missing)} required check(s) missing or not passing"] if missing else [])
        + ([f"{len(failing)} failing check(s)"] if failing else [])
        or ["the gate's reasons below"])


def _accepted_parts(accepted: Sequence[AcceptedCheck]) -> list[str]:
    """`3 accepted FAIL (torch_arch: stand-in CPU torch)`: the lines counted as `count_text`
    counts them (one per phase it ran in), each check's reason named once."""
    parts = []
    for status in (Status.ERROR, Status.FAIL, Status.DEFERRED):
        seen: dict[str, str] = {}
        for a in accepted:
            name = a.test.split(":", 1)[-1].removeprefix("probe:")
            if a.status is status and name not in seen:
                why = " ".join(a.reason.split()).split(";")[0]
                why = why.rsplit(" (", 1)[0] if why.endswith(")") else why
                if len(why) > 60:   # shortened, never leaving a parenthesis open
                    why = why[:59]
                    if why.count("(") > why.count(")"):
                        why = why[:why.rfind(" (")]
                    why += "…"
                seen[name] = why
        if seen:
            lines = sum(1 for a in accepted if a.status is status)
            parts.append(f"{lines} accepted {status.value} ("
                         + ", ".join(f"{n}: {w}" for n, w in seen.items()) + ")")
    return parts


def _not_required_parts(lines: Sequence[EvidenceLine]) -> list[str]:
    """`cluster-accept FAIL (signed by operator 0a4d…): launch_parsed — not required by the
    policy`, one per phase and signer."""
    groups: dict[tuple[str, str], list[EvidenceLine]] = {}
    for x in lines:
        groups.setdefault((x.kind, x.signer or "this store"), []).append(x)
    parts = []
    for (kind, signer), mine in groups.items():
        status = worst(x.status for x in mine)
        names = ", ".join(dict.fromkeys(x.name for x in mine))
        parts.append(f"{kind} {status.value if status else '?'} (signed by {signer}): "
                     f"{names} — {NOT_REQUIRED}")
    return parts


def _grouped(lines: Sequence[EvidenceLine | AcceptedCheck]) -> str:
    """`torch_arch FAIL (probe, cluster-probe)`: each check once with the phases it is in."""
    seen: dict[tuple[str, str], list[str]] = {}
    for x in lines:
        kind, _, name = x.test_name.partition(":") if isinstance(x, EvidenceLine) \
            else x.test.partition(":")
        seen.setdefault((name.removeprefix("probe:"), x.status.value), []).append(kind)
    return "; ".join(f"{name} {status} ({', '.join(dict.fromkeys(kinds))})"
                     for (name, status), kinds in seen.items())


def _points(report: ImageReport, accepted: Sequence[AcceptedCheck],
            deferred: Sequence[EvidenceLine], unrequired: Sequence[EvidenceLine]) -> list[str]:
    points = []
    if accepted:
        by = f"profile {report.profile}" if report.profile else "the images spec"
        points.append(f"accepted by {by} (a warning, not a refusal; reasons under Promotion "
                      "gate): " + _grouped(accepted))
    if deferred:
        points.append("DEFERRED, not required (a warning, never a pass): " + _grouped(deferred))
    points += [f"{NOT_REQUIRED} (named, not a refusal): " + _plain(line_reason(x))
               for x in unrequired]
    if report.gate.required:
        points.append("required checks satisfied: " + ", ".join(report.gate.required))
    return points
