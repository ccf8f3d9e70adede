"""Awaited hops: endpoints that replicate by themselves (a pull-through cache, a sync job).

The record, section 5: "checked the production sync and target cloud copy each for their final
state; queued only represents submission success". Those hops were copied by the relays
themselves, so imagekit copies nothing there: it polls the endpoint until it SERVES the digest —
the manifest by digest read and hashed, the tag (if any) resolving to it, every blob (and every
child manifest of an index) present — with exponential backoff and a deadline, and keeps every
poll's state as evidence:

- `absent`: the manifest is not there (yet);
- `manifest-only`: the manifest is there, none of its blobs;
- `blobs-partial`: the manifest and some blobs;
- `tag-pending`: manifest and blobs there, the tag does not resolve yet;
- `unreachable`: the endpoint did not answer (counts as not yet);
- `tag-names-another-digest`: the tag resolves to a different image: FAIL at once — a relay
  that replicated something else will not heal by waiting;
- `served`: done.

A deadline passed without `served` is FAIL, with the poll history.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from imagekit.errors import CheckFailed, DigestMismatch, NotFound, TransportError
from imagekit.oci import ImageIndex, ImageManifest, ImageReference
from imagekit.oci.digest import Digest
from imagekit.oci.manifest import parse_manifest
from imagekit.registry import ManifestBlob, RegistryClient
from imagekit.registry.retry import wall_clock

DEFAULT_DEADLINE_S = 900.0
DEFAULT_INTERVAL_S = 1.0
MAX_INTERVAL_S = 30.0


class PollState(StrEnum):
    ABSENT = "absent"
    MANIFEST_ONLY = "manifest-only"
    BLOBS_PARTIAL = "blobs-partial"
    TAG_PENDING = "tag-pending"
    UNREACHABLE = "unreachable"
    OTHER_DIGEST = "tag-names-another-digest"
    SERVED = "served"


class PollRecord(BaseModel):
    """One look at an awaited endpoint."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    at_s: float = Field(description="seconds since awaiting this hop began")
    state: PollState
    detail: str
    blobs_present: int | None = None
    blobs_total: int | None = None
    tag_digest: str | None = None


