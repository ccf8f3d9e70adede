"""`Descriptor`: media type + digest + size (+ platform, annotations) pointing at content."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from imagekit.oci.digest import Digest
from imagekit.oci.platform import Platform


class Descriptor(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)

    media_type: str = Field(alias="mediaType")
    digest: Digest
    size: int = Field(ge=0)
    urls: list[str] | None = None
    annotations: dict[str, str] | None = None
    platform: Platform | None = None
    artifact_type: str | None = Field(default=None, alias="artifactType")

    def dump(self) -> dict:
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")
