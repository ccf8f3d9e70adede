"""Relays that lie about ranges, in front of the real staging registry (tests/registry/proxy.py,
`ranges=`): a download that must resume meets a relay that ignores the Range, answers from the
wrong offset, serves more or fewer bytes than the descriptor. Each case ends in the right bytes
or a clear error naming the blob and where it went wrong, never in wrong bytes passed as good.
Both HTTP paths are exercised: the lean one (http.client) and httpx (IMAGEKIT_LEAN_HTTP=0)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import uuid

import pytest

from imagekit.errors import DigestMismatch
from imagekit.oci import ImageReference
from imagekit.promote import promote
from imagekit.registry import ClientPool
from .proxy import FaultProxy

pytestmark = pytest.mark.registry

CUT = 200_000  # the first GET of each blob is cut here, so every layer is resumed once


@pytest.fixture(scope="module")
def staged(infra, tars):
    """One image for the whole module (pushed once: every test only reads it)."""
    from imagekit.registry import RegistryOptions
    from .images import push_image
    from .settings import FAST_RETRY

    options = RegistryOptions(docker_config=infra.docker_config_dir, retry=FAST_RETRY)
    address = {name: e.address for name, e in infra.registries.items()}["staging"]
    with ClientPool(options) as pool:
        return push_image(pool.get(address), f"test/ranges-{uuid.uuid4().hex[:8]}", "v1", tars,
                          compression="gzip", level=6)


@pytest.fixture(params=["lean", "httpx"])
def path(request, monkeypatch) -> str:
    monkeypatch.setenv("IMAGEKIT_LEAN_HTTP", "1" if request.param == "lean" else "0")  # the CLI's
    return request.param


@pytest.fixture
def options(options, path):  # noqa: ANN001, ANN201 - the conftest's, on this test's path
    return options.model_copy(update={"lean_http": path == "lean"})


def _largest(staged):
    blob = max(staged.layer_blobs, key=len)
    return blob, hashlib.sha256(blob).hexdigest()


def _download(options, relay: FaultProxy, staged, size: int | None = None) -> bytes:
    blob, _ = _largest(staged)
    digest = staged.layer_digests[staged.layer_blobs.index(blob)]
    with ClientPool(options) as pool:
        return b"".join(pool.get(relay.address).blob_chunks(
            staged.repository, digest, len(blob) if size is None else size))


def test_range_answered_200_whole_body_restarts_cleanly(options, reg, staged, path):
    blob, _ = _largest(staged)
    with FaultProxy(reg["staging"], ranges="ignore", cut_first=CUT) as relay:
        got = _download(options, relay, staged)
        assert relay.stats["range-ignored"] >= 1 and relay.stats["cut-blob"] >= 1
    assert got == blob  # exactly once each byte: nothing doubled, nothing lost


def test_range_answered_200_whose_prefix_differs_fails_there(options, reg, staged, path):
    """The whole body of the 200 must repeat the bytes already passed on: a relay whose
    answers differ (here: a flipped byte in the re-sent prefix) is caught at the prefix's end."""
    with FaultProxy(reg["staging"], ranges="ignore", cut_first=CUT, lie=True) as relay:
        with pytest.raises(DigestMismatch) as caught:
            _download(options, relay, staged)
    assert "answered 200 with a whole body whose first" in caught.value.message, \
        caught.value.one_line()


def test_206_from_the_wrong_offset_is_caught_by_the_digest_and_says_where(options, reg, staged,
                                                                          path):
    _, hex_ = _largest(staged)
    with FaultProxy(reg["staging"], ranges="shift", cut_first=CUT) as relay:
        with pytest.raises(DigestMismatch) as caught:
            _download(options, relay, staged)
        assert relay.stats["range-shifted"] >= 1
    text = caught.value.one_line()
    assert "hashes to" in text and "resumed: from byte " in text and ": 206" in text, text
    assert hex_ in text  # names the blob


