"""Credentials and trust against the real production (basic) and target (Bearer) registries:
docker config.json sources, clear refusals, and no secret ever printed or recorded."""

from __future__ import annotations

import base64
import json
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from imagekit.errors import TransportError, Unauthorized
from imagekit.infra.credentials import load_credentials
from imagekit.oci import ImageReference
from imagekit.promote import promote
from imagekit.registry import ClientPool, RegistryClient, RegistryOptions
from .settings import FAST_RETRY
from .proxy import FaultProxy

pytestmark = pytest.mark.registry

WRONG = "Wr0ng-pass-imagekit-test-7f3a"


def R(text: str) -> ImageReference:
    return ImageReference.parse(text)


_WRITTEN: list[Path] = []


def write_config(folder: Path, config: dict) -> Path:
    """A docker config.json holding passwords: 0600 from its creation, removed after the test."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(json.dumps(config))
    _WRITTEN.append(path)
    return folder


@pytest.fixture(autouse=True)
def _remove_written_configs():
    yield
    while _WRITTEN:
        _WRITTEN.pop().unlink(missing_ok=True)


def auth(user: str, password: str) -> dict:
    return {"auth": base64.b64encode(f"{user}:{password}".encode()).decode()}


def cli(args: list[str], docker_config: Path, evidence: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, DOCKER_CONFIG=str(docker_config), IMAGEKIT_EVIDENCE_DIR=str(evidence),
               IMAGEKIT_RETRY_ATTEMPTS="3")
    return subprocess.run([sys.executable, "-m", "imagekit", *args], capture_output=True,
                          text=True, timeout=300, check=False, env=env)


def secrets_of(*passwords: str) -> list[str]:
    found = []
    for password in passwords:
        found.append(password)
        for user in ("imagekit", "imagekit-push", "imagekit-reader", "admin"):
            found.append(base64.b64encode(f"{user}:{password}".encode()).decode())
    return found


def assert_no_secret(texts: list[str], folder: Path | None, secrets: list[str]) -> None:
    blobs = list(texts)
    if folder is not None and folder.exists():
        blobs += [p.read_text(errors="replace") for p in folder.rglob("*") if p.is_file()]
    for secret in secrets:
        for blob in blobs:
            assert secret not in blob


@pytest.fixture(scope="module")
def creds(infra):
    return load_credentials()


@pytest.mark.parametrize("hop", ["production", "target"])
def test_wrong_password_is_a_clear_error_and_no_secret_is_printed(hop, reg, repo, staged, creds,
                                                                  tmp_path):
    docker = write_config(tmp_path / "docker", {"auths": {reg[hop]: auth(
        creds.production.username if hop == "production" else creds.target.username, WRONG)}})
    evidence = tmp_path / "evidence"
    done = cli(["promote", f"{reg['staging']}/{repo}:v1", "--to", f"{reg[hop]}/{repo}:v1",
                "--json", "--force", "--reason", "auth test"], docker, evidence)
    assert done.returncode == 2
    line = done.stderr.strip()
    assert len(line.splitlines()) == 1 and line.startswith("imagekit: error: registry ")
    assert reg[hop] in line and "credential sources tried" in line
    assert str(docker / "config.json") in line
    assert done.stdout == ""
    real = creds.production.password if hop == "production" else creds.target.password
    assert_no_secret([done.stdout, done.stderr], evidence, secrets_of(WRONG, real))


def test_no_credentials_names_the_sources_tried(reg, repo, staged, tmp_path):
    done = cli(["promote", f"{reg['staging']}/{repo}:v1", "--to", f"{reg['production']}/{repo}:v1",
                "--force", "--reason", "auth test"], tmp_path / "empty", tmp_path / "ev")
    assert done.returncode == 2
    assert "anonymous access" in done.stderr and "(absent)" in done.stderr


def test_pull_only_token_cannot_push(options, reg, repo, staged, creds, tmp_path):
    docker = write_config(tmp_path / "docker", {"auths": {reg["target"]: auth(
        creds.target_reader.username, creds.target_reader.password)}})
    opts = options.model_copy(update={"docker_config": docker})
    with ClientPool(opts) as pool, pytest.raises(Unauthorized) as caught:
        promote(R(f"{reg['staging']}/{repo}:v1"), [], R(f"{reg['target']}/{repo}:v1"),
                pool=pool)
    assert reg["target"] in caught.value.one_line()
    assert creds.target_reader.password not in caught.value.one_line()


HELPER = """#!{python}
import json, os, sys
server = sys.stdin.read().strip()
table = json.load(open(os.environ["IK_TEST_HELPER_TABLE"]))
if server not in table:
    sys.stderr.write("credentials not found in native keychain\\n"); sys.exit(1)
