"""Fixtures for attestation tests: the real registries of `imagekit infra`, a project key
pair in a 0600 file (removed afterwards), `crane registry serve` on the attest port range,
and helpers that run the real cosign and oras against an endpoint."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest

from imagekit.attest import keys
from imagekit.infra.peers import ensure_peer
from imagekit.registry import ClientPool, RegistryOptions
from tests.registry.settings import FAST_RETRY


@pytest.fixture(scope="session")
def reg(infra):
    return {name: endpoint.address for name, endpoint in infra.registries.items()}


@pytest.fixture(autouse=True)
def _docker_env(request, monkeypatch, tmp_path_factory):
    if "infra" in request.fixturenames:
        state = request.getfixturevalue("infra")
        monkeypatch.setenv("DOCKER_CONFIG", str(state.docker_config_dir))
    monkeypatch.setenv("IMAGEKIT_RETRY_WAIT_INITIAL", "0.01")
    monkeypatch.setenv("IMAGEKIT_RETRY_WAIT_MAX", "0.05")
    monkeypatch.setenv("IMAGEKIT_UPLOAD_JOURNAL", str(tmp_path_factory.mktemp("journal")))


@pytest.fixture
def pool(infra):
    options = RegistryOptions(docker_config=infra.docker_config_dir, retry=FAST_RETRY)
    with ClientPool(options) as p:
        yield p


@pytest.fixture
def repo() -> str:
    return f"attest/{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def keypair(tmp_path_factory):
    private, public = keys.generate(tmp_path_factory.mktemp("keys"))
    yield private, public
    private.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def crane_registry():
    """`crane registry serve` (go-containerregistry's registry: no referrers API) on a free
    loopback port, stopped afterwards."""
    crane = ensure_peer("crane")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen([str(crane), "registry", "serve", "--address",
                                f"127.0.0.1:{port}"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                if httpx.get(f"http://127.0.0.1:{port}/v2/").status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        else:
            pytest.fail("crane registry serve did not answer")
        yield f"127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)


class Peers:
    """cosign and oras as a consumer runs them: docker's config for credentials, the
    endpoint's CA file for TLS, plain HTTP only for the loopback HTTP registries."""

    def __init__(self, infra) -> None:
        self.infra = infra
        self.cosign = str(ensure_peer("cosign"))
        self.oras = str(ensure_peer("oras"))
        self.env = dict(os.environ, DOCKER_CONFIG=str(infra.docker_config_dir))

    def _ca(self, registry: str) -> str | None:
        for endpoint in self.infra.registries.values():
            if endpoint.address == registry and endpoint.scheme == "https":
                return str(endpoint.ca_file or self.infra.ca_file)
        return None

    def cosign_verify(self, ref: str, public: Path, predicate_type: str
                      ) -> subprocess.CompletedProcess:
        argv = [self.cosign, "verify-attestation", "--key", str(public), "--type",
                predicate_type, "--insecure-ignore-tlog", "--allow-http-registry", ref]
        ca = self._ca(ref.split("/", 1)[0])
        if ca:
            argv[2:2] = ["--registry-cacert", ca]
        return subprocess.run(argv, capture_output=True, text=True, env=self.env, timeout=120,
                              check=False)

    def oras_discover(self, ref: str) -> dict:
        argv = [self.oras, "discover", "--format", "json", "--registry-config",
                str(Path(self.infra.docker_config_dir) / "config.json")]
        ca = self._ca(ref.split("/", 1)[0])
        argv += ["--ca-file", ca] if ca else ["--plain-http"]
        done = subprocess.run([*argv, ref], capture_output=True, text=True, env=self.env,
                              timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)


@pytest.fixture(scope="session")
def peers(infra) -> Peers:
    return Peers(infra)


def imagekit(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "imagekit", *args], capture_output=True,
                          text=True, timeout=600, check=False, env=env)
