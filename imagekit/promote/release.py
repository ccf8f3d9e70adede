"""`run_release`: several images promoted in one run, at once, with one summary.

A release is the set of images that ship together (the SGLang and the vLLM image). One run
for the set, instead of one per image, shares what one process can share:

- one connection pool per registry (tokens, resolved schemes, keep-alive connections);
- one blob ledger (`SharedBlobs`): a layer two images share is moved once per destination
  repository, and mounted from the repository it already landed in on the same registry;
- bounded work: `IMAGE_JOBS` images at once, `BLOB_JOBS` uploads at once over all of them.

Each image stays its own promotion (`run_promote`): its own gate, its own hops read back, its
own `promote` evidence attempt. The release adds a `promote-release` attempt with one line
per image and the worst status. A failure of one image is named and the others go on;
`fail_fast` stops the rest at a clean boundary (the interrupt flag: uploads end where the
registry acknowledged them, nothing unfinished is recorded as PASS).

Destinations: `--via`/`--to` name a registry with an optional namespace (`ReleaseTarget`);
each image lands at `<namespace>/<last path component of its repository>` with its source
tag, or by digest when the source was given by digest alone.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from imagekit.errors import ImagekitError, InvalidInput
from imagekit.evidence import EvidenceStore
from imagekit.evidence.kinds import ReleaseImageLine, ReleaseResult
from imagekit.oci import ImageReference, Platform
from imagekit.promote.await_ import AwaitHop, AwaitPolicy
from imagekit.promote.copy import JOBS, PromoteResult, SharedBlobs, check_destination_tags
from imagekit.promote.run import Gate, run_promote
from imagekit.registry import ClientPool
from imagekit.registry.interrupt import STOP, Interrupted, graceful, request_stop
from imagekit.registry.progress import NullProgress, ProgressSink, phase
from imagekit.results import CheckResult, Status

#: Images promoted at once: enough for a release (two to a few images) to overlap one
#: image's round trips (HEADs, manifests, read-back) with another's bytes.
IMAGE_JOBS = 4
#: Uploads at once over the whole release (each hop's pool has `JOBS` workers).
BLOB_JOBS = 2 * JOBS
#: The kind and the evidence name of the release summary.
KIND = "promote-release"


@dataclass(frozen=True)
class ReleaseTarget:
    """A registry with an optional namespace: where the images of a release go."""

    registry: str
    namespace: str

    @classmethod
    def parse(cls, text: str, flag: str) -> ReleaseTarget:
        """`REGISTRY[/NAMESPACE]`; a tag or digest names one image, not a place for several."""
        given = text.strip().rstrip("/")
        probe = given if "/" in given else f"{given}/x"
        try:
            parsed = ImageReference.parse(probe)
        except InvalidInput as exc:
            raise InvalidInput(f"{flag} {text}: not a REGISTRY[/NAMESPACE] ({exc.message})",
                               where=text) from None
        if not probe.startswith(parsed.registry + "/"):
            raise InvalidInput(f"{flag} {text}: no registry host (a REGISTRY[/NAMESPACE] such "
                               "as 127.0.0.1:5002/imagekit)", where=text)
        if parsed.tag is not None or parsed.digest is not None:
            raise InvalidInput(f"{flag} {text} names one image, but several sources are given: "
                               "give a REGISTRY[/NAMESPACE] (each image lands at "
                               "NAMESPACE/<its repository's last component>:<its tag>)",
                               where=text)
        return cls(parsed.registry, parsed.repository if "/" in given else "")

    def place(self, source: ImageReference) -> ImageReference:
        """Where `source` lands: the last path component of its repository under the
        namespace, with its tag; by digest when it was given by digest alone."""
        last = source.repository.rsplit("/", 1)[-1]
        repository = f"{self.namespace}/{last}" if self.namespace else last
        if source.tag is not None:
            return ImageReference(self.registry, repository, source.tag)
        return ImageReference(self.registry, repository, None, source.digest)

    def __str__(self) -> str:
        return f"{self.registry}/{self.namespace}" if self.namespace else self.registry


@dataclass(frozen=True)
class ReleaseImage:
    """One image of a release: what was given, its source, its hops and its own gate."""

    given: str
    source: ImageReference
    via: list[ImageReference | AwaitHop]
    to: ImageReference | AwaitHop | None
    gate: Gate | Literal[False]

    @property
    def destination(self) -> str:
        last = self.to if self.to is not None else self.via[-1]
        return str(last.reference if isinstance(last, AwaitHop) else last)


def place_hops(source: ImageReference, via: list[ReleaseTarget | tuple[str, ReleaseTarget]],
               to: ReleaseTarget | None
               ) -> tuple[list[ImageReference | AwaitHop], ImageReference | None]:
    """The hops of one image: each `--via` (or `("await", target)`) and `--to` placed."""
    hops: list[ImageReference | AwaitHop] = []
    for hop in via:
        if isinstance(hop, tuple):
            hops.append(AwaitHop(hop[1].place(source)))
        else:
            hops.append(hop.place(source))
    return hops, (to.place(source) if to is not None else None)


def check_distinct(images: list[ReleaseImage]) -> None:
    """Two different sources may not land at the same place at any hop, and no source may be
    given twice: bad input, before any copy."""
    seen: dict[str, str] = {}
    for image in images:
        if str(image.source) in seen.values() or image.given in seen.values():
            raise InvalidInput(f"source {image.given} is given twice", where=image.given)
        for hop in [*image.via, *([image.to] if image.to is not None else [])]:
            place = str(hop.reference if isinstance(hop, AwaitHop) else hop)
            if place in seen:
                raise InvalidInput(f"{seen[place]} and {image.given} would both land at {place}:"
                                   " give each image its own repository or tag", where=place)
            seen[place] = image.given
        seen[f"source {image.source}"] = str(image.source)


class ImageOutcome(BaseModel):
    """One image of a release: its promotion (when it ran) or why it did not land."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    given: str
    source: str
    destination: str
    status: Status
    exit_code: int
    digest: str | None = None
    error: str | None = None
    evidence: str | None = None
    result: PromoteResult | None = None
    seconds: float = 0.0


