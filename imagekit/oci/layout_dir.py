"""An OCI image layout on disk (BuildKit's `type=oci,tar=false`): its index and blobs, each
read under a size bound and checked against the digest and size its descriptor names. The one
reader of a layout's documents for the build (imagekit.build.layout) and the provenance it
records (imagekit.provenance.layout): a blob that does not hash to its name is never used."""

from __future__ import annotations

from pathlib import Path

from imagekit.errors import DigestMismatch, InvalidInput
from imagekit.inputs import read_bytes
from imagekit.oci.descriptor import Descriptor
from imagekit.oci.digest import Digest

#: a layout's JSON documents (index, manifests, configs, in-toto statements) are small; a
#: larger one is not what BuildKit writes and is not read whole
MAX_DOCUMENT_BYTES = 16 * 1024 * 1024


def blob_path(root: Path, digest: Digest) -> Path:
    """Where the layout keeps a blob (a parsed Digest has no path separators)."""
    return root / "blobs" / digest.algorithm / digest.hex


def read_index(root: Path) -> bytes:
    """index.json's bytes; InvalidInput when `root` is not a layout."""
    if not (root / "index.json").is_file():
        raise InvalidInput("not an OCI image layout (no index.json)", where=str(root))
    return read_bytes(root / "index.json", "OCI layout index", max_bytes=MAX_DOCUMENT_BYTES)


def read_document(root: Path, descriptor: Descriptor,
                  max_bytes: int = MAX_DOCUMENT_BYTES) -> bytes:
    """A document blob's bytes, of the size and digest its descriptor names."""
    path = blob_path(root, descriptor.digest)
    if descriptor.size > max_bytes:
        raise InvalidInput(f"blob {descriptor.digest} is {descriptor.size} bytes: larger than a "
                           f"document of a layout ({max_bytes} bytes)", where=str(path))
    if not path.is_file():
        raise InvalidInput(f"the OCI layout lacks blob {descriptor.digest}", where=str(root))
    data = read_bytes(path, "OCI layout blob", max_bytes=max_bytes)
    if len(data) != descriptor.size or not descriptor.digest.matches(data):
        raise DigestMismatch(f"blob does not hash to {descriptor.digest} ({len(data)} bytes, "
                             f"{descriptor.size} listed)", where=str(path))
    return data
