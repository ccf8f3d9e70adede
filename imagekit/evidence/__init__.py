"""Evidence: immutable, append-only records of every check, keyed by image digest.

The contract between producers and readers (docs/design/evidence.md): every attempt names
its subjects (digests with roles) and writes one typed result of its kind
(`Attempt.write_result`), read back with `EvidenceStore.result`.
"""

from imagekit.evidence import kinds
from imagekit.evidence.contract import (
    EvidenceResult,
    Role,
    Subject,
    judged,
    model_for,
    parse_result,
    register,
    registered,
)
from imagekit.evidence.store import (
    LAYOUT,
    Attempt,
    AttemptRecord,
    EvidenceKey,
    EvidenceStore,
    FileEntry,
    default_root,
)

__all__ = ["LAYOUT", "Attempt", "AttemptRecord", "EvidenceKey", "EvidenceResult",
           "EvidenceStore", "FileEntry", "Role", "Subject", "default_root", "judged", "kinds",
           "model_for", "parse_result", "register", "registered"]
