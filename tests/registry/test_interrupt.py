"""Nothing lost: a real `imagekit promote` process interrupted by a real signal in the middle
of a blob keeps an ERROR attempt with the hops it finished, and the rerun moves only the
missing bytes where the registry allows it (and says so where it does not).

Against Debian's docker-registry (distribution 2.8) started here on our own port; hop 2 reads
from hop 1 through a throttling TCP relay, so the signal lands while the blob is streaming.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from imagekit.registry import RegistryClient, RegistryOptions

from .images import layer_tar, push_image
from .scratch import REGISTRY_BIN, ScratchRegistry
from .throttle import Throttle

pytestmark = pytest.mark.registry

REGISTRY_PORT = 5110
THROTTLE_PORTS = {signal.SIGINT: 5111, signal.SIGTERM: 5112, signal.SIGKILL: 5113}
LAYER = 24 << 20
RATE = 8 << 20  # bytes/s through the relay: hop 2 takes ~3 s


@pytest.fixture(scope="module")
def own_registry(tmp_path_factory):
    assert REGISTRY_BIN.exists(), "docker-registry (Debian) is needed: imagekit infra up"
    registry = ScratchRegistry(tmp_path_factory.mktemp("own-registry"), REGISTRY_PORT).start()
    try:
        yield registry.address
    finally:
        registry.stop()


@pytest.fixture(scope="module")
def source(own_registry):
    """One image with one incompressible 24 MiB layer (stored uncompressed)."""
    tar = layer_tar(99, LAYER)
    tar = tar[:512] + os.urandom(len(tar) - 1024) + tar[-512:]  # keep the tar headers
    with RegistryClient(own_registry, RegistryOptions()) as client:
        built = push_image(client, "src/app", "v1", [tar], compression="none")
    return built


def _cli(args: list[str], env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "imagekit", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _attempts(evidence: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(evidence.rglob("promote/*/attempt.json"))]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL],
                         ids=lambda s: s.name)
def test_interrupted_promote_keeps_its_hops_and_the_rerun_sends_only_missing_bytes(
        sig, own_registry, source, tmp_path):
    layer_size = len(source.layer_blobs[0])
    evidence, journal = tmp_path / "evidence", tmp_path / "journal"
    env = {**os.environ, "IMAGEKIT_EVIDENCE_DIR": str(evidence),
           "IMAGEKIT_UPLOAD_JOURNAL": str(journal), "IMAGEKIT_UPLOAD_CHUNK": str(4 << 20)}
    name = sig.name.lower()
    args = ["promote", f"{own_registry}/src/app:v1",
            "--via", f"127.0.0.1:{THROTTLE_PORTS[sig]}/{name}/mid:v1",
            "--to", f"{own_registry}/{name}/dst:v1",
            "--force", "--reason", "interrupt test image", "--json"]
    with Throttle(own_registry, THROTTLE_PORTS[sig], RATE):
        process = _cli(args, env)
        deadline = time.monotonic() + 120
        while not list(evidence.rglob("promote/*/hop-1.json")):  # hop 1 landed
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "hop 1 never landed"
            time.sleep(0.05)
        while not list(journal.glob("*.json")):  # hop 2 has a chunk acknowledged
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "hop 2 never acknowledged a chunk"
            time.sleep(0.02)
        time.sleep(0.3)  # in the middle of the next chunk
        sent_at = time.monotonic()
        process.send_signal(sig)
        out, err = process.communicate(timeout=60)
        stopped_in = time.monotonic() - sent_at

        if sig == signal.SIGKILL:
            assert process.returncode == -9
            [live] = [p.parent for p in evidence.rglob("promote/*/running.json")]
            assert (live / "hop-1.json").is_file() and not (live / "attempt.json").exists()
        else:
            assert process.returncode == 130, err
            assert stopped_in < 5, stopped_in
            [line] = err.strip().splitlines()
            assert line.startswith("imagekit: error: interrupted by " + sig.name), err
            [attempt] = _attempts(evidence)
            assert attempt["status"] == "ERROR"
            statuses = [(c["name"], c["status"]) for c in attempt["checks"]]
            assert statuses == [("hop-1", "PASS"), ("hop-2", "ERROR")], attempt["checks"]
            assert "interrupted" in attempt["checks"][1]["detail"]
            assert not list(evidence.rglob("promote/*/running.json"))  # no live leftovers

        rerun = _cli(args, env)
        out, err = rerun.communicate(timeout=180)
    assert rerun.returncode == 0, err
    hops = json.loads(out)["hops"]
    assert hops[0]["bytes_moved"] == 0 and hops[1]["verified"]
    notes = " ".join(hops[1]["notes"])
    print(sig.name, "rerun hop 2:", hops[1]["bytes_moved"], "bytes moved;", notes)
    if sig == signal.SIGKILL:
        # killed mid-request, distribution holds bytes its signed upload state does not
        # know and refuses the old session: the rerun says so and sends the blob again
        # (a kill that happens to land between two chunks leaves a resumable upload)
        if "refused to resume" in notes:
            assert hops[1]["bytes_moved"] >= layer_size, hops[1]
        else:
            held = int(notes.split("resumed the upload at byte ")[1].split()[0])
            assert hops[1]["bytes_moved"] <= layer_size - held + 4096, (hops[1], held)
        statuses = [a["status"] for a in _attempts(evidence)]
        assert sorted(statuses) == ["ERROR", "PASS"], statuses
        orphan = next(a for a in _attempts(evidence) if a["status"] == "ERROR")
        assert "interrupted" in orphan["summary"] and orphan["checks"][0]["status"] == "PASS"
    else:
        assert "resumed the upload at byte" in notes, hops[1]
        held = int(notes.split("resumed the upload at byte ")[1].split()[0])
        assert 0 < held < layer_size
        assert hops[1]["bytes_moved"] <= layer_size - held + 4096, (hops[1], held)
    with RegistryClient(own_registry, RegistryOptions()) as client:
        assert client.get_manifest(f"{name}/dst", "v1").digest == source.digest
