"""`imagekit init [DIR]`: the packaged spec and every file it names, copied into a folder of
one's own, where `pin` writes its locks and the user edits the spec.

The packaged spec cannot be used in place for writing (its lock would go into site-packages,
`ImagesSpec.writable_lock_path`), so a new user starts from a copy, as `gh` or `cosign
initialize` start from their own defaults. What is copied is read from the spec itself: the spec,
each image's build context (its Dockerfile's folder), the stand-in Dockerfiles when a profile
builds on stand-ins, and each profile's lock when it pins nothing real (placeholders only): a
lock holding the digests one machine resolved stays on that machine.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from imagekit import packaged
from imagekit.errors import InvalidInput
from imagekit.spec.loader import load_spec
from imagekit.spec.lock import load_lock
from imagekit.spec.models import STANDINS_FOLDER

SPEC_NAME = "images.toml"


class StarterResult(BaseModel):
    """What `imagekit init` wrote, and what the spec it wrote starts with."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    directory: Path
    spec: Path
    written: list[Path]
    default_profile: str
    #: the default profile builds on stand-in bases (`imagekit standins build` makes them)
    standins: bool


def starter_files(source: Path | None = None) -> dict[str, Path]:
    """Each file of the starting spec: its name relative to the spec's folder -> the shipped
    file. `source`: the spec to copy (default the packaged one)."""
    source = source or packaged.path("dockerfiles", SPEC_NAME)
    spec = load_spec(source)
    root = spec.root
    folders = {spec.dockerfile_path(name).parent for name in spec.images}
    if any(profile.standins for profile in spec.profiles.values()):
        folders.add(root / STANDINS_FOLDER)
    files = {SPEC_NAME: source}
    for folder in sorted(folders):
        for path in sorted(folder.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                files[path.relative_to(root).as_posix()] = path
    for name in sorted(spec.profiles):
        lock = spec.lock_path(name)
        if lock.is_file():
            entries = [*(pinned := load_lock(lock, name)).bases.values(),
                       *pinned.mirrors.values()]
            if entries and all(entry.placeholder for entry in entries):
                files[lock.relative_to(root).as_posix()] = lock
    return files


def write_starter(directory: Path, *, force: bool = False,
                  source: Path | None = None) -> StarterResult:
    """Copy the starting spec into `directory` (made when missing). Every target is checked
    before anything is written: an existing file is refused (one line naming them) unless
    `force` (--overwrite); a folder or a symlink in a file's place is refused always."""
    directory = directory.absolute()
    files = starter_files(source)
    if directory.exists() and not directory.is_dir():
        raise InvalidInput("not a folder", where=str(directory))
    existing: list[str] = []
    for name in files:
        target = directory / name
        if target.is_symlink() or (target.exists() and not target.is_file()):
            raise InvalidInput("something other than a file is in the way (a folder or a "
                               "symlink); move it", where=str(target))
        if target.exists():
            existing.append(name)
    if existing and not force:
        more = f" and {len(existing) - 1} more" if len(existing) > 1 else ""
        raise InvalidInput(f"{existing[0]}{more} exist already; nothing was written (use "
                           "--overwrite to replace them)", where=str(directory))
    written: list[Path] = []
    for name, shipped in files.items():
        target = directory / name
        target.parent.mkdir(parents=True, exist_ok=True)
        data = shipped.read_bytes()
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        tmp.write_bytes(data)
        tmp.chmod(0o644)   # the wheel's files may be read-only; the copy is the user's to edit
        os.replace(tmp, target)
        written.append(target)
    spec = load_spec(directory / SPEC_NAME)   # the copy loads: every file it names is there
    profile_name, profile = spec.profile(None)
    return StarterResult(directory=directory, spec=directory / SPEC_NAME, written=written,
                         default_profile=profile_name, standins=profile.standins)
