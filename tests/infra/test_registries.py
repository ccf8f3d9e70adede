"""The three real loopback registries and the token flow, spoken to with plain httpx."""

from __future__ import annotations

import hashlib
import json
import os
import ssl
import stat
import uuid

import httpx
import pytest

from imagekit.infra.credentials import load_credentials
from imagekit.infra.state import InfraState, StatePaths

pytestmark = pytest.mark.registry

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def _client(state: InfraState, name: str) -> httpx.Client:
    endpoint = state.registries[name]
    verify = ssl.create_default_context(cafile=str(endpoint.ca_file)) if endpoint.ca_file else True
    return httpx.Client(base_url=endpoint.url, verify=verify, timeout=30)


def _token(state: InfraState, scope: str, login: tuple[str, str] | None) -> httpx.Response:
    endpoint = state.registries["target"]
    return httpx.get(endpoint.token_realm, params={"service": endpoint.token_service,
                                                   "scope": scope},
                     auth=login, verify=ssl.create_default_context(cafile=str(state.ca_file)),
                     timeout=30)


def _push_image(client: httpx.Client, repo: str, headers: dict[str, str]) -> str:
    """Push one layer blob, one config blob and an OCI manifest; return the manifest digest."""
    layer = os.urandom(64)
    config = json.dumps({"architecture": "amd64", "os": "linux",
                         "rootfs": {"type": "layers", "diff_ids": []}}).encode()
    descriptors = []
    for blob, media_type in ((config, "application/vnd.oci.image.config.v1+json"),
                             (layer, "application/vnd.oci.image.layer.v1.tar")):
        digest = "sha256:" + hashlib.sha256(blob).hexdigest()
        started = client.post(f"/v2/{repo}/blobs/uploads/", headers=headers)
        assert started.status_code == 202, started.text
        location = started.headers["location"]
        put = client.put(location + ("&" if "?" in location else "?") + f"digest={digest}",
                         content=blob,
                         headers={**headers, "Content-Type": "application/octet-stream"})
        assert put.status_code == 201, put.text
        assert put.headers["docker-content-digest"] == digest
        descriptors.append({"mediaType": media_type, "digest": digest, "size": len(blob)})
    manifest = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                           "config": descriptors[0], "layers": descriptors[1:]}).encode()
    digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
    put = client.put(f"/v2/{repo}/manifests/v1", content=manifest,
                     headers={**headers, "Content-Type": OCI_MANIFEST})
    assert put.status_code == 201, put.text
    assert put.headers["docker-content-digest"] == digest
    got = client.get(f"/v2/{repo}/manifests/{digest}", headers={**headers, "Accept": OCI_MANIFEST})
    assert got.status_code == 200 and got.content == manifest
    return digest


def test_state_matches_contract(infra: InfraState) -> None:
    assert {n: (e.address, e.scheme, e.auth) for n, e in infra.registries.items()} == {
        "staging": ("127.0.0.1:5001", "http", "none"),
        "production": ("127.0.0.1:5002", "https", "basic"),
        "target": ("127.0.0.1:5003", "https", "bearer"),
        "referrers": ("127.0.0.1:5004", "http", "none")}
    config = infra.docker_config_dir / "config.json"
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert set(json.loads(config.read_text())["auths"]) >= {"127.0.0.1:5002", "127.0.0.1:5003"}
    for address in ("127.0.0.1:5002", "127.0.0.1:5003"):
        installed = f"/etc/docker/certs.d/{address}/ca.crt"
        assert open(installed, "rb").read() == infra.ca_file.read_bytes()


def test_staging_is_open(infra: InfraState) -> None:
    with _client(infra, "staging") as client:
        assert client.get("/v2/").status_code == 200
        repo = f"infra-test/staging-{uuid.uuid4().hex[:8]}"
        digest = _push_image(client, repo, {})
        assert client.delete(f"/v2/{repo}/manifests/{digest}").status_code == 202


def test_production_needs_basic_auth(infra: InfraState) -> None:
    creds = load_credentials(StatePaths(infra.state_dir)).production
    with _client(infra, "production") as client:
        anonymous = client.get("/v2/")
        assert anonymous.status_code == 401
        assert anonymous.headers["www-authenticate"].startswith("Basic ")
        assert client.get("/v2/", auth=(creds.username, "wrong")).status_code == 401
        assert client.get("/v2/", auth=(creds.username, creds.password)).status_code == 200
    with _client(infra, "production") as client:
        client.auth = httpx.BasicAuth(creds.username, creds.password)
        repo = f"infra-test/prod-{uuid.uuid4().hex[:8]}"
        digest = _push_image(client, repo, {})
        assert client.delete(f"/v2/{repo}/manifests/{digest}").status_code == 202


def test_production_rejects_untrusted_tls(infra: InfraState) -> None:
    """The project CA is what makes TLS verify: without it the handshake fails."""
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{infra.registries['production'].url}/v2/", verify=True, timeout=10)


