"""Promote a digest hop by hop (staging -> production -> target), each hop proven.

The record: "cross-repository copying first confirmed the staging image, then checked the
production sync and target cloud copy each for their final state; queued only represents
submission success". So a hop is done only when its endpoint *serves* the digest: after the
copy the manifest is read back from that endpoint (hashed), the tag (if any) must resolve to the
same digest, and every blob must be present.

Each hop reads from the previous hop (a relay), skips blobs the hop already has (HEAD), mounts
across repositories inside one registry, uploads the rest in chunks (resuming, see
`RegistryClient.upload_blob`), pushes child manifests before their index, and carries cosign
style `sha256-<hex>.sig|.att|.sbom` tags and OCI referrers when the source has them
(`imagekit.registry.referrers`: the API or the tag schema, merged into the destination's list,
and read back with the image).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from threading import BoundedSemaphore, Event, Lock

from pydantic import BaseModel, ConfigDict

from imagekit.errors import CheckFailed, DigestMismatch, InvalidInput, NotFound, RegistryBehaviour
from imagekit.oci import ImageIndex, ImageManifest, ImageReference, Platform
from imagekit.oci.descriptor import Descriptor
from imagekit.oci.digest import Digest
from imagekit.oci.manifest import parse_config, parse_manifest
from imagekit.oci.referrers import RegistryDocumentError
from imagekit.oci.referrers import parse_manifest as parse_referrer_manifest
from imagekit.promote.await_ import (
    AwaitHop,
    AwaitPolicy,
    PollRecord,
    PollState,
    await_served,
    expected_tree,
)
from imagekit.promote.await_ import summary as poll_summary
from imagekit.registry import ClientPool, ManifestBlob, RegistryClient
from imagekit.registry.interrupt import check as check_interrupt
from imagekit.registry.memory import tune_malloc
from imagekit.registry.progress import NullProgress, ProgressSink, human_bytes, phase
from imagekit.registry.referrers import SMALL_BLOB, list_referrers, push_small_blob
from imagekit.registry.referrers import attach as attach_referrer

#: Tags cosign and friends hang off an image digest (`sha256-<hex>.sig` …). The bare
#: `sha256-<hex>` tag is the referrers tag schema: carried entry by entry, not copied whole.
COMPANION_SUFFIXES = (".sig", ".att", ".sbom")


class BlobMove(BaseModel):
    """What happened to one blob at one hop: the bytes a person waits for, per blob."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    digest: str
    size: int
    #: "copied" (uploaded), "skipped" (the endpoint had it) or "mounted" (from a repository
    #: of the same registry: 0 bytes)
    action: str
    bytes_moved: int = 0
    seconds: float = 0.0


class HopRecord(BaseModel):
    """One hop's outcome: what `--json` prints under `hops` and the evidence keeps."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    endpoint: str
    registry: str
    digest: str
    verified: bool
    bytes_moved: int
    blobs_copied: int
    blobs_skipped: int
    blobs_mounted: int
    manifests_pushed: int
    companions: list[str] = []
    referrers: list[str] = []
    seconds: float
    read_back: str
    #: "copy": imagekit copied this hop; "await": the endpoint replicates by itself and was
    #: polled until it served the digest (`polls` is that history, see promote/await_.py)
    mode: str = "copy"
    polls: list[PollRecord] = []
    #: Upload resumes and restarts (e.g. "the registry refused to resume … sent from byte 0").
    notes: list[str] = []
    #: Each blob of the hop: copied, skipped or mounted, with its bytes and seconds.
    blobs: list[BlobMove] = []
    #: Every blob of the promoted tree, in bytes: `bytes_moved` beside it is what was sent
    #: (resends included), what skips and mounts saved.
    image_bytes: int = 0
    #: The upload shape used at this endpoint and what the registry taught (registry/shape.py).
    upload_shape: str = ""
    #: Blobs whose mount the registry did not do (202, 401, a 201 without the blob): uploaded.
    mount_fallbacks: list[str] = []


class BlobNotServed(NotFound):
    """A blob the endpoint acknowledged (its commit answered 201) and then does not serve: the
    per-blob read-back's finding, which stops the hop before a manifest refers to it."""


class HopNotVerified(CheckFailed):
    """A hop's read-back found the endpoint not serving what was sent (exit 1): `hop` is its
    record, `verified` False and `read_back` the reason, kept in the evidence like any hop."""

    def __init__(self, hop: HopRecord) -> None:
        super().__init__(f"hop not verified: {hop.read_back}", where=hop.endpoint)
        self.hop = hop


