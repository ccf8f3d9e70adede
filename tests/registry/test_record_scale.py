"""The record's layer count (63) through the registry core, the CLI as a user runs it.

The generated record image (tests/registry/record.py) at `SCALE` of its bytes: the full 1.4 GB
costs minutes of CPU to generate and to move on a shared 2-core CI machine, while what breaks at
63 layers (parallelism, many resumes, memory per blob) shows at a few percent; `make bench`
(bench/bench_record.py) runs the full size. IMAGEKIT_RECORD_SCALE overrides it.

- `promote` through a relay that cuts every blob download (24-64 MiB at full size, scaled):
  PASS, read back; the relay's own count of blob bytes sent is at most 2% over the image's bytes
  (a resume re-sends nothing); the CLI's peak RSS, measured from outside by GNU time
  (record.run_measured), stays under 200 MB.
- `verify-mirror --diffids` official vs the gzip -1 mirror: 63/63 diffIDs, compressed digests
  differ, as the record's mirrored base did.
"""

from __future__ import annotations

import json
import os
import socket
import sys

import pytest

from imagekit.registry import ClientPool, RegistryOptions
from . import record
from .proxy import FaultProxy
from .scratch import ScratchRegistry
from .settings import FAST_RETRY

pytestmark = pytest.mark.registry

SCALE = float(os.environ.get("IMAGEKIT_RECORD_SCALE", "0.04"))
MIB = 1 << 20
PEAK_RSS_MB = 200


@pytest.fixture(scope="module")
def record_image(infra):
    """The record image generated (cached by content) and pushed to staging once."""
    image = record.generate(SCALE)
    options = RegistryOptions(docker_config=infra.docker_config_dir, retry=FAST_RETRY)
    staging = infra.registries["staging"].address
    with ClientPool(options) as pool:
        client = pool.get(staging)
        refs = {which: record.push_record(client, image, which)
                for which in ("official", "mirror")}
    return image, refs


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_promote_through_a_cutting_relay_at_record_layer_count(record_image, tmp_path):
    image, refs = record_image
    total = image.total_bytes("official")
    lo, hi = max(MIB // 4, int(24 * MIB * SCALE)), max(MIB // 2, int(64 * MIB * SCALE))
    destination = ScratchRegistry(tmp_path / "dst", _free_port()).start()
    try:
        with FaultProxy(refs["official"].split("/", 1)[0], cut_blobs=(lo, hi)) as relay:
            source = f"{relay.address}/{refs['official'].split('/', 1)[1]}"
            run = record.run_measured(
                [sys.executable, "-m", "imagekit", "promote", source, "--to",
                 f"{destination.address}/record/copy:v1", "--json", "--evidence-dir",
                 str(tmp_path / "ev"), "--force", "--reason", "record-scale relay test"])
            stats = dict(relay.stats)
    finally:
        destination.stop()
    assert run.code == 0, (run.code, run.stdout[-800:], run.stderr[-1500:])
    hop = json.loads(run.stdout)["hops"][-1]
    assert hop["verified"] is True and hop["digest"] == str(image.manifest("official").digest)
    assert hop["blobs_copied"] == record.LAYERS + 1
    # the relay really cut downloads, and every cut was resumed without re-sending bytes
    big = sum(1 for d in image.descriptors("official") if d["size"] > hi)
    assert stats.get("cut-blob", 0) >= big > 0, stats
    ratio = stats["blob_bytes"] / total
    assert 1.0 <= ratio <= 1.02, (ratio, stats, total)
    assert run.peak_rss_mb < PEAK_RSS_MB, f"peak RSS {run.peak_rss_mb:.0f} MB"
    print(f"record scale {SCALE}: {total / 1e6:.0f} MB, {stats['cut-blob']} cuts, relay sent "
          f"{ratio:.6f}x, {run.seconds:.1f} s, peak RSS {run.peak_rss_mb:.0f} MB")


def test_verify_copy_diffids_official_vs_recompressed_mirror(record_image, tmp_path):
    image, refs = record_image
    run = record.run_measured(
        [sys.executable, "-m", "imagekit", "verify-mirror", refs["official"], refs["mirror"],
         "--diffids", "--json", "--evidence-dir", str(tmp_path / "ev")])
    assert run.code == 0, (run.code, run.stdout[-800:], run.stderr[-1500:])
    result = json.loads(run.stdout)
    found = json.dumps(result)
    assert result.get("diffids_verified") == record.LAYERS or \
        f'"diffids_verified": {record.LAYERS}' in found, found[:1500]
    assert '"compressed_digests_equal": false' in found, found[:1500]
    assert run.peak_rss_mb < PEAK_RSS_MB, f"peak RSS {run.peak_rss_mb:.0f} MB"
