"""verify-copy: compare an official image and a copy and give one verdict.

The record: a mirrored base was used only after its config digest matched the official one and
all 63 decompressed layers' diffIDs were identical, although the compressed layer digests
differed — "it cannot be described as all blobs being identical". So three facts are kept
apart and reported separately:

- config digest equal (the image ID: same config = same diff_ids and metadata);
- `rootfs.diff_ids` equal N/N (the uncompressed layer identities);
- compressed layer digests equal, or "differ (different compression)".

Those are what the two configs *claim*. With `diffids=True` every layer of the copy is really
downloaded, decompressed and hashed, and each uncompressed sha256 must equal the diff_id in
both configs; only that proves the copy's blobs hold the content the config promises.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Literal

from pydantic import BaseModel, ConfigDict

from imagekit.errors import ImagekitError, InvalidInput
from imagekit.evidence import EvidenceStore, Role, Subject
from imagekit.evidence.kinds import VerifyCopyEvidence
from imagekit.oci import ImageReference, Platform, mediatypes
from imagekit.oci.platform import LINUX_AMD64
from imagekit.registry import ClientPool
from imagekit.registry.images import ResolvedImage, resolve_image
from imagekit.registry.progress import NullProgress, ProgressSink
from imagekit.results import CheckResult, Status
from imagekit.verify.diffids import GZIP_IMPL, diff_id, hash_in_thread


class LayerCheck(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    index: int
    media_type: str
    copy_blob: str
    official_blob: str | None
    compressed_equal: bool
    official_diff_id: str | None
    copy_diff_id: str | None
    computed_diff_id: str | None = None
    uncompressed_size: int | None = None
    status: Status
    detail: str = ""


class VerifyCopyResult(BaseModel):
    """What `verify-mirror --json` prints and the evidence keeps."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    official: str
    copy_ref: str
    platform: str
    verdict: Literal["identical-content", "different"]
    official_digest: str
    copy_digest: str
    official_image_digest: str
    copy_image_digest: str
    official_config_digest: str
    copy_config_digest: str
    config_digest_equal: bool
    diff_ids_equal: bool
    diff_ids_matching: int
    layers: int
    official_layers: int
    compressed_digests_equal: bool
    compressed_digests: str
    diffids_checked: bool
    diffids_verified: int | None = None
    decompressor: str | None = None
    differences: list[str]
    layer_checks: list[LayerCheck]
    summary: list[str]

    def json_view(self) -> dict:
        """The documented --json fields first, the details after."""
        data = self.model_dump(mode="json")
        ordered = {"official": data.pop("official"), "copy": data.pop("copy_ref")}
        ordered.update(data)
        return ordered


def _layer_diff_ids(image: ResolvedImage) -> list[str]:
    return [str(d) for d in image.config.diff_ids]


def verify_copy(official: ImageReference, copy: ImageReference, *,
                platform: Platform = LINUX_AMD64, diffids: bool = False,
                pool: ClientPool | None = None, progress: ProgressSink | None = None,
                workers: int | None = None) -> VerifyCopyResult:
    progress = progress or NullProgress()
    own_pool = pool is None
    pool = pool or ClientPool()
    try:
        off = resolve_image(pool.get(official.registry), official, platform)
        cop = resolve_image(pool.get(copy.registry), copy, platform)
        return _compare(off, cop, platform, diffids, pool, progress, workers)
    finally:
        if own_pool:
            pool.close()


