"""The report at a glance: what the release engineer may do next, each probe once across the
phases it ran in, and the promotion path. Pure functions of an `ImageReport`: the verdict is
read from the stored gate decision (`report.gate`), never recomputed here."""

from __future__ import annotations

from dataclasses import dataclass, field

from imagekit.report.models import EndpointDigest, EvidenceLine, ImageReport
from imagekit.results import Status

#: The phases a probe runs in, in release order: in the built image, again when the image
#: manifest is verified, and in a Pod of the pinned digest.
PHASES = ("probe", "images-verify", "cluster-probe")
#: Endpoint names in promotion order (imagekit infra's registries).
ENDPOINT_ORDER = ("staging", "production", "target")
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
    """The endpoints in promotion order (known names first, in ENDPOINT_ORDER)."""
    def rank(item: tuple[int, EndpointDigest]) -> tuple[int, int]:
        name = endpoint_name(item[1])
        return (ENDPOINT_ORDER.index(name) if name in ENDPOINT_ORDER else len(ENDPOINT_ORDER),
                item[0])
    return [e for _, e in sorted(enumerate(report.endpoints), key=rank)]


def attestations(report: ImageReport) -> list[EvidenceLine]:
    """Current check lines of attestation kinds (none until such evidence is recorded)."""
    return [line for line in report.checks
            if line.kind.startswith(ATTESTATION_PREFIXES)]


def verdict(report: ImageReport) -> Verdict:
    """What the stored gate decision means for the person: promote to which endpoint, or
    what is missing."""
    gate = report.gate
    path = promotion_path(report)
    verified = [e for e in path if e.verified and serves_image(report, e)]
    wrong = [e for e in path if not serves_image(report, e)]
    accepted = [w for w in gate.warnings if " — accepted: " in w]
    deferred = [w for w in gate.warnings if " — accepted: " not in w]
    points: list[str] = []
    if not gate.allowed:
        missing = [r for r in gate.reasons if r.startswith("required check ")]
        failing = [r for r in gate.reasons if not r.startswith("required check ")]
        headline = (f"Do not promote: the gate refuses this digest "
                    f"({len(gate.reasons)} reason{'s' if len(gate.reasons) != 1 else ''})")
        step = "Fix or re-run: " + "; ".join(
            ([f"{len(missing)} required check(s) missing or not passing"] if missing else [])
            + ([f"{len(failing)} failing check(s)"] if failing else []))
        points += gate.reasons
        if report.overrides:
            override = report.overrides[-1]
            points.append(f"forced anyway by {override.user}: \"{override.reason}\" (an "
                          f"override is not a pass; see Gate overrides)")
        return Verdict("stop", headline, step, points)
    level = "caution" if gate.warnings else "go"
    if wrong:
        level = "stop"
        points += [f"{endpoint_name(e)} serves {e.digest[:19]}…, not this image"
                   for e in wrong]
    if verified:
        last = verified[-1]
        name = endpoint_name(last)
        later = path[path.index(last) + 1:]
        if name == ENDPOINT_ORDER[-1] or (not later and name not in ENDPOINT_ORDER[:-1]):
            headline = f"Promoted: {name} serves this digest, read back and verified"
            step = f"Deploy pinned by digest: {_pinned(last.reference, report.subject)}"
        else:
            nxt = ENDPOINT_ORDER[ENDPOINT_ORDER.index(name) + 1] if name in ENDPOINT_ORDER \
                else "the next endpoint"
            headline = f"Gate allows: promote to {nxt} (verified up to {name})"
            step = f"imagekit promote {last.reference} … (next hop: {nxt})"
    else:
        start = path[0].reference if path else report.subject
        headline = "Gate allows: promote to production (nothing promoted yet)"
        step = f"imagekit promote {start} …"
    if accepted:
        points.append(f"accepted by profile {report.profile or '?'} (a warning, not a "
                      f"refusal; reasons under Promotion gate): " + _grouped(accepted))
    if deferred:
        points.append("DEFERRED, not required (a warning, never a pass): " + _grouped(deferred))
    if report.status is not Status.PASS:
        points.append(f"Overall {report.status.value} is the worst real check status; only the "
                      f"gate applies the profile's acceptances")
    if gate.required:
        points.append("required checks satisfied: " + ", ".join(gate.required))
    return Verdict(level, headline, step, points)


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