def test_target_bearer_challenge_and_scoped_push(infra: InfraState) -> None:
    creds = load_credentials(StatePaths(infra.state_dir))
    repo = f"infra-test/target-{uuid.uuid4().hex[:8]}"
    with _client(infra, "target") as client:
        challenge = client.get("/v2/")
        assert challenge.status_code == 401
        www = challenge.headers["www-authenticate"]
        assert www.startswith("Bearer ")
        assert f'realm="{infra.registries["target"].token_realm}"' in www
        assert f'service="{infra.registries["target"].token_service}"' in www

        assert _token(infra, f"repository:{repo}:pull", None).status_code == 401
        assert _token(infra, f"repository:{repo}:pull",
                      (creds.target.username, "wrong")).status_code == 401

        issued = _token(infra, f"repository:{repo}:pull,push",
                        (creds.target.username, creds.target.password))
        assert issued.status_code == 200
        token = issued.json()["token"]
        headers = {"Authorization": f"Bearer {token}"}
        assert client.get("/v2/", headers=headers).status_code == 200
        digest = _push_image(client, repo, headers)

        # the token is scoped: another repository is refused
        other = client.post("/v2/infra-test/elsewhere/blobs/uploads/", headers=headers)
        assert other.status_code == 401

        # the pull-only reader gets a token that can pull but not push
        reader = _token(infra, f"repository:{repo}:pull,push",
                        (creds.target_reader.username, creds.target_reader.password))
        assert reader.status_code == 200
        read_headers = {"Authorization": f"Bearer {reader.json()['token']}"}
        assert client.get(f"/v2/{repo}/manifests/{digest}",
                          headers={**read_headers, "Accept": OCI_MANIFEST}).status_code == 200
        assert client.post(f"/v2/{repo}/blobs/uploads/", headers=read_headers).status_code == 401

        delete_token = _token(infra, f"repository:{repo}:delete",
                              (creds.target.username, creds.target.password)).json()["token"]
        deleted = client.delete(f"/v2/{repo}/manifests/{digest}",
                                headers={"Authorization": f"Bearer {delete_token}"})
        assert deleted.status_code == 202


def test_referrers_registry_answers_the_api_and_keeps_blobs_on_disk(infra: InfraState) -> None:
    """The fourth registry (go-containerregistry's, built from Debian's source) answers
    `GET /v2/<repo>/referrers/<digest>` with an OCI index; distribution 2.8 (staging) does
    not (404): the difference the referrers-API tests rely on."""
    from imagekit.infra import processes, referrers_registry
    from imagekit.infra.registries import status

    paths = StatePaths(infra.state_dir)
    record = processes.running("registry-referrers", paths)
    assert record is not None and record.cmdline[0] == str(referrers_registry.binary_path(paths))
    (component,) = [c for c in status(paths) if c.name == "referrers"]
    assert component.running and component.ours and "referrers API on" in component.detail
    repo = f"infra-test/referrers-{uuid.uuid4().hex[:8]}"
    with httpx.Client(base_url="http://127.0.0.1:5004", timeout=30) as client:
        subject = _push_image(client, repo, {})
        empty = b"{}"
        empty_digest = "sha256:" + hashlib.sha256(empty).hexdigest()
        started = client.post(f"/v2/{repo}/blobs/uploads/")
        assert started.status_code == 202
        put = client.put(started.headers["location"], params={"digest": empty_digest},
                         content=empty)
        assert put.status_code == 201, put.text
        referrer = json.dumps({
            "schemaVersion": 2, "mediaType": OCI_MANIFEST,
            "artifactType": "application/vnd.example+json",
            "config": {"mediaType": "application/vnd.oci.empty.v1+json",
                       "digest": empty_digest, "size": 2},
            "layers": [{"mediaType": "application/vnd.oci.empty.v1+json",
                        "digest": empty_digest, "size": 2}],
            "subject": {"mediaType": OCI_MANIFEST, "digest": subject, "size": 1}}).encode()
        digest = "sha256:" + hashlib.sha256(referrer).hexdigest()
        put = client.put(f"/v2/{repo}/manifests/{digest}", content=referrer,
                         headers={"Content-Type": OCI_MANIFEST})
        assert put.status_code == 201, put.text
        assert "oci-subject" not in put.headers   # its quirk: clients also write the tag schema
        listed = client.get(f"/v2/{repo}/referrers/{subject}")
        assert listed.status_code == 200
        (entry,) = listed.json()["manifests"]
        assert entry["digest"] == digest
        # its other quirk: artifactType is the config's media type, not the manifest's
        assert entry["artifactType"] == "application/vnd.oci.empty.v1+json"
    on_disk = referrers_registry.blobs_dir(paths) / "sha256" / empty_digest.split(":")[1]
    assert on_disk.read_bytes() == empty
    with _client(infra, "staging") as client:
        assert client.get(f"/v2/{repo}/referrers/{subject}").status_code == 404
