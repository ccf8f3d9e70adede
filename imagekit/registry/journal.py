"""Upload journal: where an interrupted blob upload stands, so a rerun resumes it.

After every acknowledged chunk the upload's location and offset are written to a small file
keyed by (registry, repository, digest). A later process that uploads the same blob asks the
registry about that location first: if the registry still holds exactly that many bytes, the
upload continues from there (the source is re-read and re-hashed from byte 0 — the digest must
still be proven — but the first `offset` bytes are not sent again). The location holds the
registry's signed upload state, not a credential. Default directory:
`$IMAGEKIT_UPLOAD_JOURNAL` or `~/.cache/imagekit/uploads`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path

from imagekit.oci.digest import Digest


def default_dir() -> Path:
    """Where the journal lives when the caller names none (`IMAGEKIT_UPLOAD_JOURNAL` reaches
    here as `RegistryOptions.upload_journal`, from the CLI's settings)."""
    return Path.home() / ".cache" / "imagekit" / "uploads"


class UploadJournal:
    def __init__(self, folder: Path | None = None) -> None:
        self.folder = Path(folder) if folder is not None else default_dir()

    def _file(self, registry: str, repository: str, digest: Digest) -> Path:
        key = hashlib.sha256(f"{registry}|{repository}|{digest}".encode()).hexdigest()[:32]
        return self.folder / f"{key}.json"

    def get(self, registry: str, repository: str, digest: Digest) -> tuple[str, int] | None:
        try:
            data = json.loads(self._file(registry, repository, digest).read_text())
            return str(data["location"]), int(data["offset"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def put(self, registry: str, repository: str, digest: Digest, location: str,
            offset: int) -> None:
        try:
            self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            target = self._file(registry, repository, digest)
            tmp = target.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"registry": registry, "repository": repository,
                                       "digest": str(digest), "location": location,
                                       "offset": offset}))
            os.replace(tmp, target)
        except OSError:
            pass  # a journal is an optimisation; an upload never fails for want of one

    def drop(self, registry: str, repository: str, digest: Digest) -> None:
        with contextlib.suppress(OSError):
            self._file(registry, repository, digest).unlink()