class ReleaseOutcome(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    status: Status
    exit_code: int
    images: list[ImageOutcome]
    evidence: str | None = None
    seconds: float


class LabelledSink:
    """One progress view for every image: the shared sink, each line and bar named by the
    image it belongs to."""

    def __init__(self, sink: ProgressSink, label: str) -> None:
        self.sink, self.label = sink, label

    def add(self, description: str, total: int | None) -> int:
        return self.sink.add(f"{self.label}: {description}", total)

    def advance(self, task: int, amount: int) -> None:
        self.sink.advance(task, amount)

    def finish(self, task: int) -> None:
        self.sink.finish(task)

    def phase(self, text: str) -> None:
        phase(self.sink, f"{self.label}: {text}")


def _label(image: ReleaseImage) -> str:
    return image.source.repository.rsplit("/", 1)[-1]


def run_release(images: list[ReleaseImage], *, store: EvidenceStore, options=None,
                progress: ProgressSink | None = None, all_platforms: bool = False,
                platform: Platform | None = None, force: bool = False,
                reason: str | None = None, await_policy: AwaitPolicy | None = None,
                fail_fast: bool = False, image_jobs: int = IMAGE_JOBS,
                blob_jobs: int = BLOB_JOBS,
                after: Callable[[ImageOutcome], ImageOutcome] | None = None
                ) -> ReleaseOutcome:
    """Promote every image at once (bounded), each gated and recorded on its own; then record
    the release summary. `after(outcome)` runs for each image that landed (the CLI signs its
    chain there) and may turn it into a failure. Returns every image's outcome."""
    if not images:
        raise InvalidInput("give at least one SRC to promote")
    check_distinct(images)
    sink = progress or NullProgress()
    started = time.monotonic()
    shared = SharedBlobs(blob_jobs)
    outcomes: dict[int, ImageOutcome] = {}
    failed = threading.Event()

    def one(index: int, image: ReleaseImage) -> None:
        began = time.monotonic()
        base = dict(given=image.given, source=str(image.source),
                    destination=image.destination)
        if failed.is_set() and fail_fast:
            outcomes[index] = ImageOutcome(**base, status=Status.ERROR, exit_code=1,
                                           error="not started: --fail-fast after a failure")
            return
        try:
            result, where = run_promote(
                image.source, image.via, image.to, store=store, all_platforms=all_platforms,
                platform=platform, options=options, progress=LabelledSink(sink, _label(image)),
                gate=image.gate, force=force, reason=reason, await_policy=await_policy,
                pool=pool, shared=shared)
        except ImagekitError as exc:
            stopped = isinstance(exc, Interrupted) and fail_fast and failed.is_set()
            outcomes[index] = ImageOutcome(
                **base, status=Status.ERROR if exc.exit_code != 1 else Status.FAIL,
                exit_code=1 if stopped else exc.exit_code,
                error=("stopped: --fail-fast after a failure" if stopped
                       else exc.one_line()[:1000]),
                seconds=round(time.monotonic() - began, 3))
            if not stopped:
                failed.set()
                if fail_fast:
                    request_stop("--fail-fast")
            return
        except Exception as exc:  # noqa: BLE001 - one image's bug is named, the others go on
            outcomes[index] = ImageOutcome(**base, status=Status.ERROR, exit_code=2,
                                           error=f"{type(exc).__name__}: {exc}"[:1000],
                                           seconds=round(time.monotonic() - began, 3))
            failed.set()
            if fail_fast:
                request_stop("--fail-fast")
            return
        outcomes[index] = ImageOutcome(**base, status=Status.PASS, exit_code=0,
                                       digest=result.digest, evidence=where, result=result,
                                       seconds=round(time.monotonic() - began, 3))

    pool = ClientPool(options)
    try:
        if platform is None:
            check_release_tags(pool, images)
        with graceful():  # SIGINT/SIGTERM (and --fail-fast): every image stops cleanly
            with ThreadPoolExecutor(max_workers=max(1, min(image_jobs, len(images))),
                                    thread_name_prefix="image") as workers:
                futures = [workers.submit(one, i, image) for i, image in enumerate(images)]
                for future in futures:
                    while not future.done():
                        try:
                            future.exception(timeout=0.2)
                        except TimeoutError:
                            continue
            interrupted = STOP.is_set() and not (fail_fast and failed.is_set())
    finally:
        pool.close()
    ordered = [outcomes[i] for i in range(len(images))]
    if after is not None:
        ordered = [after(o) if o.status is Status.PASS else o for o in ordered]
    worst = max(o.exit_code for o in ordered)
    status = Status.PASS if worst == 0 else (Status.FAIL if worst == 1 else Status.ERROR)
    summary = _record(store, ordered, status)
    outcome = ReleaseOutcome(status=status, exit_code=worst, images=ordered, evidence=summary,
                             seconds=round(time.monotonic() - started, 3))
    if interrupted:
        raise ReleaseInterrupted(outcome)
    return outcome


def check_release_tags(pool: ClientPool, images: list[ReleaseImage]) -> None:
    """Every destination tag of the release at a registry that keeps tags immutable, before
    any image moves a blob: one that names another digest than its source's refuses the
    whole release with one line (each image checks again before its own blobs)."""
    for image in images:
        targets = [*image.via, *([image.to] if image.to is not None else [])]
        places = [t.reference if isinstance(t, AwaitHop) else t for t in targets]
        if not any(p.tag and pool.get(p.registry).immutable_tags() for p in places):
            continue
        source = image.source
        digest = source.digest or pool.get(source.registry).resolve_tag(source.repository,
                                                                       source.tag or "latest")
        check_destination_tags(pool, targets, digest)


class ReleaseInterrupted(Interrupted):
    """SIGINT/SIGTERM during a release: the images that landed keep their records; the
    outcome (and its summary evidence) is carried for the caller to print."""

    def __init__(self, outcome: ReleaseOutcome) -> None:
        landed = sum(o.status is Status.PASS for o in outcome.images)
        super().__init__(f"interrupted: {landed} of {len(outcome.images)} image(s) landed and "
                         "are recorded; rerun the same command to finish the others",
                         where=f"evidence: {outcome.evidence}")
        self.outcome = outcome


def _record(store: EvidenceStore, outcomes: list[ImageOutcome], status: Status) -> str:
    """The `promote-release` attempt: one line per image, filed under the release's name,
    with no subject (each digest is judged by its own `promote` attempt, not by this)."""
    context: dict[str, Any] = {"images": [o.given for o in outcomes]}
    with store.attempt(KIND, KIND, subjects=[], **context) as attempt:
        attempt.write_result(ReleaseResult(
            status=status, images=[ReleaseImageLine(
                given=o.given, source=o.source, destination=o.destination, status=o.status,
                digest=o.digest, error=o.error, evidence=o.evidence,
                bytes_moved=sum(h.bytes_moved for h in o.result.hops) if o.result else 0,
                seconds=o.seconds) for o in outcomes]))
        for o in outcomes:
            attempt.add_check(CheckResult(
                name=o.given, status=o.status,
                detail=(f"{o.destination} serves {o.digest}" if o.status is Status.PASS
                        else f"{o.destination}: {o.error}")[:1000]))
        landed = sum(o.status is Status.PASS for o in outcomes)
        attempt.finish(status, summary=f"{landed} of {len(outcomes)} image(s) promoted")
        return str(attempt.path)
