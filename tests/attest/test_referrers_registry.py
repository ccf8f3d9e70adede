"""The referrers API on a real registry nobody on the project wrote: go-containerregistry's own
registry with `WithReferrersSupport(true)`, infra's fourth registry (127.0.0.1:5004).

- imagekit attests there; the real cosign verifies and the real oras lists what it attached;
- imagekit reads the list through the API, not the `sha256-<hex>` tag-schema fallback: the
  fallback tag (which clients write there too, the registry sends no OCI-Subject) is deleted
  first, and the API still lists every referrer;
- a promotion carries the attestations API -> tag schema (distribution 2.8) -> API.
"""

from __future__ import annotations

import json
import os
import uuid

import httpx
import pytest

from imagekit.attest.statements import PROMOTION_TYPE, TEST_RESULT_TYPE
from imagekit.oci.digest import Digest
from imagekit.registry.referrers import list_referrers, tag_schema_tag
from tests.registry.images import layer_tar, push_image

from .conftest import imagekit

pytestmark = [pytest.mark.registry]

BUNDLE = "application/vnd.dev.sigstore.bundle.v0.3+json"
EMPTY = "application/vnd.oci.empty.v1+json"


@pytest.fixture(scope="module")
def api(infra) -> str:
    """The layout's endpoint (what `infra up` starts; the state file says the same)."""
    from imagekit.infra.registries import endpoints
    from imagekit.infra.state import StatePaths

    return endpoints(StatePaths(infra.state_dir))["referrers"].address


def _env(infra, tmp_path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("IMAGEKIT_RETRY_")}
    return dict(env, DOCKER_CONFIG=str(infra.docker_config_dir),
                IMAGEKIT_EVIDENCE_DIR=str(tmp_path / "evidence"),
                IMAGEKIT_REQUIRED_CHECKS="verify-copy",
                IMAGEKIT_REQUIRED_LINKS="base-identity,hops")


def api_list(address: str, repo: str, digest: Digest) -> list[dict]:
    """What the registry's referrers API itself answers (200 and an OCI index, or the test
    fails: a 404 would mean imagekit read the tag schema)."""
    response = httpx.get(f"http://{address}/v2/{repo}/referrers/{digest}", timeout=10)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/vnd.oci.image.index.v1+json"
    return response.json()["manifests"]


def drop_fallback_tag(address: str, repo: str, digest: Digest) -> None:
    """Delete the `sha256-<hex>` tag-schema index: only the API can list referrers now."""
    url = f"http://{address}/v2/{repo}/manifests/{tag_schema_tag(digest)}"
    response = httpx.delete(url, timeout=10)
    assert response.status_code in (202, 404), response.text
    assert httpx.get(url, timeout=10).status_code == 404


def test_attest_there_cosign_verifies_oras_lists_imagekit_reads_the_api(
        infra, pool, api, keypair, peers, tmp_path):
    private, public = keypair
    repo = f"attest/{uuid.uuid4().hex[:10]}"
    # imagekit's own chunked blob upload (no crane copy first)
    image = push_image(pool.get(api), repo, "v1", [layer_tar(301, 40_000)])
    env = _env(infra, tmp_path)
    done = imagekit("attest", f"{api}/{repo}:v1", "--key", str(private), "--type",
                    "test-result", "--json", env=env)
    assert done.returncode == 0, done.stderr
    (attached,) = json.loads(done.stdout)
    assert attached["predicate_type"] == TEST_RESULT_TYPE
    # the registry lists it through the API; its quirk: artifactType = the config media type
    (entry,) = api_list(api, repo, image.digest)
    assert entry["digest"] == attached["manifest"] and entry["artifactType"] == EMPTY
    drop_fallback_tag(api, repo, image.digest)
    assert [e["digest"] for e in list_referrers(pool.get(api), repo, image.digest)] == \
        [attached["manifest"]]
    by_digest = f"{api}/{repo}@{image.digest}"
    cosign = peers.cosign_verify(by_digest, public, TEST_RESULT_TYPE)
    assert cosign.returncode == 0, cosign.stderr[-500:]
    assert "payload" in cosign.stdout
    listed = peers.oras_discover(by_digest)
    assert [r["digest"] for r in listed["referrers"]] == [attached["manifest"]]
    # no evidence here: the signed test-result says FAILED, and verify says so (exit 1), but
    # the signature and subject checks PASS through the API listing
    done = imagekit("verify-attestations", by_digest, "--trust-key", str(public),
                    "--require-type", "test-result", "--json", env=env)
    report = json.loads(done.stdout)
    statuses = {c["name"].split()[0] + " " + c["name"].split()[1]: c["status"]
                for c in report["checks"] if c["name"].startswith("attestation")}
    assert statuses == {"attestation test-result": "PASS"}, report["checks"]
    assert report["attestations"][0]["referrer"] == attached["manifest"]


