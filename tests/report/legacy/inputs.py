"""Fixed inputs of the runs in the committed old-layout store (see generate.py, runs.py)."""

from __future__ import annotations

import datetime as dt
import hashlib
from pathlib import Path

from imagekit.build import BuildRecord
from imagekit.imagesverify.models import ImageEntry
from imagekit.oci import Digest, ImageReference
from imagekit.promote.copy import HopRecord, PromoteResult
from imagekit.results import CheckResult, Status
from imagekit.verify.copy import LayerCheck, VerifyCopyResult

ROOT = Path(__file__).resolve().parents[3]
STORE = Path(__file__).resolve().parent / "store"
PREFLIGHT_SAMPLE = ROOT / "gpu_checks" / "samples" / "2026-11-29-h200x1.json"


def fake(label: str) -> Digest:
    return Digest.parse("sha256:" + hashlib.sha256(f"legacy-{label}".encode()).hexdigest())


DIGEST = fake("manifest")
IMAGE_ID = fake("config")
COPY_DIGEST = fake("copy-manifest")
BASE = ImageReference.parse(f"127.0.0.1:5001/imagekit-standins/sglang-base@{fake('base')}")
LAYER = fake("layer")
LIE = fake("lie")

BUILD = BuildRecord(
    name="sglang", profile="local", engine="sglang", base=BASE, cache_key="0" * 64,
    local_tag="imagekit-local/sglang:0000000000000000", image_id=IMAGE_ID,
    reference=ImageReference.parse(f"127.0.0.1:5001/imagekit/sglang@{DIGEST}"), digest=DIGEST,
    build_args={"BASE_IMAGE": str(BASE)}, seconds=35.2,
    built=dt.datetime(2026, 12, 1, 8, 0, tzinfo=dt.UTC), evidence="")

PROBE_CHECKS = [
    CheckResult(name="pip_check", status=Status.PASS, detail="No broken requirements found."),
    CheckResult(name="torch_arch", status=Status.FAIL,
                detail="sm_90 not in torch.cuda.get_arch_list() == []"),
]
VERSIONS = {"python": "3.11.2", "torch": "2.13.0+cpu", "pillow": "11.3.0", "av": None}

ENTRY = ImageEntry(
    image="sglang", engine="sglang", profile="local", reference=str(BUILD.reference),
    digest=str(DIGEST), image_id=str(IMAGE_ID), base=str(BASE), base_digest=str(BASE.digest),
    fix_layers=["RUN python3 -m pip install --no-cache-dir pillow==11.3.0"],
    build_args=BUILD.build_args, versions={"python": "3.11.2", "pillow": "11.3.0",
                                           "torch": "2.13.0+cpu"},
    checks=PROBE_CHECKS, status=Status.FAIL, verdict=Status.PASS, verify_key="2" * 64,
    evidence={"local_tag": BUILD.local_tag})

_LAYER_CHECK = LayerCheck(index=0, media_type="application/vnd.oci.image.layer.v1.tar+gzip",
                          copy_blob=str(fake("copy-blob")), official_blob=str(fake("blob")),
                          compressed_equal=False, official_diff_id=str(LAYER),
                          copy_diff_id=str(LAYER), computed_diff_id=str(LIE),
                          uncompressed_size=10240, status=Status.FAIL,
                          detail=f"uncompressed sha256 {LIE} != diff_id")
VERIFY_COPY = VerifyCopyResult(
    official=str(BUILD.reference), copy_ref=f"127.0.0.1:5002/mirror/sglang@{COPY_DIGEST}",
    platform="linux/amd64", verdict="different", official_digest=str(DIGEST),
    copy_digest=str(COPY_DIGEST), official_image_digest=str(DIGEST),
    copy_image_digest=str(COPY_DIGEST), official_config_digest=str(IMAGE_ID),
    copy_config_digest=str(IMAGE_ID), config_digest_equal=True, diff_ids_equal=True,
    diff_ids_matching=1, layers=1, official_layers=1, compressed_digests_equal=False,
    compressed_digests="differ (different compression): 1/1 blobs", diffids_checked=True,
    diffids_verified=0, decompressor="python", differences=[f"layer 0: uncompressed {LIE}"],
    layer_checks=[_LAYER_CHECK],
    summary=["config digest: equal", "diff_ids: equal 1/1",
             "compressed layer digests: differ (different compression): 1/1 blobs",
             "layers decompressed and hashed: 0/1 match their diff_ids (python gzip)",
             "verdict: DIFFERENT — layer 0: uncompressed sha256 differs"])

PROMOTE = PromoteResult(
    source="127.0.0.1:5001/imagekit/sglang:rehearsal", digest=str(DIGEST),
    media_type="application/vnd.oci.image.manifest.v1+json", all_platforms=False,
    platform="linux/amd64", gate=None, hops=[
        HopRecord(endpoint=f"127.0.0.1:{port}/imagekit/sglang:rehearsal",
                  registry=f"127.0.0.1:{port}", digest=str(DIGEST), verified=True,
                  bytes_moved=moved, blobs_copied=2, blobs_skipped=0, blobs_mounted=0,
                  manifests_pushed=1, seconds=1.5, read_back="manifest by digest and tag")
        for port, moved in ((5002, 52_428_800), (5003, 52_428_800))])


def bench_rounds() -> list[dict]:
    """Two rounds in the shape of imagekit.acceptance's RoundResult dump."""
    rounds = []
    for index, (concurrency, scale) in enumerate(((1, 1.0), (4, 2.5)), 1):
        def stats(base: float, scale: float = scale) -> dict:
            return {"count": 120, "mean": base * scale * 1.1, "p50": base * scale,
                    "p90": base * scale * 1.7, "p99": base * scale * 3.2,
                    "max": base * scale * 4}
        rounds.append({
            "spec": {"index": index, "concurrency": concurrency, "input_tokens": 1024,
                     "output_tokens": 128, "modality": "text", "requests": 120},
            "duration_s": 30.0 * scale, "completed": 120, "errors": 0,
            "prompt_tokens": 122880, "completion_tokens": 15360,
            "requests_per_s": 4.0 / scale, "output_tokens_per_s": 512.0 / scale,
            "ttft": stats(0.08), "itl": stats(0.012), "e2e": stats(1.6), "records": []})
    return rounds
