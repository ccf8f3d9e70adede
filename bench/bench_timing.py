"""Load timings against a known truth, and the load client's own CPU, beside vllm bench serve.

The timing reference server (tests/timing/truthserver/main.go, Go) answers every streamed
request on a fixed schedule (TTFT, then one token every ITL; vLLM's empty role chunk first) and
records when each request arrived and when each chunk's bytes were flushed: the truth.

1. Accuracy: `imagekit bench` (the CLI, one process, rounds at concurrency 1, 16, 64, 256 and an
   open-loop Poisson round) and `vllm bench serve` (openai-chat, the same workloads, one process
   each) against it; each figure beside the truth. Goal: every imagekit TTFT, ITL, TPOT and E2E
   p50/p90/p99 within 2 % or 1 ms (the larger) of the truth, the Poisson round's arrival rate
   within 2 % of its schedule. vllm's figures are judged against the truth by ITS definitions
   (docs/design/load-timing.md), as context.
2. CPU per request, user + system of the client process (psutil cpu_times every ~20 ms while
   it runs), in the load's window: from the first request's arrival at the server to the last
   answer's end (one monotonic clock), so start-up, tokenizer loading and prompt sampling are
   left out; the whole process's CPU per request (os.wait4 at its end) beside it. Same
   workload (concurrency 64) for both. Goal: imagekit's CPU per request <= vllm bench
   serve's (ratio <= 1.0), over `--repeats` alternating rounds.

    python bench/bench_timing.py --out bench/results

Writes DIR/timing.json. Without the vLLM CPU venv the peer columns say "not installed" and the
CPU goal is not judged.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from imagekit.acceptance.load import arrivals  # noqa: E402
from imagekit.acceptance.models import LatencyStats, RoundSpec  # noqa: E402
from tests.timing import runs, truth  # noqa: E402

GOAL = 1.0


def accuracy(server: truth.TruthServer, rounds: list[dict[str, Any]], tokens: int,
             work: Path, vllm: Path | None) -> dict[str, Any]:
    """One imagekit bench process over `rounds` (one server schedule), then vllm bench serve
    per round."""
    server.reset()
    matrix = runs.matrix_toml("truth-model", rounds, tokens)
    run, results = runs.imagekit_bench(server.url, matrix, work / f"imagekit-{len(rounds)}")
    if run.returncode != 0 or len(results) != len(rounds):
        raise SystemExit(f"bench_timing: imagekit bench failed ({run.returncode}):\n"
                         f"{run.output[-3000:]}")
    ordered = sorted((r for r in server.records() if r.tokens == tokens),
                     key=lambda r: r.arrival_s)
    out: dict[str, Any] = {}
    at = 0
    for spec, result in zip(rounds, results, strict=True):
        records = ordered[at:at + spec["requests"]]
        at += spec["requests"]
        label = f"c{spec['concurrency']}" if not spec.get("rate") else f"rate{spec['rate']:g}"
        itl = server.config()["itl_ms"]
        label += f"-itl{itl:g}ms"
        ours = runs.round_figures(result)
        true = truth.truth_stats(records)
        rows = truth.compare(ours.stats, true)
        entry: dict[str, Any] = {
            "name": f"accuracy {label} ({spec['requests']} req)", "row": True,
            "goal": "2%|1ms",
            "met": all(r.within for r in rows),
            "value": "worst error {:.0%} of its bound ({} {})".format(
                *max((abs(r.error_s) / r.bound_s, r.metric, r.quantile) for r in rows)),
            "truth_ms": _ms(true), "imagekit_ms": _ms(ours.stats),
            "imagekit_requests_per_s": ours.requests_per_s}
        if spec.get("rate"):
            schedule = arrivals(RoundSpec.model_validate(result["spec"]))
            scheduled = (len(schedule) - 1) / schedule[-1]
            achieved = truth.arrival_rate(records) or 0.0
            entry.update(asked_rate=spec["rate"], scheduled_rate=round(scheduled, 3),
                         achieved_rate=round(achieved, 3))
            rate_ok = abs(achieved - scheduled) <= truth.RELATIVE * scheduled
            entry["met"] = entry["met"] and rate_ok
            entry["value"] += (f"; arrivals {achieved:.1f}/s vs scheduled {scheduled:.1f}/s "
                               f"(asked {spec['rate']:g}/s)")
        others: dict[str, dict[str, LatencyStats]] = {}
        if vllm is not None:
            server.reset()
            vrun, vfig = runs.vllm_bench(
                vllm, server.url, work / "vllm", requests=spec["requests"],
                output_tokens=tokens, concurrency=None if spec.get("rate") else
                spec["concurrency"], rate=spec.get("rate"))
            vrecords = [r for r in server.records() if r.tokens == tokens]
            if vfig is None:
                entry["vllm"] = f"failed ({vrun.returncode}): {vrun.output[-300:]}"
            else:
                theirs = truth.vllm_definitions(vrecords)
                vrows = truth.compare(vfig.stats, theirs)
                others = {"vllm bench": vfig.stats, "truth (vllm defs)": theirs}
                entry.update(vllm_ms=_ms(vfig.stats), vllm_truth_by_its_definitions_ms=_ms(
                    theirs), vllm_truth_by_ours_ms=_ms(truth.truth_stats(vrecords)),
                    vllm_within_its_definitions=all(r.within for r in vrows),
                    vllm_requests_per_s=round(vfig.requests_per_s or 0, 3))
        print(truth.table(entry["name"], rows, others))
        print(f"  {'met' if entry['met'] else 'NOT MET'}: {entry['value']}")
        lag = result.get("read_lag")
        if lag:
            entry["imagekit_read_lag_ms"] = {q: round(lag[q] * 1e3, 3)
                                             for q in ("p50", "p90", "p99", "max")}
            print("  imagekit's read lag (kernel receipt to the loop's read): "
                  + " / ".join(f"{q} {v:.2f} ms" for q, v in entry["imagekit_read_lag_ms"].items()))
        entry["imagekit_client_bound"] = bool(result.get("client_bound"))
        if result.get("client_bound"):
            print(f"  client-bound: {result.get('client_bound_reason')}")
        out[f"accuracy_{label}"] = entry
    return out


def _ms(stats: dict[str, LatencyStats]) -> dict[str, dict[str, float | None]]:
    return {m: {q: None if getattr(s, q) is None else round(getattr(s, q) * 1e3, 3)
                for q in ("p50", "p90", "p99")} for m, s in stats.items()}


def cpu_rounds(server: truth.TruthServer, vllm: Path | None, tokens: int, concurrency: int,
               requests: int, repeats: int, work: Path) -> dict[str, Any]:
    """CPU per request of each client, alternating rounds: in the load's window (from the
    first request's arrival at the server to the last answer's end, on the one monotonic
    clock: start-up, tokenizer loading and prompt sampling left out) and over the whole
    process."""
    def window(run: runs.Measured) -> float:
        records = [r for r in server.records() if r.tokens == tokens]
        assert len(records) == requests, (len(records), run.output[-2000:])
        cpu = run.cpu_between(min(r.arrival_s for r in records), max(r.end_s for r in records))
        assert cpu is not None, "no CPU samples around the load"
        return cpu / requests

    def ours() -> tuple[float, float]:
        server.reset()
        run, _ = runs.imagekit_bench(server.url, runs.matrix_toml(
            "truth-model", [{"concurrency": concurrency, "requests": requests}], tokens),
            work / "cpu-ours")
        assert run.returncode == 0, run.output[-2000:]
        return window(run), run.cpu_s / requests

    def peer() -> tuple[float, float]:
        assert vllm is not None
        server.reset()
        run, fig = runs.vllm_bench(vllm, server.url, work / "cpu-vllm", requests=requests,
                                   output_tokens=tokens, concurrency=concurrency)
        assert fig is not None and fig.completed == requests, run.output[-2000:]
        return window(run), run.cpu_s / requests

    samples: dict[str, list[tuple[float, float]]] = {"ours": [], "peer": []}
    for _ in range(repeats):
        samples["ours"].append(ours())
        if vllm is not None:
            samples["peer"].append(peer())
    result: dict[str, Any] = {
        "workload": {"concurrency": concurrency, "tokens": tokens, "requests": requests,
                     "repeats": repeats},
        "ours_in_load_s": [a for a, _ in samples["ours"]],
        "ours_whole_s": [b for _, b in samples["ours"]],
        "cpu_s": {"imagekit bench": round(statistics.median(
            b for _, b in samples["ours"]) * requests, 3)}}
    if samples["peer"]:
        result["peer_in_load_s"] = [a for a, _ in samples["peer"]]
        result["peer_whole_s"] = [b for _, b in samples["peer"]]
        result["cpu_s"]["vllm bench serve"] = round(statistics.median(
            b for _, b in samples["peer"]) * requests, 3)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--ttft-ms", type=float, default=50.0)
    parser.add_argument("--itl-ms", type=float, default=10.0)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--itl-ms-c256", type=float, default=None,
                        help="the concurrency-256 round's ITL (default: two rounds, at --itl-ms "
                             "and at twice it)")
    parser.add_argument("--rate", type=float, default=170.0,
                        help="the Poisson round's rate (default: the c=64 round's throughput)")
    parser.add_argument("--quick", action="store_true",
                        help="a quarter of the requests (a smoke run: its figures are few)")
    parser.add_argument("--requests", type=int, default=512, help="CPU rounds: requests")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-vllm", action="store_true", help="imagekit only")
    args = parser.parse_args()
    vllm = None if args.no_vllm else runs.vllm_python()
    scale = 4 if args.quick else 1
    rounds = [{"concurrency": 1, "requests": 12 // scale},
              {"concurrency": 16, "requests": 64 // scale},
              {"concurrency": 64, "requests": 256 // scale},
              {"concurrency": 64, "requests": 300 // scale, "rate": args.rate}]
    wide = [{"concurrency": 256, "requests": 512 // scale}]
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp, truth.TruthServer(
            ttft_ms=args.ttft_ms, itl_ms=args.itl_ms, role_chunk=True) as server:
        work = Path(tmp)
        figures = accuracy(server, rounds, args.tokens, work, vllm)
        # 256 streams at the base gap (25,600 events/s at 10 ms: the one-process client needs
        # more than a core of this machine, so its read lag is what the round reports) and
        # at twice the gap
        for itl_ms in [args.itl_ms_c256] if args.itl_ms_c256 else [args.itl_ms, 2 * args.itl_ms]:
            server.configure(itl_ms=itl_ms)
            figures.update(accuracy(server, wide, args.tokens, work, vllm))
        server.configure(itl_ms=args.itl_ms)
        cpu = cpu_rounds(server, vllm, args.tokens, 64, args.requests // scale,
                         args.repeats, work)
    load_after = os.getloadavg()
    ours = statistics.median(cpu["ours_in_load_s"])
    result: dict[str, Any] = {
        "name": "timing", "goal": GOAL,
        "what": "client CPU per streamed request while the load runs (psutil cpu_times of "
                "the process, start-up left out), imagekit bench vs vllm bench serve, same "
                "server, workload and requests",
        "peer": "vllm bench serve 0.32 (openai-chat)" if vllm else "not installed",
        "server": {"ttft_ms": args.ttft_ms, "itl_ms": args.itl_ms,
                   "itl_ms_c256": [args.itl_ms_c256] if args.itl_ms_c256 else
                   [args.itl_ms, 2 * args.itl_ms], "tokens": args.tokens,
                   "role_chunk": True},
        "ours_s": round(ours, 6),
        "ours_cpu_per_request_ms": {
            "in_load": round(ours * 1e3, 3),
            "whole_process": round(statistics.median(cpu["ours_whole_s"]) * 1e3, 3)},
        "cpu_rounds": cpu, "cpu_s": cpu["cpu_s"],
        "machine": {"cpus": os.cpu_count(), "loadavg_before": load_before,
                    "loadavg_after": load_after},
        **figures}
    if vllm is not None:
        peer = statistics.median(cpu["peer_in_load_s"])
        ratios = [a / b for a, b in zip(cpu["ours_in_load_s"], cpu["peer_in_load_s"],
                                        strict=True) if b]
        result.update(peer_s=round(peer, 6), ratio=round(ours / peer, 3),
                      met=ours / peer <= GOAL, round_ratios=[round(r, 4) for r in ratios],
                      peer_cpu_per_request_ms={
                          "in_load": round(peer * 1e3, 3),
                          "whole_process": round(statistics.median(cpu["peer_whole_s"]) * 1e3,
                                                 3)})
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "timing.json").write_text(json.dumps(result, indent=2) + "\n")
    line = (f"timing: client CPU per request while the load runs: imagekit "
            f"{result['ours_cpu_per_request_ms']['in_load']:.3f} ms")
    if vllm is not None:
        line += (f" vs vllm bench serve {result['peer_cpu_per_request_ms']['in_load']:.3f} ms"
                 f" (ratio {result['ratio']:.3f}, goal <= {GOAL}); whole process: "
                 f"{result['ours_cpu_per_request_ms']['whole_process']:.3f} vs "
                 f"{result['peer_cpu_per_request_ms']['whole_process']:.3f} ms")
    print(line + f"; load average {load_before[0]:.2f} -> {load_after[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
