"""Offline parts of the registry layer: credentials parsing, challenges, scopes, loopback rule,
Retry-After, and the diffID engine (gzip multi-member, zstd multi-frame, truncation)."""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import os
import random

import httpx
import pytest
import zstandard

from imagekit.errors import InvalidInput
from imagekit.registry.auth import merge_scopes, parse_challenges
from imagekit.registry.credentials import CredentialSource
from imagekit.registry.endpoint import is_loopback
from imagekit.registry.retry import RetryableStatus, RetryPolicy, backoff_hook, parse_retry_after
from imagekit.verify.diffids import diff_id


def chunks_of(data: bytes, size: int = 65536):
    return (data[i:i + size] for i in range(0, len(data), size))


@pytest.fixture
def payload() -> bytes:
    rng = random.Random(3)
    return rng.randbytes(300_000) + b"abc" * 200_000


def test_gzip_single_and_multi_member(payload):
    want = hashlib.sha256(payload).hexdigest()
    assert diff_id(chunks_of(gzip.compress(payload)), "gzip")[0].hex == want
    multi = gzip.compress(payload[:1000]) + gzip.compress(payload[1000:])
    digest, size = diff_id(chunks_of(multi, 777), "gzip")
    assert digest.hex == want and size == len(payload)


def test_zstd_multi_frame_and_uncompressed(payload):
    want = hashlib.sha256(payload).hexdigest()
    c = zstandard.ZstdCompressor()
    frames = c.compress(payload[:5000]) + c.compress(payload[5000:])
    assert diff_id(chunks_of(frames), "zstd")[0].hex == want
    assert diff_id(chunks_of(payload), "none")[0].hex == want
    assert diff_id(chunks_of(payload), "none", threaded_hash=False)[0].hex == want


