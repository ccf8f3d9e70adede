"""`imagekit verify-copy` and `imagekit promote`: registry operations for people and scripts.

Credentials come only from docker's config.json (`$DOCKER_CONFIG` or ~/.docker): there is no
password flag on purpose. Plain HTTP is used without flags only for loopback registries.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from imagekit.cli.app import (app, console, err_console, evidence_store, guarded, print_json,
                              show_progress)
from imagekit.errors import InvalidInput

if TYPE_CHECKING:  # each command imports what it uses (`imagekit --help` stays fast)
    from rich.progress import Progress

    from imagekit.oci import ImageReference
    from imagekit.registry import RegistryOptions

Insecure = typer.Option([], "--insecure", metavar="REGISTRY",
                        help="Allow plain HTTP / unverified TLS for this registry (host:port); "
                             "loopback registries need no flag.")
CaFile = typer.Option(None, "--ca-file", exists=True, dir_okay=False,
                      help="Extra CA certificate (PEM) to trust; /etc/docker/certs.d/<host>/ "
                           "is read too.")
EvidenceDir = typer.Option(None, "--evidence-dir", envvar="IMAGEKIT_EVIDENCE_DIR",
                           help="Evidence store root (default ./.evidence).")
PlatformOpt = typer.Option("linux/amd64", "--platform", help="Platform to pick from an index.")
JsonOpt = typer.Option(False, "--json", help="Print one JSON document (no progress bars).")
DeadlineOpt = typer.Option(None, "--deadline", metavar="SECONDS", envvar="IMAGEKIT_DEADLINE",
                           help="Longest one registry call may go without progress, retries "
                                "included (default 30).")
VerboseOpt = typer.Option(False, "--verbose", help="Show retries and HTTP requests on stderr.")


def _transport_knobs(deadline: float | None, verbose: bool) -> None:
    """--deadline reaches every registry client of the command (RetryPolicy.from_env);
    --verbose lets the retry and httpx loggers speak (silent otherwise)."""
    import os

    if deadline is not None:
        from imagekit.inputs import positive

        os.environ["IMAGEKIT_DEADLINE"] = repr(positive(deadline, "--deadline",
                                                        maximum=86400))
    if verbose:
        import logging
        import sys

        logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                            format="imagekit: %(name)s: %(message)s")


def _rate_limits() -> list[str]:
    from imagekit.registry import ratelimit

    return [str(limit) for limit in ratelimit.seen()]


class RichSink:
    """ProgressSink on a rich Progress (thread-safe: blob copies run in a pool)."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.lock = threading.Lock()

    def add(self, description: str, total: int | None) -> int:
        with self.lock:
            return int(self.progress.add_task(description, total=total))

    def advance(self, task: int, amount: int) -> None:
        self.progress.advance(task, amount)  # type: ignore[arg-type]

    def finish(self, task: int) -> None:
        self.progress.remove_task(task)  # type: ignore[arg-type]


@contextmanager
def progress_sink(json_output: bool):
    if not show_progress(json_output):
        from imagekit.registry.progress import NullProgress

        yield NullProgress()
        return
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                  TransferSpeedColumn(), TimeRemainingColumn(), console=err_console,
                  transient=True) as progress:
        yield RichSink(progress)


def _options(insecure: list[str], ca_file: Path | None) -> RegistryOptions:
    from imagekit.inputs import pem_ca_file
    from imagekit.registry import RegistryOptions

    if ca_file is not None:
        pem_ca_file(ca_file)
    return RegistryOptions(insecure=frozenset(insecure), ca_file=ca_file)


def _ref(text: str, what: str) -> ImageReference:
    from imagekit.oci import ImageReference

    try:
        return ImageReference.parse(text)
    except InvalidInput as exc:
        raise InvalidInput(f"{what}: {exc.message}", where=exc.where) from None


