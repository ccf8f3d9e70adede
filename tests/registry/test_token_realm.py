"""Registry Bearer tokens: `expires_in`/`issued_at` honoured (a due token is fetched again before
the request, not after a 401), and a realm on another domain refused before anything is sent
to it (go-containerregistry's `validateRealmURL`). The foreign-realm case runs against real
servers of ours on loopback: a registry whose challenge names a token service on another
address (127.0.0.2) or another name (localhost), and that service counts every request."""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from imagekit.registry.auth import SCOPES, RegistryAuth, realm_refusal, token_lifetime
from imagekit.errors import NotFound, Unauthorized
from imagekit.registry.credentials import CredentialSource

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("realm", "registry", "insecure", "allowed"), [
    ("https://auth.docker.io/token", "registry-1.docker.io", False, True),
    ("https://gitlab.com/jwt/auth", "registry.gitlab.com", False, True),
    ("https://ghcr.io/token", "ghcr.io", False, True),
    ("https://127.0.0.1:5010/token", "127.0.0.1:5003", False, True),   # our target registry
    ("https://auth.example.co.uk/token", "registry.example.co.uk", False, True),
    ("https://auth.other.co.uk/token", "registry.example.co.uk", False, False),
    ("https://auth.evil.example/token", "registry.example.com", False, False),
    ("https://169.254.169.254/latest/meta-data", "registry.example.com", False, False),
    ("https://10.0.0.7/token", "10.0.0.8:5000", False, False),
    ("https://localhost:5010/token", "127.0.0.1:5003", False, False),
    ("https://127.0.0.2:5010/token", "127.0.0.1:5003", False, False),
    ("http://auth.example.com/token", "registry.example.com", False, False),
    ("http://auth.example.com/token", "registry.example.com", True, True),
    ("http://127.0.0.1:5010/token", "127.0.0.1:5001", False, True),     # loopback, plain
    ("file:///etc/passwd", "registry.example.com", False, False),
])
def test_realm_rule(realm: str, registry: str, insecure: bool, allowed: bool) -> None:
    refusal = realm_refusal(httpx.URL(realm), registry, insecure)
    assert (refusal is None) is allowed, refusal


def test_token_lifetime_follows_expires_in_and_issued_at() -> None:
    now = 1_800_000_000.0
    stamp = "2027-01-15T08:00:00Z"
    issued = dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    # issued 100 s before we asked, valid 300 s: expires 200 s from now, refreshed 30 s earlier
    expires, refresh = token_lifetime({"expires_in": 300, "issued_at": stamp},
                                      issued.timestamp() + 100)
    assert expires == issued.timestamp() + 300 and refresh == expires - 30
    # no expires_in (or less than distribution's minimum): 60 s from when we asked
    assert token_lifetime({}, now) == (now + 60, now + 54)
    assert token_lifetime({"expires_in": 10}, now)[0] == now + 60
    # issued_at so far behind our clock that the token would already be over: our clock
    assert token_lifetime({"expires_in": 300, "issued_at": "2001-01-01T00:00:00Z"}, now)[0] \
        == now + 300
    # a server clock ahead of ours never lengthens the life
    ahead = token_lifetime({"expires_in": 300, "issued_at": "2099-01-01T00:00:00Z"}, now)
    assert ahead[0] == now + 300


class _Registry:
    """A registry and its token service in one MockTransport: tokens `t<n>` live 120 s."""

    def __init__(self) -> None:
        self.now = 1_000_000.0
        self.issued: dict[str, float] = {}
        self.log: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/token":
            name = f"t{len(self.issued) + 1}"
            self.issued[name] = self.now + 120
            self.log.append("token")
            return httpx.Response(200, json={"token": name, "expires_in": 120})
        token = request.headers.get("authorization", "").removeprefix("Bearer ")
        if self.issued.get(token, 0) > self.now:
            self.log.append(f"ok {token}")
            return httpx.Response(200, json={})
        self.log.append("401")
        return httpx.Response(401, headers={
            "WWW-Authenticate": 'Bearer realm="https://reg.example.com/token",'
                                'service="reg",scope="repository:a:pull"'})


def test_a_token_due_for_renewal_is_fetched_before_the_request() -> None:
    registry = _Registry()
    auth = RegistryAuth("reg.example.com", CredentialSource(Path("/nonexistent")))
    auth.clock = lambda: registry.now
    client = httpx.Client(auth=auth, transport=httpx.MockTransport(registry))

    def get() -> int:
        return client.get("https://reg.example.com/v2/a/manifests/1",
                          extensions={SCOPES: ["repository:a:pull"]}).status_code

    assert get() == 200 and registry.log == ["401", "token", "ok t1"]
    registry.now += 100                 # 20 s left, the margin is 12 s: still the cached one
    assert get() == 200 and registry.log[-1] == "ok t1"
    registry.now += 9                   # 11 s left: due, renewed before the request goes out
    assert get() == 200
    assert registry.log[-2:] == ["token", "ok t2"]      # no 401 in between
    assert registry.log.count("401") == 1