user, secret = table[server]
print(json.dumps({{"ServerURL": server, "Username": user, "Secret": secret}}))
"""


def test_cred_helpers_and_creds_store(options, reg, repo, staged, creds, tmp_path, monkeypatch,
                                     secret_file):
    """credHelpers for production, credsStore for target: secrets come over stdin/stdout of
    docker-credential-<name>, never argv."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("iktest", "ikstore"):
        helper = bin_dir / f"docker-credential-{name}"
        helper.write_text(HELPER.format(python=sys.executable))
        helper.chmod(helper.stat().st_mode | stat.S_IEXEC)
    table = secret_file(tmp_path / "table.json", json.dumps({  # 0600, removed afterwards
        reg["production"]: [creds.production.username, creds.production.password],
        reg["target"]: [creds.target.username, creds.target.password]}))
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("IK_TEST_HELPER_TABLE", str(table))
    docker = write_config(tmp_path / "docker", {"credHelpers": {reg["production"]: "iktest"},
                                                "credsStore": "ikstore"})
    opts = options.model_copy(update={"docker_config": docker})
    with ClientPool(opts) as pool:
        result = promote(R(f"{reg['staging']}/{repo}:v1"), [R(f"{reg['production']}/{repo}:v1")],
                         R(f"{reg['target']}/{repo}:v1"), pool=pool)
        assert all(h.verified for h in result.hops)
        assert "credHelpers" in pool.get(reg["production"]).credential_sources()[0]
        assert "credsStore" in pool.get(reg["target"]).credential_sources()[-1]


def test_tls_registry_without_trusted_ca_is_refused_then_trusted_by_ca_file(infra, reg,
                                                                            tmp_path,
                                                                            monkeypatch):
    options = RegistryOptions(docker_config=infra.docker_config_dir, retry=FAST_RETRY,
                              certs_d=tmp_path / "no-certs")
    with pytest.raises(TransportError) as caught, RegistryClient(reg["production"],
                                                                 options) as client:
        client.ping()
    assert "not trusted" in caught.value.message and "--ca-file" in caught.value.message
    trusted = options.model_copy(update={"ca_file": infra.ca_file})
    with RegistryClient(reg["production"], trusted) as client:
        assert client.ping() == f"https://{reg['production']}"


def _non_loopback_ipv4() -> str:
    out = subprocess.run(["hostname", "-I"], capture_output=True, text=True, check=False).stdout
    for address in out.split():
        try:
            socket.inet_aton(address)
        except OSError:
            continue
        if not address.startswith("127."):
            return address
    pytest.fail("this machine has no non-loopback IPv4 address to test the insecure rule with")


def test_plain_http_only_on_loopback_unless_insecure(reg, repo, staged, options):
    address = _non_loopback_ipv4()
    with FaultProxy(reg["staging"], bind="0.0.0.0") as proxy:
        remote = f"{address}:{proxy.port}"
        with RegistryClient(remote, options) as client, pytest.raises(TransportError) as caught:
            client.ping()
        assert "--insecure" in caught.value.message
        allowed = options.model_copy(update={"insecure": frozenset({remote})})
        with RegistryClient(remote, allowed) as client:
            assert client.ping() == f"http://{remote}"
            assert client.get_manifest(repo, "v1").digest == staged.digest
    with RegistryClient(reg["staging"], options) as client:  # loopback: no flag needed
        assert client.ping() == f"http://{reg['staging']}"


def test_token_expiring_mid_upload_is_refreshed_and_the_chunk_resent(options, reg, repo,
                                                                     monkeypatch):
    """The target's Bearer token goes bad between chunks (as a short-lived token does during
    a long upload): the chunk is answered 401, a fresh token is fetched, the upload goes on."""
    import os as _os

    from imagekit.oci.digest import Digest

    data = _os.urandom(3 << 20)
    digest = Digest.of_bytes(data)
    from imagekit.registry import push

    with RegistryClient(reg["target"], options) as client:
        tokens = client.transport.auth.tokens
        real_patch = push._Upload._patch
        spoiled = []

        def spoil_then_send(self, budget):
            if not spoiled and tokens:
                import dataclasses

                # the server no longer takes it, though our clock says it is still good
                for key in tokens:
                    tokens[key] = dataclasses.replace(tokens[key],
                                                      header="Bearer expired.token.value")
                spoiled.append(True)
            return real_patch(self, budget)

        monkeypatch.setattr(push._Upload, "_patch", spoil_then_send)
        client.upload_blob(repo, digest, lambda: iter([data]), size=len(data))
        assert spoiled and client.blob_exists(repo, digest)
        assert all(v.header != "Bearer expired.token.value" for v in tokens.values())
