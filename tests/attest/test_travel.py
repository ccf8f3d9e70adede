"""Evidence that travels: attested at staging, promoted staging -> production (basic auth) ->
target (token auth) -> crane's registry; at each end the real cosign verifies with the project
key, oras lists the referrers, `imagekit verify` exits 0 — and FAILs naming what was broken."""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import pytest

from imagekit.attest.statements import PROMOTION_TYPE, SBOM_TYPE, TEST_RESULT_TYPE
from imagekit.oci.digest import Digest
from imagekit.registry.referrers import detach, list_referrers
from tests.registry.images import layer_tar, push_image

from .conftest import imagekit

pytestmark = [pytest.mark.registry, pytest.mark.docker]
TYPES = {"test-result": TEST_RESULT_TYPE, "promotion": PROMOTION_TYPE, "sbom": SBOM_TYPE}


def _dpkg_layer() -> bytes:
    """/usr/bin/cat (the host's static busybox) and a dpkg status of one package: the SBOM then
    has a component (an SBOM of 0 components is not attested)."""
    import io
    import shutil
    import tarfile

    busybox = shutil.which("busybox")
    assert busybox, "a static busybox is needed for the SBOM's dpkg read (apt install busybox)"
    status = (b"Package: imagekit-travel\nStatus: install ok installed\nVersion: 1.0\n"
              b"Architecture: amd64\n\n")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data, mode in (("usr/bin/cat", open(busybox, "rb").read(), 0o755),
                                 ("var/lib/dpkg/status", status, 0o644)):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, 1700000000
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.fixture(scope="module")
def promoted(infra, keypair, tmp_path_factory):
    """One image, attested at staging, promoted with the signed chain to target."""
    import uuid

    from imagekit.registry import ClientPool, RegistryOptions

    reg = {name: e.address for name, e in infra.registries.items()}
    repo = f"attest/{uuid.uuid4().hex[:10]}"
    private, public = keypair
    env = {k: v for k, v in os.environ.items()  # the CLI's own retry waits, not the fast ones
           if not k.startswith("IMAGEKIT_RETRY_")}
    env = dict(env, DOCKER_CONFIG=str(infra.docker_config_dir),
               IMAGEKIT_EVIDENCE_DIR=str(tmp_path_factory.mktemp("evidence")),
               IMAGEKIT_REQUIRED_CHECKS="verify-copy",
               IMAGEKIT_REQUIRED_LINKS="base-identity,hops")
    with ClientPool(RegistryOptions(docker_config=infra.docker_config_dir)) as pool:
        image = push_image(pool.get(reg["staging"]), repo, "v1",
                           [layer_tar(71, 300_000), layer_tar(72, 200_000), _dpkg_layer()])
    staging = f"{reg['staging']}/{repo}:v1"
    done = imagekit("verify-mirror", staging, staging, env=env)  # real evidence: base identity
    assert done.returncode == 0, done.stderr
    done = imagekit("attest", staging, "--key", str(private), "--json", env=env)
    assert done.returncode == 0, done.stderr
    assert {a["predicate_type"] for a in json.loads(done.stdout)} == {TEST_RESULT_TYPE,
                                                                       SBOM_TYPE}
    done = imagekit("promote", staging, "--via", f"{reg['production']}/{repo}:v1",
                    "--to", f"{reg['target']}/{repo}:v1", "--key", str(private), "--json",
                    env=env)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    yield {"reg": reg, "repo": repo, "digest": image.digest, "result": result, "env": env,
           "public": public, "private": private}
    from imagekit.engine import Engine
    Engine(binary=str(infra.docker_client)).remove(f"{staging.rsplit(':', 1)[0]}@"
                                                   f"{image.digest}", force=True)


def test_every_hop_carries_and_reads_back_the_referrers(promoted):
    result = promoted["result"]
    assert result["digest"] == str(promoted["digest"]) and len(result["hops"]) == 2
    for hop in result["hops"]:
        assert len(hop["referrers"]) == 2, hop  # test-result + SBOM, carried
        assert "2 referrers listed and served" in hop["read_back"]
    assert [a["predicate_type"] for a in result["attestations"]] == [PROMOTION_TYPE] * 2


def test_at_target_cosign_verifies_oras_lists_imagekit_verifies(promoted, peers):
    ref = f"{promoted['reg']['target']}/{promoted['repo']}@{promoted['digest']}"
    for name, uri in TYPES.items():
        done = peers.cosign_verify(ref, promoted["public"], uri)
        assert done.returncode == 0, f"cosign refused {name}: {done.stderr[-500:]}"
        assert str(promoted["digest"]).split(":")[1] in json.dumps(done.stdout) or \
            '"payload"' in done.stdout
    listed = peers.oras_discover(ref)
    types = {r["annotations"]["dev.sigstore.bundle.predicateType"]
             for r in listed["referrers"]}
    assert types == set(TYPES.values())
    done = imagekit("verify-attestations", f"{promoted['reg']['target']}/{promoted['repo']}:v1", "--trust-key",
                    str(promoted["public"]), "--json", env=promoted["env"])
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["digest"] == str(promoted["digest"]) and report["status"] == "PASS"
    names = [c["name"] for c in report["checks"]]
    assert "link base-identity" in names and "link hops" in names and "test-result" in names


def test_at_production_basic_auth_too(promoted, peers):
    ref = f"{promoted['reg']['production']}/{promoted['repo']}@{promoted['digest']}"
    for uri in TYPES.values():
        done = peers.cosign_verify(ref, promoted["public"], uri)
        assert done.returncode == 0, done.stderr[-500:]
    done = imagekit("verify-attestations", ref, "--trust-key", str(promoted["public"]), env=promoted["env"])
    assert done.returncode == 0, done.stdout + done.stderr


