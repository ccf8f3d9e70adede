"""An OCI image layout on disk, as BuildKit's `type=oci,tar=false` exporter writes it: the
platform image manifest (the digest a reproducible build is judged on and pushed as), its
config and layers. (The attestation manifest beside it: imagekit.provenance.layout.)

The index digest is never compared: with attestations it holds the build's start and finish
times. The linux/amd64 image manifest is what CI pins, promotes and names as the subject."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imagekit.errors import InvalidInput
from imagekit.oci import mediatypes
from imagekit.oci.digest import Digest

REFERENCE_TYPE = mediatypes.REFERENCE_TYPE_ANNOTATION
#: a layout's JSON documents (index, manifests, configs, statements) are small; a larger one is
#: not what BuildKit writes and is not read whole
JSON_LIMIT = 16 * 1024 * 1024


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


def blob_path(root: Path, digest: Digest) -> Path:
    return root / "blobs" / digest.algorithm / digest.hex


def read_json(root: Path, digest: Digest) -> dict[str, Any]:
    path = blob_path(root, digest)
    if not path.is_file():
        raise InvalidInput(f"the OCI layout lacks blob {digest}", where=str(root))
    if path.stat().st_size > JSON_LIMIT:
        raise InvalidInput(f"blob {digest} is larger than a JSON document of a layout "
                         f"({JSON_LIMIT} bytes)", where=str(path))
    data: dict[str, Any] = json.loads(path.read_bytes())
    return data


def _descriptors(root: Path) -> list[dict[str, Any]]:
    """The index's descriptors, one level of nested index (BuildKit's) opened."""
    index_file = root / "index.json"
    if not index_file.is_file():
        raise InvalidInput("not an OCI image layout (no index.json)", where=str(root))
    found: list[dict[str, Any]] = []
    for entry in json.loads(index_file.read_text()).get("manifests", []):
        if entry.get("mediaType") in mediatypes.INDEX_TYPES:
            found += read_json(root, Digest.parse(entry["digest"])).get("manifests", [])
        else:
            found.append(entry)
    return found


def platform_image(root: Path, os: str = "linux", architecture: str = "amd64") -> LayoutImage:
    """The layout's image for one platform (an attestation manifest is never one)."""
    for entry in _descriptors(root):
        platform = entry.get("platform") or {}
        if (entry.get("annotations") or {}).get(REFERENCE_TYPE) == \
                mediatypes.ATTESTATION_MANIFEST:
            continue
        if platform.get("os", os) == os and platform.get("architecture", architecture) == \
                architecture:
            digest = Digest.parse(entry["digest"])
            manifest = read_json(root, digest)
            config = read_json(root, Digest.parse(manifest["config"]["digest"]))
            return LayoutImage(root, digest, manifest, config)
    raise InvalidInput(f"the OCI layout has no {os}/{architecture} image", where=str(root))
