"""An interrupted release loses nothing: a real `imagekit promote SRC SRC` process gets SIGINT
while its big image streams; the small image that landed keeps its verified PASS record, the big
one records an ERROR (never a PASS), and the rerun finishes without sending again what landed
(counted by the relay in front of the destination).

The sources are read through a throttling TCP relay, so the signal lands mid-blob; the
destination is reached through the counting relay (`FaultProxy.uploads`)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from imagekit.oci.digest import Digest
from imagekit.registry import RegistryClient, RegistryOptions

from .images import layer_tar, push_image
from .proxy import FaultProxy
from .scratch import REGISTRY_BIN, ScratchRegistry
from .throttle import Throttle

pytestmark = pytest.mark.registry

REGISTRY_PORT = 5120
THROTTLE_PORT = 5121
LAYER = 24 << 20
RATE = 8 << 20  # bytes/s through the throttle: the big image takes ~3 s


@pytest.fixture(scope="module")
def own_registry(tmp_path_factory):
    assert REGISTRY_BIN.exists(), "docker-registry (Debian) is needed: imagekit infra up"
    registry = ScratchRegistry(tmp_path_factory.mktemp("release-registry"),
                               REGISTRY_PORT).start()
    try:
        yield registry.address
    finally:
        registry.stop()


@pytest.fixture(scope="module")
def sources(own_registry):
    """`src/small:v1` (one 300 kB layer) and `src/big:v1` (one incompressible 24 MiB layer)."""
    tar = layer_tar(98, LAYER)
    tar = tar[:512] + os.urandom(len(tar) - 1024) + tar[-512:]  # keep the tar headers
    with RegistryClient(own_registry, RegistryOptions()) as client:
        small = push_image(client, "src/small", "v1", [layer_tar(97, 300_000)])
        big = push_image(client, "src/big", "v1", [tar], compression="none")
    return small, big


def _attempts(evidence: Path, digest: Digest) -> list[dict]:
    return [json.loads(p.read_text()) for p in
            sorted((evidence / "sha256" / digest.hex).glob("promote/*/attempt.json"))]


def test_sigint_keeps_what_landed_and_the_rerun_does_not_send_it_again(own_registry, sources,
                                                                       tmp_path):
    small, big = sources
    evidence, journal = tmp_path / "evidence", tmp_path / "journal"
    env = {**os.environ, "IMAGEKIT_EVIDENCE_DIR": str(evidence),
           "IMAGEKIT_UPLOAD_JOURNAL": str(journal), "IMAGEKIT_UPLOAD_CHUNK": str(4 << 20)}
    with Throttle(own_registry, THROTTLE_PORT, RATE) as throttle, \
            FaultProxy(own_registry) as relay:
        args = [sys.executable, "-m", "imagekit", "promote",
                f"{throttle.address}/src/small:v1", f"{throttle.address}/src/big:v1",
                "--to", f"{relay.address}/release", "--force", "--reason",
                "interrupted release test", "--json"]
        process = subprocess.Popen(args, env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while not (_attempts(evidence, small.digest) and list(journal.glob("*.json"))):
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the small image never landed"
            time.sleep(0.05)
        time.sleep(0.3)  # in the middle of the big image's next chunk
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
        assert process.returncode == 130, err
        [line] = err.strip().splitlines()
        assert line.startswith("imagekit: error: interrupted: 1 of 2 image(s) landed"), err
        [landed] = _attempts(evidence, small.digest)
        assert landed["status"] == "PASS"
        [stopped] = _attempts(evidence, big.digest)
        assert stopped["status"] == "ERROR" and "interrupted" in stopped["summary"]
        [summary] = [json.loads(p.read_text()) for p in
                     evidence.rglob("promote-release/*/attempt.json")]
        assert {c["name"].split("/", 1)[1]: c["status"] for c in summary["checks"]} == {
            "src/small:v1": "PASS", "src/big:v1": "ERROR"}
        small_blobs = [str(Digest.of_bytes(b)) for b in [*small.layer_blobs, small.config]]
        assert all(relay.uploads[d] == 1 for d in small_blobs), relay.uploads
        assert relay.uploads[str(Digest.of_bytes(big.layer_blobs[0]))] == 0

        rerun = subprocess.run(args, env=env, capture_output=True, text=True, timeout=180,
                               check=False)
        assert rerun.returncode == 0, rerun.stderr
        images = {i["given"].rsplit("/", 1)[1]: i for i in json.loads(rerun.stdout)["images"]}
        (small_hop,) = images["small:v1"]["result"]["hops"]
        assert small_hop["bytes_moved"] == 0 and small_hop["verified"]  # read back only
        assert all(relay.uploads[d] == 1 for d in small_blobs), relay.uploads  # not again
        (big_hop,) = images["big:v1"]["result"]["hops"]
        notes = " ".join(big_hop["notes"])
        assert "resumed the upload at byte" in notes, big_hop
        held = int(notes.split("resumed the upload at byte ")[1].split()[0])
        assert held > 0 and big_hop["bytes_moved"] <= len(big.layer_blobs[0]) - held + 4096
    with RegistryClient(own_registry, RegistryOptions()) as client:
        assert client.get_manifest("release/small", "v1").digest == small.digest
        assert client.get_manifest("release/big", "v1").digest == big.digest


def test_fail_fast_stops_an_image_in_flight_cleanly(own_registry, sources, tmp_path):
    """--fail-fast: one image refused by its gate at once, the other streaming its 24 MiB
    layer: that one stops at a clean boundary, named as stopped, recorded as ERROR (never
    PASS), and its destination serves no manifest."""
    from imagekit.errors import CheckFailed
    from imagekit.evidence import EvidenceStore, kinds
    from imagekit.oci import ImageReference
    from imagekit.promote.release import ReleaseImage, run_release
    from imagekit.results import Status

    small, big = sources
    store = EvidenceStore(tmp_path / "evidence")

    def refuse(store, digest, **_):
        raise CheckFailed(f"gate refused {digest.short}")

    def allow(store, digest, **_):
        return kinds.GateDecision(digest=str(digest), allowed=True)

    started = time.monotonic()
    with Throttle(own_registry, THROTTLE_PORT + 1, RATE) as throttle:
        images = [
            ReleaseImage(given="big", source=ImageReference.parse(
                f"{throttle.address}/src/big:v1"), via=[], to=ImageReference.parse(
                f"{own_registry}/fail-fast/big:v1"), gate=allow),
            ReleaseImage(given="small", source=ImageReference.parse(
                f"{own_registry}/src/small:v1"), via=[], to=ImageReference.parse(
                f"{own_registry}/fail-fast/small:v1"), gate=refuse)]
        outcome = run_release(images, store=store, fail_fast=True,
                              options=RegistryOptions(upload_journal=tmp_path / "journal",
                                                      chunk_size=4 << 20))
    took = time.monotonic() - started
    print(f"fail-fast stopped the release in {took:.2f}s: {outcome.images}")
    by_name = {o.given: o for o in outcome.images}
    assert by_name["small"].status is Status.FAIL and "gate refused" in by_name["small"].error
    assert by_name["big"].status is not Status.PASS
    assert "--fail-fast" in (by_name["big"].error or ""), by_name["big"]
    assert outcome.exit_code == 1 and took < LAYER / RATE, took  # stopped before the copy could end
    assert all(r.status is not Status.PASS for r in store.attempts(big.digest, "promote"))
    with RegistryClient(own_registry, RegistryOptions()) as client:
        assert client.manifest_exists("fail-fast/big", "v1") is None
