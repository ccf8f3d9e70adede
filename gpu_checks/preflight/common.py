"""Shared pieces of the preflight: the record's schema, check records and their worst status,
sizes and bandwidth formulas (nccl-tests' definitions), the test-only fault hooks."""

from __future__ import annotations

import argparse
import math
import os
import re
import time
from typing import Any

SCHEMA = "imagekit.gpu-preflight/v1"
SMALL_JUDGE_BYTES = 1024     # the size small-message-time judges (and repeats --repeats times)
HOOK_DELAY = "PREFLIGHT_TEST_DELAY_US"  # test hook: busy-wait this many us per timed NCCL call


def hook_delay_us() -> float:
    """The fixed per-call delay of the slowdown test hook (0 when unset)."""
    value = os.environ.get(HOOK_DELAY)
    if value is None or value == "":
        return 0.0
    try:
        delay = float(value)
    except ValueError:
        delay = -1.0
    if not math.isfinite(delay) or delay < 0:
        raise ValueError(f"{HOOK_DELAY} must be a number of microseconds >= 0, not {value!r}")
    return delay


def spin_us(us: float) -> None:
    """Busy-wait `us` microseconds (time.sleep cannot wait a few microseconds)."""
    end = time.perf_counter() + us * 1e-6
    while time.perf_counter() < end:
        pass
HOOK_WRONG_RANK = "PREFLIGHT_TEST_WRONG_RANK"
HOOK_NAN = "PREFLIGHT_TEST_NAN"
TEST_HOOKS = (HOOK_WRONG_RANK, HOOK_NAN, "PREFLIGHT_TEST_DELAY_US")
#: Variables recorded (never changed) so the record shows what NCCL ran under.
ENV_PREFIXES = ("NCCL_", "TORCH_NCCL_", "TORCH_SYMM_MEM_", "NVSHMEM_", "CUDA_VISIBLE_DEVICES",
                "CUDA_DEVICE_ORDER")
_UNITS = {"": 1, "B": 1, "K": 1024, "KB": 1024, "KIB": 1024, "M": 1024**2, "MB": 1024**2,
          "MIB": 1024**2, "G": 1024**3, "GB": 1024**3, "GIB": 1024**3}
ANSI = re.compile(r"\x1b\[[0-9;]*m")

MODES = ("in_place", "out_of_place")  # all-reduce modes of the small-message timing


# ---------------------------------------------------------------------------- pure helpers


def busbw_factor(n: int) -> float:
    """nccl-tests' all-reduce bus factor 2(n-1)/n: 0 at n=1, 1 at n=2, 1.75 at n=8."""
    if n < 1:
        raise ValueError(f"world size must be >= 1, not {n}")
    return 2.0 * (n - 1) / n


def bandwidths(nbytes: int, seconds: float, n: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s (1e9 bytes/s, as nccl-tests prints them)."""
    algbw = nbytes / seconds / 1e9
    return algbw, algbw * busbw_factor(n)


def parse_size(text: str) -> int:
    """'1K', '64MiB', '1G', '4096' -> bytes (binary units)."""
    match = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", text)
    if not match or match.group(2).upper() not in _UNITS:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 1K, 64M, 1G)")
    return int(match.group(1)) * _UNITS[match.group(2).upper()]


def size_list(min_bytes: int, max_bytes: int, factor: int) -> list[int]:
    if min_bytes < 4 or max_bytes < min_bytes or factor < 2:
        raise ValueError("need 4 <= min-bytes <= max-bytes and factor >= 2")
    sizes, size = [], min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= factor
    return sizes


def human_bytes(n: int) -> str:
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def check(name: str, status: str, detail: str = "", **data: Any) -> dict[str, Any]:
    return {"name": name, "status": status, "detail": detail, "data": data}


def timed_check(name: str, judged: list[tuple[Any, Any]], label: str, /, **data: Any
                ) -> dict[str, Any]:
    """One check from several stats.Judged (per rank, size or ratio): FAIL if any whole interval
    is past its bound, else DEFERRED if any had too few cycles, else PASS (a straddling one
    named "within noise"). The detail names each judged item; data keeps every cycle."""
    bands = [j.band for _, j in judged]
    status = "FAIL" if "FAIL" in bands else "DEFERRED" if "DEFERRED" in bands else "PASS"
    order = {"FAIL": 0, "DEFERRED": 1, "NOISE": 2, "PASS": 3}
    shown = sorted(judged, key=lambda kj: order[kj[1].band])
    parts = [f"{label} {k}: {j.text}" for k, j in shown if j.band == shown[0][1].band]
    rest = len(judged) - len(parts)
    detail = "; ".join(parts) + (f"; {rest} more {'PASS' if status == 'PASS' else 'judged'}"
                                 if rest else "")
    noise = [str(k) for k, j in judged if j.band == "NOISE"]
    data.update(band="NOISE" if status == "PASS" and noise else status, within_noise=noise,
                repeats=max((j.summary.n for _, j in judged), default=0))
    return check(name, status, detail, **data)


def worst(statuses: list[str]) -> str:
    for status in ("ERROR", "FAIL", "DEFERRED", "PASS"):
        if status in statuses:
            return status
    return "ERROR"


EXIT = {"PASS": 0, "FAIL": 1, "DEFERRED": 1, "ERROR": 2}


def hook_rank(name: str) -> int | None:
    value = os.environ.get(name)
    if value is None or value == "":
        return None
    return int(value)
