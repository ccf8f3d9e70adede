"""`promote --await`: hops that replicate by themselves, against REAL relays started here.

- Debian's docker-registry as a pull-through cache (`proxy.remoteurl` -> an upstream registry);
- a replicator that copies later: a loop running the real `skopeo copy` after a delay;
- a replicator that tagged another image: FAIL at once;
- one that never copies: FAIL at the (short) deadline.

Every registry here is a docker-registry process of this module on 127.0.0.1:5125-5129.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from imagekit.evidence import EvidenceStore
from imagekit.infra.peers import ensure_peer
from imagekit.oci import ImageReference
from imagekit.promote.await_ import AwaitFailed, AwaitHop, AwaitPolicy, PollState
from imagekit.promote import promote, run_promote
from imagekit.registry import ClientPool, RegistryClient, RegistryOptions
from .images import config_for, push_image, push_index
from .scratch import REGISTRY_BIN, ScratchRegistry
from .settings import FAST_RETRY

pytestmark = pytest.mark.registry

SRC, UPSTREAM, CACHE, MIRROR = 5125, 5126, 5127, 5128


@pytest.fixture(scope="module")
def relays(tmp_path_factory):
    if not REGISTRY_BIN.exists():
        pytest.fail("docker-registry (Debian package) is not installed")
    root = tmp_path_factory.mktemp("relays")
    started = []
    try:
        for name, port, proxy in (("src", SRC, None), ("upstream", UPSTREAM, None),
                                  ("cache", CACHE, f"http://127.0.0.1:{UPSTREAM}"),
                                  ("mirror", MIRROR, None)):
            started.append(ScratchRegistry(root / name, port, proxy).start())
        yield {r.root.name: r.address for r in started}
    finally:
        for registry in started:
            registry.stop()


@pytest.fixture(scope="module")
def skopeo() -> str:
    return str(ensure_peer("skopeo"))


@pytest.fixture
def image(relays, tars):
    """A fresh repository on the source registry holding one small image (tag v1)."""
    repo = f"await/{uuid.uuid4().hex[:8]}"
    with RegistryClient(relays["src"]) as client:
        built = push_image(client, repo, "v1", tars[:2], compression="gzip", level=1)
    return repo, built


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "imagekit", *args], capture_output=True,
                          text=True, timeout=180, check=False)


def promote_cli(src: str, *hops: str, evidence: Path) -> subprocess.CompletedProcess:
    return cli("promote", src, *hops, "--json", "--evidence-dir", str(evidence), "--force",
               "--reason", "test image without check evidence")


def only_attempt(evidence: Path, digest) -> tuple:
    store = EvidenceStore(evidence)
    (record,) = store.attempts(str(digest), "promote")
    return store, record


def test_pull_through_cache_is_awaited_after_the_copied_hop(relays, image, tmp_path):
    repo, built = image
    done = promote_cli(f"{relays['src']}/{repo}:v1", "--via", f"{relays['upstream']}/{repo}:v1",
                       "--await", f"{relays['cache']}/{repo}:v1", "--await-interval", "0.2",
                       "--await-timeout", "60", evidence=tmp_path)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    copied, awaited = data["hops"]
    assert copied["mode"] == "copy" and copied["bytes_moved"] == built.total_bytes
    assert awaited["mode"] == "await" and awaited["bytes_moved"] == 0
    assert awaited["endpoint"] == f"{relays['cache']}/{repo}:v1" and awaited["verified"]
    assert awaited["polls"][-1]["state"] == "served"
    assert awaited["polls"][-1]["blobs_present"] == awaited["polls"][-1]["blobs_total"] == 3
    # the cache really serves it now, read here independently (and hashed)
    with RegistryClient(relays["cache"]) as client:
        assert client.get_manifest(repo, "v1").digest == built.digest
    _, record = only_attempt(tmp_path, built.digest)
    assert record.status.value == "PASS" and [c.name for c in record.checks] == ["hop-1",
                                                                                 "hop-2"]


def test_delayed_skopeo_replicator_is_polled_until_served(relays, image, skopeo, tmp_path):
    repo, built = image
    stop = threading.Event()
    copies: list[int] = []

    def replicator() -> None:  # a sync job that copies later, with the real skopeo
        with RegistryClient(relays["upstream"]) as upstream:  # once upstream has it ...
            while not stop.is_set() and upstream.manifest_exists(repo, "v1") is None:
                time.sleep(0.1)
        time.sleep(1.5)  # ... and a while later
        while not stop.is_set():
            done = subprocess.run(
                [skopeo, "copy", "--quiet", "--src-tls-verify=false", "--dest-tls-verify=false",
                 f"docker://{relays['upstream']}/{repo}:v1",
                 f"docker://{relays['mirror']}/{repo}:v1"], capture_output=True, check=False)
            copies.append(done.returncode)
            if done.returncode == 0:
                return
            time.sleep(0.3)

    thread = threading.Thread(target=replicator, daemon=True)
    thread.start()
    try:
        done = promote_cli(f"{relays['src']}/{repo}:v1", "--via",
                           f"{relays['upstream']}/{repo}:v1", "--await",
                           f"{relays['mirror']}/{repo}:v1", "--await-interval", "0.2",
                           "--await-timeout", "90", evidence=tmp_path)
    finally:
        stop.set()
        thread.join(30)
    assert done.returncode == 0, done.stderr
    assert copies and copies[-1] == 0
    awaited = json.loads(done.stdout)["hops"][1]
    states = [p["state"] for p in awaited["polls"]]
    assert states[0] == "absent" and states[-1] == "served", states
    assert len(states) >= 2 and awaited["seconds"] >= 1.0
    assert "absent" in awaited["read_back"] and "served" in awaited["read_back"]


def test_replicator_that_tagged_another_digest_fails_at_once(relays, image, skopeo, tars,
                                                             tmp_path):
    repo, built = image
    with RegistryClient(relays["upstream"]) as client:  # what the replicator copied instead
        other = push_image(client, f"{repo}-other", "v1", tars[2:3], compression="gzip",
                           level=1)
    subprocess.run([skopeo, "copy", "--quiet", "--src-tls-verify=false",
                    "--dest-tls-verify=false", f"docker://{relays['upstream']}/{repo}-other:v1",
                    f"docker://{relays['mirror']}/{repo}:v1"], check=True, capture_output=True)
    started = time.monotonic()
    done = promote_cli(f"{relays['src']}/{repo}:v1", "--via", f"{relays['upstream']}/{repo}:v1",
                       "--await", f"{relays['mirror']}/{repo}:v1", "--await-interval", "0.2",
                       "--await-timeout", "120", evidence=tmp_path)
    took = time.monotonic() - started
    assert done.returncode == 1, done.stderr
    assert "resolves to " + str(other.digest) in done.stderr and took < 60
    store, record = only_attempt(tmp_path, built.digest)
    assert record.status.value == "FAIL"
    hop1, hop2 = record.checks
    assert hop1.status.value == "PASS" and hop2.status.value == "FAIL"
    (poll,) = hop2.data["polls"]  # at once: one poll, no waiting for the deadline
    assert poll["state"] == "tag-names-another-digest" and poll["tag_digest"] == str(
        other.digest)


def test_replicator_that_never_copies_fails_at_the_deadline(relays, image, tmp_path):
    repo, built = image
    started = time.monotonic()
    done = promote_cli(f"{relays['src']}/{repo}:v1", "--await", f"{relays['mirror']}/{repo}:v1",
                       "--await-interval", "0.2", "--await-timeout", "2", evidence=tmp_path)
    took = time.monotonic() - started
    assert done.returncode == 1, done.stderr
    assert "not served within 2 s" in done.stderr and took >= 2
    _, record = only_attempt(tmp_path, built.digest)
    assert record.status.value == "FAIL"
    (hop,) = record.checks
    states = {p["state"] for p in hop.data["polls"]}
    assert states == {"absent"} and len(hop.data["polls"]) >= 3


def test_partial_replication_is_recorded_as_such(relays, image, tars):
    """A relay that has the manifest but lost a blob: `blobs-partial`, then FAIL at the deadline
    (the in-process API; the same code path as the CLI)."""
    repo, built = image
    with RegistryClient(relays["mirror"]) as mirror:
        promote(ImageReference.parse(f"{relays['src']}/{repo}:v1"), [],
                ImageReference.parse(f"{relays['mirror']}/{repo}:v1"))
        lost = built.layer_digests[0]
        response = mirror.request("DELETE", f"/v2/{repo}/blobs/{lost}",
                                  scopes=mirror.push_scope(repo))
        assert response.status_code == 202
    with pytest.raises(AwaitFailed) as failed:
        with ClientPool(RegistryOptions(retry=FAST_RETRY)) as pool:
            promote(ImageReference.parse(f"{relays['src']}/{repo}:v1"), [],
                    AwaitHop(ImageReference.parse(f"{relays['mirror']}/{repo}:v1")), pool=pool,
                    await_policy=AwaitPolicy(deadline_s=0.5, interval_s=0.1))
    states = [p.state for p in failed.value.polls]
    assert set(states) == {PollState.BLOBS_PARTIAL}
    assert failed.value.polls[0].blobs_present == 2 and failed.value.polls[0].blobs_total == 3


def test_whole_index_through_the_pull_through_cache(relays, tars):
    """--all-platforms: every child manifest and every blob of every platform must be served."""
    repo = f"await/{uuid.uuid4().hex[:8]}"
    with RegistryClient(relays["src"]) as client:
        amd = push_image(client, repo, "amd64", tars[:1], compression="gzip", level=1)
        arm = push_image(client, repo, "arm64", tars[1:2], compression="gzip", level=1,
                         config=config_for(tars[1:2], architecture="arm64"))
        index = push_index(client, repo, "v1", [(amd, "linux", "amd64"),
                                                (arm, "linux", "arm64")])
    with ClientPool(RegistryOptions(retry=FAST_RETRY)) as pool:
        result = promote(ImageReference.parse(f"{relays['src']}/{repo}:v1"),
                         [ImageReference.parse(f"{relays['upstream']}/{repo}:v1")],
                         AwaitHop(ImageReference.parse(f"{relays['cache']}/{repo}:v1")),
                         all_platforms=True, pool=pool,
                         await_policy=AwaitPolicy(deadline_s=30, interval_s=0.2))
    awaited = result.hops[1]
    assert result.digest == str(index.digest) and awaited.mode == "await"
    last = awaited.polls[-1]
    # 2 images x (config + layer) + the attestation's config and layer
    assert last.state is PollState.SERVED and last.blobs_present == last.blobs_total == 6


def test_without_to_the_last_hop_must_be_awaited(relays, image, tmp_path):
    repo, _ = image
    done = cli("promote", f"{relays['src']}/{repo}:v1", "--via",
               f"{relays['upstream']}/{repo}:v1", "--evidence-dir", str(tmp_path))
    assert done.returncode == 2 and "--to" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf"])
def test_await_deadline_must_be_a_finite_positive_number(value, tmp_path):
    done = cli("promote", "127.0.0.1:5129/x/y:v1", "--await", "127.0.0.1:5129/x/z:v1",
               "--await-timeout", value, "--evidence-dir", str(tmp_path))
    assert done.returncode == 2 and "--await-timeout" in done.stderr
    assert "Traceback" not in done.stderr


def test_hops_keep_command_line_order():
    from imagekit.cli.registry import _hops

    order = [("--await", "a.example/x:1"), ("--via", "b.example/x:1"),
             ("--await", "c.example/x:1")]
    hops = _hops(["b.example/x:1"], ["a.example/x:1", "c.example/x:1"], order)
    assert [type(h).__name__ for h in hops] == ["AwaitHop", "ImageReference", "AwaitHop"]
    assert [str(h) for h in hops] == ["a.example/x:1", "b.example/x:1", "c.example/x:1"]


def test_run_promote_records_the_polls(relays, image, tmp_path):
    repo, built = image
    store = EvidenceStore(tmp_path)
    with pytest.raises(AwaitFailed):
        run_promote(ImageReference.parse(f"{relays['src']}/{repo}:v1"),
                    [AwaitHop(ImageReference.parse(f"{relays['mirror']}/{repo}-none:v1"))],
                    None, store=store, gate=False,
                    await_policy=AwaitPolicy(deadline_s=0.3, interval_s=0.1))
    (record,) = store.attempts(str(built.digest), "promote")
    polls = json.loads((store.path_of(record) / "polls.json").read_text())
    assert record.status.value == "FAIL" and polls and polls[0]["state"] == "absent"
