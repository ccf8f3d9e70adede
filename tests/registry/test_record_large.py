"""The large image of bench/bench_release.py `--only large` (tests/registry/record.py), at a
small total: its plan, its streamed generation and cache, and the counting relay the bench's
kill test measures the bytes sent with.

The plan and the generation need no registry (a few seconds of CPU at 128 MB); the relay test
pushes a blob through a real docker-registry started here on our own ports.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import tracemalloc

import pytest

from imagekit.oci.digest import Digest
from imagekit.registry import RegistryClient, RegistryOptions

from . import record
from .scratch import REGISTRY_BIN, ScratchRegistry
from .throttle import Throttle

MB = record.MB
TOTAL = 128 * MB  # three layers of 16 MB, 60 sharing 80 MB
REGISTRY_PORT = int(os.environ.get("IMAGEKIT_TEST_LARGE_PORT", "5760"))


def test_large_plan_has_63_layers_three_of_an_eighth_and_adds_up() -> None:
    for total in (64 * MB, TOTAL, 8_000_000_000):
        layers = record.plan_large(total)
        assert len(layers) == record.LAYERS == 63
        assert [p.index for p in layers] == list(range(63))
        sizes = [p.size for p in layers]
        assert sum(sizes) == total
        assert sizes.count(total // 8) == 3
        others = [s for s in sizes if s != total // 8]
        assert len(others) == 60 and max(others) < total // 8 and min(others) > 0
        assert {p.kind for p in layers} == {"so"}  # random bytes: incompressible
        assert record.plan_large(total) == layers  # the same plan every time
    assert min(s.size for s in record.plan_large(8_000_000_000) if s.size >= 1_000_000_000) \
        == 1_000_000_000


def test_large_generation_streams_and_its_cache_is_reused(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("IMAGEKIT_RECORD_CACHE", str(tmp_path))
    big = TOTAL // 8
    tracemalloc.start()
    try:
        image = record.generate(total_bytes=TOTAL)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # streamed: the generator never held a big layer (16 MB) or its tar in memory
    assert peak < big // 3, f"peak {peak / MB:.1f} MB of Python memory for {big / MB:.0f} MB layers"

    assert image.root.parent == tmp_path and image.layout["copies"] == ["official"]
    body = json.loads(image.manifest("official").data)
    assert len(body["layers"]) == 63
    config = json.loads(image.blob_path(body["config"]["digest"]).read_bytes())
    diff_ids = config["rootfs"]["diff_ids"]
    # every blob is what its descriptor says; incompressible at gzip -1 (a little over)
    for descriptor in body["layers"]:
        data = image.blob_path(descriptor["digest"]).read_bytes()
        assert len(data) == descriptor["size"]
        assert "sha256:" + hashlib.sha256(data).hexdigest() == descriptor["digest"]
    assert TOTAL < image.total_bytes("official") < TOTAL * 1.01
    largest = max(range(63), key=lambda i: body["layers"][i]["size"])
    tar = gzip.decompress(image.blob_path(body["layers"][largest]["digest"]).read_bytes())
    assert "sha256:" + hashlib.sha256(tar).hexdigest() == diff_ids[largest]
    assert len(tar) > big and image.layout["uncompressed_bytes"] > TOTAL
    assert not list(image.root.rglob("*.partial"))

    # the second generate finds the cache: nothing is generated again
    def no_regeneration(*args, **kwargs):
        raise AssertionError("the cached large image was generated again")

    monkeypatch.setattr(record, "stream_layer", no_regeneration)
    again = record.generate(total_bytes=TOTAL)
    assert again.root == image.root and again.layout == image.layout
    assert [p.name for p in tmp_path.iterdir()] == [image.root.name]  # no half-built folder


@pytest.mark.registry
def test_counting_relay_counts_the_bytes_a_push_sends(tmp_path) -> None:
    assert REGISTRY_BIN.exists(), "docker-registry (Debian) is needed: imagekit infra up"
    blob = os.urandom(3 * MB)
    digest = Digest.of_bytes(blob)
    registry = ScratchRegistry(tmp_path / "registry", REGISTRY_PORT).start()
    try:
        with Throttle(registry.address, REGISTRY_PORT + 1, None) as relay:
            options = RegistryOptions(upload_journal=tmp_path / "journal", chunk_size=1 << 20)
            with RegistryClient(relay.address, options) as client:
                sent = client.upload_blob("relay/count", digest, lambda: iter([blob]),
                                          size=len(blob))
                assert client.blob_exists("relay/count", digest)
            assert sent == len(blob)
            # the body's bytes and the requests' headers (a few hundred bytes a request)
            assert len(blob) <= relay.client_bytes < len(blob) + 64 * 1024, relay.client_bytes
            assert 0 < relay.upstream_bytes < 64 * 1024  # answers only
            relay.reset()
            assert relay.client_bytes == relay.upstream_bytes == 0
    finally:
        registry.stop()
