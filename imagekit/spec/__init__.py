"""The images spec (what to build and check) and its lock (the digests builds may use)."""

from imagekit.spec.loader import default_spec_path, load_spec, resolve_image
from imagekit.spec.lock import LockEntry, LockFile, load_lock, write_lock
from imagekit.spec.models import (
    KNOWN_ENGINES,
    KNOWN_PROBES,
    Acceptance,
    ImageSpec,
    ImagesSpec,
    Profile,
    ResolvedImage,
)

__all__ = [
    "KNOWN_ENGINES", "KNOWN_PROBES", "Acceptance", "ImageSpec", "ImagesSpec", "LockEntry",
    "LockFile", "Profile", "ResolvedImage", "default_spec_path", "load_lock", "load_spec",
    "resolve_image",
    "write_lock",
]