def test_a_filter_by_artifact_type_misses_bundles_there(pool, api):
    """Why imagekit never filters listings by artifactType: this registry reports the config's
    media type, so a filter on the bundle type finds nothing although the bundle is listed."""
    repo = f"attest/{uuid.uuid4().hex[:10]}"
    image = push_image(pool.get(api), repo, "v1", [layer_tar(302, 1000)])
    from imagekit.attest.publish import referrer_manifest
    from imagekit.registry.referrers import attach, push_small_blob

    client = pool.get(api)
    bundle = push_small_blob(client, repo, b'{"dsseEnvelope":{}}')
    push_small_blob(client, repo, b"{}")
    manifest = referrer_manifest(image.manifest, bundle, 19, TEST_RESULT_TYPE)
    assert attach(client, repo, manifest) == "tag-schema"   # no OCI-Subject header there
    drop_fallback_tag(api, repo, image.digest)
    assert len(list_referrers(client, repo, image.digest)) == 1
    assert list_referrers(client, repo, image.digest, artifact_type=BUNDLE) == []


def test_promote_carries_attestations_api_then_tag_schema_then_api(
        infra, pool, api, keypair, peers, tmp_path):
    private, public = keypair
    staging = infra.registries["staging"].address
    repo = f"attest/{uuid.uuid4().hex[:10]}"
    env = _env(infra, tmp_path)
    image = push_image(pool.get(api), repo, "v1", [layer_tar(303, 200_000),
                                                   layer_tar(304, 100_000)])
    source = f"{api}/{repo}:v1"
    done = imagekit("verify-mirror", source, source, env=env)   # evidence: base identity
    assert done.returncode == 0, done.stderr
    done = imagekit("attest", source, "--key", str(private), "--type", "test-result", env=env)
    assert done.returncode == 0, done.stderr
    drop_fallback_tag(api, repo, image.digest)      # the source lists through the API only
    final = f"{uuid.uuid4().hex[:10]}/again"
    done = imagekit("promote", source, "--via", f"{staging}/{repo}:v1",
                    "--to", f"{api}/{final}:v1", "--key", str(private), "--json", env=env)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert [h["endpoint"] for h in result["hops"]] == [f"{staging}/{repo}:v1",
                                                       f"{api}/{final}:v1"]
    for hop in result["hops"]:
        assert len(hop["referrers"]) == 1 and "1 referrers listed and served" in \
            hop["read_back"], hop
    # distribution 2.8 in the middle: the tag schema, no API
    middle = httpx.get(f"http://{staging}/v2/{repo}/referrers/{image.digest}", timeout=10)
    assert middle.status_code == 404
    # the last hop: its API lists the carried test-result and the promotion attached there
    drop_fallback_tag(api, final, image.digest)
    listed = api_list(api, final, image.digest)
    assert len(listed) == 2
    by_digest = f"{api}/{final}@{image.digest}"
    for uri in (TEST_RESULT_TYPE, PROMOTION_TYPE):
        run = peers.cosign_verify(by_digest, public, uri)
        assert run.returncode == 0, run.stderr[-500:]
    assert len(peers.oras_discover(by_digest)["referrers"]) == 2
    done = imagekit("verify-attestations", by_digest, "--trust-key", str(public),
                    "--require-type", "promotion", "--json", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    names = {c["name"]: c["status"] for c in json.loads(done.stdout)["checks"]}
    assert names["link hops"] == "PASS" and names["link base-identity"] == "PASS"


@pytest.mark.parametrize("which", ["referrers", "crane"])
def test_imagekit_pushes_a_blob_in_several_chunks_to_go_containerregistrys_registry(
        which, api, crane_registry):
    """go-containerregistry's registry (the referrers-API one, and `crane registry serve`)
    answers PATCH with 204 and takes a second PATCH only with a Content-Range naming where it
    starts (without: 400 "Stream uploads after first write are not allowed"): a 300 kB layer
    in 64 KiB chunks goes up, is committed and reads back by digest."""
    from imagekit.registry import RegistryClient, RegistryOptions
    from tests.registry.settings import FAST_RETRY

    address = api if which == "referrers" else crane_registry
    repo = f"chunks/{uuid.uuid4().hex[:10]}"
    options = RegistryOptions(chunk_size=64 * 1024, retry=FAST_RETRY)
    with RegistryClient(address, options) as client:
        image = push_image(client, repo, "v1", [layer_tar(305, 300_000)], compression="none")
        (layer,) = image.layer_digests
        assert len(image.layer_blobs[0]) > 4 * 64 * 1024
        assert client.get_blob_bytes(repo, layer, len(image.layer_blobs[0])) == \
            image.layer_blobs[0]
        assert client.get_manifest(repo, "v1").digest == image.digest
