"""BuildKit's provenance statement read from the OCI image layout a build wrote
(`--output type=oci,dest=DIR,tar=false`): the build records it beside its evidence."""

from __future__ import annotations

from pathlib import Path

from imagekit.errors import DigestMismatch, InvalidInput
from imagekit.inputs import read_bytes
from imagekit.oci.descriptor import Descriptor
from imagekit.oci.digest import Digest
from imagekit.oci.layout import buildkit_statement
from imagekit.provenance.slsa import MAX_STATEMENT_BYTES, SLSA_PROVENANCE_TYPE

#: manifests, indexes and statements are small; image layers are never read here
MAX_BLOB_BYTES = MAX_STATEMENT_BYTES


def read_buildkit_provenance(layout_dir: Path | str, manifest_digest: Digest | str) -> bytes:
    """The bytes of BuildKit's SLSA v1 statement about `manifest_digest` in the layout, as
    BuildKit wrote them. Every blob read is checked against its digest and size. NotFound when
    the layout holds none (built without `--attest type=provenance,version=v1`)."""
    root = Path(layout_dir)
    digest = Digest.parse(str(manifest_digest))

    def read_blob(descriptor: Descriptor) -> bytes:
        # a parsed Digest is `algorithm:hex` of a known algorithm: no path separators
        path = root / "blobs" / descriptor.digest.algorithm / descriptor.digest.hex
        if descriptor.size > MAX_BLOB_BYTES:
            raise InvalidInput(f"blob {descriptor.digest} is {descriptor.size} bytes: not a "
                               "manifest or statement", where=str(path))
        data = read_bytes(path, "OCI layout blob", max_bytes=MAX_BLOB_BYTES)
        if len(data) != descriptor.size or not descriptor.digest.matches(data):
            raise DigestMismatch(f"blob does not hash to {descriptor.digest} "
                                 f"({len(data)} bytes, {descriptor.size} listed)",
                                 where=str(path))
        return data

    index = read_bytes(root / "index.json", "OCI layout index", max_bytes=MAX_BLOB_BYTES)
    return buildkit_statement(index, digest, SLSA_PROVENANCE_TYPE, read_blob)
