"""in-toto Statements for one image digest: test-result (from the report), promotion (the
joined chain), CycloneDX SBOM, SLSA provenance (BuildKit's, from the build's evidence). Each
names the digest as its subject — the digest a verifier is served, so a statement moved to
another image's referrers does not verify there."""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Iterable
from pathlib import Path

from imagekit import __version__
from imagekit.attest.models import ChainLink, EvidenceRef, HopLink, PromotionPredicate
from imagekit.oci.digest import Digest

#: BuildKit's SLSA v1 provenance, its subject set to the pushed digest (imagekit.provenance)
from imagekit.provenance.slsa import SLSA_PROVENANCE_TYPE
from imagekit.report.decision import accepted_of, count_text, counts_of
from imagekit.report.links import LINK_KINDS, OPTIONAL_LINKS  # noqa: F401 - re-exported

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
TEST_RESULT_TYPE = "https://in-toto.io/attestation/test-result/v0.1"
PROMOTION_TYPE = "https://imagekit.dev/attestation/promotion/v0.1"
#: cosign's `--type cyclonedx` is this URI
SBOM_TYPE = "https://cyclonedx.org/bom"
#: the cluster phases each actor signs (`--key` of cluster probe / accept / gpu-preflight):
#: imagekit.attest.phase.ClusterPhasePredicate
CLUSTER_PROBE_TYPE = "https://imagekit.dev/attestation/cluster-probe/v1"
CLUSTER_ACCEPT_TYPE = "https://imagekit.dev/attestation/cluster-accept/v1"
GPU_PREFLIGHT_TYPE = "https://imagekit.dev/attestation/gpu-preflight/v1"
PHASE_TYPES = {"cluster-probe": CLUSTER_PROBE_TYPE, "cluster-accept": CLUSTER_ACCEPT_TYPE,
               "gpu-preflight": GPU_PREFLIGHT_TYPE}
#: short names (what `--type` takes, as with cosign) -> predicate types
TYPES = {"test-result": TEST_RESULT_TYPE, "promotion": PROMOTION_TYPE, "sbom": SBOM_TYPE,
         "slsa-provenance": SLSA_PROVENANCE_TYPE, **PHASE_TYPES}
NAMES = {value: key for key, value in TYPES.items()}

REQUIRED_LINKS_ENV = "IMAGEKIT_REQUIRED_LINKS"
#: The chain the issue names: base identity, build, probes, every hop read back, cluster
#: imageID. GPU preflight and acceptance are links only when their evidence exists.
DEFAULT_REQUIRED_LINKS = ("base-identity", "build", "probes", "hops", "cluster-imageid")

#: link name -> evidence kinds it is read from (imagekit.report.links)


def required_links(given: Iterable[str] | None = None) -> list[str]:
    """The links a promotion requires: `given` (the CLI passes `$IMAGEKIT_REQUIRED_LINKS` from
    its settings; [] when it is empty), else the default chain."""
    if given is None:
        given = DEFAULT_REQUIRED_LINKS
    return list(dict.fromkeys(p.strip() for p in given if p.strip()))


def statement(digest: Digest, name: str, predicate_type: str, predicate: dict) -> dict:
    return {"_type": STATEMENT_TYPE,
            "subject": [{"name": name, "digest": {digest.algorithm: digest.hex}}],
            "predicateType": predicate_type, "predicate": predicate}


def test_result_statement(report, digest: Digest, name: str) -> dict:
    """Today's test-result statement (imagekit.report.intoto), its subjects kept, the digest
    added when the report did not name it (a verifier matches the served digest)."""
    from imagekit.report.intoto import statement as report_statement

    built = report_statement(report)
    wanted = {"name": name, "digest": {digest.algorithm: digest.hex}}
    if not any(s.get("digest") == wanted["digest"] for s in built["subject"]):
        built["subject"].append(wanted)
    # signed facts a consumer decides from: when, and the acceptances the signer's
    # profile applied (its trust policy says whether to honour them)
    built["predicate"]["timestamp"] = signed_now()
    built["predicate"]["acceptances"] = acceptances_of(report)
    return built


