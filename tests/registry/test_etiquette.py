"""Registry etiquette: tags resolve with HEAD (Docker Hub counts GETs as pulls),
`RateLimit-Remaining` is reported when sent, and retries are silent unless `--verbose`."""

from __future__ import annotations

import os
import subprocess
import sys

from imagekit.oci.digest import Digest
from imagekit.registry import RegistryClient, RegistryOptions, ratelimit

from .hostile import HostileRegistry

PORT = 5114


def test_a_tag_resolves_with_head_and_a_get_only_when_something_changed():
    with HostileRegistry("ratelimit", PORT) as server, \
            RegistryClient(server.address, RegistryOptions()) as client:
        ratelimit.clear()
        digest = client.resolve_tag("app", "v1")
        assert digest == Digest.parse(server.digest)
        assert server.stats["GET"] == 1 and server.stats["HEAD"] == 1  # GET: the /v2/ ping
        assert client.resolve_tag("app", "v1", prove=True, known=digest) == digest
        assert server.stats["GET"] == 1  # unchanged against the lock: HEADs only
        assert client.resolve_tag("app", "v1", prove=True) == digest
        assert server.stats["manifest-GET"] == 1  # new: proven once, by digest
        [limit] = [seen for seen in ratelimit.seen() if seen.registry == server.address]
        assert limit.limit == 100 and limit.window_s == 21600 and limit.remaining <= 100


def _verify_copy(address: str, *extra: str, tmp_path) -> subprocess.CompletedProcess:
    env = {**os.environ, "IMAGEKIT_EVIDENCE_DIR": str(tmp_path / "evidence")}
    for knob in ("IMAGEKIT_RETRY_WAIT_INITIAL", "IMAGEKIT_RETRY_WAIT_MAX"):
        env.pop(knob, None)
    ref = f"{address}/app:v1"
    return subprocess.run([sys.executable, "-m", "imagekit", "verify-mirror", ref, ref, *extra],
                          capture_output=True, text=True, env=env, timeout=120, check=False)


def test_retries_are_silent_unless_verbose_and_the_rate_limit_is_reported(tmp_path):
    with HostileRegistry("ratelimit", PORT, flaky=2) as server:
        quiet = _verify_copy(server.address, tmp_path=tmp_path)
        assert server.stats["manifest-GET"] >= 3  # two 503s were retried
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stderr == "", quiet.stderr
    assert f"rate limit: {server.address}: RateLimit-Remaining" in quiet.stdout
    assert "of 100 per 21600 s" in quiet.stdout
    with HostileRegistry("ratelimit", PORT, flaky=2) as server:
        loud = _verify_copy(server.address, "--verbose", tmp_path=tmp_path)
    assert loud.returncode == 0, loud.stderr
    assert "imagekit.retry: retry 1" in loud.stderr and "HTTP 503" in loud.stderr
    assert "HTTP Request: HEAD" in loud.stderr or "HTTP Request: GET" in loud.stderr
