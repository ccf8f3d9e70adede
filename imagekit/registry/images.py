"""Resolve a reference to one runnable image: manifest (verified), platform choice, config.

A reference may name an index (OCI) or list (Docker); then the entry for the wanted platform
is chosen (default linux/amd64) with attestation entries (`unknown/unknown`,
`vnd.docker.reference.type: attestation-manifest`) skipped. Both identities are kept: the
digest the user addressed (`top_digest`, maybe an index) and the image manifest's own.
"""

from __future__ import annotations

from dataclasses import dataclass

from imagekit.errors import InvalidInput
from imagekit.oci import ImageConfig, ImageIndex, ImageManifest, ImageReference, Platform
from imagekit.oci.digest import Digest
from imagekit.oci.manifest import parse_config, parse_manifest
from imagekit.oci.platform import LINUX_AMD64
from imagekit.registry.client import ManifestBlob, RegistryClient


@dataclass(frozen=True)
class ResolvedImage:
    reference: ImageReference
    top: ManifestBlob                 # what the reference names (index or image manifest)
    manifest_blob: ManifestBlob       # the chosen image manifest
    manifest: ImageManifest
    config_bytes: bytes
    config: ImageConfig
    platform: Platform | None

    @property
    def top_digest(self) -> Digest:
        return self.top.digest

    @property
    def digest(self) -> Digest:
        """The image manifest's digest (the platform image)."""
        return self.manifest_blob.digest

    @property
    def config_digest(self) -> Digest:
        return self.manifest.config_digest


def resolve_image(client: RegistryClient, reference: ImageReference,
                  platform: Platform = LINUX_AMD64) -> ResolvedImage:
    top = client.get_manifest(reference.repository, reference.digest or reference.identifier)
    parsed = parse_manifest(top.data, top.media_type)
    chosen_blob, chosen_platform = top, None
    if isinstance(parsed, ImageIndex):
        entry = parsed.select(platform)
        chosen_blob = client.get_manifest(reference.repository, entry.digest)
        chosen_platform = entry.platform
        parsed = parse_manifest(chosen_blob.data, chosen_blob.media_type)
        if not isinstance(parsed, ImageManifest):
            raise InvalidInput("an index entry is itself an index (nested indexes are not "
                               "supported)", where=f"{reference}@{entry.digest}")
    config_bytes = client.get_blob_bytes(reference.repository, parsed.config.digest,
                                         parsed.config.size)
    config = parse_config(config_bytes)
    return ResolvedImage(reference, top, chosen_blob, parsed, config_bytes, config,
                         chosen_platform)
