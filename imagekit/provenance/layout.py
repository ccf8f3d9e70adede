"""BuildKit's provenance statement read from the OCI image layout a build wrote
(`--output type=oci,dest=DIR,tar=false`): the build records it beside its evidence."""

from __future__ import annotations

from functools import partial
from pathlib import Path

from imagekit.oci.digest import Digest
from imagekit.oci.layout import buildkit_statement
from imagekit.oci.layout_dir import read_document, read_index
from imagekit.provenance.slsa import MAX_STATEMENT_BYTES, SLSA_PROVENANCE_TYPE


def read_buildkit_provenance(layout_dir: Path | str, manifest_digest: Digest | str) -> bytes:
    """The bytes of BuildKit's SLSA v1 statement about `manifest_digest` in the layout, as
    BuildKit wrote them. Every blob read is checked against its digest and size. NotFound when
    the layout holds none (built without `--attest type=provenance,version=v1`)."""
    root = Path(layout_dir)
    return buildkit_statement(read_index(root), Digest.parse(str(manifest_digest)),
                              SLSA_PROVENANCE_TYPE,
                              partial(read_document, root, max_bytes=MAX_STATEMENT_BYTES))
