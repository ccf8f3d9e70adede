"""Turn what a person types (an image NAME of the spec, a REF, a DIGEST) into a digest.

- DIGEST (`sha256:…`): itself.
- REF pinned by digest (`repo@sha256:…`): its digest.
- REF by tag: the registry serving it is asked what the tag names *now* (the manifest read and
  hashed; infra's CA and docker config for the loopback registries). Tags move, so local
  evidence only suggests: when the registry cannot be reached, the newest promote/build result
  that names the reference is used and the resolution says it was offline, and from which
  attempt.
- NAME (no '/', ':' or '@'): what `imagekit.names` resolves it to for every command — the
  verified build of this spec and lock (so `gate NAME` judges what `promote NAME` promotes);
  the newest passing `BuildResult` of that name only where no such build exists, said so.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict

from imagekit.errors import ImagekitError, InvalidInput, NotFound, TransportError
from imagekit.evidence import EvidenceStore
from imagekit.evidence.kinds import BuildResult, PromoteEvidence
from imagekit.names import looks_like_name
from imagekit.oci.digest import Digest
from imagekit.oci.reference import ImageReference
from imagekit.report.collect import read_all
from imagekit.results import Status

if TYPE_CHECKING:
    from imagekit.registry import RegistryOptions


class Resolution(BaseModel):
    """How a NAME|REF|DIGEST became a digest; `note` is printed with tag resolutions."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    requested: str
    digest: Digest
    name: str | None = None
    how: Literal["digest", "pinned", "registry", "offline", "name"]
    note: str = ""


def resolve_name(name: str, store: EvidenceStore, *, profile: str | None = None) -> Digest:
    """The digest of the newest passing build of `name` (of `profile`, when given)."""
    best = None
    for read in read_all(store):
        result = read.result
        if not isinstance(result, BuildResult) or read.record.status is not Status.PASS:
            continue
        if result.name != name or result.digest is None:
            continue
        if profile is not None and result.profile != profile:
            continue
        if best is None or read.record.finished >= best[0]:
            best = (read.record.finished, result.digest)
    if best is None:
        raise NotFound(f"no build of {name!r} with a digest was found", where=name)
    return Digest.parse(best[1])


def _by_name(name: str, store: EvidenceStore, profile: str | None,
             spec_path: Path | None = None) -> Resolution:
    """A NAME means what `imagekit.names` says it means for every command (`promote NAME`
    promotes it, so `gate NAME` must judge that same digest): the verified build of this spec
    and lock. Only when there is none — evidence examined away from the spec that built it, or
    a lock that moved on — the newest passing build of that name in the evidence is reported,
    and the note says so."""
    from imagekit.errors import SpecError
    from imagekit.names import resolve_target

    try:
        target = resolve_target(name, store=store, profile=profile, spec_path=spec_path)
    except (InvalidInput, SpecError) as exc:
        if "not an image of the spec" in exc.message:
            raise
        digest = resolve_name(name, store, profile=profile)
        return Resolution(requested=name, digest=digest, name=name, how="name",
                          note=f"{name}: no verified build of this spec and lock "
                               f"({exc.message.split(';')[0]}); the newest passing build of "
                               f"{name!r} in {store.root} instead: {digest}")
    assert target.digest is not None
    return Resolution(requested=name, digest=target.digest, name=name, how="name",
                      note=f"{name}: the verified build of this spec and lock, "
                           f"{target.reference}")


def _from_evidence(store: EvidenceStore, texts: set[str]) -> tuple[Digest, str] | None:
    """(digest, attempt directory) of the newest promote/build result naming this reference."""
    best: tuple[Any, Digest, str] | None = None
    for read in read_all(store):
        result = read.result
        pairs: list[tuple[str, str]] = []
        if isinstance(result, PromoteEvidence):
            pairs = [(result.source, result.digest)] + [(h.endpoint, h.digest)
                                                        for h in result.hops]
        elif isinstance(result, BuildResult) and result.reference and result.digest:
            pairs = [(result.reference, result.digest)]
            if "@" in result.reference:
                pairs.append((result.reference.rpartition("@")[0], result.digest))
        for reference, digest in pairs:
            if reference in texts and (best is None or read.record.finished >= best[0]):
                best = (read.record.finished, Digest.parse(digest),
                        str(store.path_of(read.record).relative_to(store.root)))
    return (best[1], best[2]) if best else None


