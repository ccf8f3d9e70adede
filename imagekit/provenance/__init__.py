"""SLSA v1 build provenance: BuildKit's statement read from a build's OCI layout, the statement
imagekit signs from it, and the check that the digest was built from the lock's base and the
checkout's Dockerfile (read by the gate and by `imagekit verify-attestations`)."""

from imagekit.provenance.check import (
    check_provenance,
    judge_provenance,
    resolve,
    resolve_served,
)
from imagekit.provenance.layout import read_buildkit_provenance
from imagekit.provenance.slsa import (
    SLSA_PROVENANCE_TYPE,
    ProvenanceStatement,
    parse_statement,
    signed_statement,
)

#: the file a build's evidence attempt holds BuildKit's statement in, bytes unchanged
PROVENANCE_FILE = "provenance.json"

__all__ = ["PROVENANCE_FILE", "SLSA_PROVENANCE_TYPE", "ProvenanceStatement", "check_provenance",
           "judge_provenance", "parse_statement", "read_buildkit_provenance", "resolve",
           "resolve_served", "signed_statement"]
