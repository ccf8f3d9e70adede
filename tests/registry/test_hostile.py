"""The registry-facing commands against endpoints that cannot heal: one line, exit 2 (1 where a
check ran and failed), in seconds, no traceback, no retry chatter, never a PASS in evidence.

Endpoints: a closed port, a name that does not resolve, a TLS certificate nobody trusts, and
the hostile registry fixture (tests/registry/hostile.py: redirect loop, a token realm that
never answers, truncated bodies, 429 with `Retry-After: 3600`, wrong digests). Real
registries cannot be made to misbehave like this; the commands are the real CLI processes.

Not in the matrix: `cluster probe REF` (it opens the cluster before it resolves the reference;
its resolution goes through the same registry client).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .hostile import MODES, HostileRegistry

REPO = Path(__file__).resolve().parents[2]
ASSETS = REPO   # the shipped folders: dockerfiles/, probes/, manifests/
PORT_CLOSED, PORT_TLS = 5101, 5108
PORTS = {mode: 5102 + i for i, mode in enumerate(m for m in MODES if m != "ratelimit")}
PORT_RATELIMIT = 5109
DEADLINE = 4.0  # settable deadline: a realm that never answers ends here
FAST = 5.0      # what cannot heal fails within this (plus the CLI's own start-up)

ENDPOINTS = ["closed-port", "unresolvable", "tls-untrusted", *PORTS]
COMMANDS = ["verify-mirror", "promote", "pin", "gate"]


def _free(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


@pytest.fixture(scope="module")
def endpoints(tmp_path_factory):
    """endpoint name -> registry address; the hostile servers run for the module."""
    tls_dir = tmp_path_factory.mktemp("hostile-tls")
    assert _free(PORT_CLOSED), f"port {PORT_CLOSED} should be closed"
    servers = [HostileRegistry(mode, port) for mode, port in PORTS.items()]
    servers.append(HostileRegistry("ratelimit", PORT_TLS, tls_dir=tls_dir))
    for server in servers:
        server.__enter__()
    try:
        found = {mode: f"127.0.0.1:{port}" for mode, port in PORTS.items()}
        found["closed-port"] = f"127.0.0.1:{PORT_CLOSED}"
        found["unresolvable"] = "no-such-registry.invalid:5000"
        found["tls-untrusted"] = f"127.0.0.1:{PORT_TLS}"
        yield found
    finally:
        for server in servers:
            server.__exit__()


@pytest.fixture(scope="module")
def startup() -> float:
    """The CLI's own start-up with the registry stack imported, on this machine now (so the
    budget is for the failure, not for imports on a busy machine): a bad reference, refused
    before any network work."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "imagekit", "verify-mirror", "NOT A REF",
                           "x/y:z"], capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 2, done.stderr
    return time.monotonic() - started


def _spec(folder: Path, ref: str) -> Path:
    root = folder / "dockerfiles"
    shutil.copytree(ASSETS / "dockerfiles", root,
                    ignore=shutil.ignore_patterns("standins", "images.local.lock"))
    spec = root / "images.toml"
    text = spec.read_text()
    for old in ("127.0.0.1:5001/imagekit-standins/sglang-base:cu13-standin",
                "127.0.0.1:5001/imagekit-standins/vllm-base:standin",
                "127.0.0.1:5001/imagekit-mirror/sglang-base:cu13-standin"):
        text = text.replace(old, ref)
    spec.write_text(text)
    return spec


def _argv(command: str, ref: str, evidence: Path, tmp_path: Path) -> list[str]:
    if command == "verify-mirror":
        return ["verify-mirror", ref, ref, "--evidence-dir", str(evidence)]
    if command == "promote":
        return ["promote", ref, "--to", ref.replace(":v1", ":copy"), "--evidence-dir",
                str(evidence)]
    if command == "pin":
        return ["pin", "--spec", str(_spec(tmp_path, ref)), "--profile", "local"]
    return ["gate", ref, "--evidence-dir", str(evidence)]


def _passes(evidence: Path) -> list[str]:
    found = []
    for record in evidence.rglob("attempt.json"):
        data = json.loads(record.read_text())
        if data.get("status") == "PASS":
            found.append(str(record))
        found += [f"{record}:{c.get('name')}" for c in data.get("checks", [])
                  if c.get("status") == "PASS"]
    return found


@pytest.mark.serial  # a bound in seconds: measured with the machine to itself
@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize("command", COMMANDS)
def test_unhealable_endpoint_is_one_line_in_seconds(command, endpoint, endpoints, startup,
                                                    tmp_path):
    address = endpoints[endpoint]
    ref = f"{address}/app:v1"
    evidence = tmp_path / "evidence"
    env = {**os.environ, "IMAGEKIT_DEADLINE": str(DEADLINE), "IMAGEKIT_EVIDENCE_DIR":
           str(evidence), "DOCKER_CONFIG": str(tmp_path / "no-docker-config")}
    for knob in ("IMAGEKIT_RETRY_WAIT_INITIAL", "IMAGEKIT_RETRY_WAIT_MAX",
                 "IMAGEKIT_RETRY_AFTER_MAX"):  # the defaults a user gets
        env.pop(knob, None)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "imagekit", *_argv(command, ref, evidence,
                                                                    tmp_path)],
                          capture_output=True, text=True, env=env, timeout=300, check=False)
    elapsed = time.monotonic() - started
    output = done.stdout + done.stderr
    assert "Traceback" not in output, output
    assert "stamina" not in output and "httpx" not in output.replace("httpx.", ""), output
    # the failure's own budget plus the CLI's start-up, twice over: this shared 2-core
    # machine's load swings start-up by seconds; a regression to the old 24-600 s is caught
    budget = (DEADLINE if endpoint == "slow-realm" else FAST) + 2 * startup + 2.0
    assert elapsed < budget, f"{elapsed:.1f} s > {budget:.1f} s: {output}"
    assert not _passes(evidence), _passes(evidence)
    host = address.rsplit(":", 1)[0] if endpoint == "unresolvable" else address
    if command == "pin":  # pin's table of tags on stdout, and one error line on stderr
        assert done.returncode == 2, output
        assert "ERROR" in done.stdout and "PASS" not in output, output
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("imagekit: error: "), output
        assert host in lines[0], output
        return
    if command == "gate" and endpoint in ("truncated", "wrong-digest"):
        # the gate resolves the tag with a HEAD (no body to cut or to mis-hash): the digest
        # has no evidence, so it is refused (exit 1), never passed
        assert done.returncode == 1 and "REFUSED" in output, output
        return
    assert done.returncode in ((1, 2) if endpoint == "wrong-digest" else (2,)), output
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("imagekit: error: "), output
    assert host in lines[0], output
    if endpoint == "retry-after":
        assert "3600" in lines[0] and "deadline" in lines[0], output
    if endpoint == "slow-realm":
        assert "deadline" in lines[0], output