def _registry_options(registry: str, base: RegistryOptions | None = None,
                      state_dir: Path | None = None):
    """Trust the infra CA and read infra's docker config for infra's loopback registries; the
    registry client's defaults otherwise. `base`: the options the CLI's settings give (retry
    knobs, certs.d, journal); `state_dir`: infra's state ($IMAGEKIT_STATE_DIR)."""
    from imagekit.infra.state import registry_trust
    from imagekit.registry import RegistryOptions

    base = base or RegistryOptions()
    # one small read for a person waiting: a few quick retries, not a relay's patience
    retry = base.retry
    retry = retry.model_copy(update={"attempts": min(retry.attempts, 3),
                                     "wait_max": min(retry.wait_max, 2.0),
                                     "timeout": min(retry.timeout, 30.0)})
    options: dict[str, Any] = {"retry": retry, "timeout_s": 30.0}
    options.update(registry_trust(registry, state_dir))
    return base.model_copy(update=options)


def _from_registry(reference: ImageReference, base: RegistryOptions | None = None,
                   state_dir: Path | None = None) -> Digest:
    """The digest a registry names for the tag (a HEAD: not counted as a pull; the digest only
    picks evidence, which is keyed by what was proven when it was recorded)."""
    from imagekit.names import digest_of
    from imagekit.registry import RegistryClient

    # stamina logs each scheduled retry as a warning; a one-line error is this command's answer
    quiet = logging.getLogger("stamina")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        with RegistryClient(reference.registry,
                            _registry_options(reference.registry, base, state_dir)) as client:
            return digest_of(client, reference)
    finally:
        quiet.setLevel(level)


def resolve(text: str, store: EvidenceStore, *, profile: str | None = None,
            options: RegistryOptions | None = None, state_dir: Path | None = None,
            spec_path: Path | None = None) -> Resolution:
    """NAME, REF or DIGEST -> the digest evidence is keyed by. `options`/`state_dir`: what the
    CLI's settings say about registries and infra (a tag is resolved at its registry);
    `spec_path`: the images spec a NAME is looked up in (`--spec`/$IMAGEKIT_IMAGES_SPEC, else
    the default one)."""
    text = text.strip()
    if not text:
        raise InvalidInput("give an image NAME, REF or DIGEST")
    if text.startswith(("sha256:", "sha512:")):
        return Resolution(requested=text, digest=Digest.parse(text), how="digest")
    if looks_like_name(text):
        return _by_name(text, store, profile, spec_path)
    reference = ImageReference.parse(text)
    if reference.digest is not None:
        return Resolution(requested=text, digest=reference.digest, how="pinned")
    try:
        digest = _from_registry(reference, options, state_dir)
    except TransportError as exc:         # unreachable: evidence may suggest, and says so
        found = _from_evidence(store, {text, str(reference)})
        if found is None:
            raise NotFound(f"{text}: the registry cannot be reached ({exc.one_line()}) and no "
                           "evidence names this reference", where=text) from None
        digest, where = found
        return Resolution(requested=text, digest=digest, how="offline",
                          note=f"resolved OFFLINE: {reference.registry} unreachable "
                               f"({exc.one_line()[:200]}); {text} → {digest} from evidence "
                               f"{where} (the tag may have moved since)")
    except ImagekitError as exc:
        raise NotFound(f"{text}: the registry lookup failed: {exc.one_line()}",
                       where=text) from None
    return Resolution(requested=text, digest=digest, how="registry",
                      note=f"{text} → {digest} at the registry now")
