"""verify-copy against the real staging registry: the record's mirrored-base situations."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import pytest

from imagekit.evidence import EvidenceStore
from imagekit.oci import ImageReference, Platform
from imagekit.oci import mediatypes as mt
from imagekit.oci.digest import Digest
from imagekit.registry import ManifestBlob
from imagekit.verify import record_evidence, verify_copy
from .images import config_for, layer_tar, push_blob, push_image, push_index

pytestmark = pytest.mark.registry


def ref(registry: str, repository: str, tag: str = "v1") -> ImageReference:
    return ImageReference.parse(f"{registry}/{repository}:{tag}")


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "imagekit", *args], capture_output=True,
                          text=True, timeout=300, check=False)


def test_recompressed_copy_is_identical_content_but_not_identical_blobs(pool, reg, repo, tars,
                                                                        staged):
    copy = push_image(pool.get(reg["staging"]), repo + "-copy", "v1", tars, compression="gzip",
                      level=1)
    assert copy.layer_digests != staged.layer_digests  # really recompressed
    assert copy.config_digest == staged.config_digest
    result = verify_copy(ref(reg["staging"], repo), ref(reg["staging"], repo + "-copy"),
                         diffids=True, pool=pool)
    assert result.verdict == "identical-content"
    assert result.config_digest_equal and result.diff_ids_equal
    assert result.layers == 4 and result.diff_ids_matching == 4
    assert result.compressed_digests_equal is False
    assert result.compressed_digests.startswith("differ (different compression)")
    assert result.diffids_verified == 4
    assert all(c.computed_diff_id == str(d) for c, d in zip(result.layer_checks, staged.diff_ids))
    text = " ".join(result.summary).lower()
    assert "all blobs identical" not in text and "not identical" in text


def test_cli_json_and_exit_codes(reg, repo, tars, staged, pool, tmp_path):
    push_image(pool.get(reg["staging"]), repo + "-copy", "v1", tars, compression="gzip", level=9)
    done = cli("verify-mirror", f"{reg['staging']}/{repo}:v1", f"{reg['staging']}/{repo}-copy:v1",
               "--diffids", "--json", "--evidence-dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["verdict"] == "identical-content"
    assert data["config_digest_equal"] is True and data["diff_ids_equal"] is True
    assert data["layers"] == 4 and data["compressed_digests_equal"] is False
    records = EvidenceStore(tmp_path).attempts(data["copy_digest"], "verify-copy")  # the copy's
    assert len(records) == 1 and records[0].status.value == "PASS"
    assert {c.name for c in records[0].checks} >= {"config-digest", "diff-ids", "layer-content"}


def test_one_changed_layer_differs_and_names_the_layer(pool, reg, repo, tars, staged):
    changed = list(tars)
    changed[2] = layer_tar(99, len(tars[2]))
    push_image(pool.get(reg["staging"]), repo + "-bad", "v1", changed)
    result = verify_copy(ref(reg["staging"], repo), ref(reg["staging"], repo + "-bad"),
                         pool=pool)
    assert result.verdict == "different"
    assert not result.diff_ids_equal and result.diff_ids_matching == 3
    assert any(d.startswith("layer 2:") for d in result.differences)
    assert not any(d.startswith(("layer 0:", "layer 1:", "layer 3:"))
                   for d in result.differences)
    done = cli("verify-mirror", f"{reg['staging']}/{repo}:v1", f"{reg['staging']}/{repo}-bad:v1")
    assert done.returncode == 1
    assert "layer 2" in done.stdout


def test_config_that_differs_is_different_even_with_equal_layers(pool, reg, repo, tars, staged):
    other_config = config_for(tars, env=["PATH=/usr/bin", "EXTRA=1"])
    push_image(pool.get(reg["staging"]), repo + "-cfg", "v1", tars, config=other_config)
    result = verify_copy(ref(reg["staging"], repo), ref(reg["staging"], repo + "-cfg"),
                         pool=pool)
    assert result.verdict == "different"
    assert result.config_digest_equal is False and result.diff_ids_equal is True
    assert result.compressed_digests_equal is True
    assert result.differences[0].startswith("config digest differs")


def test_diffids_catches_a_copy_whose_blob_does_not_hold_what_its_config_claims(
        pool, reg, repo, tars, staged):
    """Same config (so same claims) but layer 1 swapped for other content: only --diffids
    sees it."""
    client = pool.get(reg["staging"])
    liar = repo + "-liar"
    blob = gzip.compress(layer_tar(77, 400_000), mtime=0)
    push_blob(client, liar, blob)
    for layer in staged.layer_blobs:
        push_blob(client, liar, layer)
    push_blob(client, liar, staged.config)
    body = json.loads(staged.manifest.data)
    body["layers"][1] = {"mediaType": mt.OCI_LAYER_GZIP, "digest": str(Digest.of_bytes(blob)),
                         "size": len(blob)}
    data = json.dumps(body).encode()
    client.put_manifest(liar, "v1", ManifestBlob(data, mt.OCI_MANIFEST, Digest.of_bytes(data)))
    claims = verify_copy(ref(reg["staging"], repo), ref(reg["staging"], liar), pool=pool)
    assert claims.verdict == "identical-content"  # the configs agree; blobs not read
    proven = verify_copy(ref(reg["staging"], repo), ref(reg["staging"], liar), diffids=True,
                         pool=pool)
    assert proven.verdict == "different"
    assert proven.diffids_verified == 3
    assert [c.index for c in proven.layer_checks if c.status.value == "FAIL"] == [1]
    assert any(d.startswith("layer 1:") for d in proven.differences)


def test_zstd_uncompressed_and_docker_media_types(pool, reg, repo, tars, staged):
    client = pool.get(reg["staging"])
    push_image(client, repo + "-mixed", "v1", tars, compression=["zstd", "none", "gzip", "zstd"])
    result = verify_copy(ref(reg["staging"], repo), ref(reg["staging"], repo + "-mixed"),
                         diffids=True, pool=pool)
    assert result.verdict == "identical-content" and result.diffids_verified == 4
    docker = push_image(client, repo + "-docker", "v1", tars, compression="docker-gzip",
                        level=3, manifest_type=mt.DOCKER_MANIFEST)
    assert json.loads(docker.manifest.data)["mediaType"] == mt.DOCKER_MANIFEST
    result = verify_copy(ref(reg["staging"], repo), ref(reg["staging"], repo + "-docker"),
                         diffids=True, pool=pool)
    assert result.verdict == "identical-content" and result.diffids_verified == 4


def test_index_platform_selection_skips_attestations(pool, reg, repo, tars, staged):
    client = pool.get(reg["staging"])
    arm_tars = [layer_tar(50, 300_000)]
    arm = push_image(client, repo, "arm", arm_tars, config=config_for(arm_tars,
                                                                      architecture="arm64"))
    push_index(client, repo, "multi", [(staged, "linux", "amd64"), (arm, "linux", "arm64")])
    amd = verify_copy(ref(reg["staging"], repo, "multi"), ref(reg["staging"], repo, "v1"),
                      pool=pool)
    assert amd.verdict == "identical-content"
    assert amd.official_image_digest == str(staged.digest) != amd.official_digest
    arm_result = verify_copy(ref(reg["staging"], repo, "multi"), ref(reg["staging"], repo, "arm"),
                             platform=Platform.parse("linux/arm64"), pool=pool)
    assert arm_result.verdict == "identical-content"
    done = cli("verify-mirror", f"{reg['staging']}/{repo}:multi", f"{reg['staging']}/{repo}:v1",
               "--platform", "linux/s390x")
    assert done.returncode == 2
    assert "no linux/s390x image in the index" in done.stderr
    assert "unknown" not in done.stderr.split("offers:")[1]


def test_evidence_record_is_about_the_copy(pool, reg, repo, staged, tars, tmp_path):
    """Filed under the copy's digest, subject = the copy, compared_with = the official."""
    from imagekit.evidence import Role
    from imagekit.evidence.kinds import VerifyCopyEvidence

    copy = push_image(pool.get(reg["staging"]), repo + "-copy", "v1", tars,
                      compression="gzip", level=1)
    result = verify_copy(ref(reg["staging"], repo), ref(reg["staging"], repo + "-copy"),
                         pool=pool)
    store = EvidenceStore(tmp_path)
    record_evidence(store, result)
    assert store.attempts(str(staged.digest), "verify-copy") == []
    (record,) = store.attempts(str(copy.digest), "verify-copy")
    assert record.context["copy"].endswith(f"{repo}-copy:v1")
    roles = {s.role: str(s.digest) for s in store.subjects(record)}
    assert roles == {Role.SUBJECT: str(copy.digest), Role.COMPARED_WITH: str(staged.digest)}
    evidence = store.result(record)
    assert isinstance(evidence, VerifyCopyEvidence) and evidence.verdict == "identical-content"


def test_missing_copy_is_an_error_exit_2(reg, repo, staged):
    done = cli("verify-mirror", f"{reg['staging']}/{repo}:v1", f"{reg['staging']}/{repo}:nope")
    assert done.returncode == 2
    assert done.stderr.startswith("imagekit: error: manifest not found")
    assert len(done.stderr.strip().splitlines()) == 1
