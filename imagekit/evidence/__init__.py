"""Evidence: immutable, append-only records of every check, keyed by image digest."""

from imagekit.evidence.store import (
    Attempt,
    AttemptRecord,
    EvidenceKey,
    EvidenceStore,
    FileEntry,
    default_root,
)

__all__ = ["Attempt", "AttemptRecord", "EvidenceKey", "EvidenceStore", "FileEntry",
           "default_root"]
