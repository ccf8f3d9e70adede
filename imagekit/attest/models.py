"""Records of attestations: the promotion predicate (the joined chain), what was attached,
and what `imagekit verify-attestations` found. Facts: frozen, extra forbidden, schemas exported."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from imagekit.results import CheckResult, Status

LinkStatus = Literal["PASS", "FAIL", "DEFERRED", "ERROR", "ABSENT"]


class EvidenceRef(BaseModel):
    """One evidence file a link was read from: path under the evidence root + its sha256."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    digest: dict[str, str]


class ChainLink(BaseModel):
    """One link of the chain (base identity, build, probes, hop-N, cluster imageID, …)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    status: LinkStatus
    detail: str = ""
    accepted: str | None = None
    evidence: list[EvidenceRef] = []


class HopLink(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    endpoint: str
    digest: str
    verified: bool
    read_back: str
    referrers: list[str] = []


class PromotionPredicate(BaseModel):
    """`https://imagekit.dev/attestation/promotion/v0.1`: every link imagekit holds for one
    digest, joined; `required` names the links the signer's profile requires."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    digest: str
    media_type: str
    source: str | None = None
    profile: str | None = None
    config_digest: str | None = None
    diff_ids: list[str] = []
    base_digest: str | None = None
    fix_layers: list[str] = []
    links: list[ChainLink]
    hops: list[HopLink] = []
    required: list[str]
    generated: str
    #: set when the chain was signed past a refusing gate (`promote --force --reason`): the
    #: reason and what the gate refused for; `imagekit verify-attestations` fails such a chain
    forced: str | None = None
    #: the imagekit that made the statement (absent in statements made before it was recorded)
    imagekit_version: str | None = None


class Attached(BaseModel):
    """One attestation attached to a digest at one registry."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    repository: str
    subject: str
    predicate_type: str
    manifest: str
    bundle: str
    listing: Literal["api", "tag-schema"]


class AttestOutcome(BaseModel):
    """What `imagekit attest` did: the statements attached, and those it could not make (a
    digest whose build recorded no provenance: DEFERRED, with why; nothing is invented)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    attached: list[Attached]
    deferred: list[CheckResult] = []


class AttestVerifyReport(BaseModel):
    """What `imagekit verify-attestations REF --json` prints."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    reference: str
    digest: str
    status: Status
    attestations: list[dict] = []
    checks: list[CheckResult]