def _compare(off: ResolvedImage, cop: ResolvedImage, platform: Platform, diffids: bool,
             pool: ClientPool, progress: ProgressSink, workers: int | None
             ) -> VerifyCopyResult:
    differences: list[str] = []
    off_ids, cop_ids = _layer_diff_ids(off), _layer_diff_ids(cop)
    config_equal = off.config_digest == cop.config_digest
    if not config_equal:
        differences.append(f"config digest differs: official {off.config_digest}, copy "
                           f"{cop.config_digest}")
    matching = sum(1 for a, b in zip(off_ids, cop_ids, strict=False) if a == b)
    diff_ids_equal = off_ids == cop_ids
    if len(off_ids) != len(cop_ids):
        differences.append(f"layer count differs: official {len(off_ids)}, copy {len(cop_ids)}")
    for index, (a, b) in enumerate(zip(off_ids, cop_ids, strict=False)):
        if a != b:
            differences.append(f"layer {index}: diff_id differs (official {a}, copy {b})")
    if len(cop.manifest.layers) != len(cop_ids):
        differences.append(f"copy manifest has {len(cop.manifest.layers)} layers but its config "
                           f"lists {len(cop_ids)} diff_ids")
    off_blobs = [str(d) for d in off.manifest.layer_digests]
    cop_blobs = [str(d) for d in cop.manifest.layer_digests]
    compressed_equal = off_blobs == cop_blobs
    differing_blobs = sum(1 for i, b in enumerate(cop_blobs)
                          if i >= len(off_blobs) or off_blobs[i] != b)

    computed: dict[int, tuple[str, int] | ImagekitError] = {}
    if diffids:
        computed = _recompute(cop, pool, progress, workers)

    checks: list[LayerCheck] = []
    verified = 0
    for index, layer in enumerate(cop.manifest.layers):
        off_id = off_ids[index] if index < len(off_ids) else None
        cop_id = cop_ids[index] if index < len(cop_ids) else None
        status, detail, got, size = Status.PASS, "", None, None
        if off_id != cop_id:
            status, detail = Status.FAIL, "diff_id differs between the configs"
        if diffids:
            outcome = computed.get(index)
            if isinstance(outcome, ImagekitError):
                status, detail = Status.FAIL, f"cannot recompute: {outcome.one_line()}"
                differences.append(f"layer {index}: {detail}")
            elif outcome is not None:
                got, size = outcome
                if got != cop_id or got != off_id:
                    status = Status.FAIL
                    detail = (f"uncompressed sha256 {got} != diff_id (copy config {cop_id}, "
                              f"official {off_id})")
                    differences.append(f"layer {index}: {detail}")
                elif status is Status.PASS:
                    verified += 1
        checks.append(LayerCheck(
            index=index, media_type=layer.media_type, copy_blob=str(layer.digest),
            official_blob=off_blobs[index] if index < len(off_blobs) else None,
            compressed_equal=index < len(off_blobs) and off_blobs[index] == str(layer.digest),
            official_diff_id=off_id, copy_diff_id=cop_id, computed_diff_id=got,
            uncompressed_size=size, status=status, detail=detail))

    identical = not differences and config_equal and diff_ids_equal and \
        (not diffids or verified == len(cop_ids))
    n = len(cop_ids)
    compressed_text = "equal" if compressed_equal else \
        f"differ (different compression): {differing_blobs}/{len(cop_blobs)} blobs"
    summary = [
        f"config digest: {'equal' if config_equal else 'DIFFERS'} "
        f"(official {off.config_digest.short}, copy {cop.config_digest.short})",
        f"diff_ids: {'equal' if diff_ids_equal else 'DIFFER'} {matching}/{max(n, len(off_ids))}",
        f"compressed layer digests: {compressed_text}",
    ]
    if diffids:
        summary.append(f"layers decompressed and hashed: {verified}/{n} match their diff_ids "
                       f"({GZIP_IMPL} gzip)")
    else:
        summary.append("layer content not downloaded (use --diffids to recompute every diffID)")
    if identical:
        summary.append("verdict: identical content" + (
            "" if compressed_equal else " (compressed blobs are NOT identical: "
                                        "different compression of the same layers)"))
    else:
        summary.append("verdict: DIFFERENT — " + "; ".join(differences[:5]))
    return VerifyCopyResult(
        official=str(off.reference), copy_ref=str(cop.reference), platform=str(platform),
        verdict="identical-content" if identical else "different",
        official_digest=str(off.top_digest), copy_digest=str(cop.top_digest),
        official_image_digest=str(off.digest), copy_image_digest=str(cop.digest),
        official_config_digest=str(off.config_digest), copy_config_digest=str(cop.config_digest),
        config_digest_equal=config_equal, diff_ids_equal=diff_ids_equal,
        diff_ids_matching=matching, layers=n, official_layers=len(off_ids),
        compressed_digests_equal=compressed_equal, compressed_digests=compressed_text,
        diffids_checked=diffids, diffids_verified=verified if diffids else None,
        decompressor=GZIP_IMPL if diffids else None, differences=differences,
        layer_checks=checks, summary=summary)


