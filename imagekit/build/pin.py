"""`imagekit pin`: resolve each base (and mirror) tag of a profile to its manifest digest in its
registry and write the profile's lock. `--check` re-resolves and reports tags that moved.

Digests come from `imagekit.registry`: a HEAD resolves the tag (registries count GETs as
pulls), and a digest that is new or moved is proven by reading its manifest by digest and
hashing it; an unchanged one was proven when it was locked. For a multi-platform tag this is
the index digest; BuildKit selects linux/amd64 from it at build time.
"""

from __future__ import annotations

import datetime as dt

from pydantic import BaseModel, ConfigDict

from imagekit.errors import ImagekitError
from imagekit.oci import Digest, ImageReference
from imagekit.registry import ClientPool
from imagekit.results import CheckResult, Status
from imagekit.spec import ImagesSpec, LockEntry, LockFile, load_lock, write_lock


class PinLine(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    image: str
    role: str
    tag: ImageReference
    locked: Digest | None
    resolved: Digest | None
    error: str | None = None

    @property
    def moved(self) -> bool:
        return self.locked is not None and self.resolved is not None and \
            self.locked != self.resolved

    def check(self) -> CheckResult:
        name = f"{self.image}.{self.role}"
        if self.error:
            return CheckResult(name=name, status=Status.ERROR, detail=f"{self.tag}: {self.error}")
        if self.locked is None:
            return CheckResult(name=name, status=Status.FAIL,
                               detail=f"{self.tag} is not in the lock (now {self.resolved})")
        if self.moved:
            return CheckResult(name=name, status=Status.FAIL,
                               detail=f"{self.tag} moved: lock {self.locked}, now "
                                      f"{self.resolved}")
        return CheckResult(name=name, status=Status.PASS, detail=f"{self.tag}@{self.resolved}")


def resolve_tag(pool: ClientPool, ref: ImageReference, known: Digest | None = None) -> Digest:
    """HEAD for the tag (not counted as a pull); a digest other than the lock's is proven by
    reading its manifest by digest (hashed)."""
    return pool.get(ref.registry).resolve_tag(ref.repository, ref.tag or "latest", prove=True,
                                              known=known)


def pin(spec: ImagesSpec, profile: str | None = None, *, check: bool = False,
        pool: ClientPool | None = None) -> tuple[str, list[PinLine]]:
    """Resolve every tag; write the lock unless `check`. Returns (profile, lines)."""
    profile_name, _ = spec.profile(profile)
    # writing: refused before any registry is asked when the lock has no place of its own
    lock_path = spec.lock_path(profile_name) if check else spec.writable_lock_path(profile_name)
    lock = load_lock(lock_path, profile_name)
    own = pool is None
    pool = pool or ClientPool()
    lines: list[PinLine] = []
    try:
        for name, image in spec.images.items():
            for role, tags, locked in (("base", image.base, lock.bases),
                                       ("mirror", image.mirror, lock.mirrors)):
                tag = tags.get(profile_name)
                if tag is None:
                    continue
                entry = locked.get(name)
                previous = entry.digest if entry and entry.tag == tag and \
                    not entry.placeholder else None
                try:
                    resolved, error = resolve_tag(pool, tag, previous), None
                except ImagekitError as exc:
                    resolved, error = None, exc.one_line()
                lines.append(PinLine(image=name, role=role, tag=tag, locked=previous,
                                     resolved=resolved, error=error))
    finally:
        if own:
            pool.close()
    if not check:
        failed = [line for line in lines if line.resolved is None]
        if failed:
            return profile_name, lines
        now = dt.datetime.now(dt.UTC).replace(microsecond=0)
        bases = {line.image: LockEntry(tag=line.tag, digest=line.resolved, resolved=now)
                 for line in lines if line.role == "base"}
        mirrors = {line.image: LockEntry(tag=line.tag, digest=line.resolved, resolved=now)
                   for line in lines if line.role == "mirror"}
        write_lock(lock_path, LockFile(profile=profile_name, bases=bases, mirrors=mirrors),
                   header=f"profile {profile_name}: resolved by `imagekit pin`.")
    return profile_name, lines
