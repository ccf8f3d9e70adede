"""The report at a glance: the one decision every report leads with, what the release engineer
may do next, each probe once across the phases it ran in, and the promotion path in hop order.
Pure functions of an `ImageReport`: the verdict is read from the stored gate decision
(`report.gate`), never recomputed here."""

from __future__ import annotations

from dataclasses import dataclass, field

from imagekit.report.models import Decision, EndpointDigest, EvidenceLine, ImageReport
from imagekit.results import Status

#: The phases a probe runs in, in release order: in the built image, again when the image
#: manifest is verified, and in a Pod of the pinned digest.
PHASES = ("probe", "images-verify", "cluster-probe")
#: Evidence kinds (prefixes) that are attestations about the image (SBOM, signature, …).
ATTESTATION_PREFIXES = ("attest", "sbom", "sign", "provenance")


@dataclass(frozen=True)
class Verdict:
    level: str                       # "go" (allowed, clean), "caution" (allowed, warnings), "stop"
    headline: str
    next_step: str
    points: list[str] = field(default_factory=list)


def endpoint_name(endpoint: EndpointDigest) -> str:
    """`production (127.0.0.1:5002)` → `production`; an unnamed address stays itself."""
    return endpoint.endpoint.split(" (", 1)[0]


def serves_image(report: ImageReport, endpoint: EndpointDigest) -> bool:
    return endpoint.digest in (report.subject, *report.aliases)


def promotion_path(report: ImageReport) -> list[EndpointDigest]:
    """The endpoints in the order the image reached them: where the build pushed it, the
    promotion's source, then each hop in the order it was made (the evidence's order; a
    relay such as `--via` comes before the destination, whatever the registries are named)."""
    return list(report.endpoints)


def attestations(report: ImageReport) -> list[EvidenceLine]:
    """Current check lines of attestation kinds (none until such evidence is recorded)."""
    return [line for line in report.checks
            if line.kind.startswith(ATTESTATION_PREFIXES)]


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


def gate_lines(report: ImageReport) -> list[EvidenceLine]:
    """The current lines the gate judges (promotion's own hops are drawn, not judged)."""
    from imagekit.report.collect import NOT_GATE_INPUT

    return [x for x in report.checks if x.kind not in NOT_GATE_INPUT]


def _accepted_parts(report: ImageReport) -> list[str]:
    """`1 accepted FAIL (torch_arch: stand-in CPU torch)`, each check once whichever phases
    it ran in; from the evaluated lines, else from the gate's warnings (signed evidence)."""
    lines = [x for x in gate_lines(report) if x.accepted and x.status is not Status.PASS]
    parts = []
    if lines:
        for status in (Status.ERROR, Status.FAIL, Status.DEFERRED):
            seen: dict[str, str] = {}
            for x in lines:
                name = x.name.removeprefix("probe:")
                if x.status is status and name not in seen:
                    why = " ".join(str(x.accepted).split()).split(";")[0]
                    why = why.rsplit(" (", 1)[0] if why.endswith(")") else why
                    seen[name] = why if len(why) <= 60 else why[:59] + "…"
            if seen:
                parts.append(f"{len(seen)} accepted {status.value} ("
                             + ", ".join(f"{n}: {w}" for n, w in seen.items()) + ")")
        return parts
    accepted = [w for w in report.gate.warnings if " — accepted: " in w]
    return [f"{len(accepted)} accepted ({_grouped(accepted)})"] if accepted else []


def decide(report: ImageReport) -> Decision:
    """The one decision every format leads with: the stored gate verdict, what was promoted
    where (hops read back, or the signed promotion statement), and the evaluated checks."""
    gate = report.gate
    lines = gate_lines(report)
    passed = sum(1 for x in lines if x.status is Status.PASS)
    warned = [x for x in lines if x.status is Status.DEFERRED and not x.accepted]
    where = destination(report)
    signers = sorted({s.signer for s in report.chain if s.current})
    if not gate.allowed:
        first = _plain(gate.reasons[0]) if gate.reasons else "the gate refuses it"
        more = f" (+{len(gate.reasons) - 1} more)" if len(gate.reasons) > 1 else ""
        summary = f"not promotable: {first}{more}"
        if where and report.overrides:
            o = report.overrides[-1]
            summary += f"; promoted anyway to {short_ref(where)}, forced by {o.user or 'someone'}"
        return Decision(verdict="not promotable", may_promote=False, summary=summary,
                        reasons=list(gate.reasons), destination=where)
    why: list[str] = []
    if lines:
        why.append(f"{passed} check{'s' if passed != 1 else ''} pass")
    elif signers:
        why.append("statements signed by " + ", ".join(signers) + " pass the gate")
    why += _accepted_parts(report)
    if warned:
        why.append(f"{len(warned)} DEFERRED (a warning, never a pass)")
    wrong = [e for e in report.endpoints if not serves_image(report, e)]
    why += [f"{e.reference} serves another digest ({short(e.digest)})" for e in wrong]
    if gate.overridden:
        why.append("gate overridden")
    head = f"promoted to {short_ref(where)}" if where else "promotable"
    return Decision(verdict="promoted" if where else "promotable", may_promote=True,
                    summary=f"{head}: {', '.join(why) or 'the gate allows it'}",
                    reasons=[*gate.warnings, *gate.sources], destination=where)


def _plain(reason: str) -> str:
    """A gate reason as a person reads it: without the evidence directory at its end,
    shortened."""
    text = " ".join(reason.split())
    if text.endswith(")") and " (" in text and "/" in text.rsplit(" (", 1)[1]:
        text = text.rsplit(" (", 1)[0]
    return text if len(text) <= 120 else text[:119] + "…"


