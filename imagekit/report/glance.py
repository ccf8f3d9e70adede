"""The report at a glance, for the renderers: each probe once across the phases it ran in, the
promotion path in hop order, the phases this store did not run. Pure functions of an
`ImageReport`; the decision itself is `imagekit.report.decision.derive`'s, never made here."""

from __future__ import annotations

from imagekit.report.decision import LATER_KIND_PREFIXES
from imagekit.report.models import EndpointDigest, EvidenceLine, ImageReport

#: The phases a probe runs in, in release order: in the built image, again when the image
#: manifest is verified, and in a Pod of the pinned digest.
PHASES = ("probe", "images-verify", "cluster-probe")
#: Evidence kinds (prefixes) that are attestations about the image (SBOM, signature, …).
ATTESTATION_PREFIXES = ("attest", "sbom", "sign", "provenance")


def endpoint_name(endpoint: EndpointDigest) -> str:
    """`production (127.0.0.1:5002)` → `production`; an unnamed address stays itself."""
    return endpoint.endpoint.split(" (", 1)[0]


def promotion_path(report: ImageReport) -> list[EndpointDigest]:
    """The endpoints in the order the image reached them: where the build pushed it, the
    promotion's source, then each hop in the order it was made (the evidence's order; a
    relay such as `--via` comes before the destination, whatever the registries are named)."""
    return list(report.endpoints)


def attestations(report: ImageReport) -> list[EvidenceLine]:
    """Current check lines of attestation kinds (none until such evidence is recorded)."""
    return [line for line in report.checks
            if line.kind.startswith(ATTESTATION_PREFIXES)]


#: Report sections by phase, with the signed-statement phase (SignedStatement.phase) of each.
PHASE_NAMES = {"image": "image phase", "hops": "promotion", "cluster": "cluster phase"}


def phases_run(report: ImageReport) -> dict[str, bool]:
    """Which phases this store itself measured (its own evidence lines and records)."""
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
