"""promote through the real relay registries: staging (HTTP) -> production (TLS + basic) ->
target (TLS + Bearer), with faults, lies, interruptions and re-promotion."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from imagekit.errors import DigestMismatch, TransportError
from imagekit.evidence import EvidenceStore
from imagekit.oci import ImageReference, Platform
from imagekit.oci import mediatypes as mt
from imagekit.oci.digest import Digest
from imagekit.promote import HopNotVerified, promote, run_promote
from imagekit.registry import ClientPool, ManifestBlob

from .images import config_for, layer_tar, push_blob, push_image, push_index
from .proxy import FaultProxy
from .settings import FAST_RETRY

pytestmark = pytest.mark.registry


def R(text: str) -> ImageReference:
    return ImageReference.parse(text)


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "imagekit", *args], capture_output=True,
                          text=True, timeout=300, check=False, env=env)


def test_relay_staging_production_target_each_hop_verified(pool, reg, repo, staged, tmp_path):
    store = EvidenceStore(tmp_path)
    result, where = run_promote(
        R(f"{reg['staging']}/{repo}:v1"), [R(f"{reg['production']}/{repo}:v1")],
        R(f"{reg['target']}/{repo}:v1"), store=store, options=pool.options, gate=False)
    assert result.digest == str(staged.digest)
    assert [h.registry for h in result.hops] == [reg["production"], reg["target"]]
    for hop in result.hops:
        assert hop.verified and hop.digest == str(staged.digest)
        assert hop.bytes_moved == staged.total_bytes
        assert hop.blobs_copied == 5 and hop.blobs_skipped == 0
    # each endpoint really serves the digest, read here independently (and hashed)
    for name in ("production", "target"):
        served = pool.get(reg[name]).get_manifest(repo, "v1")
        assert served.digest == staged.digest
    (record,) = store.attempts(str(staged.digest), "promote")
    assert record.status.value == "PASS" and [c.name for c in record.checks] == ["hop-1",
                                                                                 "hop-2"]
    hops = json.loads((store.path_of(record) / "result.json").read_text())["hops"]
    assert hops[1]["endpoint"] == f"{reg['target']}/{repo}:v1"
    # the real passwords were used on both hops and appear nowhere in the evidence
    from imagekit.infra.credentials import load_credentials
    creds = load_credentials()
    recorded = "".join(p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file())
    for secret in (creds.production.password, creds.target.password):
        assert secret and secret not in recorded


def test_re_promotion_moves_zero_bytes(pool, reg, repo, staged):
    src, dst = R(f"{reg['staging']}/{repo}:v1"), R(f"{reg['production']}/{repo}:v1")
    promote(src, [], dst, pool=pool)
    again = promote(src, [], dst, pool=pool)
    (hop,) = again.hops
    assert hop.verified and hop.bytes_moved == 0 and hop.blobs_copied == 0
    assert hop.blobs_skipped == 5 and hop.manifests_pushed == 0


def test_cross_repository_mount_inside_one_registry(pool, reg, repo, staged):
    result = promote(R(f"{reg['staging']}/{repo}:v1"), [], R(f"{reg['staging']}/{repo}-m:rc"),
                     pool=pool)
    (hop,) = result.hops
    assert hop.verified and hop.blobs_mounted == 5 and hop.bytes_moved == 0


def test_cli_json_hops(reg, repo, staged, tmp_path):
    done = cli("promote", f"{reg['staging']}/{repo}:v1", "--via", f"{reg['production']}/{repo}:v1",
               "--to", f"{reg['target']}/{repo}:v1", "--json", "--evidence-dir", str(tmp_path),
               "--force", "--reason", "test image without check evidence")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert [h["endpoint"] for h in data["hops"]] == [f"{reg['production']}/{repo}:v1",
                                                     f"{reg['target']}/{repo}:v1"]
    for hop in data["hops"]:
        assert hop["digest"] == str(staged.digest) and hop["verified"] is True
        assert hop["bytes_moved"] == staged.total_bytes


def test_force_without_reason_is_refused(reg, repo, staged):
    done = cli("promote", f"{reg['staging']}/{repo}:v1", "--to", f"{reg['production']}/{repo}:v1",
               "--force")
    assert done.returncode == 2 and "--reason" in done.stderr


def test_fault_injecting_proxies_on_both_sides_promote_still_completes(options, reg, repo,
                                                                      staged):
    with FaultProxy(reg["staging"], faults=0.35, seed=11) as src_proxy, \
            FaultProxy(reg["staging"], faults=0.35, seed=12) as dst_proxy, \
            ClientPool(options) as pool:
        result = promote(R(f"{src_proxy.address}/{repo}:v1"),
                         [R(f"{dst_proxy.address}/{repo}-relay:v1")],
                         R(f"{reg['production']}/{repo}-faults:v1"), pool=pool)
        injected = sum(src_proxy.stats[k] + dst_proxy.stats[k]
                       for k in ("503", "429", "reset", "reset-after", "cut-body"))
        requests = src_proxy.stats["requests"] + dst_proxy.stats["requests"]
    assert injected >= 0.2 * requests > 0, (src_proxy.stats, dst_proxy.stats)
    assert all(h.verified and h.digest == str(staged.digest) for h in result.hops)
    production = ClientPool(options).get(reg["production"])
    assert production.get_manifest(f"{repo}-faults", "v1").digest == staged.digest


def test_lying_proxy_is_caught_and_nothing_is_written_at_the_next_hop(options, pool, reg, repo,
                                                                      staged):
    with FaultProxy(reg["staging"], lie=True) as liar, ClientPool(options) as lying_pool:
        with pytest.raises(DigestMismatch):
            promote(R(f"{liar.address}/{repo}:v1"), [], R(f"{reg['production']}/{repo}-lie:v1"),
                    pool=lying_pool)
        assert liar.stats["lies"] >= 1
    production = pool.get(reg["production"])
    assert production.manifest_exists(f"{repo}-lie", staged.digest) is None
    assert production.manifest_exists(f"{repo}-lie", "v1") is None
    for digest in [staged.config_digest, *staged.layer_digests]:
        assert not production.blob_exists(f"{repo}-lie", digest)


def test_a_committed_blob_the_endpoint_does_not_serve_fails_the_hop(options, reg, repo, staged):
    """The read-back of each blob as it lands (a HEAD after its commit, overlapping the other
    uploads) is a real check: a registry that answers the commit 201 and then 404s the blob
    fails the hop naming the blob — never a verified hop."""
    with FaultProxy(reg["staging"], hide_committed=True) as hiding, \
            ClientPool(options) as hiding_pool:
        with pytest.raises(HopNotVerified,
                           match="was committed but the endpoint does not serve it") as caught:
            promote(R(f"{reg['staging']}/{repo}:v1"), [], R(f"{hiding.address}/{repo}-hid:v1"),
                    pool=hiding_pool)
        assert hiding.commits >= 1 and hiding.stats["hidden"] >= 1, hiding.stats
    hop = caught.value.hop
    assert not hop.verified and hop.manifests_pushed == 0
    assert "no manifest was pushed that refers to it" in hop.read_back


def test_a_tag_that_reads_back_another_digest_fails_the_hop_in_evidence(pool, reg, repo,
                                                                          staged, tmp_path):
    """The read-back is the hop's verdict: a registry whose tag names another digest after
    the push (the lying proxy) gives a hop record with verified False, kept in evidence as a
    FAIL with the read-back's words, the promotion stopped there, and `imagekit promote`
    exits 1. The same promote through an honest proxy is verified (exit 0)."""
    other = "sha256:" + "0" * 64
    destination = f"{repo}-liar:v1"
    with FaultProxy(reg["staging"], lie_tags=other) as liar:
        lied = cli("promote", f"{reg['staging']}/{repo}:v1", "--via",
                   f"{liar.address}/{destination}", "--to",
                   f"{reg['production']}/{repo}-after-liar:v1", "--evidence-dir",
                   str(tmp_path / "lied"), "--force", "--reason", "test image, no evidence")
        assert liar.stats["tag-lies"] >= 1, liar.stats
    assert lied.returncode == 1, lied.stdout + lied.stderr
    assert f"tag v1 resolves to {other}, not {staged.digest}" in lied.stdout + lied.stderr
    store = EvidenceStore(tmp_path / "lied")
    (record,) = store.attempts(str(staged.digest), "promote")
    assert record.status.value == "FAIL"
    assert [(c.name, c.status.value) for c in record.checks] == [("hop-1", "FAIL")]
    assert f"does not serve {staged.digest} as sent: " in record.checks[0].detail
    assert f"tag v1 resolves to {other}" in record.checks[0].detail
    (hop,) = store.result(record).hops
    assert hop.verified is False and f"resolves to {other}" in hop.read_back
    # the promotion stopped there: nothing reached the next hop
    assert pool.get(reg["production"]).manifest_exists(f"{repo}-after-liar", "v1") is None
    with FaultProxy(reg["staging"]) as honest:
        done = cli("promote", f"{reg['staging']}/{repo}:v1", "--to",
                   f"{honest.address}/{repo}-honest:v1", "--evidence-dir",
                   str(tmp_path / "honest"), "--force", "--reason", "test image, no evidence")
    assert done.returncode == 0, done.stdout + done.stderr
    (record,) = EvidenceStore(tmp_path / "honest").attempts(str(staged.digest), "promote")
    assert [(c.name, c.status.value) for c in record.checks] == [("hop-1", "PASS")]


def test_interrupted_promote_rerun_resends_no_present_blob(options, reg, repo, staged):
    """A network cut after 2 committed blobs; the rerun skips exactly those."""
    retry = FAST_RETRY.model_copy(update={"attempts": 2})
    cut_options = options.model_copy(update={"retry": retry})
    with FaultProxy(reg["staging"], cut_after_commits=2) as cut, \
            ClientPool(cut_options) as cut_pool:
        with pytest.raises(TransportError):
            promote(R(f"{reg['staging']}/{repo}:v1"), [], R(f"{cut.address}/{repo}-cut:v1"),
                    pool=cut_pool, workers=1)
        assert cut.commits == 2
    with ClientPool(options) as pool:
        dst = pool.get(reg["staging"])
        present = [d for d in [staged.config_digest, *staged.layer_digests]
                   if dst.blob_exists(f"{repo}-cut", d)]
        assert len(present) == 2
        sizes = dict(zip([*staged.layer_digests, staged.config_digest],
                         [*map(len, staged.layer_blobs), len(staged.config)], strict=True))
        # a fresh client name (through a clean proxy) so the rerun uploads instead of mounting
        with FaultProxy(reg["staging"]) as clean:
            rerun = promote(R(f"{reg['staging']}/{repo}:v1"), [],
                            R(f"{clean.address}/{repo}-cut:v1"), pool=pool)
    (hop,) = rerun.hops
    assert hop.verified and hop.blobs_skipped == 2 and hop.blobs_copied == 3
    assert hop.bytes_moved == staged.total_bytes - sum(sizes[d] for d in present)


def test_all_platforms_copies_the_index_and_companion_tags(pool, reg, repo, staged):
    client = pool.get(reg["staging"])
    arm_tars = [layer_tar(60, 200_000)]
    arm = push_image(client, repo, "arm", arm_tars,
                     config=config_for(arm_tars, architecture="arm64"))
    index = push_index(client, repo, "multi", [(staged, "linux", "amd64"),
                                                (arm, "linux", "arm64")])
    # a cosign-style signature tag hanging off the index digest
    sig_layer = push_blob(client, repo, b"signature-payload")
    cfg = push_blob(client, repo, b"{}")
    sig = json.dumps({"schemaVersion": 2, "mediaType": mt.OCI_MANIFEST,
                      "config": {"mediaType": mt.OCI_CONFIG, "digest": str(cfg), "size": 2},
                      "layers": [{"mediaType": "application/vnd.dev.cosign.simplesigning.v1+json",
                                  "digest": str(sig_layer), "size": 17}]}).encode()
    sig_tag = f"sha256-{index.digest.hex}.sig"
    client.put_manifest(repo, sig_tag, ManifestBlob(sig, mt.OCI_MANIFEST, Digest.of_bytes(sig)))

    result = promote(R(f"{reg['staging']}/{repo}:multi"), [],
                     R(f"{reg['production']}/{repo}:multi"), all_platforms=True, pool=pool)
    (hop,) = result.hops
    assert result.digest == str(index.digest) and hop.verified
    assert hop.companions == [sig_tag]
    production = pool.get(reg["production"])
    assert production.get_manifest(repo, "multi").digest == index.digest
    for entry in json.loads(index.data)["manifests"]:  # every platform and the attestation
        assert production.manifest_exists(repo, Digest.parse(entry["digest"])) is not None
    assert production.get_manifest(repo, sig_tag).digest == Digest.of_bytes(sig)

    single = promote(R(f"{reg['staging']}/{repo}:multi"), [],
                     R(f"{reg['target']}/{repo}:amd"), pool=pool,
                     platform=Platform.parse("linux/amd64"))
    assert single.digest == str(staged.digest) and single.platform == "linux/amd64"
    assert single.source_digest == str(index.digest) and "digest changed" in \
        single.digest_changed
    assert pool.get(reg["target"]).manifest_exists(repo, index.digest) is None


def test_upload_cut_mid_blob_resumes_in_a_new_process_from_the_journal(options, reg, repo,
                                                                        tmp_path):
    """A 5 MiB blob in 1 MiB chunks; the network is cut after 2 acknowledged chunks. A fresh
    client (as a rerun in a new process would have) resumes from byte 2 MiB: it re-reads and
    re-hashes the source but sends only the 3 MiB the registry does not hold."""
    import os as _os

    data = _os.urandom(5 << 20)
    digest = Digest.of_bytes(data)
    journal = tmp_path / "journal"
    opts = options.model_copy(update={"upload_journal": journal,
                                      "retry": FAST_RETRY.model_copy(update={"attempts": 2})})
    with FaultProxy(reg["staging"], cut_after_patches=2) as proxy:
        from imagekit.registry import RegistryClient
        with RegistryClient(proxy.address, opts) as client, pytest.raises(TransportError):
            client.upload_blob(repo, digest, lambda: iter([data]), size=len(data))
        assert proxy.patches == 2 and len(list(journal.glob("*.json"))) == 1
        proxy.cut_after_patches = None  # the network is back
        with RegistryClient(proxy.address, opts) as client:
            sent = client.upload_blob(repo, digest, lambda: iter([data]), size=len(data))
            assert sent == 3 << 20
            assert client.blob_exists(repo, digest)
            assert client.get_blob_bytes(repo, digest) == data
    assert list(journal.glob("*.json")) == []
