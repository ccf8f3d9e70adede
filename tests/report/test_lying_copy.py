"""A lying copy, end to end on the loopback staging registry: a copy whose config
claims the official's layers but whose blob holds other content fails `verify-mirror --diffids`;
that failure is the COPY's evidence — its gate refuses — and the official stays promotable."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from imagekit.evidence import EvidenceStore, Role, kinds
from imagekit.oci import mediatypes as mt
from imagekit.oci.digest import Digest
from imagekit.registry import ClientPool, ManifestBlob, RegistryOptions
from imagekit.results import CheckResult, Status
from tests.registry.images import layer_tar, push_blob, push_image

pytestmark = pytest.mark.registry
REPO = Path(__file__).resolve().parents[2]


def ik(*args: str, evidence: Path, docker_config: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "IMAGEKIT_EVIDENCE_DIR": str(evidence),
           "DOCKER_CONFIG": str(docker_config), "IMAGEKIT_RETRY_WAIT_MAX": "0.05",
           "IMAGEKIT_REQUIRED_CHECKS": "probe"}
    return subprocess.run([sys.executable, "-m", "imagekit", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300, check=False)


def test_a_lying_copy_blocks_the_copy_not_the_official(infra, tmp_path) -> None:
    staging = infra.registries["staging"].address
    repo = f"test/{uuid.uuid4().hex[:10]}"
    tars = [layer_tar(seed, 300_000) for seed in (1, 2, 3)]
    with ClientPool(RegistryOptions(docker_config=infra.docker_config_dir)) as pool:
        client = pool.get(staging)
        official = push_image(client, repo, "v1", tars)
        # the liar: the official's config (same claims), layer 1 swapped for other content
        other = gzip.compress(layer_tar(77, 300_000), mtime=0)
        for blob in (other, *official.layer_blobs, official.config):
            push_blob(client, repo + "-liar", blob)
        body = json.loads(official.manifest.data)
        body["layers"][1] = {"mediaType": mt.OCI_LAYER_GZIP,
                             "digest": str(Digest.of_bytes(other)), "size": len(other)}
        data = json.dumps(body).encode()
        liar = client.put_manifest(repo + "-liar", "v1",
                                   ManifestBlob(data, mt.OCI_MANIFEST, Digest.of_bytes(data)))
    evidence = tmp_path / "evidence"
    store = EvidenceStore(evidence)
    with store.attempt(official.digest, "probe") as attempt:     # the official's own check
        attempt.write_result(kinds.ProbeResult(image=f"{staging}/{repo}:v1"))
        attempt.add_check(CheckResult(name="pip_check", status=Status.PASS))
    run = dict(evidence=evidence, docker_config=infra.docker_config_dir)
    official_ref, copy_ref = f"{staging}/{repo}:v1", f"{staging}/{repo}-liar:v1"

    compared = ik("verify-mirror", official_ref, copy_ref, "--diffids", **run)
    assert compared.returncode == 1, compared.stderr
    [record] = store.attempts(liar, "verify-copy")              # filed under the copy
    assert store.attempts(official.digest, "verify-copy") == []
    assert {s.role: s.digest for s in store.subjects(record)} == {
        Role.SUBJECT: liar, Role.COMPARED_WITH: official.digest}
    assert {c.name: c.status for c in record.checks}["layer-content"] is Status.FAIL

    copy_gate = ik("gate", copy_ref, "--json", "--require-check", "verify-copy", **run)
    assert copy_gate.returncode == 1, copy_gate.stderr
    decision = json.loads(copy_gate.stdout)
    assert decision["digest"] == str(liar) and not decision["allowed"]
    # the gate names the check by the command's current name (the evidence keeps its kind)
    assert any("verify-mirror:layer-content FAIL" in r for r in decision["reasons"])
    assert not any("verify-copy:" in r for r in decision["reasons"])

    official_gate = ik("gate", official_ref, "--json", "--require-check", "probe", **run)
    assert official_gate.returncode == 0, official_gate.stdout + official_gate.stderr
    decision = json.loads(official_gate.stdout)
    assert decision["digest"] == str(official.digest) and decision["allowed"]
    assert not any("verify-mirror" in text or "verify-copy" in text
                   for text in decision["reasons"] + decision["warnings"])

    # and what the user saw in the issue: promoting the official is no longer refused
    promoted = ik("promote", official_ref, "--to", f"{staging}/{repo}-promoted:v1",
                  "--insecure", staging, **run)
    assert promoted.returncode == 0, promoted.stderr
    refused = ik("promote", copy_ref, "--to", f"{staging}/{repo}-promoted:liar",
                 "--insecure", staging, **run)
    assert refused.returncode == 1 and "promotion refused by the gate" in refused.stderr
    assert "verify-mirror:layer-content FAIL" in refused.stderr
