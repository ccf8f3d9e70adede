"""`imagekit verify-mirror` and `imagekit promote`: registry operations for people and scripts.

Credentials come only from docker's config.json (`$DOCKER_CONFIG` or ~/.docker): there is no
password flag on purpose. Plain HTTP is used without flags only for loopback registries.
"""

from __future__ import annotations

import functools
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from typer.core import TyperCommand

from imagekit.cli import trustopts
from imagekit.cli.app import (
    app,
    console,
    err_console,
    evidence_store,
    guarded,
    print_json,
    settings,
    show_progress,
)
from imagekit.cli.app import progress_for as app_progress
from imagekit.cli.surface import option
from imagekit.cli.trustopts import TrustKeyOpt, TrustPolicyOpt
from imagekit.errors import InvalidInput

if TYPE_CHECKING:  # each command imports what it uses (`imagekit --help` stays fast)
    from rich.progress import Progress

    from imagekit.evidence import EvidenceStore
    from imagekit.oci import ImageReference, Platform
    from imagekit.registry import RegistryOptions
    from imagekit.spec.models import ImagesSpec
    from imagekit.trust import TrustPolicy

Insecure = option("--insecure")
CaFile = option("--ca-file", exists=True, dir_okay=False)
EvidenceDir = option("--evidence-dir")
SpecOpt = option("--spec", note="An image NAME is its verified build of this spec.")
JsonOpt = option("--json", note="No progress bars.")
DeadlineOpt = option("--call-timeout")
VerboseOpt = option("--verbose")


def _transport_knobs(deadline: float | None, verbose: bool) -> float | None:
    """--call-timeout, checked: the command passes it to its registry options (`_options`), so it
    reaches every registry client of the command as an argument; --verbose lets the retry and
    httpx loggers speak (silent otherwise)."""
    if deadline is not None:
        from imagekit.inputs import positive

        deadline = positive(deadline, "--call-timeout", maximum=86400)
    if verbose:
        import logging
        import sys

        logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                            format="imagekit: %(name)s: %(message)s")
    return deadline


def _rate_limits() -> list[str]:
    from imagekit.registry import ratelimit

    return [str(limit) for limit in ratelimit.seen()]