def test_206_whose_content_range_names_another_offset_fails_at_once(options, reg, staged,
                                                                    path):
    with FaultProxy(reg["staging"], ranges="shift-honest", cut_first=CUT) as relay:
        with pytest.raises(DigestMismatch) as caught:
            _download(options, relay, staged)
    assert "was answered 206 from byte" in caught.value.message, caught.value.message


@pytest.mark.parametrize("lie", ["longer", "longer-unannounced"])
def test_blob_longer_than_its_descriptor_stops_at_size_plus_one(options, reg, staged, path,
                                                                lie):
    blob, hex_ = _largest(staged)
    with FaultProxy(reg["staging"], ranges=lie, extra=8 << 20) as relay:
        with pytest.raises(DigestMismatch) as caught:
            _download(options, relay, staged)
        # the relay could not hand over its 8 MiB of junk: the client stopped reading
        assert relay.stats["blob_bytes"] <= len(blob) + 4 * (1 << 20)
    text = caught.value.one_line()
    assert f"longer than its descriptor's {len(blob)} bytes" in text and hex_ in text, text
    assert ("announces" in text) if lie == "longer" else \
        (f"byte {len(blob) + 1} arrived and the download stopped there" in text), text


def test_blob_shorter_once_is_resumed(options, reg, staged, path):
    blob, _ = _largest(staged)
    with FaultProxy(reg["staging"], ranges="shorter-once") as relay:
        assert _download(options, relay, staged) == blob
        assert relay.stats["shortened"] >= 1


def test_blob_shorter_than_its_descriptor_fails_naming_it(options, reg, staged, path):
    blob, hex_ = _largest(staged)
    with FaultProxy(reg["staging"], ranges="shorter", extra=10_000) as relay:
        with pytest.raises(DigestMismatch) as caught:
            _download(options, relay, staged)
        assert relay.stats["416"] >= 1
    text = caught.value.one_line()
    assert f"blob is truncated at the registry: it ends at byte {len(blob) - 10_000} of its " \
        f"descriptor's {len(blob)} bytes" in text and "HTTP 416" in text and hex_ in text, text


def test_promote_through_a_range_ignoring_relay_moves_each_byte_once(options, pool, reg, repo,
                                                                    staged):
    with FaultProxy(reg["staging"], ranges="ignore", cut_first=CUT) as relay, \
            ClientPool(options) as relay_pool:
        result = promote(ImageReference.parse(f"{relay.address}/{staged.repository}:v1"), [],
                         ImageReference.parse(f"{reg['production']}/{repo}-ignored:v1"),
                         pool=relay_pool)
        assert relay.stats["range-ignored"] >= 1
    hop = result.hops[-1]
    assert hop.verified and hop.digest == str(staged.digest)
    assert hop.bytes_moved == staged.total_bytes  # uploads count each byte once


def test_promote_cli_through_a_shifting_relay_fails_naming_the_blob(reg, repo, staged,
                                                                   tmp_path):
    """The CLI as a user meets it: exit 2 (DigestMismatch), one line naming the blob and the
    resume, no PASS in the evidence."""
    _, hex_ = _largest(staged)
    with FaultProxy(reg["staging"], ranges="shift", cut_first=CUT) as relay:
        done = subprocess.run(
            [sys.executable, "-m", "imagekit", "promote",
             f"{relay.address}/{staged.repository}:v1",
             "--to", f"{reg['production']}/{repo}-shifted:v1", "--json",
             "--evidence-dir", str(tmp_path / "ev"), "--force", "--reason", "range test"],
            capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2, (done.returncode, done.stdout[-500:], done.stderr[-1500:])
    assert "Traceback" not in done.stderr
    said = done.stderr + done.stdout
    assert "resumed: from byte" in said and hex_ in said, said[-1500:]
    records = [json.loads(p.read_text()) for p in (tmp_path / "ev").rglob("*.json")]
    assert not any(r.get("status") == "PASS" for r in records if isinstance(r, dict))
