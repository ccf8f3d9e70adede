"""Image manifests and indexes (OCI and Docker v2), and the image config.

The record's whole verification story lives in two identities of a layer, kept apart here:
`ImageManifest.layers[i].digest` is the *compressed blob* (what a registry stores, may differ
between mirrors), `ImageConfig.rootfs.diff_ids[i]` is the *uncompressed tar* (what the image is).
`ImageManifest.config.digest` is the image ID (config name); the manifest's own digest is the
address you pull.
"""

from __future__ import annotations

import json

from pydantic import BaseModel, ConfigDict, Field

from imagekit.errors import InvalidInput
from imagekit.oci import mediatypes as mt
from imagekit.oci.descriptor import Descriptor
from imagekit.oci.digest import Digest
from imagekit.oci.platform import LINUX_AMD64, Platform


class ImageManifest(BaseModel):
    """OCI image manifest or Docker v2 schema 2 manifest."""

    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)

    schema_version: int = Field(alias="schemaVersion")
    media_type: str | None = Field(default=None, alias="mediaType")
    config: Descriptor
    layers: list[Descriptor]
    subject: Descriptor | None = None
    annotations: dict[str, str] | None = None

    @property
    def config_digest(self) -> Digest:
        """The image ID: same config digest = same image content and metadata."""
        return self.config.digest

    @property
    def layer_digests(self) -> list[Digest]:
        """Compressed blob digests, in order (not diffIDs)."""
        return [layer.digest for layer in self.layers]

    def blobs(self) -> list[Descriptor]:
        return [self.config, *self.layers]


class ImageIndex(BaseModel):
    """OCI image index or Docker manifest list."""

    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)

    schema_version: int = Field(alias="schemaVersion")
    media_type: str | None = Field(default=None, alias="mediaType")
    manifests: list[Descriptor]
    subject: Descriptor | None = None
    annotations: dict[str, str] | None = None

    def image_entries(self) -> list[Descriptor]:
        """Entries that are runnable images: attestation manifests and unknown/unknown skipped."""
        result = []
        for entry in self.manifests:
            if (entry.annotations or {}).get(mt.REFERENCE_TYPE_ANNOTATION) == \
                    mt.ATTESTATION_MANIFEST:
                continue
            if entry.platform is not None and entry.platform.is_unknown:
                continue
            result.append(entry)
        return result

    def select(self, platform: Platform = LINUX_AMD64) -> Descriptor:
        """The entry for `platform`; NotFound-style InvalidInput naming what is offered."""
        candidates = self.image_entries()
        for entry in candidates:
            if entry.platform is not None and entry.platform.satisfies(platform):
                return entry
        offered = ", ".join(str(e.platform) for e in candidates if e.platform) or "none"
        raise InvalidInput(f"no {platform} image in the index (offers: {offered})")


class RootFS(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)

    type: str = "layers"
    diff_ids: list[Digest]


class ImageConfig(BaseModel):
    """The parts of an image config imagekit reads; everything else is kept (extra=allow)."""

    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)

    architecture: str | None = None
    os: str | None = None
    variant: str | None = None
    rootfs: RootFS
    config: dict | None = None
    history: list[dict] | None = None

    @property
    def diff_ids(self) -> list[Digest]:
        """Uncompressed layer digests, in order: the content identity of the layers."""
        return list(self.rootfs.diff_ids)


Manifest = ImageManifest | ImageIndex


def parse_manifest(data: bytes, media_type: str | None = None) -> Manifest:
    """Parse manifest bytes as an index or image manifest, by mediaType (header or body)."""
    try:
        body = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidInput(f"manifest is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise InvalidInput("manifest is not a JSON object")
    kind = body.get("mediaType") or media_type
    if kind in mt.INDEX_TYPES or (kind is None and "manifests" in body):
        return ImageIndex.model_validate(body)
    if kind in mt.IMAGE_MANIFEST_TYPES or (kind is None and "layers" in body):
        return ImageManifest.model_validate(body)
    raise InvalidInput(f"unsupported manifest media type {kind!r}")


def parse_config(data: bytes) -> ImageConfig:
    try:
        return ImageConfig.model_validate_json(data)
    except ValueError as exc:
        raise InvalidInput(f"image config cannot be read: {str(exc).splitlines()[0]}") from None