@app.command("verify-copy")
@guarded
def verify_copy_cmd(
    official: str = typer.Argument(..., help="The official image (tag or @digest)."),
    copy: str = typer.Argument(..., help="The copy to check against it."),
    platform: str = PlatformOpt,
    diffids: bool = typer.Option(False, "--diffids",
                                 help="Download, decompress and hash every layer of the copy."),
    json_output: bool = JsonOpt,
    insecure: list[str] = Insecure,
    ca_file: Path = CaFile,
    evidence_dir: Path = EvidenceDir,
    deadline: float = DeadlineOpt,
    verbose: bool = VerboseOpt,
) -> None:
    """Is COPY content-identical to OFFICIAL? Exit 0 same content, 1 different, 2 error."""
    from imagekit.errors import DigestMismatch, NotFound, TransportError, Unauthorized
    from imagekit.oci import Platform
    from imagekit.registry import ClientPool
    from imagekit.verify import record_evidence, verify_copy
    from imagekit.verify.copy import record_failure

    _transport_knobs(deadline, verbose)
    official_ref, copy_ref = _ref(official, "OFFICIAL"), _ref(copy, "COPY")
    wanted = Platform.parse(platform)
    store = evidence_store(evidence_dir)
    options = _options(insecure, ca_file)
    try:
        with ClientPool(options) as pool, \
                progress_sink(json_output) as sink:
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


@app.command("promote")
@guarded
def promote_cmd(
    source: str = typer.Argument(..., help="The image to promote (tag or @digest)."),
    via: list[str] = typer.Option([], "--via", metavar="REF",
                                  help="A relay hop, in order (repeatable)."),
    to: str = typer.Option(..., "--to", metavar="REF", help="The final destination."),
    all_platforms: bool = typer.Option(False, "--all-platforms",
                                       help="Copy the whole index and every platform."),
    platform: str = PlatformOpt,
    force: bool = typer.Option(False, "--force", help="Promote despite the evidence gate "
                                                      "(needs --reason; recorded)."),
    reason: str = typer.Option(None, "--reason", help="Why --force (recorded in evidence)."),
    json_output: bool = JsonOpt,
    insecure: list[str] = Insecure,
    ca_file: Path = CaFile,
    evidence_dir: Path = EvidenceDir,
    deadline: float = DeadlineOpt,
    verbose: bool = VerboseOpt,
) -> None:
    """Copy SOURCE hop by hop (--via … --to), each hop verified by reading the digest back."""
    from imagekit.oci import Platform
    from imagekit.promote import run_promote
    from imagekit.report.gate import enforce      # the gate, handed to promotion

    if force and not (reason or "").strip():
        raise InvalidInput("--force needs a non-empty --reason \"…\" (it is recorded)")
    _transport_knobs(deadline, verbose)
    source_ref = _ref(source, "SOURCE")
    via_refs = [_ref(v, "--via") for v in via]
    to_ref = _ref(to, "--to")
    wanted, options = Platform.parse(platform), _options(insecure, ca_file)
    store = evidence_store(evidence_dir)
    with progress_sink(json_output) as sink:
        result, where = run_promote(
            source_ref, via_refs, to_ref, store=store,
            all_platforms=all_platforms, platform=wanted,
            options=options, progress=sink, gate=enforce, force=force, reason=reason)
    if json_output:
        data = result.model_dump(mode="json")
        data["evidence"] = where
        data["rate_limits"] = _rate_limits()
        print_json(data)
        return
    console.print(f"promoted {result.digest}", markup=False, soft_wrap=True)
    for hop in result.hops:
        console.print(f"  {hop.endpoint}: verified={hop.verified} bytes_moved={hop.bytes_moved} "
                      f"copied={hop.blobs_copied} skipped={hop.blobs_skipped} "
                      f"mounted={hop.blobs_mounted} {hop.seconds:.2f}s", markup=False, soft_wrap=True)
        for note in hop.notes:
            console.print(f"    note: {note}", markup=False, soft_wrap=True)
    for line in _rate_limits():
        console.print(f"rate limit: {line}", markup=False, soft_wrap=True)
    console.print(f"evidence: {where}", markup=False, soft_wrap=True)
