"""The build's SLSA provenance end to end at the real staging registry: `imagekit attest` signs
BuildKit's statement for the pushed digest and attaches it; `imagekit verify-attestations
--require-type slsa-provenance` verifies it with the public key, against the spec's lock and
Dockerfile (the real cosign verifies it too) — and FAILs naming both digests when the lock pins
another base."""

from __future__ import annotations

import json
import os
import uuid

import pytest

from imagekit.attest.statements import SLSA_PROVENANCE_TYPE
from imagekit.evidence import EvidenceStore
from imagekit.oci.digest import Digest
from imagekit.registry import ClientPool, RegistryOptions
from tests.registry.images import layer_tar, push_image

from .conftest import imagekit
from .test_provenance import BASE, buildkit_bytes, record_build, write_spec

pytestmark = [pytest.mark.registry]


def test_provenance_signed_at_staging_verifies_against_the_lock(infra, keypair, tmp_path,
                                                              peers):
    staging = infra.registries["staging"].address
    repo = f"attest/{uuid.uuid4().hex[:10]}"
    with ClientPool(RegistryOptions(docker_config=infra.docker_config_dir)) as pool:
        image = push_image(pool.get(staging), repo, "v1", [layer_tar(81, 20_000)])
    private, public = keypair
    evidence = tmp_path / "evidence"
    record_build(EvidenceStore(evidence), buildkit_bytes(), image.digest, f"{staging}/{repo}")
    env = dict({k: v for k, v in os.environ.items() if not k.startswith("IMAGEKIT_RETRY_")},
               DOCKER_CONFIG=str(infra.docker_config_dir), IMAGEKIT_EVIDENCE_DIR=str(evidence))
    ref = f"{staging}/{repo}:v1"

    done = imagekit("attest", ref, "--key", str(private), "--type", "slsa-provenance",
                    "--json", env=env)
    assert done.returncode == 0, done.stderr
    assert [a["predicate_type"] for a in json.loads(done.stdout)] == [SLSA_PROVENANCE_TYPE]
    # the real cosign verifies it as SLSA v1 provenance with the public key
    done = peers.cosign_verify(f"{staging}/{repo}@{image.digest}", public, "slsaprovenance1")
    assert done.returncode == 0, done.stderr[-500:]

    # the spec's image is told by REF's repository; its lock pins the base BuildKit resolved
    spec = write_spec(tmp_path / "spec", repository=repo)
    verify = ["verify-attestations", ref, "--trust-key", str(public), "--require-type",
              "slsa-provenance", "--spec", str(spec), "--profile", "local", "--json"]
    done = imagekit(*verify, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["digest"] == str(image.digest) and report["status"] == "PASS"
    checks = {c["name"]: c for c in report["checks"]}
    assert {checks[f"slsa-provenance {n}"]["status"] for n in
            ("subject", "base", "dockerfile")} == {"PASS"}

    # the lock re-pinned to another base: the same signed provenance FAILs, naming both
    other = Digest.of_bytes(b"re-pinned base")
    write_spec(tmp_path / "spec", base_digest=other, repository=repo)
    done = imagekit(*verify, env=env)
    assert done.returncode == 1, done.stdout + done.stderr
    base = {c["name"]: c for c in json.loads(done.stdout)["checks"]}["slsa-provenance base"]
    assert base["status"] == "FAIL" and str(BASE) in base["detail"] and \
        str(other) in base["detail"]


def test_attest_defers_a_provenance_no_build_recorded(infra, keypair, tmp_path):
    staging = infra.registries["staging"].address
    repo = f"attest/{uuid.uuid4().hex[:10]}"
    with ClientPool(RegistryOptions(docker_config=infra.docker_config_dir)) as pool:
        push_image(pool.get(staging), repo, "v1", [layer_tar(82, 20_000)])
    env = dict(os.environ, DOCKER_CONFIG=str(infra.docker_config_dir),
               IMAGEKIT_EVIDENCE_DIR=str(tmp_path / "evidence"))
    done = imagekit("attest", f"{staging}/{repo}:v1", "--key", str(keypair[0]), "--type",
                    "slsa-provenance", env=env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "DEFERRED slsa-provenance: no build of sha256:" in done.stdout
    assert "attested" not in done.stdout