def test_truncated_or_garbage_layer_is_an_error(payload):
    blob = gzip.compress(payload)
    with pytest.raises(InvalidInput, match="truncated"):
        diff_id(chunks_of(blob[: len(blob) // 2]), "gzip")
    with pytest.raises(InvalidInput, match="not valid gzip"):
        diff_id(chunks_of(b"not gzip at all" * 10), "gzip")


def test_credentials_from_auths_in_every_spelling(tmp_path, secret_file):
    config = {"auths": {
        "a.example:5000": {"auth": base64.b64encode(b"alice:s3cret:with:colons").decode()},
        "https://b.example": {"username": "bob", "password": "pw"},
        "c.example": {"identitytoken": "refresh-me"},
    }}
    secret_file(tmp_path / "config.json", json.dumps(config))
    source = CredentialSource(tmp_path)
    alice = source.lookup("a.example:5000").credential
    assert alice is not None and alice.username == "alice" and alice.secret == "s3cret:with:colons"
    assert "s3cret" not in repr(alice) and "s3cret" not in str(alice)
    bob = source.lookup("b.example").credential
    assert bob is not None and bob.username == "bob"
    token = source.lookup("c.example").credential
    assert token is not None and token.identity_token
    missing = source.lookup("d.example")
    assert missing.credential is None and any("auths[d.example]" in s for s in missing.sources)


def test_bad_auth_entry_is_a_one_line_error_without_the_secret(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"auths": {"x": {"auth": "%%%notb64"}}}))
    with pytest.raises(InvalidInput) as caught:
        CredentialSource(tmp_path).lookup("x")
    assert "%%%notb64" not in caught.value.one_line()


def test_docker_config_env(tmp_path, monkeypatch, secret_file):
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    secret_file(tmp_path / "config.json", json.dumps({"auths": {"r": {"auth": base64.b64encode(
        b"u:p").decode()}}}))
    found = CredentialSource().lookup("r").credential
    assert found is not None and (found.username, found.secret) == ("u", "p")
    assert str(tmp_path) in found.source


def test_challenge_parsing():
    (bearer,) = parse_challenges('Bearer realm="https://auth.example/token",'
                                 'service="registry.example",scope="repository:a/b:pull,push '
                                 'repository:c:pull"')
    assert bearer.scheme == "bearer" and bearer.realm == "https://auth.example/token"
    assert bearer.service == "registry.example"
    assert bearer.scopes == ["repository:a/b:pull,push", "repository:c:pull"]
    (basic,) = parse_challenges('Basic realm="Registry Realm"')
    assert basic.scheme == "basic" and basic.realm == "Registry Realm"


def test_merge_scopes():
    assert merge_scopes(["repository:a:pull"], ["repository:a:push", "repository:b:pull"]) == \
        ["repository:a:pull,push", "repository:b:pull"]


@pytest.mark.parametrize("registry,loopback", [
    ("127.0.0.1:5000", True), ("127.3.2.1", True), ("localhost:5000", True), ("[::1]:5000", True),
    ("192.0.2.2:5000", False), ("registry.example", False), ("10.0.0.1:5000", False)])
def test_loopback_rule(registry, loopback):
    assert is_loopback(registry) is loopback


def test_retry_after_is_honoured_capped_and_refused_beyond_the_deadline():
    policy = RetryPolicy(retry_after_max=5, deadline=30)
    request = httpx.Request("GET", "http://x/")

    def status(code, after=None):
        headers = {"Retry-After": after} if after else {}
        return RetryableStatus(httpx.Response(code, headers=headers, request=request))

    hook = backoff_hook(policy)
    assert hook(status(429, "2")) == 2.0
    assert hook(status(503, "20")) == 5  # within the deadline: waited, capped
    assert isinstance(hook(status(502)), float)  # backoff
    # a broken connection is retried briefly: asked of a fresh budget, since this one's four
    # failures already back off (1.6 s + jitter) to about the 2 s broken window
    assert isinstance(backoff_hook(policy)(httpx.ReadError("boom")), float)
    assert hook(ValueError("not transport")) is False
    beyond = backoff_hook(policy)
    assert beyond(status(429, "3600")) is False
    assert "3600" in beyond.gave_up and "deadline" in beyond.gave_up
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0
    assert parse_retry_after("soon") is None


def test_what_cannot_heal_is_not_retried_and_broken_connections_only_briefly(monkeypatch):
    import socket
    import time

    from imagekit.registry.retry import classify

    unresolvable = httpx.ConnectError("[Errno -2] Name or service not known")
    unresolvable.__cause__ = socket.gaierror(-2, "Name or service not known")
    assert classify(unresolvable) == "final"
    assert classify(httpx.ConnectError("[SSL: CERTIFICATE_VERIFY_FAILED] nope")) == "final"
    assert classify(httpx.TooManyRedirects("loop")) == "final"
    assert classify(httpx.ConnectError("[Errno 111] Connection refused")) == "broken"
    assert classify(httpx.RemoteProtocolError("incomplete body")) == "broken"
    assert classify(httpx.ReadTimeout("slow")) == "timeout"
    budget = RetryPolicy(broken_window=0.2, wait_initial=0.01, wait_jitter=0).budget("x")
    refused = httpx.ConnectError("[Errno 111] Connection refused")
    assert isinstance(budget(refused), float)
    time.sleep(0.25)
    assert budget(refused) is False and "still failing" in budget.gave_up
    budget.answered()  # an exchange went through: the window starts again
    assert isinstance(budget(refused), float)
    timed = RetryPolicy(deadline=0.1).budget("y")
    time.sleep(0.15)
    assert timed(httpx.ReadTimeout("slow")) is False


def test_upload_range_and_rate_limit_headers():
    from imagekit.registry import ratelimit
    from imagekit.registry.push import _range_end

    assert _range_end("0-1048575", floor=0) == 1 << 20
    assert _range_end("0-0", floor=0) == 0   # distribution: empty upload
    assert _range_end("0-0", floor=1) == 1   # ... or one byte we know was acknowledged
    assert _range_end("bytes=5-9", floor=0) is None
    limit = ratelimit.parse("docker.io", httpx.Headers({"RateLimit-Limit": "100;w=21600",
                                                        "RateLimit-Remaining": "76;w=21600"}))
    assert (limit.remaining, limit.limit, limit.window_s) == (76, 100, 21600)
    assert str(limit) == "docker.io: RateLimit-Remaining 76 of 100 per 21600 s"
    assert ratelimit.parse("x", httpx.Headers({})) is None


def test_retry_policy_from_env(monkeypatch):
    monkeypatch.setenv("IMAGEKIT_RETRY_ATTEMPTS", "3")
    monkeypatch.setenv("IMAGEKIT_RETRY_WAIT_MAX", "0.5")
    from imagekit.settings import load

    policy = RetryPolicy.from_settings(load())
    assert policy.attempts == 3 and policy.wait_max == 0.5
    assert os.environ["IMAGEKIT_RETRY_ATTEMPTS"] == "3"


def test_progress_sink_draws_bars_and_json_mode_is_quiet():
    import io

    from rich.console import Console
    from rich.progress import Progress

    from imagekit.cli.app import show_progress
    from imagekit.cli.registry import RichSink

    out = io.StringIO()
    with Progress(console=Console(file=out, force_terminal=True, width=100)) as progress:
        sink = RichSink(progress)
        task = sink.add("layer 0 sha256:abc", 100)
        sink.advance(task, 60)
        progress.refresh()
        assert progress.tasks[0].completed == 60
        sink.finish(task)
    assert "layer 0" in out.getvalue()
    assert show_progress(True) is False


def test_a_plain_http_loopback_registry_never_loads_the_ca_bundle() -> None:
    """The https-first ping of a loopback registry that speaks plain HTTP goes to HTTP after a
    TLS hello the port does not answer in TLS, and the verifying context (LazyTrust) has loaded
    no CA certificate (the system bundle costs ~45 ms of CPU) until a TLS connection is made.
    (TLS registries: tests/registry/test_auth.py, test_hostile.py.)"""
    import ssl
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from imagekit.registry import RegistryClient
    from imagekit.registry.endpoint import LazyTrust, _context, speaks_plain_http

    _context.cache_clear()  # as in a fresh CLI process: an earlier test's TLS use loaded it

    class V2(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), V2)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    registry = f"127.0.0.1:{server.server_address[1]}"
    try:
        assert speaks_plain_http(registry, 2.0)
        with RegistryClient(registry) as client:
            assert client.ping() == f"http://{registry}"
            context = client.transport.lean.context if client.transport.lean else None
            assert isinstance(context, LazyTrust)
            assert context.cert_store_stats()["x509_ca"] == 0
            context.wrap_bio(ssl.MemoryBIO(), ssl.MemoryBIO(), server_hostname="example.com")
            assert context.cert_store_stats()["x509_ca"] > 0  # loaded at the first TLS use
    finally:
        server.shutdown()
        server.server_close()
    # a port that refuses is not taken for plain HTTP: the https ping decides, as before
    assert not speaks_plain_http(f"127.0.0.1:{server.server_address[1]}", 2.0)
