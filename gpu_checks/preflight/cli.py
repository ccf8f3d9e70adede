"""Arguments (one line on bad input, exit 2), the run, the record and table, the exit status."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from . import stats
from .common import EXIT, HOOK_NAN, HOOK_WRONG_RANK, SCHEMA, hook_delay_us, hook_rank, parse_size
from .matmul import MATMUL_REL_ERROR_BOUND
from .run import Preflight
from .table import table
from .verdicts import BASELINE_TOLERANCE

DESCRIPTION = ("GPU preflight: device inventory, BF16 matmul correctness and rate, all-reduce "
               "correctness and bandwidth, topology. One JSON record plus a readable table.")


class _OneLineParser(argparse.ArgumentParser):
    """Bad input: one line `preflight: error: <what>`, exit 2 (no usage dump)."""

    def error(self, message: str) -> Any:  # type: ignore[override]
        print(f"preflight: error: {' '.join(message.split())}", file=sys.stderr, flush=True)
        raise SystemExit(2)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = _OneLineParser(prog="preflight", description=DESCRIPTION,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", type=Path, help="write the JSON record here (rank 0)")
    p.add_argument("--backend", choices=["auto", "nccl", "gloo"], default="auto",
                   help="auto: nccl when CUDA is available, else gloo")
    p.add_argument("--expect-model", help="substring every GPU name must contain, e.g. H200")
    p.add_argument("--expect-gpus", type=int, help="GPUs visible per host (one rank each)")
    p.add_argument("--min-memory-gib", type=float, help="least total memory per GPU, GiB")
    p.add_argument("--sizes", type=lambda s: [parse_size(x) for x in s.split(",") if x],
                   help="explicit all-reduce sizes, e.g. 1K,1M,1G (overrides min/max/factor)")
    p.add_argument("--min-bytes", type=parse_size, default=1024)
    p.add_argument("--max-bytes", type=parse_size, default=None,
                   help="default 1G on GPUs, 16M on CPUs")
    p.add_argument("--factor", type=int, default=2, help="size step (x2 as nccl-tests)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--check-bytes", type=parse_size, default=parse_size("64M"),
                   help="largest all-reduce correctness buffer (capped by --max-bytes)")
    p.add_argument("--matmul-n", type=int, default=None, help="default 8192 on GPUs, 256 on CPUs")
    p.add_argument("--matmul-warmup", type=int, default=3)
    p.add_argument("--matmul-iters", type=int, default=20)
    p.add_argument("--matmul-rel-error-bound", type=float, default=MATMUL_REL_ERROR_BOUND)
    p.add_argument("--tflops-ceiling", type=float, default=None,
                   help="bf16 ceiling, TFLOP/s; default: the table BF16_CEILINGS by the GPU's "
                        "NVML name (a model not in it: matmul-rate DEFERRED)")
    p.add_argument("--min-tflops", type=float, default=None,
                   help="matmul-rate floor, TFLOP/s; default 0.8 x the ceiling")
    p.add_argument("--repeats", default=5,
                   help="independent cycles of every timed check (nccl-tests -N); the median "
                        "is judged with its interval")
    p.add_argument("--confidence", default=stats.CONFIDENCE,
                   help="coverage of the median's interval, in (0, 1)")
    p.add_argument("--timeout-s", type=int, default=300, help="collective timeout")
    p.add_argument("--health", choices=["auto", "on", "off"], default="auto",
                   help="NVML health checks (nvidia-ml-py); auto: on GPUs")
    p.add_argument("--baseline", default="auto",
                   help="bandwidth verdict against a baseline record: a JSON file, a folder of "
                        "them, 'off'; auto: on GPUs, samples/ beside the package or the checkout's "
                        "gpu_checks/samples")
    p.add_argument("--baseline-tolerance", type=float, default=BASELINE_TOLERANCE,
                   help="FAIL when busbw at >= 64 MiB is this fraction below the baseline")
    p.add_argument("--load-s", type=float, default=1.0,
                   help="seconds of sustained bf16 matmul while NVML samples clock-event reasons")
    p.add_argument("--small-max-bytes", type=parse_size, default=parse_size("1M"),
                   help="largest size of the small-message timing")
    p.add_argument("--small-repeats", type=int, default=3,
                   help="timed loops per small size and mode (ncclAllReduce): the lowest is "
                        "kept, as for nccl-tests run with -N of the same count")
    p.add_argument("--nccl-tests-log", type=Path, default=None,
                   help="all_reduce_perf output of the same machine: compare small messages")
    args = p.parse_args(argv)
    gpu = torch.cuda.is_available() and args.backend != "gloo"
    if args.max_bytes is None:
        args.max_bytes = parse_size("1G") if gpu else parse_size("16M")
    if args.matmul_n is None:
        args.matmul_n = 8192 if gpu else 256
    for name in ("min_bytes", "max_bytes"):
        if getattr(args, name) % 4:
            p.error(f"--{name.replace('_', '-')} must be a multiple of 4 bytes (float32)")
    if args.sizes and any(s % 4 or s < 4 for s in args.sizes):
        p.error("--sizes must be multiples of 4 bytes")
    if args.warmup < 0 or args.iters < 1 or args.matmul_iters < 1 or args.matmul_n < 1:
        p.error("--iters, --matmul-iters and --matmul-n must be >= 1, --warmup >= 0")
    if args.small_repeats < 1:
        p.error("--small-repeats must be >= 1")
    try:
        args.repeats = stats.check_repeats(args.repeats)
        args.confidence = stats.check_confidence(args.confidence)
        hook_delay_us()
    except ValueError as exc:
        p.error(str(exc))
    if args.tflops_ceiling is not None and not args.tflops_ceiling > 0:
        p.error("--tflops-ceiling must be > 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))
    try:
        for hook in (HOOK_WRONG_RANK, HOOK_NAN):
            hook_rank(hook)
        hook_delay_us()
        preflight = Preflight(args)
        record = preflight.run()
    except Exception as exc:  # noqa: BLE001 - one line, exit 2; the record says ERROR
        message = " ".join(f"{type(exc).__name__}: {exc}".split())[:1000]
        print(f"preflight: error: rank {rank}: {message}", file=sys.stderr, flush=True)
        if rank == 0 and args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps({"schema": SCHEMA, "status": "ERROR",
                                             "error": message}, indent=2) + "\n")
        # no destroy_process_group here: with a peer stuck in a collective it could hang;
        # the process exits and the launcher reaps the rest
        if dist.is_initialized() and dist.get_world_size() == 1:
            dist.destroy_process_group()
        return 2
    dist.destroy_process_group()
    if rank == 0:
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(record, indent=2) + "\n")
        print(table(record), flush=True)
    return EXIT[record["status"]]