def signed_now() -> str:
    """The time put inside every statement imagekit signs (freshness is decided by it)."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="microseconds")


def acceptances_of(report) -> list[dict]:  # noqa: ANN001 - an ImageReport
    """`{test, status, reason, profile, spec_digest}` for every line the profile accepted."""
    from imagekit.report.accepted import match

    found = []
    for line in report.checks:
        if not line.accepted:
            continue
        entry = match(line.kind, line.name, line.status, list(report.accepted))
        found.append({"test": line.test_name, "status": line.status.value,
                      "reason": entry.reason if entry else line.accepted,
                      "profile": (entry.profile if entry else None) or report.profile,
                      "spec_digest": entry.spec_digest if entry else None})
    return found


def _worst(statuses: list[str]) -> str:
    for status in ("ERROR", "FAIL", "DEFERRED", "PASS"):
        if status in statuses:
            return status
    return "ABSENT"


def _ref(root: str, evidence: str) -> EvidenceRef | None:
    path = Path(root) / evidence / "attempt.json"
    try:
        return EvidenceRef(name=f"{evidence}/attempt.json",
                           digest={"sha256": hashlib.sha256(path.read_bytes()).hexdigest()})
    except OSError:
        return None


def links_of_report(report, signed_lines=None, root: str | None = None) -> list[ChainLink]:
    """One link per chain part from the report's current lines; a line the profile accepts
    (its reason is kept) lets the link PASS, and is counted as accepted, never inside the
    PASS count (`4 PASS, 2 accepted (torch_arch FAIL, cli_help DEFERRED)`, the reports'
    own count: imagekit.report.decision.count_text); no evidence = ABSENT. `signed_lines`:
    lines read from statements trusted keys signed (imagekit.report.trusted; their detail
    names the signer), used where this store measured nothing of the image itself."""
    links: list[ChainLink] = []
    lines = list(report.checks) if report is not None else []
    if signed_lines:
        lines = [*signed_lines, *lines]
    evidence_root = report.evidence_root if report is not None else (root or "")
    for name, kinds in LINK_KINDS.items():
        mine = [line for line in lines if any(
            line.kind == k or (k.endswith("-") and line.kind.startswith(k)) for k in kinds)]
        if not mine:
            if name not in OPTIONAL_LINKS:
                links.append(ChainLink(name=name, status="ABSENT", detail="no evidence"))
            continue
        statuses = ["PASS" if line.accepted else line.status.value for line in mine]
        accepted = "; ".join(sorted({line.accepted for line in mine if line.accepted})) or None
        failing = [f"{line.kind}:{line.name} {line.status.value}" for line in mine
                   if not line.accepted and line.status.value != "PASS"]
        counted = count_text(counts_of(mine), accepted_of(mine))
        detail = f"{', '.join(failing)} ({counted})" if failing else counted
        sources = sorted({line.detail for line in mine if line.detail.startswith("signed by")})
        if sources:
            detail += f" ({'; '.join(sources)})"
        refs = {line.evidence: _ref(evidence_root, line.evidence) for line in mine}
        links.append(ChainLink(name=name, status=_worst(statuses), detail=detail[:500],
                               accepted=accepted, evidence=[r for r in refs.values() if r]))
    if report is not None and report.facts.fix_layers:
        links.append(ChainLink(name="fix-layers", status="PASS",
                               detail=f"{len(report.facts.fix_layers)} fix layer(s)"))
    return links


def promotion_predicate(digest: Digest, media_type: str, *, report=None, hops: list[HopLink],
                        source: str | None = None, config_digest: str | None = None,
                        diff_ids: list[str] | None = None,
                        required: Iterable[str] | None = None,
                        promote_evidence: str | None = None, signed_lines=None,
                        root: str | None = None, forced: str | None = None
                        ) -> PromotionPredicate:
    links = links_of_report(report, signed_lines, root)
    hop_ok = bool(hops) and all(h.verified and h.digest == str(digest) for h in hops)
    hop_refs = []
    if promote_evidence:
        path = Path(promote_evidence) / "attempt.json"
        if path.exists():
            hop_refs.append(EvidenceRef(name=str(path), digest={
                "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}))
    links.append(ChainLink(
        name="hops", status="PASS" if hop_ok else ("ABSENT" if not hops else "FAIL"),
        detail="; ".join(f"{h.endpoint}: {h.read_back}" for h in hops)[:1000] or "no hops",
        evidence=hop_refs))
    facts = report.facts if report is not None else None
    return PromotionPredicate(
        digest=str(digest), media_type=media_type, source=source,
        profile=report.profile if report is not None else None,
        config_digest=config_digest, diff_ids=list(diff_ids or []),
        base_digest=facts.base_digest if facts else None,
        fix_layers=list(facts.fix_layers) if facts else [],
        links=links, hops=hops, required=required_links(required), forced=forced,
        generated=dt.datetime.now(dt.UTC).isoformat(timespec="microseconds"),
        imagekit_version=__version__)
