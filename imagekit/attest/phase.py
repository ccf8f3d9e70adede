"""Each actor signs its own phase: `cluster probe`, `cluster accept` and `cluster gpu-preflight`
with `--key` sign what they saw on the cluster as an in-toto statement and attach it, as an
OCI referrer of the digest, at the registry endpoint they pulled from (the layout of
`imagekit attest`: cosign verifies it with `verify-attestation --type <uri>`).

One predicate shape for the three phases (`ClusterPhasePredicate`), one predicate type per
phase (`imagekit.attest.statements`): the cluster (its API server), the node the Pod ran on,
the image it named and the imageID the kubelet reported, every check's verdict, the profile's
acceptances the signer applied, and the sha256 of the local evidence attempt it came from.

The key is loaded and validated by the caller BEFORE any side effect (`load_signing_key`):
a bad key is exit 2 before a Pod exists.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from pathlib import Path
from typing import Literal

from cryptography.hazmat.primitives.asymmetric import ec
from pydantic import BaseModel, ConfigDict, Field

from imagekit.attest.keys import load_private
from imagekit.attest.models import Attached, EvidenceRef
from imagekit.attest.publish import sign_and_attach
from imagekit.attest.statements import PHASE_TYPES, statement
from imagekit.oci import ImageReference
from imagekit.oci.digest import Digest
from imagekit.registry import RegistryClient
from imagekit.results import CheckReport, Status

Phase = Literal["cluster-probe", "cluster-accept", "gpu-preflight"]
#: the check whose data["observed"] holds what the cluster said about the Pod, per phase
OBSERVED_BY: dict[str, str] = {"cluster-probe": "pod_completed",
                               "cluster-accept": "engine_start",
                               "gpu-preflight": "preflight_pod"}


class PhaseVerdict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    status: Status
    detail: str = ""


class ClusterPhasePredicate(BaseModel):
    """`https://imagekit.dev/attestation/<phase>/v1`: what one actor saw on its cluster."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    phase: Phase
    digest: str = Field(description="the digest the Pod was pinned to")
    reference: str = Field(description="what the actor asked for (tag or digest)")
    cluster: str = Field(description="the Kubernetes API server it spoke to")
    node: str | None = Field(None, description="the node the Pod ran on (None: no Pod ran)")
    image: str | None = Field(None, description="the image the container named")
    image_id: str | None = Field(None, description="the imageID the kubelet reported")
    status: Status = Field(description="the phase's verdict before profile acceptances")
    verdict: Status = Field(description="the verdict with the acceptances applied")
    checks: list[PhaseVerdict]
    accepted: list[dict] = Field(default=[], description="acceptances the signer's profile "
                                 "applied: check, status, profile, reason")
    profile: str | None = None
    evidence: EvidenceRef | None = Field(None, description="the local attempt it came from")
    generated: str


def load_signing_key(path: Path | None) -> ec.EllipticCurvePrivateKey | None:
    """The private key for `--key` (None when not given); bad input raises InvalidInput."""
    return load_private(path) if path is not None else None


def _evidence_ref(evidence: str | None) -> EvidenceRef | None:
    if not evidence:
        return None
    path = Path(evidence) / "attempt.json"
    try:
        return EvidenceRef(name=str(Path(evidence).name) + "/attempt.json",
                           digest={"sha256": hashlib.sha256(path.read_bytes()).hexdigest()})
    except OSError:
        return None


def phase_predicate(phase: Phase, report: CheckReport, *, digest: Digest, reference: str,
                    cluster: str, accepted: list[dict] | None = None,
                    verdict: Status | None = None, profile: str | None = None
                    ) -> ClusterPhasePredicate:
    seen: dict = {}
    for check in report.checks:
        if check.name == OBSERVED_BY[phase] and isinstance((check.data or {}).get("observed"),
                                                           dict):
            seen = check.data["observed"]
    return ClusterPhasePredicate(
        phase=phase, digest=str(digest), reference=reference, cluster=cluster,
        node=seen.get("node"), image=seen.get("image"), image_id=seen.get("image_id"),
        status=report.status, verdict=verdict or report.status,
        checks=[PhaseVerdict(name=c.name, status=c.status, detail=c.detail[:300])
                for c in report.checks],
        accepted=list(accepted or []), profile=profile, evidence=_evidence_ref(report.evidence),
        generated=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"))


def sign_phase(client: RegistryClient, reference: ImageReference, digest: Digest,
               predicate: ClusterPhasePredicate, key: ec.EllipticCurvePrivateKey) -> Attached:
    """Sign the phase statement (subject: `digest` at that repository) and attach it there."""
    subject = client.get_manifest(reference.repository, digest)
    name = f"{reference.registry}/{reference.repository}"
    signed = statement(subject.digest, name, PHASE_TYPES[predicate.phase],
                       predicate.model_dump(mode="json"))
    return sign_and_attach(client, reference.repository, subject, signed, key)