#: Bytes per downloaded piece fed to the decompressor (see `lean.READ_SIZE`).
DIFFID_PIECE = 128 << 10


def _recompute(image: ResolvedImage, pool: ClientPool, progress: ProgressSink,
               workers: int | None) -> dict[int, tuple[str, int] | ImagekitError]:
    """Download, decompress and hash every layer of `image`, layers in parallel."""
    client = pool.get(image.reference.registry)
    repository = image.reference.repository

    def one(index: int) -> tuple[int, tuple[str, int] | ImagekitError]:
        layer = image.manifest.layers[index]
        task = progress.add(f"layer {index} {layer.digest.short}", layer.size)
        try:
            compression = mediatypes.layer_compression(layer.media_type)
        except ValueError:
            return index, InvalidInput(f"unknown layer media type {layer.media_type}")

        def chunks():
            for data in client.blob_chunks(repository, layer.digest, layer.size,
                                           piece=DIFFID_PIECE):
                progress.advance(task, len(data))
                yield data

        try:
            digest, size = diff_id(chunks(), compression, threaded_hash=threaded)
            return index, (str(digest), size)
        except ImagekitError as exc:
            return index, exc
        finally:
            progress.finish(task)

    count = len(image.manifest.layers)
    # a layer per core: hashing and inflating release the GIL, so each worker keeps a core
    # busy; more workers than cores measured slower on the loaded 2-core machine (4 workers
    # 1.57-1.61 s, 2 workers 1.38-1.53 s in process, 128 KiB pieces, load average 5.4-6.7)
    workers = workers or max(1, min(count, os.cpu_count() or 2))
    threaded = hash_in_thread(count, workers)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="diffid") as executor:
        return dict(executor.map(one, range(count)))


def evidence_of(result: VerifyCopyResult) -> VerifyCopyEvidence:
    """The comparison's evidence result (imagekit.evidence.kinds): named fields, no lines."""
    return VerifyCopyEvidence(
        official=result.official, copy_ref=result.copy_ref, platform=result.platform,
        verdict=result.verdict, official_digest=result.official_digest,
        copy_digest=result.copy_digest, config_digest_equal=result.config_digest_equal,
        diff_ids_equal=result.diff_ids_equal, diff_ids_matching=result.diff_ids_matching,
        layers=result.layers, official_layers=result.official_layers,
        compressed_digests_equal=result.compressed_digests_equal,
        diffids_checked=result.diffids_checked, diffids_verified=result.diffids_verified,
        differences=list(result.differences))


def record_evidence(store: EvidenceStore, result: VerifyCopyResult,
                    raw: dict[str, bytes] | None = None) -> str:
    """One `verify-copy` attempt about the COPY (subject; filed under its digest), compared with
    the official (role compared_with): a copy that fails blocks the copy, never the official.
    Returns its directory."""
    subjects = [Subject.of(result.copy_digest, Role.SUBJECT, result.copy_ref),
                Subject.of(result.official_digest, Role.COMPARED_WITH, result.official)]
    with store.attempt(result.copy_digest, "verify-copy", subjects=subjects,
                       official=result.official, copy=result.copy_ref, platform=result.platform,
                       copy_digest=result.copy_digest) as attempt:
        attempt.write_json("result.json", result)
        attempt.write_text("summary.txt", "\n".join(result.summary) + "\n")
        for name, data in (raw or {}).items():
            attempt.write_bytes(name, data)
        attempt.write_result(evidence_of(result))
        attempt.finish(summary=_verdict_line(result)[:300], checks=checks_of(result))
        return str(attempt.path)


