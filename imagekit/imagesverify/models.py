"""The image manifest `images verify` writes: per image its digests, final versions, fix layers
and every check's status (accepted non-PASS statuses listed with their reason, never as PASS)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from imagekit.results import CheckResult, Status


class AcceptedCheck(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    check: str
    status: Status
    reason: str


class ImageEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    image: str
    engine: str
    profile: str
    reference: str | None
    digest: str | None
    image_id: str | None
    base: str
    base_digest: str
    mirror: str | None = None
    fix_layers: list[str] = []
    build_args: dict[str, str] = {}
    versions: dict[str, str | None] = {}
    checks: list[CheckResult]
    accepted: list[AcceptedCheck] = []
    status: Status
    verdict: Status
    verify_key: str
    cached: bool = False
    evidence: dict[str, str] = {}


class ImagesVerifyReport(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    profile: str
    spec: str
    images: list[ImageEntry]
    verdict: Status
    seconds: float
    evidence: str | None = None