class AwaitPolicy(BaseModel):
    """How long and how often: first wait `interval_s`, doubling up to `max_interval_s`, never
    past `deadline_s` (counted from the first poll)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    deadline_s: float = Field(DEFAULT_DEADLINE_S, gt=0)
    interval_s: float = Field(DEFAULT_INTERVAL_S, gt=0)
    max_interval_s: float = Field(MAX_INTERVAL_S, gt=0)


@dataclass(frozen=True)
class AwaitHop:
    """A hop imagekit does not copy to: `promote(..., via=[..., AwaitHop(ref)])`."""

    reference: ImageReference

    def __str__(self) -> str:
        return str(self.reference)


class AwaitFailed(CheckFailed):
    """The awaited endpoint did not come to serve the digest (exit 1); `polls` is the history."""

    def __init__(self, message: str, *, where: str | None = None,
                 polls: list[PollRecord] | None = None, endpoint: str = "") -> None:
        super().__init__(message, where=where)
        self.polls = list(polls or [])
        self.endpoint = endpoint


@dataclass(frozen=True)
class Expected:
    """What the endpoint must hold: child manifests (of an index) and blobs, from the source."""

    manifests: tuple[Digest, ...]
    blobs: tuple[Digest, ...]


def expected_tree(client: RegistryClient, repository: str, root: ManifestBlob) -> Expected:
    """Child manifests and blobs of `root`, read from the hop before (verified reads)."""
    manifests: list[Digest] = []
    blobs: list[Digest] = []

    def walk(blob: ManifestBlob) -> None:
        parsed = parse_manifest(blob.data, blob.media_type)
        if isinstance(parsed, ImageIndex):
            for entry in parsed.manifests:
                manifests.append(entry.digest)
                walk(client.get_manifest(repository, entry.digest))
        else:
            assert isinstance(parsed, ImageManifest)
            blobs.extend(d.digest for d in parsed.blobs())

    walk(root)
    return Expected(tuple(dict.fromkeys(manifests)), tuple(dict.fromkeys(blobs)))


def poll_once(client: RegistryClient, target: ImageReference, root: ManifestBlob,
              expected: Expected, pool: ThreadPoolExecutor, at_s: float) -> PollRecord:
    """One look: tag first (HEAD; a different digest is confirmed by a hashed GET), then the
    manifest by digest (HEAD, then GET and hashed when present), then every child and blob."""
    repo, digest, tag = target.repository, root.digest, target.tag
    try:
        tag_digest = client.manifest_exists(repo, tag) if tag else None
        if tag and tag_digest is not None and tag_digest != digest:
            confirmed = client.get_manifest(repo, tag).digest  # hashed, not a header's word
            if confirmed != digest:
                return PollRecord(at_s=at_s, state=PollState.OTHER_DIGEST,
                                  detail=f"tag {tag} resolves to {confirmed}, not {digest}",
                                  tag_digest=str(confirmed))
            tag_digest = confirmed
        if client.manifest_exists(repo, digest) is None:
            return PollRecord(at_s=at_s, state=PollState.ABSENT,
                              detail=f"manifest {digest.short} not served",
                              tag_digest=str(tag_digest) if tag_digest else None)
        try:
            if client.get_manifest(repo, digest).digest != digest:
                raise DigestMismatch("endpoint serves different bytes", where=str(target))
        except NotFound:
            return PollRecord(at_s=at_s, state=PollState.ABSENT,
                              detail=f"manifest {digest.short} vanished between HEAD and GET")
        children = list(pool.map(lambda d: client.manifest_exists(repo, d) is not None,
                                 expected.manifests))
        present = list(pool.map(lambda d: client.blob_exists(repo, d), expected.blobs))
    except TransportError as exc:
        return PollRecord(at_s=at_s, state=PollState.UNREACHABLE, detail=exc.one_line()[:300])
    have, total = sum(present), len(present)
    if not all(children) or have < total:
        state = PollState.MANIFEST_ONLY if have == 0 else PollState.BLOBS_PARTIAL
        missing_children = len(children) - sum(children)
        detail = f"manifest served, {have}/{total} blobs present" + (
            f", {missing_children} child manifest(s) missing" if missing_children else "")
        return PollRecord(at_s=at_s, state=state, detail=detail, blobs_present=have,
                          blobs_total=total, tag_digest=str(tag_digest) if tag_digest else None)
    if tag and tag_digest is None:
        return PollRecord(at_s=at_s, state=PollState.TAG_PENDING,
                          detail=f"manifest and {total} blobs served, tag {tag} not yet",
                          blobs_present=have, blobs_total=total)
    if tag:  # the tag's answer, hashed, must be the digest itself
        by_tag = client.get_manifest(repo, tag).digest
        if by_tag != digest:
            return PollRecord(at_s=at_s, state=PollState.OTHER_DIGEST,
                              detail=f"tag {tag} resolves to {by_tag}, not {digest}",
                              tag_digest=str(by_tag))
    notes = [f"manifest {digest.short} served"]
    if tag:
        notes.append(f"tag {tag} -> {digest.short}")
    notes.append(f"{total} blobs present")
    return PollRecord(at_s=at_s, state=PollState.SERVED, detail="; ".join(notes),
                      blobs_present=have, blobs_total=total,
                      tag_digest=str(digest) if tag else None)


def await_served(client: RegistryClient, target: ImageReference, root: ManifestBlob,
                 expected: Expected, policy: AwaitPolicy | None = None, *,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep,
                 on_poll: Callable[[PollRecord], None] | None = None) -> list[PollRecord]:
    """Poll until served; returns the history (last one `served`). Raises AwaitFailed on a tag
    naming another digest (at once) or at the deadline."""
    policy = policy or AwaitPolicy()
    started = clock()
    polls: list[PollRecord] = []
    wait = policy.interval_s
    # the deadline is a hard wall clock: no poll's requests, retries or waits run past it
    # (a registry answering 500, or never answering, ends the hop at the deadline)
    with wall_clock(policy.deadline_s), \
            ThreadPoolExecutor(max_workers=4, thread_name_prefix="await") as pool:
        while True:
            record = poll_once(client, target, root, expected, pool,
                               round(clock() - started, 3))
            polls.append(record)
            if on_poll is not None:
                on_poll(record)
            if record.state is PollState.SERVED:
                return polls
            if record.state is PollState.OTHER_DIGEST:
                raise AwaitFailed(f"awaited hop: {record.detail} (a relay that replicated "
                                  "another image does not heal by waiting)", where=str(target),
                                  polls=polls, endpoint=str(target))
            left = policy.deadline_s - (clock() - started)
            if left <= 0:
                raise AwaitFailed(f"awaited hop not served within {policy.deadline_s:g} s "
                                  f"({len(polls)} polls, last: {record.state.value}: "
                                  f"{record.detail})", where=str(target), polls=polls,
                                  endpoint=str(target))
            sleep(min(wait, left))
            wait = min(policy.max_interval_s, wait * 2)


def summary(polls: list[PollRecord]) -> str:
    """`absent x3 -> blobs-partial -> served`: the history in one line."""
    parts: list[str] = []
    for poll in polls:
        if parts and parts[-1].split(" x")[0] == poll.state.value:
            name, _, count = parts[-1].partition(" x")
            parts[-1] = f"{name} x{int(count or 1) + 1}"
        else:
            parts.append(poll.state.value)
    return " -> ".join(parts)
