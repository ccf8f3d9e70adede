"""An OCI image layout on disk, as BuildKit's `type=oci,tar=false` exporter writes it: the
platform image manifest (the digest a reproducible build is judged on and pushed as), its
config and layers. Every document is read and checked by imagekit.oci.layout_dir. (The
attestation manifest beside it: imagekit.provenance.layout.)

The index digest is never compared: with attestations it holds the build's start and finish
times. The linux/amd64 image manifest is what CI pins, promotes and names as the subject."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imagekit.errors import InvalidInput
from imagekit.oci import mediatypes
from imagekit.oci.descriptor import Descriptor
from imagekit.oci.digest import Digest
from imagekit.oci.layout_dir import MAX_DOCUMENT_BYTES, blob_path, read_document, read_index

REFERENCE_TYPE = mediatypes.REFERENCE_TYPE_ANNOTATION
JSON_LIMIT = MAX_DOCUMENT_BYTES


@dataclass(frozen=True)
class LayoutImage:
    """The platform image of one layout: manifest digest and bytes, config, layer digests."""

    root: Path
    digest: Digest
    manifest: dict[str, Any]
    config: dict[str, Any]

    @property
    def layers(self) -> list[Digest]:
        return [Digest.parse(layer["digest"]) for layer in self.manifest.get("layers", [])]

    @property
    def diff_ids(self) -> list[str]:
        return list((self.config.get("rootfs") or {}).get("diff_ids") or [])

    def blob(self, digest: Digest) -> Path:
        return blob_path(self.root, digest)


def read_json(root: Path, descriptor: Descriptor) -> dict[str, Any]:
    """A layout document as JSON, read and checked by imagekit.oci.layout_dir."""
    data: dict[str, Any] = json.loads(read_document(root, descriptor))
    return data


def _descriptors(root: Path) -> list[Descriptor]:
    """The index's descriptors, one level of nested index (BuildKit's) opened."""
    found: list[Descriptor] = []
    for raw in json.loads(read_index(root)).get("manifests", []):
        entry = Descriptor.model_validate(raw)
        if entry.media_type in mediatypes.INDEX_TYPES:
            found += [Descriptor.model_validate(nested)
                      for nested in read_json(root, entry).get("manifests", [])]
        else:
            found.append(entry)
    return found


def platform_image(root: Path, os: str = "linux", architecture: str = "amd64") -> LayoutImage:
    """The layout's image for one platform (an attestation manifest is never one)."""
    for entry in _descriptors(root):
        platform = entry.platform
        if (entry.annotations or {}).get(REFERENCE_TYPE) == mediatypes.ATTESTATION_MANIFEST:
            continue
        if platform is None or (platform.os == os and platform.architecture == architecture):
            manifest = read_json(root, entry)
            config = read_json(root, Descriptor.model_validate(manifest["config"]))
            return LayoutImage(root, entry.digest, manifest, config)
    raise InvalidInput(f"the OCI layout has no {os}/{architecture} image", where=str(root))