def checks_of(result: VerifyCopyResult) -> list[CheckResult]:
    """The comparison's checks, worded from the result's named fields."""
    n = max(result.layers, result.official_layers)
    checks = [
        CheckResult(name="config-digest", status=Status.PASS if result.config_digest_equal
                    else Status.FAIL,
                    detail=f"config digest: {'equal' if result.config_digest_equal else 'DIFFERS'}"
                           f" (official {result.official_config_digest}, copy "
                           f"{result.copy_config_digest})",
                    data={"official": result.official_config_digest,
                          "copy": result.copy_config_digest}),
        CheckResult(name="diff-ids", status=Status.PASS if result.diff_ids_equal else Status.FAIL,
                    detail=f"diff_ids: {'equal' if result.diff_ids_equal else 'DIFFER'} "
                           f"{result.diff_ids_matching}/{n}",
                    data={"matching": result.diff_ids_matching, "layers": result.layers}),
        CheckResult(name="compressed-digests", status=Status.PASS,
                    detail=f"compressed layer digests: {result.compressed_digests} "
                           "(informational: content identity is decided by diff_ids)",
                    data={"equal": result.compressed_digests_equal}),
    ]
    if result.diffids_checked:
        content_ok = result.diffids_verified == result.layers == result.official_layers
        checks.append(CheckResult(
            name="layer-content", status=Status.PASS if content_ok else Status.FAIL,
            detail=f"layers decompressed and hashed: {result.diffids_verified}/{result.layers} "
                   f"match their diff_ids ({result.decompressor} gzip)",
            data={"verified": result.diffids_verified, "layers": result.layers}))
    return checks


def _verdict_line(result: VerifyCopyResult) -> str:
    if result.verdict == "identical-content":
        return "verdict: identical content" + ("" if result.compressed_digests_equal else
                                               " (compressed blobs differ: different "
                                               "compression of the same layers)")
    return "verdict: DIFFERENT — " + "; ".join(result.differences[:5])


def record_failure(store: EvidenceStore, official: ImageReference, copy: ImageReference,
                   error: ImagekitError) -> str:
    """An ERROR attempt for a comparison that could not be made (an image not found, refused,
    or lying about its digest): the failure is kept, never a verdict. About the copy: filed
    under its digest when the reference pins one (so its gate refuses), else under a name
    derived from it; the official, when pinned, is only compared with."""
    subjects = []
    if copy.digest is not None:
        subjects.append(Subject.of(copy.digest, Role.SUBJECT, str(copy)))
    if official.digest is not None:
        subjects.append(Subject.of(official.digest, Role.COMPARED_WITH, str(official)))
    key = copy.digest or f"verify-copy-{copy.registry}-{copy.repository}"[:120]
    with store.attempt(key, "verify-copy", subjects=subjects, official=str(official),
                       copy=str(copy)) as attempt:
        attempt.write_text("error.txt", error.one_line() + "\n")
        attempt.write_result(VerifyCopyEvidence(
            official=str(official), copy_ref=str(copy), verdict="not-compared",
            official_digest=str(official.digest) if official.digest else None,
            copy_digest=str(copy.digest) if copy.digest else None,
            error=error.one_line()[:1000]))
        attempt.finish(Status.ERROR, summary=f"{type(error).__name__}: {error.one_line()}"[:300],
                       checks=[CheckResult(name="comparison", status=Status.ERROR,
                                           detail=error.one_line()[:1000])])
        return str(attempt.path)