@dataclass(frozen=True)
class ReadBack:
    """What a hop's read-back observed: the endpoint serves the digest as sent (`verified`), or
    not, and in words either way. A registry that answers wrong (other bytes, a tag naming
    another digest, a blob or referrer missing) is an outcome; one that cannot be asked (the
    connection, the credentials) stays an error."""

    verified: bool
    detail: str

    def __add__(self, other: ReadBack) -> ReadBack:
        return ReadBack(self.verified and other.verified, f"{self.detail}; {other.detail}")


class PromoteResult(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str
    digest: str
    media_type: str
    #: True when every platform of an index was copied (the default for an index), False
    #: for one platform of it or a single-platform image: what was done, not what was asked
    all_platforms: bool
    platform: str | None
    #: "index" (N platforms), "platform OS/ARCH" or "manifest"
    copied: str = ""
    #: the platforms the promoted digest carries
    platforms: list[str] = []
    hops: list[HopRecord]
    gate: dict | None = None
    source_digest: str | None = None
    digest_changed: str | None = None


@dataclass
class _Location:
    client: RegistryClient
    reference: ImageReference

    @property
    def repository(self) -> str:
        return self.reference.repository


@dataclass
class _Stats:
    bytes_moved: int = 0
    copied: int = 0
    skipped: int = 0
    mounted: int = 0
    manifests: int = 0
    companions: list[str] = field(default_factory=list)
    referrers: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    blobs: list[BlobMove] = field(default_factory=list)
    #: blobs this hop saw served at the endpoint as they landed (a HEAD after the commit, or
    #: the HEAD that found them present): the read-back does not ask again
    served: set[Digest] = field(default_factory=set)
    mount_fallbacks: list[str] = field(default_factory=list)
    #: every blob of the tree and its size, as the read-back walked it
    sizes: dict[Digest, int] = field(default_factory=dict)
    #: the read-back HEAD of each committed blob, run off the upload worker (a worker free a
    #: round trip sooner for the next blob); all are awaited before the manifest is pushed
    checker: ThreadPoolExecutor | None = None
    checks: list[tuple[Digest, Future[bool]]] = field(default_factory=list)
    lock: Lock = field(default_factory=Lock)

    def check(self, digest: Digest, head: Callable[[], bool]) -> bool | None:
        """`head()` now (its answer) or, with a checker, later (None: see `await_checks`)."""
        if self.checker is None:
            return head()
        future = self.checker.submit(head)
        with self.lock:
            self.checks.append((digest, future))
        return None

    def await_checks(self, where: str) -> None:
        """Every committed blob's read-back, done: a blob the endpoint does not serve fails
        the hop naming it, before any manifest refers to it."""
        with self.lock:
            checks, self.checks = self.checks, []
        for digest, future in checks:
            if not future.result():
                raise BlobNotServed(f"blob {digest} was committed but the endpoint does not "
                                    "serve it", where=where)
            self.saw_served(digest)

    def saw_served(self, digest: Digest) -> None:
        with self.lock:
            self.served.add(digest)

    def blob(self, move: BlobMove) -> None:
        with self.lock:
            self.blobs.append(move)

    def note(self, text: str) -> None:
        with self.lock:
            self.notes.append(text)

    def add(self, **counts: int) -> None:
        with self.lock:
            for name, value in counts.items():
                setattr(self, name, getattr(self, name) + value)


def resolve_source(client: RegistryClient, source: ImageReference, all_platforms: bool,
                   platform: Platform | None) -> tuple[ManifestBlob, Platform | None]:
    """The manifest to promote: by default (no platform asked for) what the source names —
    an index stays the whole index, as crane and regctl copy it, so the digest a tag names is
    the digest promoted; with `platform` (and not `all_platforms`) that platform's manifest."""
    top = client.get_manifest(source.repository, source.digest or source.identifier)
    parsed = parse_manifest(top.data, top.media_type)
    if isinstance(parsed, ImageIndex) and not all_platforms and platform is not None:
        entry = parsed.select(platform)
        return client.get_manifest(source.repository, entry.digest), entry.platform
    if isinstance(parsed, ImageManifest) and platform is not None:
        # a single-platform image: --only-platform must name the platform it is, never silently
        # promote another one
        config = parse_config(client.get_blob_bytes(source.repository, parsed.config.digest,
                                                    parsed.config.size))
        have = Platform(os=config.os or "", architecture=config.architecture or "",
                        variant=config.variant)
        if not have.satisfies(platform):
            raise InvalidInput(f"--only-platform {platform}: the source is a single-platform "
                               f"{have} image, not an index", where=str(source))
    return top, None


def digest_note(source_digest: Digest, promoted: Digest, chosen: Platform | None) -> str | None:
    """Why the promoted digest is not the one the source reference names (None: it is)."""
    if promoted == source_digest:
        return None
    return (f"the source names index {source_digest}; --only-platform {chosen} promoted that "
            f"platform's manifest {promoted}, so the digest changed: the tag at each "
            "endpoint names the single-platform manifest, not the source's index")


def largest_first(blobs: list[Descriptor]) -> list[Descriptor]:
    """Each digest once, the largest first: with a few workers the big layers start at once
    and the small ones fill in around them, so no worker ends alone on a 150 MB layer that was
    queued late (longest-processing-time-first). Ties keep the manifest's order."""
    unique = list({d.digest: d for d in blobs}.values())
    return sorted(unique, key=lambda d: -d.size)


#: Blobs copied at once. On loopback (2 cores) 8 workers were no faster than 4, CPU the same;
#: on a link whose rate is per connection (bench/bench_link.py: 20 MB/s, 30 ms a request) the
#: blobs in flight set the pace: the 63-layer record image took 19.4 s with 4 (crane's
#: `--jobs` default), where skopeo's 6 took 15.8 s.
JOBS = 8


class SharedBlobs:
    """The blobs of one release, shared by the promotions of its images.

    Two images of a release often share layers (one base). Without this, both promotions see
    a shared blob absent at the same moment and both upload it. Here a (registry, digest) is
    moved by one promotion at a time; another that needs it waits, then finds it present (the
    same repository) or mounts it from the repository it landed in (`POST ...?mount=&from=`,
    0 bytes): one upload per registry where the registry mounts, one per repository where it
    does not. `uploads` bounds the uploads of the whole release."""

    def __init__(self, uploads: int = JOBS) -> None:
        self._lock = Lock()
        self._moving: dict[tuple[str, Digest], Event] = {}
        self._landed: dict[tuple[str, Digest], str] = {}
        self.uploads = BoundedSemaphore(uploads)

    def claim(self, registry: str, digest: Digest) -> Event | None:
        """None: the caller moves the blob (and calls `release`); else the Event another
        promotion sets when its move of the same blob ended (then claim again)."""
        with self._lock:
            key = (registry, digest)
            if key in self._moving:
                return self._moving[key]
            self._moving[key] = Event()
            return None

    def release(self, registry: str, repository: str, digest: Digest, landed: bool) -> None:
        with self._lock:
            if landed:
                self._landed.setdefault((registry, digest), repository)
            event = self._moving.pop((registry, digest), None)
        if event is not None:
            event.set()

    def mount_from(self, registry: str, repository: str, digest: Digest) -> str | None:
        """Another repository of `registry` this release already put `digest` in."""
        with self._lock:
            found = self._landed.get((registry, digest))
        return found if found != repository else None


class Promoter:
    """Copies one manifest tree from one location to the next; thread pool for blobs."""

    def __init__(self, progress: ProgressSink | None = None, workers: int | None = None,
                 shared: SharedBlobs | None = None) -> None:
        self.progress = progress or NullProgress()
        self.workers = workers or JOBS
        self.shared = shared

    # -- the tree ------------------------------------------------------------------------------
    def _children(self, src: _Location, blob: ManifestBlob
                  ) -> tuple[list[ManifestBlob], list[Descriptor]]:
        parsed = parse_manifest(blob.data, blob.media_type)
        if isinstance(parsed, ImageIndex):
            manifests = [src.client.get_manifest(src.repository, entry.digest)
                         for entry in parsed.manifests]
            return manifests, []
        assert isinstance(parsed, ImageManifest)
        return [], parsed.blobs()

    def _served(self, dst: _Location, digest: Digest) -> bool:
        """True when `dst` already serves `digest` (HEAD, then the bytes re-hashed)."""
        if dst.client.manifest_exists(dst.repository, digest) is None:
            return False
        try:
            return dst.client.get_manifest(dst.repository, digest).digest == digest
        except NotFound:
            return False

    def _copy_tree(self, src: _Location, dst: _Location, blob: ManifestBlob,
                   stats: _Stats, pool: ThreadPoolExecutor, *, checked: bool = False,
                   reference: str | None = None) -> None:
        """Children first (blobs, then child manifests), the manifest itself last — pushed
        under `reference` (a tag) when given, else by digest."""
        if not checked and self._served(dst, blob.digest):
            return  # a registry only accepts a manifest whose blobs/children it holds
        children, blobs = self._children(src, blob)
        for child in children:
            self._copy_tree(src, dst, child, stats, pool)
        for future in [pool.submit(self._copy_blob, src, dst, d, stats)
                       for d in largest_first(blobs)]:
            future.result()
        stats.await_checks(str(dst.reference))
        dst.client.put_manifest(dst.repository, reference or blob.digest, blob)
        stats.add(manifests=1)

    def _copy_blob(self, src: _Location, dst: _Location, descriptor: Descriptor,
                   stats: _Stats) -> None:
        shared = self.shared
        if shared is None:
            self._move_blob(src, dst, descriptor, stats)
            return
        registry, digest = dst.client.registry, descriptor.digest
        while (other := shared.claim(registry, digest)) is not None:
            while not other.wait(0.2):  # another image of the release moves it
                check_interrupt(str(dst.reference))
        landed = False
        try:
            self._move_blob(src, dst, descriptor, stats)
            landed = True
        finally:
            shared.release(registry, dst.repository, digest, landed)

    def _move_blob(self, src: _Location, dst: _Location, descriptor: Descriptor,
                   stats: _Stats) -> None:
        digest = descriptor.digest
        started = time.perf_counter()
        if dst.client.blob_exists(dst.repository, digest):
            stats.add(skipped=1)
            stats.saw_served(digest)
            stats.blob(BlobMove(digest=str(digest), size=descriptor.size, action="skipped"))
            phase(self.progress, f"{dst.client.registry} {digest.short}: present, skipped")
            return
        mount = src.repository if src.client is dst.client and \
            src.repository != dst.repository else None
        if mount is None and self.shared is not None:
            mount = self.shared.mount_from(dst.client.registry, dst.repository, digest)
        def fell_back(text: str) -> None:
            stats.note(text)
            with stats.lock:
                stats.mount_fallbacks.append(str(digest))

        outcome = None if mount is None else \
            dst.client.mount_blob(dst.repository, digest, mount, on_note=fell_back)
        session = outcome.session if outcome is not None else None
        if outcome is not None and outcome.mounted:
            stats.add(mounted=1)
            stats.saw_served(digest)  # mount_blob read it back (HEAD) before saying mounted
            stats.blob(BlobMove(digest=str(digest), size=descriptor.size, action="mounted",
                                seconds=round(time.perf_counter() - started, 4)))
            phase(self.progress, f"{dst.client.registry} {digest.short}: mounted from "
                                 f"{mount} (0 bytes)")
            return
        if self.shared is not None:
            with self.shared.uploads:
                self._upload(src, dst, descriptor, stats, started, session)
        else:
            self._upload(src, dst, descriptor, stats, started, session)

    def _upload(self, src: _Location, dst: _Location, descriptor: Descriptor, stats: _Stats,
                started: float, session: str | None = None) -> None:
        digest = descriptor.digest
        task = self.progress.add(f"{dst.client.registry} {digest.short}", descriptor.size)

        def source():
            return src.client.blob_chunks(src.repository, digest, descriptor.size)

        try:
            sent = dst.client.upload_blob(
                dst.repository, digest, source,
                on_bytes=lambda n: self.progress.advance(task, n), size=descriptor.size,
                on_note=stats.note, session=session)
        finally:
            self.progress.finish(task)
        # this blob's read-back, while the other blobs still move and off this worker (crane
        # reads nothing back; here it costs no wall time at the end of the hop)
        served = stats.check(digest, lambda: dst.client.blob_exists(dst.repository, digest))
        if served is False:
            raise BlobNotServed(f"blob {digest} was committed but the endpoint does not serve "
                                "it", where=str(dst.reference))
        if served:
            stats.saw_served(digest)
        stats.add(copied=1, bytes_moved=sent)
        stats.blob(BlobMove(digest=str(digest), size=descriptor.size, action="copied",
                            bytes_moved=sent, seconds=round(time.perf_counter() - started, 4)))

    # -- companions ----------------------------------------------------------------------------
    def _companions(self, src: _Location, dst: _Location, digest: Digest, stats: _Stats,
                    pool: ThreadPoolExecutor,
                    referrers: list[tuple[Digest, ManifestBlob]] | None = None) -> None:
        """cosign-style tags and OCI referrers of `digest`, copied when the source has them."""
        wanted = {f"{digest.algorithm}-{digest.hex}{suffix}" for suffix in COMPANION_SUFFIXES}
        for tag in sorted(wanted.intersection(src.client.list_tags(src.repository))):
            blob = src.client.get_manifest(src.repository, tag)
            self._copy_tree(src, dst, blob, stats, pool)
            dst.client.put_manifest(dst.repository, tag, blob)
            stats.companions.append(tag)
        if referrers is None:
            referrers = self._source_referrers(src, digest)
        self._referrers(src, dst, referrers, stats, pool)

    def _source_referrers(self, src: _Location, digest: Digest
                          ) -> list[tuple[Digest, ManifestBlob]]:
        """The source's referrers of `digest`, every listing and manifest parsed (bounded and
        strict, `imagekit.oci.referrers`) BEFORE anything is copied: a hostile listing stops
        the hop with nothing pushed."""
        found = []
        for entry in list_referrers(src.client, src.repository, digest):
            referrer = Digest.parse(entry["digest"])
            blob = src.client.get_manifest(src.repository, referrer)
            where = f"{src.client.registry}/{src.repository}@{referrer}"
            parse_referrer_manifest(blob.data, where)  # the registry's word: bounded
            try:
                parse_manifest(blob.data, blob.media_type)
            except (ValueError, InvalidInput) as exc:
                raise RegistryDocumentError(f"referrer manifest is not an OCI manifest: "
                                            f"{' '.join(str(exc).split())[:160]}",
                                            where=where) from None
            found.append((referrer, blob))
        return found

    def _referrers(self, src: _Location, dst: _Location,
                   referrers: list[tuple[Digest, ManifestBlob]], stats: _Stats,
                   pool: ThreadPoolExecutor) -> None:
        """Each referrer's blobs, then its manifest attached at `dst` (API or tag schema)."""
        for referrer, blob in referrers:
            children, blobs = self._children(src, blob)
            for child in children:
                self._copy_tree(src, dst, child, stats, pool)
            unique = list({d.digest: d for d in blobs}.values())
            for future in [pool.submit(self._copy_referrer_blob, src, dst, d, stats)
                           for d in unique]:
                future.result()
            stats.await_checks(str(dst.reference))
            attach_referrer(dst.client, dst.repository, blob)
            stats.add(manifests=1)
            stats.referrers.append(str(referrer))

    def _copy_referrer_blob(self, src: _Location, dst: _Location, descriptor: Descriptor,
                            stats: _Stats) -> None:
        """Attestation blobs are small: read whole (verified), pushed in one PUT."""
        if descriptor.size > SMALL_BLOB:
            self._copy_blob(src, dst, descriptor, stats)
            return
        if dst.client.blob_exists(dst.repository, descriptor.digest):
            stats.add(skipped=1)
            return
        data = src.client.get_blob_bytes(src.repository, descriptor.digest, descriptor.size)
        push_small_blob(dst.client, dst.repository, data)
        stats.add(copied=1, bytes_moved=len(data))

    def _read_back_referrers(self, dst: _Location, digest: Digest, wanted: list[str]
                             ) -> ReadBack:
        """Every referrer carried must be listed at `dst`, its manifest served (hashed) and
        its blobs present."""
        if not wanted:
            return ReadBack(True, "0 referrers")
        listed = {e.get("digest") for e in list_referrers(dst.client, dst.repository, digest)}
        missing = [r for r in wanted if r not in listed]
        if missing:
            return ReadBack(False, f"hop does not list {len(missing)} referrer(s) of "
                                   f"{digest.short}: {', '.join(missing[:3])}")
        for referrer in wanted:
            try:
                blob = dst.client.get_manifest(dst.repository, Digest.parse(referrer))
            except (DigestMismatch, NotFound) as exc:
                return ReadBack(False, f"referrer {referrer}: {exc.one_line()}")
            for descriptor in self._children(dst, blob)[1]:
                if not dst.client.blob_exists(dst.repository, descriptor.digest):
                    return ReadBack(False, f"referrer {referrer} lacks blob "
                                           f"{descriptor.digest}")
        return ReadBack(True, f"{len(wanted)} referrers listed and served")

    # -- read back -----------------------------------------------------------------------------
    def _read_back(self, dst: _Location, root: ManifestBlob, pool: ThreadPoolExecutor,
                   seen: set[Digest] | None = None,
                   sizes: dict[Digest, int] | None = None,
                   side: ThreadPoolExecutor | None = None) -> ReadBack:
        """Whether the endpoint serves the digest: manifest by digest (GET, hashed), the tag
        (HEAD) names it, every blob present (HEADs, in parallel; those in `seen` were HEADed at
        this endpoint during the hop, as they landed, and are not asked again). What differs
        is the outcome (`verified` False, with the reason), never only an exception."""
        tag = dst.reference.tag
        # the tag with a HEAD (a GET only when no digest header comes), beside the manifest's
        # GET: what it names is the registry's word either way, and the bytes of that digest
        # are hashed by the GET
        asked = side.submit(dst.client.resolve_tag, dst.repository, tag) \
            if side is not None and tag else None
        try:
            served = dst.client.get_manifest(dst.repository, root.digest)
        except (DigestMismatch, NotFound) as exc:   # other bytes, or none, for the digest
            if asked is not None:
                asked.cancel()
            return ReadBack(False, f"manifest {root.digest.short}: {exc.one_line()}")
        if served.digest != root.digest:  # get_manifest already hashed; belt and braces
            return ReadBack(False, f"hop serves {served.digest}, not {root.digest}")
        notes = [f"manifest {root.digest.short} served"]
        if tag:
            try:
                by_tag = asked.result() if asked is not None else \
                    dst.client.resolve_tag(dst.repository, tag)
            except NotFound as exc:
                return ReadBack(False, f"tag {tag}: {exc.one_line()}")
            if by_tag != root.digest:
                return ReadBack(False, f"tag {tag} resolves to {by_tag}, not {root.digest}")
            notes.append(f"tag {tag} -> {root.digest.short}")
        try:
            blobs = self._all_blobs(dst, root)
        except (DigestMismatch, NotFound) as exc:   # a child manifest of an index
            return ReadBack(False, f"child manifest: {exc.one_line()}")
        if sizes is not None:
            sizes.update(blobs)
        ask = [d for d in blobs if d not in (seen or set())]
        present = list(pool.map(lambda d: dst.client.blob_exists(dst.repository, d), ask))
        missing = [str(d) for d, ok in zip(ask, present, strict=True) if not ok]
        if missing:
            return ReadBack(False, f"hop serves the manifest but lacks {len(missing)} "
                                   f"blob(s): {', '.join(missing[:3])}")
        early = len(blobs) - len(ask)
        notes.append(f"{len(blobs)} blobs present" + (
            f" ({early} read back as they landed)" if early else ""))
        return ReadBack(True, "; ".join(notes))

    def _all_blobs(self, dst: _Location, root: ManifestBlob) -> dict[Digest, int]:
        """Every blob of the tree (each once) and its size."""
        parsed = parse_manifest(root.data, root.media_type)
        if isinstance(parsed, ImageManifest):
            return {d.digest: d.size for d in parsed.blobs()}
        found: dict[Digest, int] = {}
        for entry in parsed.manifests:
            child = dst.client.get_manifest(dst.repository, entry.digest)
            found.update(self._all_blobs(dst, child))
        return found

    # -- one hop -------------------------------------------------------------------------------
    def hop(self, src: _Location, dst: _Location, root: ManifestBlob) -> HopRecord:
        """Copy `root` from `src` to `dst` and read it back: the record's `verified` is the
        read-back's outcome (a blob committed and then not served stops the hop before its
        manifest is pushed: not verified either)."""
        started = time.perf_counter()
        stats = _Stats()
        tag = dst.reference.tag
        # independent round trips at once (on a link of 30 ms a request, each one saved is
        # 30 ms of the hop): the source's referrers (read and parsed before anything is
        # copied) beside the destination's HEAD; after the copy, the companions beside the
        # read-back
        with ThreadPoolExecutor(max_workers=2, thread_name_prefix="side") as side, \
                ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="check") as heads, \
                ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="blob") as pool:
            stats.checker = heads
            listing = side.submit(self._source_referrers, src, root.digest)
            served = self._served(dst, root.digest)
            referrers = listing.result()
            phase(self.progress, f"hop {dst.reference}: copying from {src.client.registry}")
            # the read-back GETs the manifest and every child at the destination
            check_quota(dst.client, 1 + manifest_gets(root),
                        "manifest GETs at the destination (the read-back)")
            try:
                if served:
                    stats.add(skipped=len(self._all_blobs(dst, root)))
                    if tag and dst.client.manifest_exists(dst.repository, tag) != root.digest:
                        dst.client.put_manifest(dst.repository, tag, root)
                        stats.add(manifests=1)
                else:
                    self._copy_tree(src, dst, root, stats, pool, checked=True, reference=tag)
                phase(self.progress, f"hop {dst.reference}: {human_bytes(stats.bytes_moved)} "
                                     f"moved ({stats.copied} copied, {stats.skipped} skipped, "
                                     f"{stats.mounted} mounted) in "
                                     f"{time.perf_counter() - started:.2f}s; reading back")
                stats.await_checks(str(dst.reference))  # blobs of a tree already served too
            except BlobNotServed as exc:
                read_back = ReadBack(False, f"{exc.one_line()}; no manifest was pushed that "
                                            "refers to it")
            else:
                companions = side.submit(self._companions, src, dst, root.digest, stats, pool,
                                         referrers)
                read_back = self._read_back(dst, root, pool, stats.served, stats.sizes, side)
                companions.result()
                read_back += self._read_back_referrers(dst, root.digest, stats.referrers)
        phase(self.progress, f"hop {dst.reference}: "
                             f"{'verified' if read_back.verified else 'NOT verified'} "
                             f"({read_back.detail})")
        image_bytes = sum(stats.sizes.values())
        return HopRecord(
            endpoint=str(dst.reference), registry=dst.client.registry, digest=str(root.digest),
            verified=read_back.verified, bytes_moved=stats.bytes_moved,
            blobs_copied=stats.copied,
            blobs_skipped=stats.skipped, blobs_mounted=stats.mounted,
            manifests_pushed=stats.manifests, companions=stats.companions,
            referrers=stats.referrers, notes=stats.notes, blobs=stats.blobs,
            seconds=round(time.perf_counter() - started, 4), read_back=read_back.detail,
            image_bytes=image_bytes, upload_shape=dst.client.upload_shape(),
            mount_fallbacks=stats.mount_fallbacks)


