"""The lean HTTP/1.1 path for blob bodies (imagekit/registry/lean.py) against the real
registries: it carries the bodies where it applies (plain HTTP and TLS + Bearer), answers
a challenge by handing the request back to httpx, and with it off everything still moves
through httpx. Cut bodies, resets and lies are test_promote's fault proxies and test_hostile."""

from __future__ import annotations

import pytest

from imagekit.oci import ImageReference
from imagekit.promote import promote
from imagekit.registry import ClientPool
from imagekit.registry.lean import LeanPool

pytestmark = pytest.mark.registry


def test_blob_bodies_take_the_lean_path_on_http_and_token_registries(monkeypatch, pool, reg,
                                                                     repo, staged):
    answered: list[tuple[str, int | None]] = []
    real = LeanPool.exchange

    def spy(self, method, url, headers, timeout, body=None, expect=False):
        response = real(self, method, url, headers, timeout, body, expect)
        answered.append((method, None if response is None else response.status_code))
        return response

    monkeypatch.setattr(LeanPool, "exchange", spy)
    result = promote(ImageReference.parse(f"{reg['staging']}/{repo}:v1"), [],
                     ImageReference.parse(f"{reg['target']}/{repo}:v1"), pool=pool)
    (hop,) = result.hops
    assert hop.verified and hop.bytes_moved == staged.total_bytes
    # every layer was read from staging and written to target by the lean path
    layers = len(staged.layer_digests)
    assert sum(1 for m, s in answered if m == "GET" and s == 200) >= layers
    assert sum(1 for m, s in answered if m == "PATCH" and s in (202, 204)) >= layers
    target = pool.get(reg["target"])
    for digest, blob in zip(staged.layer_digests, staged.layer_blobs):
        assert target.get_blob_bytes(repo, digest, len(blob)) == blob  # hashed on the way


def test_a_challenge_on_the_lean_path_goes_back_to_httpx(monkeypatch, options, reg, repo,
                                                         staged):
    """A fresh client has no token yet: the lean GET is answered 401, nothing was consumed,
    httpx answers the challenge and the blob arrives verified."""
    answered: list[int | None] = []
    real = LeanPool.exchange

    def spy(self, method, url, headers, timeout, body=None, expect=False):
        response = real(self, method, url, headers, timeout, body, expect)
        answered.append(None if response is None else response.status_code)
        return response

    with ClientPool(options) as fresh:
        promote(ImageReference.parse(f"{reg['staging']}/{repo}:v1"), [],
                ImageReference.parse(f"{reg['target']}/{repo}:v1"), pool=fresh)
    with ClientPool(options) as fresh:
        monkeypatch.setattr(LeanPool, "exchange", spy)
        digest, blob = staged.layer_digests[0], staged.layer_blobs[0]
        client = fresh.get(reg["target"])
        assert b"".join(client.blob_chunks(repo, digest, len(blob))) == blob
    assert answered[0] is None  # the 401: handed back to httpx


def test_with_the_lean_path_off_httpx_moves_everything(monkeypatch, reg, repo, staged, options):
    with ClientPool(options.model_copy(update={"lean_http": False})) as off:
        assert off.get(reg["production"]).transport.lean is None
        result = promote(ImageReference.parse(f"{reg['staging']}/{repo}:v1"), [],
                         ImageReference.parse(f"{reg['production']}/{repo}:v1"), pool=off)
    assert result.hops[0].verified and result.hops[0].bytes_moved == staged.total_bytes
