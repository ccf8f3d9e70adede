"""The lock: base (and mirror) tags of one profile resolved to digests by `imagekit pin`.

One TOML file per profile (named by the profile's `lock`). Builds read only digests from here;
a tag in the spec with no lock entry is an error, never a silent pull of whatever the tag is now.
An entry may be marked `placeholder = true` (a digest nobody could resolve from this machine):
builds refuse it with a one-line error rather than pretend it was pinned.
"""

from __future__ import annotations

import datetime as dt
import os
import tomllib
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from imagekit.errors import InvalidInput, SpecError
from imagekit.inputs import read_text
from imagekit.oci import Digest, ImageReference


class LockEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    tag: ImageReference
    digest: Digest
    resolved: dt.datetime | None = None
    placeholder: bool = False
    #: the spec's tag this entry stands for when `standins build --layers N` padded the stand-in
    #: and pushed it under a tag of its own (`…-layers63`): the spec is unchanged, the lock says
    #: which image serves as that base
    padded_from: ImageReference | None = None

    def stands_for(self, tag: ImageReference) -> bool:
        return self.tag == tag or self.padded_from == tag


class LockFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    version: int = 1
    profile: str
    bases: dict[str, LockEntry] = {}
    mirrors: dict[str, LockEntry] = {}


def load_lock(path: Path, profile: str) -> LockFile:
    """The lock of `profile`; an absent file is an empty lock (every base then fails to pin)."""
    if not path.exists():
        return LockFile(profile=profile)
    try:
        text = read_text(path, "lock file")
    except InvalidInput as exc:
        raise SpecError(exc.message, where=exc.where) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"lock file is not valid TOML: {exc}", where=str(path)) from None
    try:
        lock = LockFile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise SpecError(f"bad lock file: {loc}: {first['msg']}", where=str(path)) from None
    if lock.profile != profile:
        raise SpecError(f"lock file is for profile {lock.profile!r}, not {profile!r}",
                        where=str(path))
    return lock


def _q(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_lock(lock: LockFile, header: str = "") -> str:
    lines = ["# imagekit images lock: written by `imagekit pin`; builds use only these digests."]
    lines += [f"# {line}" if line else "#" for line in header.splitlines()]
    lines += [f"version = {lock.version}", f"profile = {_q(lock.profile)}", ""]
    for table, entries in (("bases", lock.bases), ("mirrors", lock.mirrors)):
        for name in sorted(entries):
            entry = entries[name]
            lines.append(f"[{table}.{name}]")
            lines.append(f"tag = {_q(str(entry.tag))}")
            lines.append(f"digest = {_q(str(entry.digest))}")
            if entry.resolved is not None:
                lines.append(f"resolved = {entry.resolved.isoformat()}")
            if entry.placeholder:
                lines.append("placeholder = true")
            if entry.padded_from is not None:
                lines.append(f"padded_from = {_q(str(entry.padded_from))}")
            lines.append("")
    return "\n".join(lines)


def write_lock(path: Path, lock: LockFile, header: str = "") -> None:
    """Atomic replace: a reader never sees half a lock."""
    text = render_lock(lock, header)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