def what_is_copied(root: ManifestBlob, chosen: Platform | None) -> tuple[str, list[str]]:
    """What the promoted digest is, in words, and its platforms: the whole index, one
    platform of an index, or a single-platform manifest."""
    parsed = parse_manifest(root.data, root.media_type)
    if isinstance(parsed, ImageIndex):
        platforms = [str(e.platform) for e in parsed.manifests if e.platform is not None]
        return f"index ({len(parsed.manifests)} manifests)", platforms
    if chosen is not None:
        return f"platform {chosen}", [str(chosen)]
    return "manifest", []


def check_destination_tags(pool: ClientPool, targets: list, digest: Digest) -> None:
    """Before any blob moves: a destination tag that already names another digest at a
    registry that keeps tags immutable (configured, or learned this run from a refused PUT)
    refuses the promote with one line. The same digest is success; a registry that moves
    tags is not asked (its tag moves as `crane copy` moves it)."""
    for target in targets:
        reference = target.reference if isinstance(target, AwaitHop) else target
        if reference.tag is None:
            continue
        client = pool.get(reference.registry)
        if not client.immutable_tags():
            continue
        there = client.manifest_exists(reference.repository, reference.tag)
        if there is not None and there != digest:
            raise RegistryBehaviour(
                f"tag {reference.tag} already names {there} and the registry keeps tags "
                f"immutable: {digest} cannot land there (nothing was sent; promote to another "
                "tag)", where=str(reference))