class RichSink:
    """ProgressSink on a rich Progress: a bar per blob and one for the total (thread-safe:
    blob copies run in a pool); phases are printed above the bars."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.lock = threading.Lock()
        self.total_task: int | None = None
        self.total = 0

    def add(self, description: str, total: int | None) -> int:
        with self.lock:
            self.total += total or 0
            if self.total_task is None:
                self.total_task = int(self.progress.add_task("total", total=self.total or None))
            else:
                self.progress.update(self.total_task, total=self.total or None)  # type: ignore
            return int(self.progress.add_task(description, total=total))

    def advance(self, task: int, amount: int) -> None:
        self.progress.advance(task, amount)  # type: ignore[arg-type]
        if self.total_task is not None:
            self.progress.advance(self.total_task, amount)  # type: ignore[arg-type]

    def finish(self, task: int) -> None:
        self.progress.remove_task(task)  # type: ignore[arg-type]

    def phase(self, text: str) -> None:
        self.progress.console.print(text, markup=False, soft_wrap=True, highlight=False)


@contextmanager
def progress_sink(json_output: bool, verbose: bool = False, step: str = "registry"):
    """Rich bars on a terminal; on a pipe one line per blob and phase (elapsed, bytes); with
    --json nothing on stderr unless --verbose (then the lines): registry etiquette.
    An explicit IMAGEKIT_PROGRESS (plain, json, rich, off) reports through the one progress
    mechanism instead, as the rehearsal asks of its child steps."""
    import sys

    if settings().progress is not None:
        from imagekit.registry.progress import PhaseSink

        with app_progress(json_output) as installed:
            yield PhaseSink(installed, step)
        return
    if json_output and not verbose:
        from imagekit.registry.progress import NullProgress

        yield NullProgress()
        return
    if not show_progress(json_output):
        from imagekit.registry.progress import LineProgress

        lines = LineProgress(sys.stderr)
        try:
            yield lines
        finally:
            lines.close()
        return
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TransferSpeedColumn,
    )

    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                  TransferSpeedColumn(), TimeElapsedColumn(), console=err_console,
                  transient=True) as progress:
        yield RichSink(progress)


#: PATCH size for promote's uploads. No piece is held in memory until acknowledged (a broken
#: PATCH asks the registry where it stands and re-reads the source up to there,
#: `registry/push.py`), so the size only sets how often the registry is waited for and the
#: resume point an interrupt leaves. 16 MiB measured against the whole blob in one PATCH (as
#: `crane copy` sends it), 4 x 150 MB image in process, 5 + 5 interleaved pairs in both
#: orders: no difference (2.89 s vs 2.91 s median, same client and registry CPU),
#: so the finer resume point is kept, and a proxy's body limit (nginx's
#: client_max_body_size) is not met by a multi-GB layer. `IMAGEKIT_UPLOAD_CHUNK` wins when set.
PROMOTE_CHUNK_BYTES = 16 << 20
#: ... and the largest chunk an upload grows to (doubling after each confirmed chunk): on a link
#: of 30 ms a request and 20 MB/s a connection, a 150 MB layer in 16 MiB chunks stood still for
#: nine round trips (0.5 s more than `crane copy`'s single PATCH, measured by
#: bench/bench_link.py); 16, 32, 64, 128 MiB keeps an early resume point and meets four.
PROMOTE_CHUNK_MAX = 128 << 20


def _options(insecure: list[str], ca_file: Path | None, deadline: float | None = None,
             **extra: object) -> RegistryOptions:
    """The command's registry options: the settings (IMAGEKIT_RETRY_*, IMAGEKIT_DEADLINE, …)
    under its flags (`--call-timeout`, `--insecure`, `--ca-file`, what `extra` names)."""
    from imagekit.inputs import pem_ca_file
    from imagekit.registry import RegistryOptions

    if ca_file is not None:
        pem_ca_file(ca_file)
    return RegistryOptions.from_settings(settings(), deadline=deadline,
                                         insecure=frozenset(insecure), ca_file=ca_file, **extra)


def _ref(text: str, what: str) -> ImageReference:
    from imagekit.oci import ImageReference

    try:
        return ImageReference.parse(text)
    except InvalidInput as exc:
        raise InvalidInput(f"{what}: {exc.message}", where=exc.where) from None


@app.command("verify-mirror")
@guarded
def verify_copy_cmd(
    official: str = typer.Argument(..., metavar="OFFICIAL",
                                   help="The official image: a REF (tag or @digest) or a spec "
                                        "image NAME (its verified build)."),
    copy: str = typer.Argument(..., metavar="COPY",
                               help="The copy to check against it (REF or NAME)."),
    platform: str = option("--platform"),
    diffids: bool = option("--diffids"),
    spec: Path = SpecOpt,
    json_output: bool = JsonOpt,
    insecure: list[str] = Insecure,
    ca_file: Path = CaFile,
    evidence_dir: Path = EvidenceDir,
    deadline: float | None = DeadlineOpt,
    verbose: bool = VerboseOpt,
) -> None:
    """Is COPY content-identical to OFFICIAL? Exit 0 same content, 1 different, 2 error."""
    from imagekit.errors import DigestMismatch, NotFound, TransportError, Unauthorized
    from imagekit.oci import Platform
    from imagekit.registry import ClientPool
    from imagekit.verify import record_evidence, verify_copy
    from imagekit.verify.copy import record_failure

    deadline = _transport_knobs(deadline, verbose)
    store = evidence_store(evidence_dir)
    official_ref = _image(official, "OFFICIAL", store, spec=spec)
    copy_ref = _image(copy, "COPY", store, spec=spec)
    wanted = Platform.parse(platform)
    options = _options(insecure, ca_file, deadline)
    try:
        with ClientPool(options) as pool, \
                progress_sink(json_output, verbose, "verify-copy") as sink:
            result = verify_copy(official_ref, copy_ref, platform=wanted, diffids=diffids,
                                 pool=pool, progress=sink)
    except (NotFound, Unauthorized, DigestMismatch, TransportError) as exc:
        kept = record_failure(store, official_ref, copy_ref, exc)
        exc.where = f"{exc.where}; evidence: {kept}" if exc.where else f"evidence: {kept}"
        raise
    where = record_evidence(store, result)
    if json_output:
        data = result.json_view()
        data["evidence"] = where
        data["rate_limits"] = _rate_limits()
        print_json(data)
    else:
        for line in result.summary:
            console.print(line, markup=False, soft_wrap=True)
        for line in _rate_limits():
            console.print(f"rate limit: {line}", markup=False, soft_wrap=True)
        console.print(f"evidence: {where}", markup=False, soft_wrap=True)
    if result.verdict != "identical-content":
        raise typer.Exit(1)


class _HopOrderCommand(TyperCommand):
    """Remembers the command-line order of --via and --await (typer keeps each list apart)."""

    def parse_args(self, ctx, args):  # noqa: ANN001, ANN201 - click's signature
        order: list[tuple[str, str]] = []
        tokens = list(args)
        for index, token in enumerate(tokens):
            if token == "--":
                break
            for flag in ("--via", "--await"):
                if token == flag and index + 1 < len(tokens):
                    order.append((flag, tokens[index + 1]))
                elif token.startswith(flag + "="):
                    order.append((flag, token.split("=", 1)[1]))
        ctx.meta["imagekit.hop_order"] = order
        return super().parse_args(ctx, args)


def _image(text: str, what: str, store, *, trust=None, pool=None,  # noqa: ANN001
           spec: Path | None = None) -> ImageReference:
    """A spec image NAME (its verified build of this spec and lock, pinned by digest:
    `imagekit.names`, the one resolver; with trust, the profile's staging tag verified by its
    signed statements when this store has no build) or a REF."""
    from imagekit.names import looks_like_name, resolve_target

    if looks_like_name(text):
        from imagekit.cli.common import images_spec

        return resolve_target(text, store=store, spec_path=images_spec(spec),
                              remote=trustopts.name_resolver(trust, store, pool)).reference
    return _ref(text, what)


def _source(text: str, store, *, trust=None, pool=None,  # noqa: ANN001
            spec: Path | None = None) -> ImageReference:
    """SOURCE as a spec image NAME or a REF."""
    return _image(text, "REF", store, trust=trust, pool=pool, spec=spec)


def _hops(via: list[str], awaited: list[str], order: list[tuple[str, str]]) -> list:
    """--via and --await values in command-line order (AwaitHop for the awaited ones)."""
    from imagekit.promote.await_ import AwaitHop

    if sorted(v for f, v in order if f == "--via") != sorted(via) or \
            sorted(v for f, v in order if f == "--await") != sorted(awaited):
        order = [("--via", v) for v in via] + [("--await", a) for a in awaited]
    return [AwaitHop(_ref(value, "--await")) if flag == "--await" else _ref(value, "--via")
            for flag, value in order]


def _distinct_hops(source, hops: list, to_ref) -> None:
    """A hop that is where the image already is moves nothing and proves nothing:
    `promote SRC --await SRC` (an awaited hop in the repository it would replicate from) and
    a hop naming the source itself are refused, not recorded as a PASS. (A --via/--to in the
    same repository under another tag is a retag, and allowed.)"""
    from imagekit.promote.await_ import AwaitHop

    previous = source
    for hop in [*hops, *([to_ref] if to_ref is not None else [])]:
        awaited = isinstance(hop, AwaitHop)
        target = hop.reference if awaited else hop
        same_place = (target.registry, target.repository) == (previous.registry,
                                                              previous.repository)
        if (awaited and same_place) or str(target) == str(source):
            what = "the source" if str(target) == str(source) or previous is source \
                else "the hop before it"
            raise InvalidInput(f"hop {target} is {what}: nothing would be moved or proved",
                               where=str(target))
        previous = target


def _final_hop_gate(enforce, to_ref, images: ImagesSpec | None):  # noqa: ANN001, ANN201
    """The gate, with the images spec's `final_hop_requires` of a profile whose last registry
    is the destination added to its requirements (e.g. cluster-accept before the target)."""
    given = settings().required_checks_list()  # $IMAGEKIT_REQUIRED_CHECKS, else the defaults
    plain = enforce if given is None else functools.partial(enforce, required=given)
    if to_ref is None or images is None:  # no destination, or no spec here: the plain gate
        return plain
    extra = images.final_hop_requirements(to_ref.registry)
    if not extra:
        return plain
    from imagekit.report.required import parse_requirements

    required = [str(r) for r in parse_requirements(given)] + extra
    return functools.partial(enforce, required=required)


def _spec_here(given: Path | None = None) -> ImagesSpec | None:
    """The images spec a promote reads (`--spec`, $IMAGEKIT_IMAGES_SPEC, ./dockerfiles, the
    packaged one), None where none loads: a promote by reference needs none, and a spec that
    does not load is the other commands' business. Read once per command (`_promote_setup`),
    for the registries' upload shapes and the gate's final-hop requirements."""
    from imagekit.cli.common import images_spec
    from imagekit.spec import load_spec
    from imagekit.spec.loader import default_spec_path

    path = default_spec_path(images_spec(given))
    if not path.is_file():
        return None
    try:
        return load_spec(path)
    except Exception:  # noqa: BLE001 - no usable spec here: promote by reference goes on
        return None


def _promote_setup(platform: str | None, insecure: list[str], ca_file: Path | None,
                   deadline: float | None, trust_key: list[Path] | None,
                   trust_policy: Path | None, evidence_dir: Path | None,
                   spec: Path | None = None
                   ) -> tuple[Platform | None, RegistryOptions, TrustPolicy, EvidenceStore,
                              ImagesSpec | None]:
    """What one image's promote and a release's share: the platform asked for, the registry
    options (promote's upload chunk), the trust to gate on, the evidence store and the images
    spec here (None when none loads)."""
    from imagekit.oci import Platform

    wanted = Platform.parse(platform) if platform is not None else None
    chunk = settings().upload_chunk
    options = _options(insecure, ca_file, deadline, chunk_size=chunk or PROMOTE_CHUNK_BYTES,
                       chunk_grow_to=None if chunk else PROMOTE_CHUNK_MAX)
    images = _spec_here(spec)
    if images is not None and images.registries:  # the registries file (IMAGEKIT_REGISTRIES) wins
        options = options.model_copy(update={"shapes": {**images.registries, **options.shapes}})
    return (wanted, options, trustopts.load(trust_key, trust_policy),
            evidence_store(evidence_dir), images)


@app.command("promote", cls=_HopOrderCommand)
@guarded
def promote_cmd(
    ctx: typer.Context,
    sources: list[str] = typer.Argument(
        None, metavar="SRC",
        help="The images to promote: each a spec image NAME (its latest verified build) or a "
             "reference (tag or @digest). Several sources promote a release at once: --via "
             "and --to then name a REGISTRY[/NAMESPACE] and each image lands at "
             "NAMESPACE/<its repository's last component>:<its tag>."),
    via: list[str] = option("--via"),
    awaited: list[str] = option("--await"),
    to: str = option("--to"),
    await_deadline: float = option("--await-timeout"),
    await_interval: float = option("--await-interval"),
    all_platforms: bool = option("--all-platforms"),
    platform: str = option("--only-platform"),
    key: Path = option("--key", dir_okay=False,
                       note="Signs the promotion chain and attaches it at every endpoint."),
    force: bool = option("--force"),
    reason: str = option("--reason"),
    fail_fast: bool = option("--fail-fast"),
    spec: Path = SpecOpt,
    trust_key: list[Path] = TrustKeyOpt,
    trust_policy: Path = TrustPolicyOpt,
    json_output: bool = JsonOpt,
    insecure: list[str] = Insecure,
    ca_file: Path = CaFile,
    evidence_dir: Path = EvidenceDir,
    deadline: float | None = DeadlineOpt,
    verbose: bool = VerboseOpt,
) -> None:
    """Copy REF hop by hop (--via … --to), each hop verified by reading the digest back
    (several SRC: a release, every image at once, exit status the worst image's);
    --await hops are not copied to but polled until they serve the digest. Where the local
    evidence has nothing about the digest, --trust-key lets the statements signed at the
    source decide the gate (named in its reasons)."""
    from imagekit.cli.common import images_spec
    from imagekit.inputs import positive
    from imagekit.promote import run_promote
    from imagekit.promote.await_ import AwaitHop, AwaitPolicy
    from imagekit.report.gate import enforce  # the gate, handed to promotion

    if force and not (reason or "").strip():
        raise InvalidInput("--force needs a non-empty --reason \"…\" (it is recorded)")
    if key is not None:  # the signing key before the gate and before any copy
        from imagekit.attest.keys import load_private

        load_private(key)
    deadline = _transport_knobs(deadline, verbose)
    if all_platforms and platform:
        raise InvalidInput("--all-platforms and --only-platform exclude each other")
    await_deadline = positive(await_deadline, "--await-timeout", maximum=7 * 86400)
    await_interval = positive(await_interval, "--await-interval", maximum=3600)
    order = ctx.meta.get("imagekit.hop_order", [])
    sources = list(sources or [])
    if not sources:
        raise InvalidInput("give at least one SRC to promote (a spec image NAME or a REF)")
    if len(sources) > 1:
        _promote_release(sources, via, awaited, order, to, key=key, force=force, reason=reason,
                         all_platforms=all_platforms, platform=platform,
                         await_deadline=await_deadline, await_interval=await_interval,
                         fail_fast=fail_fast, trust_key=trust_key, trust_policy=trust_policy,
                         json_output=json_output, insecure=insecure, ca_file=ca_file,
                         evidence_dir=evidence_dir, deadline=deadline, verbose=verbose,
                         spec=spec)
        return
    source = sources[0]
    hops = _hops(via, awaited, order)
    if to is None and not (hops and isinstance(hops[-1], AwaitHop)):
        raise InvalidInput("give --to REF (or end the hops with --await REF)")
    to_ref = _ref(to, "--to") if to is not None else None
    wanted, options, trust, store, loaded_spec = _promote_setup(
        platform, insecure, ca_file, deadline, trust_key, trust_policy, evidence_dir, spec)
    from imagekit.registry import ClientPool

    with ClientPool(options) as reader:
        source_ref = _source(source, store, trust=trust, pool=reader, spec=spec)
        _distinct_hops(source_ref, hops, to_ref)
        gate = functools.partial(_final_hop_gate(enforce, to_ref, loaded_spec), trust=trust,
                                 pull=trustopts.puller(trust, source_ref, reader),
                                 spec_path=images_spec(spec), state_dir=settings().state_dir)
        if key is not None:   # the chain will be signed: only over links the evidence holds
            from imagekit.attest.statements import required_links

            gate = functools.partial(
                gate, sign_links=required_links(settings().required_links_list()))
        with progress_sink(json_output, verbose, "promote") as sink:
            result, where = run_promote(
                source_ref, hops, to_ref, store=store, all_platforms=all_platforms,
                platform=wanted, options=options, progress=sink, gate=gate, force=force,
                reason=reason,
                await_policy=AwaitPolicy(deadline_s=await_deadline,
                                         interval_s=await_interval))
    attached = []
    if key is not None:
        from imagekit.attest.run import attest_promotion
        from imagekit.registry import ClientPool

        with ClientPool(options) as pool:
            attached = attest_promotion(result, key, store=store, pool=pool, evidence=where,
                                        required=settings().required_links_list(),
                                        trust=trust,
                                        required_checks=settings().required_checks_list(),
                                        spec_path=images_spec(spec),
                                        state_dir=settings().state_dir)
    if json_output:
        data = result.model_dump(mode="json")
        data["evidence"] = where
        if key is not None:
            data["attestations"] = [a.model_dump(mode="json") for a in attached]
        data["rate_limits"] = _rate_limits()
        print_json(data)
        return
    if result.digest_changed:
        console.print(f"note: {result.digest_changed}", markup=False, soft_wrap=True)
    console.print(f"promoted {result.digest}", markup=False, soft_wrap=True)
    gate_info = result.gate if isinstance(result.gate, dict) else {}
    for source in gate_info.get("sources") or []:
        console.print(f"  gate source: {source}", markup=False, soft_wrap=True)
    for ignored in gate_info.get("ignored") or []:
        console.print(f"  gate ignored: {ignored}", markup=False, soft_wrap=True)
    for hop in result.hops:
        if hop.mode == "await":
            console.print(f"  {hop.endpoint}: awaited, verified={hop.verified} "
                          f"{len(hop.polls)} poll(s) {hop.seconds:.2f}s: {hop.read_back}",
                          markup=False, soft_wrap=True)
            continue
        console.print(f"  {hop.endpoint}: verified={hop.verified} bytes_moved={hop.bytes_moved} "
                      f"copied={hop.blobs_copied} skipped={hop.blobs_skipped} "
                      f"mounted={hop.blobs_mounted} {hop.seconds:.2f}s", markup=False,
                      soft_wrap=True)
        for note in hop.notes:
            console.print(f"    note: {note}", markup=False, soft_wrap=True)
    for item in attached:
        console.print(f"  attested {item.predicate_type} at {item.repository} "
                      f"({item.manifest[:19]}, {item.listing})", markup=False, soft_wrap=True)
    for line in _rate_limits():
        console.print(f"rate limit: {line}", markup=False, soft_wrap=True)
    console.print(f"evidence: {where}", markup=False, soft_wrap=True)


def _release_hops(via: list[str], awaited: list[str], order: list[tuple[str, str]]) -> list:
    """--via and --await of a release, in command-line order, as REGISTRY[/NAMESPACE]s."""
    from imagekit.promote.release import ReleaseTarget

    if sorted(v for f, v in order if f == "--via") != sorted(via) or \
            sorted(v for f, v in order if f == "--await") != sorted(awaited):
        order = [("--via", v) for v in via] + [("--await", a) for a in awaited]
    return [("await", ReleaseTarget.parse(value, flag)) if flag == "--await"
            else ReleaseTarget.parse(value, flag) for flag, value in order]


def _promote_release(sources: list[str], via: list[str], awaited: list[str],
                     order: list[tuple[str, str]], to: str | None, *, key: Path | None,
                     force: bool, reason: str | None, all_platforms: bool,
                     platform: str | None, await_deadline: float, await_interval: float,
                     fail_fast: bool, trust_key: list[Path], trust_policy: Path | None,
                     json_output: bool, insecure: list[str], ca_file: Path | None,
                     evidence_dir: Path | None, deadline: float | None, verbose: bool,
                     spec: Path | None = None) -> None:
    """`promote SRC SRC ... --via REG[/NS] --to REG[/NS]`: a release, each image gated,
    copied, read back (and signed) on its own, all at once; exit status the worst image's."""
    from imagekit.cli.common import images_spec
    from imagekit.promote.await_ import AwaitPolicy
    from imagekit.promote.release import (
        ImageOutcome,
        ReleaseImage,
        ReleaseTarget,
        check_distinct,
        place_hops,
        run_release,
    )
    from imagekit.registry import ClientPool
    from imagekit.report.gate import enforce
    from imagekit.results import Status

    targets = _release_hops(via, awaited, order)
    if to is None and not (targets and isinstance(targets[-1], tuple)):
        raise InvalidInput("give --to REGISTRY[/NAMESPACE] (or end the hops with --await)")
    to_target = ReleaseTarget.parse(to, "--to") if to is not None else None
    wanted, options, trust, store, loaded_spec = _promote_setup(
        platform, insecure, ca_file, deadline, trust_key, trust_policy, evidence_dir, spec)
    with ClientPool(options) as reader:
        images: list[ReleaseImage] = []
        final_gate = None  # every image ends on the same registry: its requirements once
        for given in sources:  # every NAME resolved, every place checked, before any copy
            source_ref = _source(given, store, trust=trust, pool=reader, spec=spec)
            hops, to_ref = place_hops(source_ref, targets, to_target)
            _distinct_hops(source_ref, hops, to_ref)
            final_gate = final_gate or _final_hop_gate(enforce, to_ref, loaded_spec)
            gate = functools.partial(final_gate, trust=trust,
                                     pull=trustopts.puller(trust, source_ref, reader),
                                     spec_path=images_spec(spec),
                                     state_dir=settings().state_dir)
            if key is not None:
                from imagekit.attest.statements import required_links

                gate = functools.partial(
                    gate, sign_links=required_links(settings().required_links_list()))
            images.append(ReleaseImage(given=given, source=source_ref, via=hops, to=to_ref,
                                       gate=gate))
        check_distinct(images)
        attached: dict[str, list] = {}

        def sign(outcome: ImageOutcome) -> ImageOutcome:
            """The image's promotion chain signed at every endpoint, as for one image."""
            if key is None or outcome.result is None:
                return outcome
            from imagekit.attest.run import attest_promotion
            from imagekit.errors import ImagekitError

            try:
                with ClientPool(options) as pool:
                    attached[outcome.given] = attest_promotion(
                        outcome.result, key, store=store, pool=pool, evidence=outcome.evidence,
                        required=settings().required_links_list(), trust=trust,
                        required_checks=settings().required_checks_list(),
                        spec_path=images_spec(spec), state_dir=settings().state_dir)
            except ImagekitError as exc:
                return outcome.model_copy(update={
                    "status": Status.ERROR if exc.exit_code != 1 else Status.FAIL,
                    "exit_code": exc.exit_code, "error": f"signing: {exc.one_line()}"[:1000]})
            return outcome

        with progress_sink(json_output, verbose, "promote") as sink:
            outcome = run_release(
                images, store=store, options=options, progress=sink,
                all_platforms=all_platforms, platform=wanted, force=force, reason=reason,
                await_policy=AwaitPolicy(deadline_s=await_deadline, interval_s=await_interval),
                fail_fast=fail_fast, after=sign)
    if json_output:
        data = outcome.model_dump(mode="json")
        for image in data["images"]:
            if key is not None and image["given"] in attached:
                image["attestations"] = [a.model_dump(mode="json")
                                         for a in attached[image["given"]]]
        data["rate_limits"] = _rate_limits()
        print_json(data)
    else:
        landed = sum(o.status is Status.PASS for o in outcome.images)
        console.print(f"promoted {landed} of {len(outcome.images)} image(s) in "
                      f"{outcome.seconds:.2f}s", markup=False, soft_wrap=True)
        for image in outcome.images:
            if image.result is None or image.status is not Status.PASS:
                console.print(f"  {image.status.value} {image.given} -> {image.destination}: "
                              f"{image.error}", markup=False, soft_wrap=True)
                continue
            moved = sum(h.bytes_moved for h in image.result.hops)
            console.print(f"  PASS {image.given} -> {image.destination} {image.digest} "
                          f"({len(image.result.hops)} hop(s) verified, bytes_moved={moved}, "
                          f"{image.seconds:.2f}s)", markup=False, soft_wrap=True)
            for item in attached.get(image.given, []):
                console.print(f"    attested {item.predicate_type} at {item.repository} "
                              f"({item.manifest[:19]}, {item.listing})", markup=False,
                              soft_wrap=True)
            console.print(f"    evidence: {image.evidence}", markup=False, soft_wrap=True)
        for line in _rate_limits():
            console.print(f"rate limit: {line}", markup=False, soft_wrap=True)
        console.print(f"evidence: {outcome.evidence}", markup=False, soft_wrap=True)
    if outcome.exit_code:
        raise typer.Exit(outcome.exit_code)
