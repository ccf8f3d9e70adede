"""What a build leaves behind, as data (also what other helpers read: `latest_build`)."""

from __future__ import annotations

import datetime as dt

from pydantic import BaseModel, ConfigDict

from imagekit.oci import Digest, ImageReference


class BuildRecord(BaseModel):
    """One successful build of one image of the spec, pushed to the profile's staging registry.

    `image_id` is the config digest (docker's image ID); `digest` is the manifest digest the
    staging registry answered for the push; `reference` is the staging repository pinned to it.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    profile: str
    engine: str
    base: ImageReference
    cache_key: str
    local_tag: str
    image_id: Digest
    reference: ImageReference | None = None
    digest: Digest | None = None
    build_args: dict[str, str] = {}
    seconds: float
    cached: bool = False
    built: dt.datetime
    evidence: str = ""
    #: SOURCE_DATE_EPOCH and where it came from (imagekit.build.epoch)
    source_date_epoch: int | None = None
    epoch_origin: str | None = None
    #: the build engine: docker version and {package file: sha256}
    builder_version: str | None = None
    builder_packages: dict[str, str] = {}
    #: BuildKit's provenance statement, a file in `evidence` (None: the build attached none)
    provenance: str | None = None

    @property
    def pushed(self) -> bool:
        return self.digest is not None