# ------------------------------------------------------------------------------ foreign realm

class _Counting(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, host: str, handler) -> None:
        super().__init__((host, 0), handler)
        self.hits: list[dict] = []
        threading.Thread(target=self.serve_forever, daemon=True).start()


def _token_service(host: str) -> _Counting:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self.server.hits.append({"path": self.path,
                                     "authorization": self.headers.get("Authorization")})
            body = json.dumps({"token": "stolen-scope-token", "expires_in": 300}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_POST = do_GET

    return _Counting(host, Handler)


def _registry(realm: str) -> _Counting:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            self.server.hits.append({"path": self.path})
            self.send_response(401)
            self.send_header("WWW-Authenticate",
                             f'Bearer realm="{realm}",service="r",scope="repository:x:pull"')
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        do_HEAD = do_GET

    return _Counting("127.0.0.1", Handler)


@pytest.mark.parametrize("realm_host", ["127.0.0.2", "localhost"])
def test_a_foreign_realm_gets_nothing_and_the_run_stops(realm_host: str, tmp_path: Path
                                                        ) -> None:
    """Both hosts answer on this machine, so a request would arrive: none does."""
    token_service = _token_service("127.0.0.2" if realm_host == "127.0.0.2" else "127.0.0.1")
    port = token_service.server_address[1]
    registry = _registry(f"http://{realm_host}:{port}/token")
    address = f"127.0.0.1:{registry.server_address[1]}"
    config = tmp_path / "docker"
    config.mkdir()
    secret = base64.b64encode(b"alice:s3cret-password").decode()
    (config / "config.json").write_text(json.dumps({"auths": {address: {"auth": secret}}}))
    try:
        result = subprocess.run(
            [sys.executable, "-m", "imagekit", "verify-mirror", f"{address}/x:1",
             f"{address}/x:2", "--evidence-dir", str(tmp_path / "evidence")],
            capture_output=True, text=True, cwd=REPO, timeout=60,
            env={**os.environ, "DOCKER_CONFIG": str(config), "IMAGEKIT_PROGRESS": "plain"})
    finally:
        registry.shutdown()
        token_service.shutdown()
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"imagekit: error: registry {address} names the token realm "
                               f"http://{realm_host}:{port}/token, which is refused: ")
    assert "nothing was sent to it" in lines[0]
    assert registry.hits, "the registry was asked (and challenged)"
    assert token_service.hits == []            # no credential, no scope, no request at all
    assert "s3cret" not in result.stderr + result.stdout


def test_the_same_realm_on_the_registrys_host_is_used(tmp_path: Path) -> None:
    """The control: the same setup with the realm on the registry's own address is asked."""
    token_service = _token_service("127.0.0.1")
    registry = _registry(f"http://127.0.0.1:{token_service.server_address[1]}/token")
    address = f"127.0.0.1:{registry.server_address[1]}"
    auth = RegistryAuth(address, CredentialSource(tmp_path))
    client = httpx.Client(auth=auth)
    try:
        with pytest.raises(Unauthorized, match="refused anonymous access"):
            client.get(f"http://{address}/v2/x/manifests/1",   # the stub refuses every token
                       extensions={SCOPES: ["repository:x:pull"]})
    finally:
        registry.shutdown()
        token_service.shutdown()
    assert len(token_service.hits) == 1


@pytest.mark.registry
def test_target_registry_token_is_renewed_before_it_expires(pool, reg, repo) -> None:
    """The real target registry and its token service (`expires_in` 900, `issued_at`): once
    the token is due, the next request fetches a new one first and meets no 401."""
    client = pool.get(reg["target"])
    seen: list[str] = []
    client.transport.http.event_hooks["response"].append(    # (the /v2/ ping aside)
        lambda r: r.request.url.path == "/v2/" or
        seen.append(f"{r.request.url.port} {r.request.url.path} {r.status_code}"))
    with pytest.raises(NotFound):
        client.resolve_tag(repo, "absent")       # the repository is not on target
    token_port = 5010
    assert [s.split()[2] for s in seen] == ["401", "200", "404"]
    assert seen[1].startswith(f"{token_port} /token")
    [token] = client.transport.auth.tokens.values()
    # from the answer's issued_at (whole seconds) + expires_in (900), less the 60-s margin
    assert 830 < token.refresh_at - time.time() <= 840
    seen.clear()
    client.transport.auth.clock = lambda: time.time() + 900 - 59   # inside the 60-s margin
    with pytest.raises(NotFound):
        client.resolve_tag(repo, "absent")
    assert [s.split()[2] for s in seen] == ["200", "404"], seen   # renewed first, no 401
    assert seen[0].startswith(f"{token_port} /token")