def manifest_gets(root: ManifestBlob) -> int:
    """Manifest GETs a copy of `root` still makes where it reads: one per child of an index
    (the root itself was read already)."""
    parsed = parse_manifest(root.data, root.media_type)
    return len(parsed.manifests) if isinstance(parsed, ImageIndex) else 0


def check_quota(client: RegistryClient, needed: int, what: str) -> None:
    """A registry that counts requests (Docker Hub's `ratelimit-remaining`) and has fewer
    left than this promote needs there is refused before anything is copied. Manifest GETs
    are what such registries count (HEADs are free and are what tags resolve with)."""
    limit = client.rate_limit()
    if limit is None:
        return
    if limit.remaining < needed:
        raise RegistryBehaviour(
            f"rate limit: {limit}, and this promote needs {needed} {what} (nothing was "
            "copied; wait for the window to pass or promote from a mirror)",
            where=client.registry)


def await_hop(src: _Location, dst: _Location, root: ManifestBlob,
              policy: AwaitPolicy | None = None) -> HopRecord:
    """A hop the endpoint replicates by itself: copy nothing, poll until it serves `root`."""
    started = time.perf_counter()
    expected = expected_tree(src.client, src.repository, root)
    polls = await_served(dst.client, dst.reference, root, expected, policy)
    return HopRecord(
        endpoint=str(dst.reference), registry=dst.client.registry, digest=str(root.digest),
        verified=polls[-1].state is PollState.SERVED, bytes_moved=0, blobs_copied=0,
        blobs_skipped=0, blobs_mounted=0,
        manifests_pushed=0, seconds=round(time.perf_counter() - started, 4),
        read_back=f"{polls[-1].detail} (awaited: {poll_summary(polls)})", mode="await",
        polls=polls)