#: Report sections by phase, with the signed-statement phase (SignedStatement.phase) of each.
PHASE_NAMES = {"image": "image phase", "hops": "promotion", "cluster": "cluster phase"}


def phases_run(report: ImageReport) -> dict[str, bool]:
    """Which phases this store itself measured (its own evidence lines and records)."""
    from imagekit.report.gate import LATER_KIND_PREFIXES

    kinds = {x.kind for x in report.checks}
    return {
        "image": any(not k.startswith(LATER_KIND_PREFIXES) for k in kinds),
        "hops": bool(report.endpoints) or "promote" in kinds,
        "cluster": any(k.startswith(("cluster-", "gpu-", "accept-", "bench", "engine-"))
                       for k in kinds) or bool(report.preflight or report.latency
                                               or report.acceptance or report.cluster_starts),
    }


def not_run(report: ImageReport) -> list[str]:
    """One line per phase this store did not run: `cluster phase: not run by this store;
    signed statements: none` (or the statements trusted keys signed about it)."""
    out = []
    for phase, ran in phases_run(report).items():
        if ran:
            continue
        signed = sorted({f"{s.name} by {s.signer}" for s in report.chain
                         if s.phase == phase and s.current})
        out.append(f"{PHASE_NAMES[phase]}: not run by this store; signed statements: "
                   + (", ".join(signed) or "none"))
    return out


def verdict(report: ImageReport) -> Verdict:
    """The decision said as a banner: its one sentence, the next step, the points behind it."""
    gate = report.gate
    decision = report.outcome()
    accepted = [w for w in gate.warnings if " — accepted: " in w]
    deferred = [w for w in gate.warnings if " — accepted: " not in w]
    points: list[str] = []
    if not decision.may_promote:
        missing = [r for r in gate.reasons if r.startswith("required check ")]
        failing = [r for r in gate.reasons if not r.startswith("required check ")]
        step = "Fix or re-run: " + "; ".join(
            ([f"{len(missing)} required check(s) missing or not passing"] if missing else [])
            + ([f"{len(failing)} failing check(s)"] if failing else [])
            or ["the gate's reasons below"])
        points += gate.reasons
        if report.overrides:
            override = report.overrides[-1]
            points.append(f"forced anyway by {override.user}: \"{override.reason}\" (an "
                          f"override is not a pass; see Gate overrides)")
        return Verdict("stop", decision.summary, step, points)
    wrong = [e for e in report.endpoints if not serves_image(report, e)]
    level = "stop" if wrong else "caution" if gate.warnings else "go"
    if decision.destination:
        step = f"deploy {decision.destination} (pinned by digest)"
    else:
        path = promotion_path(report)
        start = path[-1].reference if path else report.subject
        step = f"imagekit promote {short_ref(start)} --to REF"
    if accepted:
        by = f"profile {report.profile}" if report.profile else "the images spec"
        points.append(f"accepted by {by} (a warning, not a refusal; reasons under "
                      f"Promotion gate): " + _grouped(accepted))
    if deferred:
        points.append("DEFERRED, not required (a warning, never a pass): " + _grouped(deferred))
    if gate.required:
        points.append("required checks satisfied: " + ", ".join(gate.required))
    return Verdict(level, decision.summary, step, points)


def _grouped(warnings: list[str]) -> str:
    """`probe:torch_arch FAIL: …`, `cluster-probe:probe:torch_arch FAIL: …` → `torch_arch FAIL
    (probe, cluster-probe)`: each check once with the phases it is in."""
    seen: dict[tuple[str, str], list[str]] = {}
    for w in warnings:
        test, _, rest = w.partition(" ")
        status = rest.split(":", 1)[0].split(" ", 1)[0]
        kind, _, name = test.partition(":")
        seen.setdefault((name.removeprefix("probe:"), status), []).append(kind)
    return "; ".join(f"{name} {status} ({', '.join(kinds)})"
                     for (name, status), kinds in seen.items())


def _pinned(reference: str, digest: str) -> str:
    """`host:port/repo:tag` → `host:port/repo@digest`."""
    repo = reference.split("@", 1)[0]
    head, _, tail = repo.rpartition("/")
    if ":" in tail:
        tail = tail.split(":", 1)[0]
    return f"{head}/{tail}@{digest}" if head else f"{tail}@{digest}"


def probe_name(line: EvidenceLine) -> str | None:
    """The probe a line is about, or None when it is not a probe (cluster lifecycle…)."""
    if line.kind == "cluster-probe":
        return line.name.removeprefix("probe:") if line.name.startswith("probe:") else None
    return line.name if line.kind in PHASES else None


def probe_matrix(report: ImageReport) -> tuple[list[str], dict[str, dict[str, EvidenceLine]]]:
    """Rows: each probe once (first seen order), then the phase-only checks (cluster
    lifecycle: resolve, pod, image ID…); columns: PHASES; cell: the current line or absent."""
    probes: dict[str, dict[str, EvidenceLine]] = {}
    others: dict[str, dict[str, EvidenceLine]] = {}
    for line in report.checks:
        if line.kind not in PHASES:
            continue
        name = probe_name(line)
        if name is None:
            others.setdefault(line.name, {})[line.kind] = line
        else:
            probes.setdefault(name, {})[line.kind] = line
    rows = {**probes, **{k: v for k, v in others.items() if k not in probes}}
    return list(rows), rows
