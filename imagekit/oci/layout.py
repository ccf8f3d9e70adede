"""BuildKit's attestation inside an OCI image layout (`--output type=oci`): which blob holds the
in-toto statement of one image manifest.

BuildKit puts, beside each image manifest of the layout's index, an attestation manifest
(annotation `vnd.docker.reference.type=attestation-manifest`, `vnd.docker.reference.digest` =
the image manifest's digest) whose layers are in-toto statements, one per predicate type.
Pure: the caller hands in how to read a blob (imagekit.provenance reads a layout on disk).
"""

from __future__ import annotations

from collections.abc import Callable

from imagekit.errors import InvalidInput, NotFound
from imagekit.oci import mediatypes as mt
from imagekit.oci.descriptor import Descriptor
from imagekit.oci.digest import Digest
from imagekit.oci.manifest import ImageIndex, ImageManifest, parse_manifest

INTOTO_MEDIA_TYPE = "application/vnd.in-toto+json"
#: annotations BuildKit writes: which manifest an attestation manifest is about, and the
#: predicate type of each in-toto layer
REFERENCE_DIGEST_ANNOTATION = "vnd.docker.reference.digest"
PREDICATE_TYPE_ANNOTATION = "in-toto.io/predicate-type"
#: BuildKit follows nested indexes this deep at most (its layout has one level)
_MAX_DEPTH = 4

BlobReader = Callable[[Descriptor], bytes]


def attestation_manifest_of(index: ImageIndex, manifest_digest: Digest,
                            read_blob: BlobReader, depth: int = 0) -> Descriptor | None:
    """The attestation manifest entry about `manifest_digest`, looked for in `index` and the
    indexes it lists."""
    for entry in index.manifests:
        annotations = entry.annotations or {}
        if annotations.get(mt.REFERENCE_TYPE_ANNOTATION) == mt.ATTESTATION_MANIFEST and \
                annotations.get(REFERENCE_DIGEST_ANNOTATION) == str(manifest_digest):
            return entry
    if depth >= _MAX_DEPTH:
        return None
    for entry in index.manifests:
        if entry.media_type in mt.INDEX_TYPES:
            nested = parse_manifest(read_blob(entry), entry.media_type)
            if isinstance(nested, ImageIndex):
                found = attestation_manifest_of(nested, manifest_digest, read_blob, depth + 1)
                if found is not None:
                    return found
    return None


def buildkit_statement(index_bytes: bytes, manifest_digest: Digest, predicate_type: str,
                       read_blob: BlobReader) -> bytes:
    """The bytes of the in-toto statement of `predicate_type` BuildKit attached to
    `manifest_digest` in the layout whose `index.json` is `index_bytes`. NotFound when the
    layout holds none (a build without `--attest`, or `mode=` that wrote another type)."""
    index = parse_manifest(index_bytes, mt.OCI_INDEX)
    if not isinstance(index, ImageIndex):
        raise InvalidInput("the layout's index.json is not an image index")
    entry = attestation_manifest_of(index, manifest_digest, read_blob)
    if entry is None:
        raise NotFound(f"no attestation manifest about {manifest_digest} in the layout "
                       "(built without --attest?)")
    manifest = parse_manifest(read_blob(entry), entry.media_type)
    if not isinstance(manifest, ImageManifest):
        raise InvalidInput(f"attestation manifest {entry.digest} is not an image manifest")
    for layer in manifest.layers:
        if layer.media_type == INTOTO_MEDIA_TYPE and \
                (layer.annotations or {}).get(PREDICATE_TYPE_ANNOTATION) == predicate_type:
            return read_blob(layer)
    held = sorted({(layer.annotations or {}).get(PREDICATE_TYPE_ANNOTATION, layer.media_type)
                   for layer in manifest.layers}) or ["nothing"]
    raise NotFound(f"the attestation manifest about {manifest_digest} holds no "
                   f"{predicate_type} statement (it holds {', '.join(held)})")