def test_missing_link_fails_by_name(promoted):
    done = imagekit("verify-attestations", f"{promoted['reg']['target']}/{promoted['repo']}:v1", "--trust-key",
                    str(promoted["public"]), "--require-link", "build", env=promoted["env"])
    assert done.returncode == 1
    assert "FAIL     link build: ABSENT" in done.stdout


def test_a_hop_through_crane_registry_carries_everything(promoted, crane_registry, peers):
    """imagekit itself pushes the image's blobs to crane's registry (nothing placed there
    first): its chunked upload meets a PATCH answered 204 instead of the spec's 202 (push.py
    accepts both); the hop then carries and reads back every referrer."""
    assert httpx.head(f"http://{crane_registry}/v2/{promoted['repo']}/manifests/"
                      f"{promoted['digest']}", timeout=10).status_code == 404
    target = f"{promoted['reg']['target']}/{promoted['repo']}:v1"
    crane_ref = f"{crane_registry}/{promoted['repo']}:v1"
    done = imagekit("promote", target, "--to", crane_ref, "--json",
                    env=dict(promoted["env"], IMAGEKIT_REQUIRED_CHECKS="promote"))
    assert done.returncode == 0, done.stderr
    (hop,) = json.loads(done.stdout)["hops"]
    assert len(hop["referrers"]) == 3  # test-result, SBOM, promotion
    # both layers and the config went up through imagekit's PATCH upload (crane's 204)
    assert hop["blobs_copied"] >= 3 and hop["bytes_moved"] > 200_000, hop
    by_digest = f"{crane_registry}/{promoted['repo']}@{promoted['digest']}"
    for uri in TYPES.values():
        run = peers.cosign_verify(by_digest, promoted["public"], uri)
        assert run.returncode == 0, run.stderr[-500:]
    assert len(peers.oras_discover(by_digest)["referrers"]) == 3
    done = imagekit("verify-attestations", crane_ref, "--trust-key", str(promoted["public"]), env=promoted["env"])
    assert done.returncode == 0, done.stdout + done.stderr


def test_wrong_public_key_fails_and_cosign_refuses(promoted, peers, tmp_path):
    from imagekit.attest import keys

    private, wrong = keys.generate(tmp_path)
    private.unlink()
    ref = f"{promoted['reg']['target']}/{promoted['repo']}@{promoted['digest']}"
    done = imagekit("verify-attestations", ref, "--trust-key", str(wrong), env=promoted["env"])
    assert done.returncode == 1
    # the right key's bundles are another signer's here: named and ignored, never a FAIL
    # of their own (cosign's semantics); the verdict: nothing trusted is there
    assert "signed by a key that is not trusted" in done.stdout and "ignored" in done.stdout
    assert "no signature verifies" not in done.stdout
    assert "missing attestation" in done.stdout
    assert peers.cosign_verify(ref, wrong, PROMOTION_TYPE).returncode != 0


def _bundle_of(pool, registry, repo, digest, predicate_type):
    client = pool.get(registry)
    for entry in list_referrers(client, repo, digest):
        if entry.get("annotations", {}).get("dev.sigstore.bundle.predicateType") == \
                predicate_type:
            manifest = json.loads(client.get_manifest(repo, Digest.parse(entry["digest"])).data)
            return Digest.parse(entry["digest"]), Digest.parse(manifest["layers"][0]["digest"])
    raise AssertionError(f"no {predicate_type} referrer")


def test_a_changed_byte_in_an_attestation_blob_fails_by_name(promoted, peers, pool, infra):
    registry = promoted["reg"]["target"]
    referrer, bundle = _bundle_of(pool, registry, promoted["repo"], promoted["digest"],
                                  TEST_RESULT_TYPE)
    data_file = (Path(infra.state_dir) / "registries" / "target" / "data" / "docker" /
                 "registry" / "v2" / "blobs" / "sha256" / bundle.hex[:2] / bundle.hex / "data")
    original = data_file.read_bytes()
    at = original.index(b'"payload":"') + 40  # inside the signed payload's base64
    flipped = b"A" if original[at:at + 1] != b"A" else b"B"
    data_file.write_bytes(original[:at] + flipped + original[at + 1:])
    try:
        ref = f"{registry}/{promoted['repo']}@{promoted['digest']}"
        done = imagekit("verify-attestations", ref, "--trust-key", str(promoted["public"]), env=promoted["env"])
        assert done.returncode == 1
        line = next(x for x in done.stdout.splitlines() if x.strip().startswith("FAIL"))
        assert f"attestation test-result {referrer.short}" in line
        assert "does not hash to its digest" in line
        assert peers.cosign_verify(ref, promoted["public"], TEST_RESULT_TYPE).returncode != 0
    finally:
        data_file.write_bytes(original)


def test_an_attestation_removed_fails_by_name(promoted, peers, pool):
    registry = promoted["reg"]["target"]
    client = pool.get(registry)
    referrer, _ = _bundle_of(pool, registry, promoted["repo"], promoted["digest"],
                             PROMOTION_TYPE)
    detach(client, promoted["repo"], promoted["digest"], referrer)
    ref = f"{registry}/{promoted['repo']}@{promoted['digest']}"
    done = imagekit("verify-attestations", ref, "--trust-key", str(promoted["public"]), env=promoted["env"])
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"FAIL     attestation promotion: missing attestation: no verified " \
           f"{PROMOTION_TYPE}" in done.stdout, done.stdout
    refused = peers.cosign_verify(ref, promoted["public"], PROMOTION_TYPE)
    assert refused.returncode != 0, refused.stdout[-300:]
    kept = peers.cosign_verify(ref, promoted["public"], SBOM_TYPE)
    assert kept.returncode == 0, kept.stderr[-500:]