def promote(source: ImageReference, via: list[ImageReference | AwaitHop],
            to: ImageReference | AwaitHop | None, *,
            all_platforms: bool = False, platform: Platform | None = None,
            pool: ClientPool | None = None, progress: ProgressSink | None = None,
            gate=None, on_hop=None, workers: int | None = None,
            await_policy: AwaitPolicy | None = None,
            shared: SharedBlobs | None = None) -> PromoteResult:
    """Copy `source` through every `via` to `to`. `gate(digest)` (optional) runs before any
    copy and may raise to refuse; `on_hop(HopRecord)` sees each hop as it lands. A hop whose
    read-back differs ends the promotion with HopNotVerified (exit 1), after `on_hop` saw it.
    An `AwaitHop` (in `via` or as `to`) is not copied to: it is polled until it serves the
    digest (`await_policy`), and the next hop reads from it. `to` may be None when the last
    `via` is the final endpoint. `shared`: the blob ledger of a release whose images are
    promoted at once (`imagekit.promote.release`)."""
    tune_malloc()
    # no cyclic garbage collection while blobs move: the pieces are not cyclic, but every
    # ~700 allocations of the copy loops started a collection that walked the CLI's ~40k
    # long-lived objects (measured: 106 collections, 0.18 s of a record-scale promote)
    collecting = gc.isenabled()
    own_pool = pool is None
    pool = pool or ClientPool()
    targets = [*via, *([to] if to is not None else [])]
    if not targets:
        raise InvalidInput("promote needs a destination (--to or a last --await)")
    try:
        gc.disable()
        src_client = pool.get(source.registry)
        root, chosen = resolve_source(src_client, source, all_platforms, platform)
        named = root.digest if chosen is None else src_client.get_manifest(
            source.repository, source.digest or source.identifier).digest
        copied, platforms = what_is_copied(root, chosen)
        check_destination_tags(pool, targets, root.digest)
        check_quota(src_client, manifest_gets(root), "more manifest GETs at the source")
        gate_info = gate(root.digest) if gate is not None else None
        promoter = Promoter(progress, workers, shared)
        previous = _Location(src_client, source.with_digest(root.digest))
        hops: list[HopRecord] = []
        for hop_target in targets:
            target = hop_target.reference if isinstance(hop_target, AwaitHop) else hop_target
            if target.digest is not None and target.digest != root.digest:
                raise InvalidInput(f"destination pins {target.digest}, but the source is "
                                   f"{root.digest}", where=str(target))
            here = _Location(pool.get(target.registry), target)
            if isinstance(hop_target, AwaitHop):
                record = await_hop(previous, here, root, await_policy)
            else:
                record = promoter.hop(previous, here, root)
            hops.append(record)
            if on_hop is not None:
                on_hop(record)
            if not record.verified:   # the next hop would relay what this one does not serve
                raise HopNotVerified(record)
            previous = _Location(here.client, target.with_digest(root.digest))
        return PromoteResult(source=str(source), digest=str(root.digest),
                             media_type=root.media_type, all_platforms=chosen is None,
                             copied=copied, platforms=platforms,
                             platform=str(chosen) if chosen else None, hops=hops,
                             gate=gate_info, source_digest=str(named),
                             digest_changed=digest_note(named, root.digest, chosen))
    finally:
        if collecting:
            gc.enable()
        if own_pool:
            pool.close()
