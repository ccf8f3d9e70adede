#!/usr/bin/env python3
"""GPU preflight: device inventory, BF16 matmul correctness and rate, all-reduce correctness and
bandwidth, topology. One JSON record plus a readable table.

Why this exists: a node can report the right GPU count and still compute garbage (a bad HBM
stack, a flaky NVLink lane, a wrong driver) — a served model then answers nonsense rather than
crashing. This script proves, before any model is loaded, that every GPU is the model and size we
expect, that a BF16 matrix product gives finite and correct numbers, and that NCCL all-reduce sums
every element exactly, and it measures the all-reduce bandwidth with nccl-tests' definitions.

It depends on torch alone (no imagekit import), so it runs inside any engine image and as a
cluster preflight Pod. Launch it with one process per GPU::

    python -m torch.distributed.run --nproc-per-node 8 gpu_checks/preflight.py --json out.json

or plainly (`python gpu_checks/preflight.py`) as a world of one. Backend `nccl` on GPUs, `gloo`
on CPUs, same code path. It never changes a GPU setting and never scrubs the environment: the
NVLink-multicast-off variables (NCCL_NVLS_ENABLE=0, …) reach NCCL and `nvidia-smi` as they came.

Bandwidth definitions (nccl-tests, doc/PERFORMANCE.md): for each size every rank times `iters`
all-reduces after `warmup` untimed ones (CUDA events on GPUs; barrier + perf_counter on CPUs);
the per-rank average time of the slowest rank is t; algbw = bytes / t; busbw = algbw * 2(n-1)/n.
At n = 1 that factor is 0, so busbw is 0 by definition: one rank moves nothing over a link, and
its algbw measures a local no-op/copy, not an interconnect.

Exit status: 0 PASS, 1 FAIL (or a requested check that could not run: DEFERRED), 2 ERROR.

Test-only fault hooks (never set them in a real run; a record made with one is always FAIL):
  PREFLIGHT_TEST_WRONG_RANK=<r>  rank r contributes one wrong element to the all-reduce check
  PREFLIGHT_TEST_NAN=<r>         rank r's matmul output gets a NaN after the product
  PREFLIGHT_TEST_DELAY_US=<us>   every timed ncclAllReduce call waits <us> more on the host (the
                                 injected slowdown: small-message-time must FAIL on its interval)

Timed checks (matmul-rate, small-message-time, bandwidth-verdict, nvml-clock-events) repeat their
measurement --repeats (5) times in independent cycles, as nccl-tests -N does, and judge the
median of the cycles with its order-statistic interval (imagekit/stats.py, embedded below): FAIL
only when the whole interval is past the bound, PASS "within noise" when it straddles it,
DEFERRED when too few cycles give no interval. Every cycle's value is in the record.
"""

from __future__ import annotations

import time

_T_START = time.perf_counter()  # wall time counts torch's import too

import argparse
import ctypes
import datetime as dt
import json
import math
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

# ---- begin imagekit/stats.py (verbatim; tests/unit/test_stats.py keeps it equal) ----
_STATS_SOURCE = r'''"""Noise-aware verdicts: a robust statistic, its distribution-free interval, a 3-way rule.

Standard library only, no imagekit import: `gpu_checks/preflight.py` (torch only, shipped alone
as a ConfigMap) carries a verbatim copy of this file between its "begin/end imagekit/stats.py"
markers, and tests/unit/test_stats.py::test_preflight_carries_this_module_verbatim keeps the two
equal.

The statistic of a repeated measurement is the MEDIAN of its cycles (not the lowest: the lowest
of K cycles drifts down as K grows and hides a slow majority; the median does neither). Its
interval is the order-statistic (binomial) interval of the median: (x(k), x(n+1-k)) for the
largest k whose coverage 1 - 2 P(Bin(n, 1/2) < k) is still >= the confidence. It assumes only
independent cycles, no distribution. At confidence 0.9 it needs 5 samples ((min, max), 93.75 %);
fewer is DEFERRED with the reason, never a PASS.

Two distributions (a run against a previous one) are compared by the Hodges-Lehmann shift of
log(sample) (so a ratio of typical values) with its Mann-Whitney interval: the k-th smallest
and largest of the n*m pairwise log-ratios, k from the exact Mann-Whitney U distribution (normal
approximation above 10 000 pairs).

The 3-way rule against a bound: FAIL only when the whole interval is past the bound; PASS when
the whole interval is inside; NOISE (straddling: reported as PASS with a "within noise" note,
never blocking) otherwise.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Literal

CONFIDENCE = 0.90
STATISTIC = "median of cycles"
INTERVAL = "order-statistic (binomial) interval of the median"
SHIFT_INTERVAL = "Hodges-Lehmann ratio with its Mann-Whitney interval"

Band = Literal["PASS", "NOISE", "FAIL", "DEFERRED"]


def check_repeats(value: Any, what: str = "--repeats") -> int:
    """An int >= 1, else ValueError naming `what` (callers turn it into one line, exit 2)."""
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            value = int(str(value), 10)
        except ValueError:
            raise ValueError(f"{what} must be a whole number >= 1, not {value!r}") from None
    if value < 1:
        raise ValueError(f"{what} must be >= 1, not {value}")
    return value


def check_confidence(value: Any, what: str = "--confidence") -> float:
    """A float strictly between 0 and 1, else ValueError naming `what`."""
    try:
        c = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a number in (0, 1), not {value!r}") from None
    if not (0.0 < c < 1.0) or math.isnan(c):
        raise ValueError(f"{what} must be in (0, 1) exclusive, not {value}")
    return c


def median(xs: Iterable[float]) -> float:
    s = sorted(xs)
    if not s:
        raise ValueError("median of no samples")
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2.0


def _binom_cdf_half(k: int, n: int) -> float:
    """P(Bin(n, 1/2) <= k)."""
    if k < 0:
        return 0.0
    return sum(math.comb(n, i) for i in range(min(k, n) + 1)) / 2.0 ** n


def median_rank(n: int, confidence: float) -> tuple[int, float] | None:
    """(k, coverage) of the widest-needed symmetric order-statistic interval (x(k), x(n+1-k))
    whose coverage is >= confidence, or None when even (min, max) covers less."""
    best = None
    for k in range(1, n // 2 + 1):
        coverage = 1.0 - 2.0 * _binom_cdf_half(k - 1, n)
        if coverage >= confidence:
            best = (k, coverage)
        else:
            break
    return best


def min_samples(confidence: float) -> int:
    """Fewest cycles whose (min, max) covers the median at `confidence`."""
    n = 1
    while median_rank(n, confidence) is None:
        n += 1
    return n


@dataclass(frozen=True)
class Summary:
    """A repeated measurement: every sample, the median, its interval and coverage."""

    samples: list[float]
    n: int
    statistic: float | None
    low: float | None
    high: float | None
    coverage: float | None
    confidence: float
    why: str | None = None  # set when there are too few samples for an interval

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarize(samples: Iterable[float], confidence: float = CONFIDENCE) -> Summary:
    xs = [float(x) for x in samples if x is not None and math.isfinite(float(x))]
    s = sorted(xs)
    n = len(s)
    stat = median(s) if s else None
    rank = median_rank(n, confidence) if n else None
    if rank is None:
        need = min_samples(confidence)
        return Summary(xs, n, stat, None, None, None, confidence,
                       why=f"{n} sample(s): an interval of the median at {confidence:.0%} "
                           f"confidence needs at least {need}")
    k, coverage = rank
    return Summary(xs, n, stat, s[k - 1], s[n - k], coverage, confidence)


@dataclass(frozen=True)
class Judged:
    """A summary against a bound: band PASS / NOISE / FAIL / DEFERRED, and a readable line."""

    band: Band
    bound: float
    better: Literal["lower", "higher"]
    summary: Summary
    text: str
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def status(self) -> str:
        """The check status: NOISE is a PASS (with the note in `text`); it never blocks."""
        return "PASS" if self.band == "NOISE" else self.band

    def as_dict(self) -> dict[str, Any]:
        out = {"band": self.band, "bound": self.bound, "better": self.better,
               "statistic_definition": STATISTIC, "interval_definition": INTERVAL}
        out.update(self.summary.as_dict())
        out.update(self.extra)
        return out


def fmt(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}g}"


def judge(samples: Iterable[float] | Summary, bound: float, better: Literal["lower", "higher"],
          confidence: float = CONFIDENCE, unit: str = "") -> Judged:
    """The 3-way rule. better='lower': the value must be <= bound (a time ratio);
    better='higher': >= bound (a rate floor)."""
    s = samples if isinstance(samples, Summary) else summarize(samples, confidence)
    if s.low is None or s.high is None:
        return Judged("DEFERRED", bound, better, s, f"too few samples to judge: {s.why}")
    span = (f"median {fmt(s.statistic)}{unit} over {s.n} cycles, "
            f"{s.coverage:.0%} interval [{fmt(s.low)}, {fmt(s.high)}]{unit}")
    op = "<=" if better == "lower" else ">="
    if better == "lower":
        inside, past = s.high <= bound, s.low > bound
    else:
        inside, past = s.low >= bound, s.high < bound
    if past:
        return Judged("FAIL", bound, better, s, f"{span}: the whole interval misses "
                                                f"{op} {fmt(bound)}{unit}")
    if inside:
        return Judged("PASS", bound, better, s, f"{span} {op} {fmt(bound)}{unit}")
    return Judged("NOISE", bound, better, s, f"{span} straddles the bound {fmt(bound)}{unit}: "
                                             "within noise (not a FAIL)")


# ---------------------------------------------------------------- two distributions


def _mw_counts(n: int, m: int) -> list[int]:
    """Number of arrangements giving each Mann-Whitney U = 0..n*m (no ties): the coefficients
    of the Gaussian binomial [n+m choose n]_q."""
    # product over i=1..n of (1 - q^(m+i)) / (1 - q^i), as exact integer polynomials
    poly = [1]
    for i in range(1, n + 1):
        # multiply by (1 - q^(m+i))
        grown = poly + [0] * (m + i)
        for j, c in enumerate(poly):
            grown[j + m + i] -= c
        # divide by (1 - q^i): running sum with stride i
        for j in range(i, len(grown)):
            grown[j] += grown[j - i]
        poly = grown[: n * m + 1] if len(grown) > n * m + 1 else grown
    return poly[: n * m + 1]


def _mw_lower_k(n: int, m: int, confidence: float) -> int:
    """The largest k with P(U <= k - 1) <= (1 - confidence)/2 (0 when none: too few)."""
    alpha = (1.0 - confidence) / 2.0
    if n * m <= 10000:
        counts = _mw_counts(n, m)
        total = math.comb(n + m, n)
        cum, k = 0, 0
        for u, c in enumerate(counts):
            cum += c
            if cum / total <= alpha:
                k = u + 1
            else:
                break
        return k
    mu = n * m / 2.0
    sigma = math.sqrt(n * m * (n + m + 1) / 12.0)
    z = _norm_ppf(1.0 - alpha)
    return max(0, int(math.floor(mu - z * sigma)))


def _norm_ppf(p: float) -> float:
    """Inverse standard normal CDF (bisection on erf; plenty for interval widths)."""
    lo, hi = -10.0, 10.0
    for _ in range(100):
        mid = (lo + hi) / 2.0
        if 0.5 * (1.0 + math.erf(mid / math.sqrt(2.0))) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


@dataclass(frozen=True)
class Shift:
    """current / baseline as a ratio of typical values, with its interval."""

    ratio: float | None
    low: float | None
    high: float | None
    confidence: float
    n_baseline: int
    n_current: int
    baseline_median: float | None
    current_median: float | None
    why: str | None = None

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["definition"] = SHIFT_INTERVAL
        return out


def ratio_shift(baseline: Iterable[float], current: Iterable[float],
                confidence: float = CONFIDENCE) -> Shift:
    """Hodges-Lehmann estimate of current/baseline (median of all pairwise ratios) and its
    distribution-free Mann-Whitney interval. Samples must be > 0 (times, rates)."""
    a = [float(x) for x in baseline if x is not None and float(x) > 0 and math.isfinite(x)]
    b = [float(x) for x in current if x is not None and float(x) > 0 and math.isfinite(x)]
    med_a = median(a) if a else None
    med_b = median(b) if b else None
    if not a or not b:
        return Shift(None, None, None, confidence, len(a), len(b), med_a, med_b,
                     why=f"{len(a)} baseline and {len(b)} current sample(s)")
    logs = sorted(math.log(y) - math.log(x) for x in a for y in b)
    est = math.exp(median(logs))
    k = _mw_lower_k(len(a), len(b), confidence)
    if k < 1:
        return Shift(est, None, None, confidence, len(a), len(b), med_a, med_b,
                     why=f"{len(a)} baseline and {len(b)} current samples are too few for a "
                         f"{confidence:.0%} interval of the shift")
    return Shift(est, math.exp(logs[k - 1]), math.exp(logs[len(logs) - k]), confidence,
                 len(a), len(b), med_a, med_b)


def judge_shift(shift: Shift, bound: float, better: Literal["lower", "higher"] = "lower"
                ) -> tuple[Band, str]:
    """current/baseline against a ratio bound: for times (better='lower') a regression is the
    whole interval above `bound` (e.g. 1.2); for rates (better='higher') the whole interval
    below it (e.g. 0.8)."""
    if shift.low is None or shift.high is None:
        return "DEFERRED", f"too few samples to compare: {shift.why}"
    span = (f"{fmt(shift.ratio)}x the previous run ({shift.confidence:.0%} interval "
            f"[{fmt(shift.low)}, {fmt(shift.high)}], {shift.n_current} vs "
            f"{shift.n_baseline} samples)")
    if better == "lower":
        past, inside = shift.low > bound, shift.high <= bound
    else:
        past, inside = shift.high < bound, shift.low >= bound
    if past:
        return "FAIL", f"{span}: the whole interval is past {fmt(bound)}x"
    if inside:
        return "PASS", f"{span} within {fmt(bound)}x"
    return "NOISE", f"{span} straddles {fmt(bound)}x: within noise (not a regression)"


def _wilson(k: int, n: int, z: float) -> tuple[float, float]:
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def proportion_diff(k1: int, n1: int, k2: int, n2: int, confidence: float = CONFIDENCE
                    ) -> tuple[float, float, float]:
    """(p2 - p1, low, high): Newcombe's hybrid score interval of the difference of two shares
    (k2 of n2 now against k1 of n1 before); n1, n2 >= 1."""
    z = _norm_ppf(1.0 - (1.0 - confidence) / 2.0)
    p1, p2 = k1 / n1, k2 / n2
    l1, u1 = _wilson(k1, n1, z)
    l2, u2 = _wilson(k2, n2, z)
    d = p2 - p1
    low = d - math.sqrt((p2 - l2) ** 2 + (u1 - p1) ** 2)
    high = d + math.sqrt((u2 - p2) ** 2 + (p1 - l1) ** 2)
    return d, low, high


def goal_band(summary: Summary, goal: float, better: Literal["lower", "higher"]) -> str:
    """A bench goal: 'met' when the interval's worse end meets it, 'missed' when its better end
    misses it, 'within noise' otherwise; 'too few rounds' without an interval."""
    if summary.low is None or summary.high is None:
        return "too few rounds"
    worse, best = (summary.high, summary.low) if better == "lower" else \
        (summary.low, summary.high)
    ok = (lambda v: v <= goal) if better == "lower" else (lambda v: v >= goal)
    if ok(worse):
        return "met"
    if not ok(best):
        return "missed"
    return "within noise"


def judge_two(baseline: Iterable[float], current: Iterable[float], bound: float,
              better: Literal["lower", "higher"] = "lower", confidence: float = CONFIDENCE,
              what: str = "the reference") -> Judged:
    """current / baseline (both repeated, both noisy) against a ratio bound, on the
    Hodges-Lehmann ratio and its Mann-Whitney interval: the 3-way rule of `judge`. The summary's
    samples are each current sample over the baseline's median (for display); statistic, low
    and high are the shift's."""
    base = [float(x) for x in baseline]
    cur = [float(x) for x in current]
    shift = ratio_shift(base, cur, confidence)
    ref = shift.baseline_median
    shown = [x / ref for x in cur] if ref else []
    summary = Summary(shown, len(cur), shift.ratio, shift.low, shift.high, None, confidence,
                      why=shift.why)
    extra = {"baseline_samples": base, "current_samples": cur, "shift": shift.as_dict(),
             "statistic_definition": SHIFT_INTERVAL, "interval_definition": SHIFT_INTERVAL}
    if shift.low is None or shift.high is None:
        return Judged("DEFERRED", bound, better, summary,
                      f"too few samples to compare with {what}: {shift.why}", extra)
    span = (f"{fmt(shift.ratio)}x {what} ({confidence:.0%} interval [{fmt(shift.low)}, "
            f"{fmt(shift.high)}]x, {len(cur)} vs {len(base)} samples)")
    if better == "lower":
        past, inside = shift.low > bound, shift.high <= bound
    else:
        past, inside = shift.high < bound, shift.low >= bound
    op = "<=" if better == "lower" else ">="
    if past:
        return Judged("FAIL", bound, better, summary,
                      f"{span}: the whole interval misses {op} {fmt(bound)}x", extra)
    if inside:
        return Judged("PASS", bound, better, summary, f"{span} {op} {fmt(bound)}x", extra)
    return Judged("NOISE", bound, better, summary,
                  f"{span} straddles the bound {fmt(bound)}x: within noise (not a FAIL)", extra)
'''
# ---- end imagekit/stats.py ----


def _load_stats() -> Any:
    """The embedded statistics module (imagekit/stats.py), as a module of its own."""
    import types
    mod = types.ModuleType("preflight_stats")
    sys.modules["preflight_stats"] = mod  # dataclasses look their module up
    exec(compile(_STATS_SOURCE, "imagekit/stats.py", "exec"), mod.__dict__)
    return mod


stats = _load_stats()

SCHEMA = "imagekit.gpu-preflight/v1"
BF16_CEILING_TFLOPS = 790.0  # H200, 8192^3 bf16 on random data, measured on this workplace's H200s
#: Dense bf16 ceiling per device model, keyed by the name NVML (and torch) reports. H200: measured
#: here (KINDS.md: 769-805 TFLOP/s on 8192^3 random data). The others: the vendor's dense bf16
#: datasheet figure x 0.8, the fraction this workplace's H200 reaches of its own datasheet figure
#: (790 / 989) -- leads, not readings. A model not in the table: matmul-rate is DEFERRED.
BF16_CEILINGS: dict[str, tuple[float, str]] = {
    "NVIDIA H200": (790.0, "measured on this workplace's H200s (8192^3, random data)"),
    "NVIDIA H200 NVL": (668.0, "datasheet 835 x 0.8"),
    "NVIDIA H100 80GB HBM3": (791.0, "datasheet 989 (SXM) x 0.8"),
    "NVIDIA H100 PCIe": (605.0, "datasheet 756 x 0.8"),
    "NVIDIA H100 NVL": (668.0, "datasheet 835 x 0.8"),
    "NVIDIA H20": (118.0, "datasheet 148 x 0.8"),
    "NVIDIA H800": (791.0, "datasheet 989 x 0.8"),
    "NVIDIA A100-SXM4-80GB": (250.0, "datasheet 312 x 0.8"),
    "NVIDIA A100-SXM4-40GB": (250.0, "datasheet 312 x 0.8"),
    "NVIDIA A100 80GB PCIe": (250.0, "datasheet 312 x 0.8"),
    "NVIDIA A100-PCIE-40GB": (250.0, "datasheet 312 x 0.8"),
    "NVIDIA A800-SXM4-80GB": (250.0, "datasheet 312 x 0.8"),
    "NVIDIA L40S": (290.0, "datasheet 362 x 0.8"),
    "NVIDIA B200": (1800.0, "datasheet 2250 x 0.8"),
}
MATMUL_FLOOR_FRACTION = 0.8  # matmul-rate: FAIL when a rank's whole interval is below 0.8 x ceiling
SMALL_JUDGE_BYTES = 1024     # the size small-message-time judges (and repeats --repeats times)
HOOK_DELAY = "PREFLIGHT_TEST_DELAY_US"  # test hook: busy-wait this many us per timed NCCL call


def ceiling_for(name: str | None) -> tuple[float, str] | None:
    """(TFLOP/s, source) for an NVML device name, exact or ignoring case and spaces."""
    if not name:
        return None
    if name in BF16_CEILINGS:
        return BF16_CEILINGS[name]
    norm = "".join(name.lower().split())
    for key, value in BF16_CEILINGS.items():
        if "".join(key.lower().split()) == norm:
            return value
    return None


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
MATMUL_REL_ERROR_BOUND = 1e-2  # bf16 operands and output: ~1e-3 expected; NaN never passes
HOOK_WRONG_RANK = "PREFLIGHT_TEST_WRONG_RANK"
HOOK_NAN = "PREFLIGHT_TEST_NAN"
TEST_HOOKS = (HOOK_WRONG_RANK, HOOK_NAN, "PREFLIGHT_TEST_DELAY_US")
#: Variables recorded (never changed) so the record shows what NCCL ran under.
ENV_PREFIXES = ("NCCL_", "TORCH_NCCL_", "TORCH_SYMM_MEM_", "NVSHMEM_", "CUDA_VISIBLE_DEVICES",
                "CUDA_DEVICE_ORDER")
_UNITS = {"": 1, "B": 1, "K": 1024, "KB": 1024, "KIB": 1024, "M": 1024**2, "MB": 1024**2,
          "MIB": 1024**2, "G": 1024**3, "GB": 1024**3, "GIB": 1024**3}
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


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


def parse_topo_matrix(text: str) -> dict[str, Any]:
    """Parse `nvidia-smi topo -m` (tab-separated): links between devices and each GPU's affinity.

    Returns {"devices": [...], "links": {"GPU0": {"GPU1": "NV18", ...}}, "affinity":
    {"GPU0": {"CPU Affinity": "0-47", "NUMA Affinity": "0", ...}}}. Unknown layouts yield empty
    parts; the raw text is always kept beside the parse by the caller.
    """
    lines = [_ANSI.sub("", line).rstrip("\n") for line in text.splitlines()]
    header_index = next((i for i, line in enumerate(lines)
                         if line.startswith("\t") and "GPU0" in line), None)
    result: dict[str, Any] = {"devices": [], "links": {}, "affinity": {}}
    if header_index is None:
        return result
    columns = [c.strip() for c in lines[header_index].split("\t")][1:]
    devices = [c for c in columns if re.fullmatch(r"(GPU|NIC|mlx)\S*", c)]
    result["devices"] = devices
    for line in lines[header_index + 1:]:
        if not line.strip() or line.startswith("Legend"):
            break
        cells = [c.strip() for c in line.split("\t")]
        name, values = cells[0], cells[1:]
        if not name:
            continue
        # device columns come first; nvidia-smi pads the affinity columns with empty cells
        row = dict(zip(devices, values))
        result["links"][name] = {d: row[d] for d in devices if d in row and d != name}
        rest = [c for c in columns if c not in devices]
        extra = dict(zip(rest, [v for v in values[len(devices):] if v]))
        if extra:
            result["affinity"][name] = extra
    return result


def pci_sysfs_name(bus_id: str) -> str:
    """'00000000:18:00.0' or '0000:18:00.0' -> '0000:18:00.0' (sysfs spelling, lower case)."""
    domain, rest = bus_id.strip().lower().split(":", 1)
    return f"{int(domain, 16):04x}:{rest}"


def numa_of(bus_id: str | None, sysfs: Path = Path("/sys/bus/pci/devices")) -> dict[str, Any]:
    """A GPU's NUMA node and local CPU list, read from sysfs by PCI bus id (-1: none reported)."""
    if not bus_id:
        return {"numa_node": None, "cpu_affinity": None, "source": "no PCI bus id"}
    base = sysfs / pci_sysfs_name(bus_id)
    try:
        numa = int((base / "numa_node").read_text().strip())
    except (OSError, ValueError):
        numa = None
    try:
        cpus = (base / "local_cpulist").read_text().strip()
    except OSError:
        cpus = None
    return {"numa_node": numa, "cpu_affinity": cpus, "source": str(base)}


def smi_bus_id(uuid: str | None) -> str | None:
    """A GPU's PCI bus id from nvidia-smi, matched by UUID (when torch does not expose it)."""
    smi = shutil.which("nvidia-smi")
    if not uuid or smi is None:
        return None
    try:
        out = subprocess.run([smi, "--query-gpu=uuid,pci.bus_id", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0].removeprefix("GPU-") == uuid.removeprefix("GPU-"):
            return pci_sysfs_name(parts[1])
    return None


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


def contribution(numel: int, rank: int, device: torch.device) -> torch.Tensor:
    """Rank r's all-reduce input: small integers, exact in float32, different on every rank."""
    i = torch.arange(numel, dtype=torch.int64, device=device)
    return ((i * 7 + rank * 13) % 1024 - 512).to(torch.float32)


def expected_sum(numel: int, world: int, device: torch.device) -> torch.Tensor:
    """The exact element sum over all ranks (|sum| <= 512 * world, exact in float32)."""
    i = torch.arange(numel, dtype=torch.int64, device=device)
    total = torch.zeros(numel, dtype=torch.int64, device=device)
    for r in range(world):
        total += (i * 7 + r * 13) % 1024 - 512
    return total.to(torch.float32)


def hook_rank(name: str) -> int | None:
    value = os.environ.get(name)
    if value is None or value == "":
        return None
    return int(value)


# ---------------------------------------------------------------------------- image-to-GPU fit
#
# Why: an image whose kernels were built for another GPU generation, or for a newer CUDA than the
# node's driver runs, fails only when the first kernel launches ("no kernel image is available",
# "CUDA driver version is insufficient") — long after the Pod was scheduled. The rules:
# - SASS `sm_XY` runs on a GPU of compute capability X.Z with Z >= Y (same major); `sm_XYa` only
#   on exactly X.Y; `sm_XYf` on the family X.Z, Z >= Y (CUDA 12.9+).
# - PTX `compute_XY` is compiled by the driver at load for any GPU >= X.Y (`a`: exactly X.Y,
#   `f`: the family) — but only when the driver is at least as new as the toolkit that wrote it.
# - A CUDA runtime X.y needs a driver supporting X.y; within one major version, CUDA's minor
#   version compatibility (11.1+) lets it run on a driver for X.(y-k) without PTX JIT.
# The same rules live in imagekit/cluster/fit.py (cluster precheck) and probes/_cudafit.py (in-image
# probe); tests/gpu check that the three agree.

_ARCH = re.compile(r"(sm|compute)_(\d+?)(\d)([af]?)")


def parse_cuda_version(value: Any) -> tuple[int, int] | None:
    """'12.4', '12.4.1', 12040 (NVML/driver integer), (12, 4) -> (12, 4); None if unreadable."""
    if value is None or value == "":
        return None
    if isinstance(value, tuple):
        return (int(value[0]), int(value[1]))
    if isinstance(value, int) or (isinstance(value, str) and value.isdigit() and len(value) > 3):
        number = int(value)
        return (number // 1000, (number % 1000) // 10)
    match = re.fullmatch(r"\s*(\d+)(?:\.(\d+))?(?:\.\d+)*\s*", str(value))
    if not match:
        return None
    return (int(match.group(1)), int(match.group(2) or 0))


def parse_arch(entry: str) -> tuple[str, int, int, str] | None:
    """'sm_90' -> ('sm', 9, 0, ''); 'compute_100f' -> ('compute', 10, 0, 'f'); else None."""
    match = _ARCH.fullmatch(entry.strip().lower())
    if not match:
        return None
    return (match.group(1), int(match.group(2)), int(match.group(3)), match.group(4))


def _arch_runs_on(major: int, minor: int, suffix: str, cc: tuple[int, int], ptx: bool) -> bool:
    if suffix == "a":
        return (major, minor) == cc
    if suffix == "f" or not ptx:
        return major == cc[0] and minor <= cc[1]
    return (major, minor) <= cc


def fit_checks(image_cuda: Any, arch_list: list[str] | None, cc: tuple[int, int] | None,
               driver_cuda: Any, where: str = "") -> list[dict[str, Any]]:
    """Two checks: `fit-cuda` (image CUDA vs what the driver supports) and `fit-arch` (image arch
    list vs the GPU's compute capability). Unknown inputs give DEFERRED saying which."""
    image_v, driver_v = parse_cuda_version(image_cuda), parse_cuda_version(driver_cuda)
    at = f" {where}" if where else ""
    data = {"image_cuda": image_cuda, "driver_cuda": driver_cuda, "arch_list": arch_list,
            "compute_capability": f"{cc[0]}.{cc[1]}" if cc else None}
    out = []
    minor_compat = False
    if image_v is None or driver_v is None:
        out.append(check("fit-cuda", "DEFERRED",
                         f"cannot compare CUDA versions{at}: image "
                         f"{image_cuda or 'unknown (CPU build or not given)'}, driver supports "
                         f"{driver_cuda or 'unknown'}", **data))
    elif image_v[0] > driver_v[0] or (image_v[0] == driver_v[0] and image_v[0] < 11
                                      and image_v[1] > driver_v[1]):
        out.append(check("fit-cuda", "FAIL",
                         f"image built for CUDA {image_v[0]}.{image_v[1]}, but the driver{at} "
                         f"supports CUDA up to {driver_v[0]}.{driver_v[1]}: a newer major "
                         "version needs a newer driver (the first CUDA call fails)", **data))
    elif image_v > driver_v:
        minor_compat = True
        out.append(check("fit-cuda", "PASS",
                         f"image CUDA {image_v[0]}.{image_v[1]} on a driver{at} supporting "
                         f"{driver_v[0]}.{driver_v[1]}: same major, runs under minor version "
                         "compatibility (no PTX JIT of the newer toolkit's PTX)", **data,
                         minor_version_compatibility=True))
    else:
        out.append(check("fit-cuda", "PASS",
                         f"image CUDA {image_v[0]}.{image_v[1]} <= {driver_v[0]}.{driver_v[1]} "
                         f"supported by the driver{at}", **data))
    if cc is None:
        out.append(check("fit-arch", "DEFERRED", f"the GPU's compute capability{at} is unknown",
                         **data))
        return out
    if not arch_list:
        out.append(check("fit-arch", "FAIL" if arch_list == [] else "DEFERRED",
                         f"empty CUDA arch list in the image (CPU build of torch?): nothing runs "
                         f"on sm_{cc[0]}{cc[1]}" if arch_list == [] else
                         "the image's arch list is unknown", **data))
        return out
    sass, ptx, unknown = [], [], []
    for entry in arch_list:
        parsed = parse_arch(entry)
        if parsed is None:
            unknown.append(entry)
            continue
        kind, major, minor, suffix = parsed
        if _arch_runs_on(major, minor, suffix, cc, ptx=kind == "compute"):
            (ptx if kind == "compute" else sass).append(entry)
    want = f"sm_{cc[0]}{cc[1]}"
    extra = {"sass_for_gpu": sass, "ptx_for_gpu": ptx, "unparsed": unknown}
    if sass:
        out.append(check("fit-arch", "PASS",
                         f"{', '.join(sass)} in the image's arch list runs on {want} "
                         f"(compute capability {cc[0]}.{cc[1]}{at})", **data, **extra))
    elif ptx and minor_compat:
        out.append(check("fit-arch", "FAIL",
                         f"only PTX ({', '.join(ptx)}) could serve {want}, and the driver{at} is "
                         f"older than the image's CUDA {image_cuda}: it cannot JIT-compile that "
                         "PTX", **data, **extra))
    elif ptx:
        out.append(check("fit-arch", "PASS",
                         f"no SASS for {want}, but PTX {', '.join(ptx)} is JIT-compiled by the "
                         f"driver{at} at load (slower first start)", **data, **extra))
    else:
        out.append(check("fit-arch", "FAIL",
                         f"no entry of the image's arch list {arch_list} runs on {want} (compute "
                         f"capability {cc[0]}.{cc[1]}{at}): 'no kernel image is available'",
                         **data, **extra))
    return out


# ---------------------------------------------------------------------------- NVML health
#
# Why: DCGM-style health facts that a correct matmul and all-reduce do not show yet — ECC off or
# uncorrectable errors already counted, rows awaiting remap (the GPU needs a reset), clocks held
# down by heat or power, a PCIe link trained below its generation or width, link replays, NVLink
# errors, XID events. nvidia-ml-py is optional: without it each health check is DEFERRED saying
# so. Constants are NVML's ABI values (nvml.h), so a fake module in tests needs only functions.

NVML_VOLATILE, NVML_AGGREGATE, NVML_UNCORRECTED, NVML_CORRECTED = 0, 1, 1, 0
NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_TIMEOUT = 3, 10
NVML_XID_CRITICAL = 0x8
NVML_CLOCK_SM, NVML_TEMPERATURE_GPU = 1, 0
NVML_PERF_POLICY = {"power": 0, "thermal": 1}
NVML_NVLINK_MAX_LINKS = 18
NVML_NVLINK_ERRORS = {"replay": 0, "recovery": 1, "crc_flit": 2, "crc_data": 3}
CLOCK_EVENT_REASONS = {  # nvmlClocksEventReason* bits
    0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap",
    0x8: "hw_slowdown", 0x10: "sync_boost", 0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown", 0x100: "display_clock_setting"}
#: Reasons that mean the GPU is slowed by heat or a hardware power/slowdown signal: FAIL.
CLOCK_EVENT_FAIL = 0x8 | 0x20 | 0x40 | 0x80
#: XIDs that indicate hardware (memory, bus, NVLink, GSP) rather than an application's fault.
HARDWARE_XIDS = {48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 121, 123, 136, 140, 143, 144,
                 145, 146, 147, 148, 149, 150, 154, 155, 156, 158}
_XID_LINE = re.compile(r"NVRM: Xid \(PCI:([0-9a-fA-F:.]+)\): (\d+)")


def reason_names(mask: int) -> list[str]:
    return [name for bit, name in CLOCK_EVENT_REASONS.items() if mask & bit]


def _nvml_error(exc: Exception) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


class NvmlGpu:
    """One GPU seen through NVML (module `nv`: pynvml, or a fake in tests). Every read that
    raises is kept as an error string under `errors`; nothing here raises past `open`."""

    def __init__(self, nv: Any, uuid: str | None, pci_bus_id: str | None, index: int) -> None:
        self.nv = nv
        self.handle = None
        self.located_by = None
        attempts = [("uuid", nv.nvmlDeviceGetHandleByUUID, uuid),
                    ("pci_bus_id", nv.nvmlDeviceGetHandleByPciBusId, pci_bus_id),
                    ("index", nv.nvmlDeviceGetHandleByIndex, index)]
        errors = []
        for how, fn, key in attempts:
            if key is None:
                continue
            try:
                self.handle = fn(key)
                self.located_by = how
                break
            except Exception as exc:  # noqa: BLE001 - try the next way of naming the GPU
                errors.append(f"{how}: {_nvml_error(exc)}")
        if self.handle is None:
            raise RuntimeError("NVML does not know this GPU (" + "; ".join(errors) + ")")
        self.events = None
        self.events_error: str | None = None

    def read(self, out: dict[str, Any], key: str, fn_name: str, *args: Any) -> Any:
        fn = getattr(self.nv, fn_name, None)
        if fn is None:
            out.setdefault("errors", {})[key] = f"{fn_name} not in this nvidia-ml-py"
            return None
        try:
            value = fn(self.handle, *args)
        except Exception as exc:  # noqa: BLE001 - NVMLError_NotSupported and friends
            out.setdefault("errors", {})[key] = _nvml_error(exc)
            return None
        out[key] = value
        return value

    def clock_reasons(self, out: dict[str, Any]) -> Any:
        for fn in ("nvmlDeviceGetCurrentClocksEventReasons",
                   "nvmlDeviceGetCurrentClocksThrottleReasons"):
            if hasattr(self.nv, fn):
                return self.read(out, "clock_event_reasons", fn)
        out.setdefault("errors", {})["clock_event_reasons"] = "no clock-event reason call"
        return None

    def snapshot(self) -> dict[str, Any]:
        """The counters once: ECC, remapped rows, retired pages, PCIe, NVLink, power, heat."""
        s: dict[str, Any] = {"t_monotonic": time.monotonic()}
        mode = self.read(s, "ecc_mode", "nvmlDeviceGetEccMode")
        if mode is not None:
            s["ecc_mode"] = {"current": int(mode[0]), "pending": int(mode[1])}
        for kind, etype in (("uncorrected", NVML_UNCORRECTED), ("corrected", NVML_CORRECTED)):
            for scope, ctype in (("volatile", NVML_VOLATILE), ("aggregate", NVML_AGGREGATE)):
                self.read(s, f"ecc_{kind}_{scope}", "nvmlDeviceGetTotalEccErrors", etype, ctype)
        rows = self.read(s, "remapped_rows", "nvmlDeviceGetRemappedRows")
        if rows is not None:
            s["remapped_rows"] = {"correctable": int(rows[0]), "uncorrectable": int(rows[1]),
                                  "pending": bool(rows[2]), "failure": bool(rows[3])}
        for cause, name in ((0, "multiple_single_bit"), (1, "double_bit")):
            pages = self.read(s, f"retired_pages_{name}", "nvmlDeviceGetRetiredPages", cause)
            if pages is not None:
                s[f"retired_pages_{name}"] = len(pages)
        pending = self.read(s, "retired_pages_pending", "nvmlDeviceGetRetiredPagesPendingStatus")
        if pending is not None:
            s["retired_pages_pending"] = bool(pending)
        for key, fn in (("pcie_gen", "nvmlDeviceGetCurrPcieLinkGeneration"),
                        ("pcie_gen_max", "nvmlDeviceGetMaxPcieLinkGeneration"),
                        ("pcie_gen_gpu_max", "nvmlDeviceGetGpuMaxPcieLinkGeneration"),
                        ("pcie_width", "nvmlDeviceGetCurrPcieLinkWidth"),
                        ("pcie_width_max", "nvmlDeviceGetMaxPcieLinkWidth"),
                        ("pcie_replay_counter", "nvmlDeviceGetPcieReplayCounter"),
                        ("power_mw", "nvmlDeviceGetPowerUsage"),
                        ("power_limit_mw", "nvmlDeviceGetEnforcedPowerLimit")):
            self.read(s, key, fn)
        self.read(s, "temperature_c", "nvmlDeviceGetTemperature", NVML_TEMPERATURE_GPU)
        self.read(s, "sm_clock_mhz", "nvmlDeviceGetClockInfo", NVML_CLOCK_SM)
        self.clock_reasons(s)
        for policy, code in NVML_PERF_POLICY.items():
            viol = self.read(s, f"violation_{policy}", "nvmlDeviceGetViolationStatus", code)
            if viol is not None:
                s[f"violation_{policy}"] = {"reference_ns": int(viol.referenceTime),
                                            "violation_ns": int(viol.violationTime)}
        links: dict[str, Any] = {}
        for link in range(NVML_NVLINK_MAX_LINKS):
            entry: dict[str, Any] = {}
            state = self.read(entry, "active", "nvmlDeviceGetNvLinkState", link)
            if state is None:
                links[str(link)] = {"error": entry["errors"]["active"]}
                continue
            entry["active"] = bool(state)
            for name, counter in NVML_NVLINK_ERRORS.items():
                self.read(entry, name, "nvmlDeviceGetNvLinkErrorCounter", link, counter)
            links[str(link)] = entry
        s["nvlink"] = links
        return s

    def sample(self) -> dict[str, Any]:
        """What changes under load: clock-event reasons, PCIe generation/width, SM clock."""
        s: dict[str, Any] = {"t_monotonic": time.monotonic()}
        self.clock_reasons(s)
        self.read(s, "pcie_gen", "nvmlDeviceGetCurrPcieLinkGeneration")
        self.read(s, "pcie_width", "nvmlDeviceGetCurrPcieLinkWidth")
        self.read(s, "sm_clock_mhz", "nvmlDeviceGetClockInfo", NVML_CLOCK_SM)
        self.read(s, "power_mw", "nvmlDeviceGetPowerUsage")
        return s

    def watch_xids(self) -> None:
        try:
            self.events = self.nv.nvmlEventSetCreate()
            self.nv.nvmlDeviceRegisterEvents(self.handle, NVML_XID_CRITICAL, self.events)
        except Exception as exc:  # noqa: BLE001 - registration is refused on some systems
            self.events_error = _nvml_error(exc)
            self.events = None

    def drain_xids(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        if self.events is None:
            return found
        for _ in range(1000):
            try:
                data = self.nv.nvmlEventSetWait_v2(self.events, 0)
            except Exception as exc:  # noqa: BLE001 - Timeout: no more events
                if getattr(exc, "value", None) != NVML_ERROR_TIMEOUT:
                    self.events_error = _nvml_error(exc)
                break
            found.append({"event_type": int(data.eventType), "xid": int(data.eventData)})
        try:
            self.nv.nvmlEventSetFree(self.events)
        except Exception:  # noqa: BLE001 - freeing is best effort
            pass
        self.events = None
        return found


class LoadSampler:
    """Samples `NvmlGpu.sample` every `interval_s` in a thread while the GPU is busy."""

    def __init__(self, gpu: NvmlGpu | None, interval_s: float = 0.005) -> None:
        import threading
        self.gpu, self.interval_s = gpu, interval_s
        self.samples: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set() and len(self.samples) < 5000:
            self.samples.append(self.gpu.sample())  # type: ignore[union-attr]
            self._stop.wait(self.interval_s)

    def __enter__(self) -> "LoadSampler":
        if self.gpu is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.gpu is not None:
            self._stop.set()
            self._thread.join(timeout=5)
            self.samples.append(self.gpu.sample())  # one right at the end of the load


def parse_kernel_xids(text: str) -> list[dict[str, Any]]:
    """XID lines from /dev/kmsg records ('pri,seq,usec,flags;msg') or dmesg ('[ secs] msg')."""
    found = []
    for line in text.splitlines():
        match = _XID_LINE.search(line)
        if not match:
            continue
        t = None
        head = line.split(";", 1)[0].split(",")
        if ";" in line and len(head) >= 3 and head[2].isdigit():
            t = int(head[2]) / 1e6
        else:
            stamp = re.match(r"\s*\[\s*(\d+\.\d+)\]", line)
            t = float(stamp.group(1)) if stamp else None
        found.append({"pci": match.group(1).lower(), "xid": int(match.group(2)),
                      "t_monotonic": t, "line": line.strip()[:300]})
    return found


def read_kernel_log() -> dict[str, Any]:
    """The kernel log when this process may read it (/dev/kmsg, else `dmesg`)."""
    chunks: list[str] = []
    try:
        fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
        try:
            while len(chunks) < 200000:
                try:
                    chunks.append(os.read(fd, 8192).decode(errors="replace").rstrip("\n"))
                except BlockingIOError:
                    break
                except BrokenPipeError:  # a record was overwritten while reading: go on
                    continue
        finally:
            os.close(fd)
        return {"readable": True, "source": "/dev/kmsg", "text": "\n".join(chunks)}
    except OSError as exc:
        first = f"/dev/kmsg: {exc.strerror or exc}"
    dmesg = shutil.which("dmesg")
    if dmesg is None:
        return {"readable": False, "why": f"{first}; no dmesg on PATH"}
    try:
        done = subprocess.run([dmesg], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"readable": False, "why": f"{first}; dmesg: {exc}"}
    if done.returncode != 0:
        return {"readable": False,
                "why": f"{first}; dmesg exited {done.returncode}: {done.stderr.strip()[:200]}"}
    return {"readable": True, "source": "dmesg", "text": done.stdout}


def _pci_prefix(bus_id: str | None) -> str | None:
    """'0000:00:06.0' -> '0000:00:06' (how NVRM names the GPU in an XID line)."""
    if not bus_id:
        return None
    return pci_sysfs_name(bus_id).rsplit(".", 1)[0]


def _delta(before: dict[str, Any], after: dict[str, Any], key: str) -> int | None:
    if isinstance(before.get(key), int) and isinstance(after.get(key), int):
        return after[key] - before[key]
    return None


def clock_windows(samples: list[dict[str, Any]], windows: int) -> list[dict[str, Any]]:
    """The load's NVML samples cut into `windows` consecutive equal parts (the clock check's
    cycles): per part the fraction of samples carrying a slowdown reason, and its SM clock."""
    n = len(samples)
    k = max(1, min(windows, n))
    out = []
    for w in range(k):
        part = samples[w * n // k:(w + 1) * n // k]
        slow = [s for s in part if int(s["clock_event_reasons"]) & CLOCK_EVENT_FAIL]
        clocks = [s["sm_clock_mhz"] for s in part if isinstance(s.get("sm_clock_mhz"), int)]
        mask = 0
        for s in slow:
            mask |= int(s["clock_event_reasons"]) & CLOCK_EVENT_FAIL
        out.append({"samples": len(part), "slowed_fraction": len(slow) / len(part) if part else 0,
                    "reasons": reason_names(mask),
                    "sm_clock_mhz_median": stats.median(clocks) if clocks else None})
    return out


def health_checks(per_rank: list[dict[str, Any]], world: int, repeats: int = 5,
                  confidence: float = stats.CONFIDENCE
                  ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Judge every rank's NVML readings: (checks, not-applicable notes).

    Each rank's entry: {"rank", "available", "why", "before", "after", "load_samples",
    "xid_events", "xid_watch_error", "kernel_log": {"readable", "why", "xids"}, "window":
    [t0, t1]}. A check's data keeps every rank's counters; a notes entry says why a check does
    not apply here (retired pages on GPUs that remap rows; NVLink on one GPU)."""
    names = ("nvml-ecc", "nvml-remapped-rows", "nvml-clock-events", "nvml-pcie", "nvml-nvlink",
             "nvml-xid")
    missing = [r for r in per_rank if not r.get("available")]
    if missing:
        why = "; ".join(f"rank {r['rank']}: {r.get('why')}" for r in missing)
        return [check(n, "DEFERRED", f"no NVML reading: {why}",
                      ranks=[r["rank"] for r in missing]) for n in names], []
    checks: list[dict[str, Any]] = []
    notes: list[dict[str, Any]] = []

    def verdict(name: str, problems: list[str], unread: list[str], ok: str, **data: Any) -> None:
        if problems:
            checks.append(check(name, "FAIL", "; ".join(problems), **data))
        elif unread:
            checks.append(check(name, "DEFERRED", "NVML could not read: " + "; ".join(unread),
                                **data))
        else:
            checks.append(check(name, "PASS", ok, **data))

    # ECC mode and uncorrectable counters
    problems, unread, data = [], [], {}
    for r in per_rank:
        a, errs = r["after"], r["after"].get("errors", {})
        data[str(r["rank"])] = {k: a.get(k) for k in a if k.startswith("ecc_")}
        mode = a.get("ecc_mode")
        if mode is None:
            unread.append(f"rank {r['rank']} ECC mode ({errs.get('ecc_mode')})")
        elif not mode["current"]:
            problems.append(f"rank {r['rank']}: ECC is disabled"
                            + (" (enabled after the next reset)" if mode["pending"] else ""))
        for scope in ("volatile", "aggregate"):
            value = a.get(f"ecc_uncorrected_{scope}")
            if value is None:
                unread.append(f"rank {r['rank']} {scope} uncorrectable "
                              f"({errs.get(f'ecc_uncorrected_{scope}')})")
            elif value:
                problems.append(f"rank {r['rank']}: {value} {scope} uncorrectable ECC error(s)")
    verdict("nvml-ecc", problems, unread,
            f"ECC enabled on all {len(per_rank)} GPU(s); 0 volatile and 0 aggregate "
            "uncorrectable errors", per_rank=data)

    # Remapped rows (Ampere and later) and retired pages (before Ampere)
    problems, unread, data = [], [], {}
    remap_ok = True
    for r in per_rank:
        a, errs = r["after"], r["after"].get("errors", {})
        rows = a.get("remapped_rows")
        data[str(r["rank"])] = {"remapped_rows": rows, "retired_pages": {
            k: a.get(k, errs.get(k)) for k in ("retired_pages_multiple_single_bit",
                                               "retired_pages_double_bit",
                                               "retired_pages_pending")}}
        if rows is None:
            remap_ok = False
            if a.get("retired_pages_pending") is None:
                unread.append(f"rank {r['rank']} remapped rows "
                              f"({errs.get('remapped_rows')}) and retired pages "
                              f"({errs.get('retired_pages_pending')})")
        else:
            if rows["pending"]:
                problems.append(f"rank {r['rank']}: a row remap is pending (the GPU needs a "
                                "reset before it is trusted)")
            if rows["failure"]:
                problems.append(f"rank {r['rank']}: row remapping FAILED (no spare rows left)")
        if a.get("retired_pages_pending"):
            problems.append(f"rank {r['rank']}: a page retirement is pending (reset needed)")
    rp_unsupported = [r["rank"] for r in per_rank
                      if r["after"].get("retired_pages_pending") is None]
    if rp_unsupported and remap_ok:
        err = per_rank[0]["after"].get("errors", {}).get("retired_pages_pending")
        notes.append({"name": "nvml-retired-pages", "status": "N/A",
                      "detail": f"retired pages not supported ({err}): these GPUs remap rows "
                                "instead (Ampere and later, e.g. Hopper); judged by "
                                "nvml-remapped-rows", "ranks": rp_unsupported})
    verdict("nvml-remapped-rows", problems, unread,
            f"no row remap pending and no remapping failure on {len(per_rank)} GPU(s) "
            f"(remapped rows: " + ", ".join(
                f"rank {r['rank']} {r['after']['remapped_rows']['correctable']} corr/"
                f"{r['after']['remapped_rows']['uncorrectable']} unc"
                for r in per_rank if r["after"].get("remapped_rows")) + ")"
            if remap_ok else "no retired page pending", per_rank=data)

    # Clock-event (throttle) reasons during the matmul: the load is cut into --repeats windows
    # (cycles); per window the fraction of samples slowed by a thermal/hardware reason. FAIL
    # only when the whole interval of that fraction is above 0 (slowed all through the load);
    # a transient reason in some windows is PASS "within noise", named.
    problems, unread, data = [], [], {}
    noisy: list[str] = []
    for r in per_rank:
        samples = [s for s in r.get("load_samples", []) if "clock_event_reasons" in s]
        mask = 0
        for s in samples:
            mask |= int(s["clock_event_reasons"])
        viol = (r.get("load") or {}).get("violation_ns") or {
            p: _delta(r["before"].get(f"violation_{p}") or {},
                      r["after"].get(f"violation_{p}") or {}, "violation_ns")
            for p in NVML_PERF_POLICY}
        clocks = [s["sm_clock_mhz"] for s in r.get("load_samples", []) if "sm_clock_mhz" in s]
        data[str(r["rank"])] = {"samples": len(samples), "reasons_mask": mask,
                                "reasons": reason_names(mask), "violation_ns_delta": viol,
                                "load": r.get("load"),
                                "sm_clock_mhz_min": min(clocks) if clocks else None,
                                "sm_clock_mhz_max": max(clocks) if clocks else None}
        windows = clock_windows(samples, repeats) if samples else []
        judged = stats.judge([w["slowed_fraction"] for w in windows], 0.0, "lower", confidence)
        data[str(r["rank"])].update(windows=windows, **{f"judged_{k}": v for k, v in
                                                        judged.as_dict().items()})
        if not samples:
            unread.append(f"rank {r['rank']} clock-event reasons under load")
        elif mask & CLOCK_EVENT_FAIL and judged.band == "DEFERRED":
            unread.append(f"rank {r['rank']} enough load samples to judge the clock "
                          f"({judged.text})")
        elif mask & CLOCK_EVENT_FAIL and judged.band == "FAIL":
            problems.append(f"rank {r['rank']}: clocks slowed during the matmul by "
                            f"{', '.join(reason_names(mask & CLOCK_EVENT_FAIL))} in every "
                            f"window ({judged.text})")
        elif mask & CLOCK_EVENT_FAIL:
            noisy.append(f"rank {r['rank']}: {', '.join(reason_names(mask & CLOCK_EVENT_FAIL))}"
                         f" in some windows, slowed fraction {judged.text}")
        if (viol.get("thermal") or 0) > 0:
            problems.append(f"rank {r['rank']}: thermal violation for "
                            f"{viol['thermal'] / 1e6:.1f} ms during the load")
    seen = sorted({n for d in data.values() for n in d["reasons"]})
    power = [f"rank {k} {d['violation_ns_delta']['power'] / 1e6:.0f} ms" for k, d in data.items()
             if (d["violation_ns_delta"].get("power") or 0) > 0]
    loads = [d["load"] for d in data.values() if d.get("load")]
    verdict("nvml-clock-events", problems, unread,
            ("no thermal or hardware slowdown during the matmul" if not noisy else
             "within noise, not slowed throughout the matmul: " + "; ".join(noisy))
            + (f" ({loads[0]['ops']} products in {loads[0]['seconds']} s)" if loads else "")
            + (f"; seen: {', '.join(seen)}" if seen else "; no clock-event reason seen")
            + (f"; at the power cap (sw_power_cap, not a fault under full load): "
               f"{', '.join(power)}" if power else ""),
            per_rank=data)

    # PCIe link generation/width under load; replay counter
    problems, unread, data = [], [], {}
    for r in per_rank:
        b, a = r["before"], r["after"]
        loads = r.get("load_samples", [])
        gen = max([s["pcie_gen"] for s in loads if "pcie_gen" in s] + [a.get("pcie_gen") or 0])
        width = max([s["pcie_width"] for s in loads if "pcie_width" in s]
                    + [a.get("pcie_width") or 0])
        replay = _delta(b, a, "pcie_replay_counter")
        data[str(r["rank"])] = {"gen_under_load": gen or None, "gen_max": a.get("pcie_gen_max"),
                                "gen_gpu_max": a.get("pcie_gen_gpu_max"),
                                "width_under_load": width or None,
                                "width_max": a.get("pcie_width_max"),
                                "replay_counter": a.get("pcie_replay_counter"),
                                "replay_delta": replay}
        if not gen or a.get("pcie_gen_max") is None:
            unread.append(f"rank {r['rank']} PCIe generation "
                          f"({a.get('errors', {}).get('pcie_gen_max')})")
        elif gen < a["pcie_gen_max"]:
            problems.append(f"rank {r['rank']}: PCIe link at gen {gen} under load, max "
                            f"{a['pcie_gen_max']}")
        if not width or a.get("pcie_width_max") is None:
            unread.append(f"rank {r['rank']} PCIe width "
                          f"({a.get('errors', {}).get('pcie_width_max')})")
        elif width < a["pcie_width_max"]:
            problems.append(f"rank {r['rank']}: PCIe link x{width}, max x{a['pcie_width_max']}")
        if replay is None:
            unread.append(f"rank {r['rank']} PCIe replay counter "
                          f"({a.get('errors', {}).get('pcie_replay_counter')})")
        elif replay > 0:
            problems.append(f"rank {r['rank']}: PCIe replay counter rose by {replay} during "
                            "the run (link errors)")
    verdict("nvml-pcie", problems, unread,
            "PCIe at max generation and width under load, replay counter unchanged ("
            + ", ".join(f"rank {k} gen{d['gen_under_load']} x{d['width_under_load']}, "
                        f"{d['replay_counter']} replays" for k, d in data.items()) + ")",
            per_rank=data)

    # NVLink: link state and error counters, where the GPU has links
    problems, data = [], {}
    any_active = False
    for r in per_rank:
        b, a = r["before"].get("nvlink", {}), r["after"].get("nvlink", {})
        active = [k for k, v in a.items() if v.get("active")]
        inactive = [k for k, v in a.items() if v.get("active") is False]
        any_active = any_active or bool(active)
        rises = {}
        for link in active:
            for name in NVML_NVLINK_ERRORS:
                d = _delta(b.get(link, {}), a.get(link, {}), name)
                if d:
                    rises[f"link{link}.{name}"] = d
        data[str(r["rank"])] = {"active": active, "inactive": inactive, "error_rises": rises,
                                "errors_total": {f"link{k}": {n: v.get(n) for n in
                                                              NVML_NVLINK_ERRORS}
                                                 for k, v in a.items() if v.get("active")}}
        if active and inactive:
            problems.append(f"rank {r['rank']}: NVLink(s) {', '.join(inactive)} down while "
                            f"{len(active)} are up")
        if rises:
            problems.append(f"rank {r['rank']}: NVLink error counters rose during the run: "
                            + ", ".join(f"{k} +{v}" for k, v in rises.items()))
    if not any_active and not problems:
        first = per_rank[0]["after"].get("nvlink", {}).get("0", {})
        notes.append({"name": "nvml-nvlink", "status": "N/A",
                      "detail": "no active NVLink on any GPU"
                                + (f" (NVML: {first['error']})" if "error" in first else "")
                                + (": one GPU, nothing to link" if world == 1 else
                                   "; the GPUs talk over PCIe"), "per_rank": data})
    else:
        verdict("nvml-nvlink", problems, [],
                "every NVLink up, no error counter rose ("
                + ", ".join(f"rank {k} {len(d['active'])} links" for k, d in data.items()) + ")",
                per_rank=data)

    # XID: NVML events during the run, and the kernel log when readable
    problems, unread, data = [], [], {}
    for r in per_rank:
        events = r.get("xid_events", [])
        log = r.get("kernel_log", {})
        t0, t1 = r.get("window", [None, None])
        during = [x for x in log.get("xids", []) if t0 is not None and x["t_monotonic"]
                  is not None and x["t_monotonic"] >= t0 - 1.0]
        earlier_hw = [x for x in log.get("xids", []) if x not in during
                      and x["xid"] in HARDWARE_XIDS]
        data[str(r["rank"])] = {"nvml_events": events, "nvml_watch_error":
                                r.get("xid_watch_error"), "kernel_log_readable":
                                log.get("readable"), "kernel_log_why": log.get("why"),
                                "kernel_log_xids": log.get("xids", [])}
        if events:
            problems.append(f"rank {r['rank']}: XID " + ", ".join(str(e["xid"]) for e in events)
                            + " reported by NVML during the run")
        if during:
            problems.append(f"rank {r['rank']}: kernel log XID "
                            + ", ".join(str(x["xid"]) for x in during) + " during the run")
        if earlier_hw:
            problems.append(f"rank {r['rank']}: hardware XID "
                            + ", ".join(str(x["xid"]) for x in earlier_hw)
                            + " in the kernel log since boot")
        if r.get("xid_watch_error") and not log.get("readable"):
            unread.append(f"rank {r['rank']} XID events ({r['xid_watch_error']}) and kernel "
                          f"log ({log.get('why')})")
    sources = []
    if any(not r.get("xid_watch_error") for r in per_rank):
        sources.append("NVML XID events watched during the run")
    if any(r.get("kernel_log", {}).get("readable") for r in per_rank):
        sources.append("kernel log read")
    else:
        sources.append("kernel log not readable (" + str(per_rank[0].get("kernel_log", {})
                                                         .get("why")) + ")")
    verdict("nvml-xid", problems, unread, "no XID: " + "; ".join(sources), per_rank=data)
    return checks, notes


# ---------------------------------------------------------------------------- bandwidth verdict

BASELINE_MIN_BYTES = 64 * 1024**2
BASELINE_TOLERANCE = 0.10


def topology_signature(record: dict[str, Any]) -> str:
    """How the GPUs are linked, as a comparable string: 'single', or the sorted multiset of
    link kinds between GPU pairs from `nvidia-smi topo -m` ('NV18x6'), or 'unknown'."""
    if record.get("world_size") == 1:
        return "single"
    matrix = ((record.get("topology") or {}).get("matrix") or {})
    kinds: dict[str, int] = {}
    for a, row in (matrix.get("links") or {}).items():
        for b, link in row.items():
            if a.startswith("GPU") and b.startswith("GPU") and a < b:
                kinds[link] = kinds.get(link, 0) + 1
    if not kinds:
        return "unknown" if record.get("device_type") == "cuda" else "cpu"
    return ",".join(f"{k}x{v}" for k, v in sorted(kinds.items()))


def baseline_key(record: dict[str, Any]) -> tuple[str, int, str]:
    names = sorted({str(r.get("name")) for r in record.get("ranks", [])})
    return (" + ".join(names), int(record.get("world_size") or 0), topology_signature(record))


def find_baseline(key: tuple[str, int, str], path: Path | None
                  ) -> tuple[Path | None, dict[str, Any] | None, str]:
    """The baseline for `key`: `path` itself (a file), or in a folder the earliest PASS record
    of the same GPU model, count and topology (the first run of a kind is its baseline)."""
    if path is None:
        return None, None, "no baseline folder or file given"
    files = [path] if path.is_file() else sorted(path.glob("*.json")) if path.is_dir() else []
    if not files:
        return None, None, f"{path} holds no JSON records"
    found = []
    for f in files:
        try:
            rec = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(rec, dict) or rec.get("schema") != SCHEMA:
            continue
        if rec.get("status") != "PASS" or rec.get("test_hooks") or not rec.get("bandwidth"):
            continue
        if baseline_key(rec) == key:
            found.append((str(rec.get("started")), f, rec))
    if not found:
        return None, None, (f"no PASS record of {key[1]}x {key[0]} with topology {key[2]} in "
                            f"{path}")
    _, f, rec = min(found, key=lambda t: t[0])
    return f, rec, "earliest matching record"


def bandwidth_verdict(record: dict[str, Any], baseline: dict[str, Any] | None,
                      source: str, tolerance: float = BASELINE_TOLERANCE,
                      min_bytes: int = BASELINE_MIN_BYTES,
                      confidence: float = stats.CONFIDENCE) -> dict[str, Any]:
    """busbw at every size >= min_bytes against the baseline's: FAIL naming the sizes that fall
    more than `tolerance` below it and each one's slowest rank; no baseline: DEFERRED."""
    key = baseline_key(record)
    if record.get("world_size", 1) == 1:
        return check("bandwidth-verdict", "DEFERRED",
                     "n=1: busbw is 0 by definition; there is no link to judge", key=list(key))
    if baseline is None:
        return check("bandwidth-verdict", "DEFERRED",
                     f"no baseline to judge busbw against: {source}; commit a PASS sample of "
                     f"this GPU model, count and topology in gpu_checks/samples/",
                     key=list(key))
    mine = {row["bytes"]: row for row in record["bandwidth"]["sizes"] if row["bytes"] >= min_bytes}
    base = {row["bytes"]: row for row in baseline["bandwidth"]["sizes"]
            if row["bytes"] >= min_bytes}
    common = sorted(set(mine) & set(base))
    if not common:
        return check("bandwidth-verdict", "DEFERRED",
                     f"no size >= {human_bytes(min_bytes)} measured in both this run and the "
                     f"baseline ({source})", key=list(key))
    rows, judged = [], []
    for size in common:
        ref_cycles = base[size].get("busbw_cycles_GBps") or [base[size]["busbw_GBps"]]
        ref = stats.median(ref_cycles)  # the baseline's typical busbw (median of its cycles)
        samples = [b / ref if ref else float("inf")
                   for b in (mine[size].get("busbw_cycles_GBps") or [mine[size]["busbw_GBps"]])]
        j = stats.judge(samples, 1.0 - tolerance, "higher", confidence)
        row = {"bytes": size, "busbw_GBps": mine[size]["busbw_GBps"],
               "baseline_busbw_GBps": ref, "ratio": j.summary.statistic,
               "slowest_rank": mine[size]["slowest_rank"], **j.as_dict()}
        rows.append(row)
        judged.append((f"{human_bytes(size)} (slowest rank {mine[size]['slowest_rank']}, "
                       f"{mine[size]['busbw_GBps']:.1f} vs {ref:.1f} GB/s)", j))
    data = {"key": list(key), "baseline": source, "tolerance": tolerance,
            "min_bytes": min_bytes, "sizes": rows}
    out = timed_check("bandwidth-verdict", judged, "size", **data)
    out["detail"] = (f"busbw / the baseline's ({source}) at {len(rows)} size(s) >= "
                     f"{human_bytes(min_bytes)} against {1 - tolerance:.2f}: " + out["detail"])
    return out


# ---------------------------------------------------------------------------- nccl-tests beside us


def parse_nccl_tests(text: str) -> dict[str, dict[int, dict[str, float]]]:
    """all_reduce_perf output (one or several runs) -> {"eager"|"graph": {bytes: {"in_place_us",
    "out_of_place_us"}}}; the mode comes from each run's header ('graph: 0' or 'graph: N').
    A size printed several times in one mode (-N cycles, or runs appended) keeps each column's
    lowest time: the preflight keeps the lowest of its --small-repeats loops too."""
    runs: dict[str, dict[int, dict[str, float]]] = {}
    mode = "eager"
    for line in text.splitlines():
        header = re.search(r"\bgraph: (\d+)", line)
        if header:
            mode = "graph" if int(header.group(1)) else "eager"
            continue
        cells = line.split()
        if len(cells) >= 12 and cells[0].isdigit() and cells[2] in ("float", "half", "bfloat16",
                                                                     "double", "int32", "int8"):
            try:
                new = {"out_of_place_us": float(cells[5]), "in_place_us": float(cells[9])}
            except ValueError:
                continue
            old = runs.setdefault(mode, {}).get(int(cells[0]))
            merged = dict(new) if old is None else \
                {k: min(v, old[k]) for k, v in new.items() if not k.endswith("_cycles")}
            for k, v in new.items():  # every cycle too: the verdict compares distributions
                merged[f"{k}_cycles"] = (old or {}).get(f"{k}_cycles", []) + [v]
            runs[mode][int(cells[0])] = merged
    return runs


NCCL_FLOAT32, NCCL_SUM = 7, 0  # ncclDataType_t ncclFloat32, ncclRedOp_t ncclSum (nccl.h)
MODES = ("in_place", "out_of_place")


def find_libnccl(maps: str) -> str | None:
    """The libnccl this process has mapped (torch's own), from /proc/self/maps text."""
    for line in maps.splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6 and re.search(r"/libnccl[^/]*\.so(\.\d+)*$", parts[5].strip()):
            return parts[5].strip()
    return None


class DirectNccl:
    """ncclAllReduce called through ctypes on the process group's own communicator, from the
    libnccl torch loaded: what nccl-tests times, without torch c10d's per-call host work or the
    event record/wait nodes ProcessGroupNCCL adds around a captured collective."""

    def __init__(self, lib: Any, comm: int, path: str) -> None:
        self.comm, self.path = comm, path
        # no argtypes: every argument is passed as a ready ctypes object (args()), so a call
        # converts nothing; ~1 us less host time per call in the eager loop than with argtypes
        self.fn = lib.ncclAllReduce
        self.delay_us = hook_delay_us()  # the slowdown test hook; 0 in a real run
        self.fn.restype = ctypes.c_int
        self.errstr = lib.ncclGetErrorString
        self.errstr.argtypes = [ctypes.c_int]
        self.errstr.restype = ctypes.c_char_p

    @classmethod
    def open(cls, backend: str, device: torch.device, pg: Any = None,
             maps: str | None = None) -> tuple["DirectNccl | None", str | None]:
        """(handle, None) or (None, why not): gloo/CPU, no _comm_ptr() on this torch, no
        communicator yet, or no libnccl mapped (e.g. linked statically)."""
        if backend != "nccl" or device.type != "cuda":
            return None, f"backend {backend} on {device.type}: no NCCL communicator to call"
        try:
            pg = pg if pg is not None else dist.group.WORLD
            impl = pg._get_backend(device)
            get = getattr(impl, "_comm_ptr", None)
            if not callable(get):
                return None, (f"{type(impl).__name__} has no _comm_ptr() in torch "
                              f"{torch.__version__}")
            comm = int(get())
            if not comm:
                return None, "_comm_ptr() returned 0: the communicator is not created yet"
            if maps is None:
                maps = Path("/proc/self/maps").read_text()
            path = find_libnccl(maps)
            if path is None:
                return None, "no libnccl*.so mapped in this process (/proc/self/maps)"
            return cls(ctypes.CDLL(path), comm, path), None
        except Exception as exc:  # noqa: BLE001 - any failure: the c10d timing stays
            return None, " ".join(f"{type(exc).__name__}: {exc}".split())[:300]

    def args(self, src: torch.Tensor, dst: torch.Tensor) -> tuple[Any, ...]:
        """One call's arguments, on torch's current stream (the capture stream in a capture)."""
        stream = torch.cuda.current_stream(src.device).cuda_stream
        return (ctypes.c_void_p(src.data_ptr()), ctypes.c_void_p(dst.data_ptr()),
                ctypes.c_size_t(src.numel()), ctypes.c_int(NCCL_FLOAT32),
                ctypes.c_int(NCCL_SUM), ctypes.c_void_p(self.comm), ctypes.c_void_p(stream))

    def run(self, args: tuple[Any, ...], times: int) -> None:
        fn, delay = self.fn, self.delay_us
        for _ in range(times):
            if delay:
                spin_us(delay)
            rc = fn(*args)
            if rc:
                raise RuntimeError(f"ncclAllReduce returned {rc} "
                                   f"({(self.errstr(rc) or b'?').decode()})")


CYCLE_KEYS = ("eager_us", "graph_us", "event_eager_us", "event_graph_us", "sums_ok")


def merge_cycles(cycles: list[dict[str, Any]]) -> dict[str, Any]:
    """Several direct_times() cycles as one: each time the median of the cycles (None if any
    cycle lacks it), the sums ok only if every cycle's were, the first problem kept."""
    out: dict[str, Any] = {}
    for m in MODES:
        first = dict(cycles[0][m])
        for key in ("eager_us", "graph_us", "event_eager_us", "event_graph_us"):
            vals = [c[m][key] for c in cycles]
            first[key] = stats.median(vals) if all(v is not None for v in vals) else None
        bad = [c[m] for c in cycles if not c[m]["sums_ok"]]
        if bad:
            first["sums_ok"], first["sums"] = False, bad[0]["sums"]
        out[m] = first
    return out


def small_message_verdict(ours: list[dict[str, Any]], theirs: dict[str, dict[int, dict[str,
                          float]]], source: str, world: int, at_bytes: int = 1024,
                          bound: float = 1.5, direct_why: str | None = None,
                          confidence: float = stats.CONFIDENCE
                          ) -> tuple[dict[str, Any], dict[str, Any]]:
    """(check, comparison data): our ncclAllReduce times at `at_bytes` (ctypes on torch's own
    communicator, timed as nccl-tests does: host clock around the loop to the stream's end,
    eager and one CUDA graph replay) <= bound x nccl-tests' times of the same mode (eager vs
    default, graph vs -G), and the sums we timed exact. Event-pair times are data only. Judged: out of place always, in place at n >= 2 — at n = 1 NCCL enqueues no work for
    an in-place all-reduce (both sides time an empty host call), so it is kept as data only.
    torch c10d's own times stay as context. No direct timing (gloo, no communicator pointer or
    libnccl): DEFERRED saying why."""
    mine = {row["bytes"]: row for row in ours}
    rows = []
    for b in sorted(mine):
        row: dict[str, Any] = {"bytes": b, "ours_eager_us": mine[b]["eager_us"],
                               "ours_graph_us": mine[b].get("graph_us"),
                               "ours_graph_empty": mine[b].get("graph_empty")}
        for m, t in (mine[b].get("nccl") or {}).items():
            row[f"ours_nccl_{m}_eager_us"] = t.get("eager_us")
            row[f"ours_nccl_{m}_graph_us"] = t.get("graph_us")
            row[f"ours_nccl_{m}_event_eager_us"] = t.get("event_eager_us")
            row[f"ours_nccl_{m}_event_graph_us"] = t.get("event_graph_us")
        for mode in ("eager", "graph"):
            t = theirs.get(mode, {}).get(b)
            if t:
                row[f"nccl_tests_{mode}_in_place_us"] = t["in_place_us"]
                row[f"nccl_tests_{mode}_out_of_place_us"] = t["out_of_place_us"]
        rows.append(row)
    data: dict[str, Any] = {"at_bytes": at_bytes, "bound": bound, "nccl_tests": source,
                            "sizes": rows, "judged": ["out_of_place"] +
                            (["in_place"] if world > 1 else [])}
    if not theirs.get("eager"):
        return check("small-message-time", "DEFERRED",
                     f"no nccl-tests (eager) output to compare with ({source})", **data), data
    base = theirs["eager"].get(at_bytes)
    if at_bytes not in mine or base is None:
        return check("small-message-time", "DEFERRED",
                     f"{human_bytes(at_bytes)} not measured by both ({source})", **data), data
    direct = mine[at_bytes].get("nccl")
    if not direct:
        return check("small-message-time", "DEFERRED",
                     "no nccl-tests-like timing (ncclAllReduce on the process group's "
                     f"communicator): {direct_why or 'not measured'}; torch c10d's times are "
                     "kept as context only", **data), data
    ratios: dict[str, float] = {}
    verdicts: list[tuple[str, Any]] = []
    cycles = mine[at_bytes].get("nccl_cycles") or [direct]
    parts, problems = [], []
    for m in MODES:
        t = direct.get(m) or {}
        judged = m in data["judged"]
        if judged and t.get("sums_ok") is False:
            problems.append(f"{m.replace('_', ' ')}: {t.get('sums')}")
        pair = []
        for mode, key in (("eager", "eager_us"), ("graph", "graph_us")):
            ref = theirs.get(mode, {}).get(at_bytes, {}).get(f"{m}_us")
            if t.get(key) is None or not ref or ref <= 0:
                if judged and mode == "eager":
                    problems.append(f"{m.replace('_', ' ')} eager not timed by both")
                continue
            ratio = t[key] / ref
            if judged:
                ours_cycles = [c[m][key] for c in cycles
                               if (c.get(m) or {}).get(key) is not None]
                theirs_cycles = theirs.get(mode, {}).get(at_bytes, {}).get(
                    f"{m}_us_cycles") or [ref]
                j = stats.judge_two(theirs_cycles, ours_cycles, bound, "lower", confidence,
                                    f"nccl-tests ({mode})")
                verdicts.append((f"{m}_{mode}", j))
                ratios[f"{m}_{mode}"] = j.summary.statistic if j.summary.statistic is not None \
                    else ratio
            pair.append(f"{mode} {t[key]:.2f} vs {ref:.2f} us = {ratio:.2f}x")
        label = m.replace("_", " ") + ("" if judged else " (not judged)")
        parts.append(f"{label}: " + (", ".join(pair) or "-"))
    data["ratios"] = ratios
    data["ratio"] = max(ratios.values()) if ratios else None
    data["per_ratio"] = [dict(ratio=k, **j.as_dict()) for k, j in verdicts]
    head = (f"{human_bytes(at_bytes)} ncclAllReduce on torch's communicator vs nccl-tests, "
            f"both timed by the host clock around the loop to the stream's end: "
            + "; ".join(parts))
    if world == 1:
        head += ("; n=1: NCCL does no work for an in-place all-reduce on one rank (the graph "
                 "captures nothing, the result is the rank's own contribution), so in place "
                 "is not judged; out of place copies and is")
    if problems:
        return check("small-message-time", "FAIL", head + "; " + "; ".join(problems),
                     **data), data
    verdict_ = timed_check("small-message-time", verdicts, "ratio", **data)
    verdict_["detail"] = (f"{head}; sums exact; judged on our {len(cycles)} cycle(s) against "
                          f"nccl-tests' cycles (Hodges-Lehmann ratio, Mann-Whitney interval), "
                          f"bound {bound}x: {verdict_['detail']}")
    return verdict_, data


# ---------------------------------------------------------------------------- the run


class Preflight:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rank = int(os.environ.get("RANK", "0"))
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(self.world)))
        cuda = torch.cuda.is_available()
        backend = args.backend
        if backend == "auto":
            backend = "nccl" if cuda else "gloo"
        if backend == "nccl" and not cuda:
            raise RuntimeError("backend nccl asked for, but torch sees no CUDA device")
        self.backend = backend
        self.device = torch.device("cuda", self.local_rank) if backend == "nccl" \
            else torch.device("cpu")
        self.checks: list[dict[str, Any]] = []
        self.notes: list[dict[str, Any]] = []  # checks that do not apply here (N/A), and why
        self.hooks = {k: os.environ[k] for k in TEST_HOOKS if os.environ.get(k)}
        self.want_health = args.health == "on" or (args.health == "auto" and
                                                   self.device.type == "cuda")
        self.nvml: NvmlGpu | None = None
        self.health: dict[str, Any] = {"rank": self.rank, "available": False, "why": None}

    # -- process group ------------------------------------------------------------------

    def init(self) -> None:
        timeout = dt.timedelta(seconds=self.args.timeout_s)
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        if "RANK" in os.environ and "MASTER_ADDR" in os.environ:
            dist.init_process_group(self.backend, timeout=timeout)
        else:  # standalone: a world of one, rendezvous through a private file
            self._store_dir = tempfile.TemporaryDirectory(prefix="preflight-")
            store = dist.FileStore(os.path.join(self._store_dir.name, "store"), 1)
            dist.init_process_group(self.backend, store=store, rank=0, world_size=1,
                                    timeout=timeout)

    def barrier(self) -> None:
        if self.device.type == "cuda":
            dist.barrier(device_ids=[self.local_rank])
        else:
            dist.barrier()

    def gather(self, value: Any) -> list[Any]:
        """All-gather a JSON-able value from every rank (rank order), as bytes in a tensor.

        Not dist.all_gather_object: it pickles (so a peer could run code here) and needs numpy,
        which a minimal image may lack.
        """
        data = torch.tensor(list(json.dumps(value).encode()), dtype=torch.uint8,
                            device=self.device)
        length = torch.tensor([data.numel()], dtype=torch.int64, device=self.device)
        lengths = [torch.zeros_like(length) for _ in range(self.world)]
        dist.all_gather(lengths, length)
        longest = max(int(n.item()) for n in lengths)
        padded = torch.zeros(longest, dtype=torch.uint8, device=self.device)
        padded[:data.numel()] = data
        parts = [torch.zeros_like(padded) for _ in range(self.world)]
        dist.all_gather(parts, padded)
        return [json.loads(bytes(part[:int(n.item())].tolist()).decode())
                for part, n in zip(parts, lengths)]

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    # -- inventory ----------------------------------------------------------------------

    def inventory(self) -> dict[str, Any]:
        info: dict[str, Any] = {"rank": self.rank, "local_rank": self.local_rank,
                                "hostname": socket.gethostname(), "device": str(self.device),
                                "visible_devices": torch.cuda.device_count()
                                if torch.cuda.is_available() else 0}
        if self.device.type == "cuda":
            props = torch.cuda.get_device_properties(self.device)
            info.update(name=props.name, total_memory_bytes=int(props.total_memory),
                        total_memory_gib=round(props.total_memory / 1024**3, 2),
                        compute_capability=f"{props.major}.{props.minor}",
                        multiprocessors=props.multi_processor_count)
            uuid = getattr(props, "uuid", None)
            info["uuid"] = f"GPU-{uuid}" if uuid is not None and \
                not str(uuid).startswith("GPU-") else (str(uuid) if uuid else None)
            bus_id = None
            if hasattr(props, "pci_bus_id") and hasattr(props, "pci_domain_id"):
                bus_id = f"{props.pci_domain_id:04x}:{props.pci_bus_id:02x}:" \
                         f"{props.pci_device_id:02x}.0"
            info["pci_bus_id"] = bus_id or smi_bus_id(info["uuid"])
        else:
            info.update(name=f"cpu ({platform.processor() or platform.machine()})",
                        total_memory_bytes=None, total_memory_gib=None,
                        compute_capability=None, multiprocessors=os.cpu_count(), uuid=None,
                        pci_bus_id=None)
        return info

    def device_checks(self, ranks: list[dict[str, Any]]) -> None:
        a = self.args
        if a.expect_model is not None:
            if self.device.type != "cuda":
                self.checks.append(check("device-model", "DEFERRED",
                                         f"no GPU in this run (backend {self.backend}): "
                                         f"cannot compare with {a.expect_model!r}"))
            else:
                bad = [r for r in ranks if a.expect_model.lower() not in r["name"].lower()]
                self.checks.append(check(
                    "device-model", "FAIL" if bad else "PASS",
                    (f"rank {bad[0]['rank']} is {bad[0]['name']!r}, expected "
                     f"{a.expect_model!r}" if bad else
                     f"all {len(ranks)} GPUs are {ranks[0]['name']!r} "
                     f"(expected {a.expect_model!r})"),
                    bad_ranks=[r["rank"] for r in bad]))
        if a.min_memory_gib is not None:
            if self.device.type != "cuda":
                self.checks.append(check("device-memory", "DEFERRED",
                                         f"no GPU in this run (backend {self.backend})"))
            else:
                bad = [r for r in ranks if r["total_memory_gib"] < a.min_memory_gib]
                low = min(r["total_memory_gib"] for r in ranks)
                self.checks.append(check(
                    "device-memory", "FAIL" if bad else "PASS",
                    (f"rank {bad[0]['rank']} has {bad[0]['total_memory_gib']} GiB, expected >= "
                     f"{a.min_memory_gib}" if bad else
                     f"smallest GPU has {low} GiB (expected >= {a.min_memory_gib})"),
                    bad_ranks=[r["rank"] for r in bad]))
        if a.expect_gpus is not None:
            if self.device.type != "cuda":
                self.checks.append(check("gpu-count", "DEFERRED",
                                         f"no GPU in this run (backend {self.backend})"))
            else:
                per_host: dict[str, int] = {}
                for r in ranks:
                    per_host[r["hostname"]] = r["visible_devices"]
                wrong = {h: c for h, c in per_host.items() if c != a.expect_gpus}
                ok = not wrong and self.local_world == a.expect_gpus
                detail = (f"{a.expect_gpus} GPUs visible on each of {len(per_host)} host(s), "
                          f"one rank on each" if ok else
                          f"expected {a.expect_gpus} GPUs per host with one rank each; visible "
                          f"{per_host}, ranks per host {self.local_world}")
                self.checks.append(check("gpu-count", "PASS" if ok else "FAIL", detail,
                                         visible_per_host=per_host,
                                         ranks_per_host=self.local_world))

    # -- BF16 matmul ----------------------------------------------------------------------

    def matmul(self) -> dict[str, Any]:
        n = self.args.matmul_n
        gen = torch.Generator(device=self.device)
        gen.manual_seed(int.from_bytes(os.urandom(4), "little") ^ self.rank)
        a = torch.randn(n, n, generator=gen, device=self.device, dtype=torch.float32)
        b = torch.randn(n, n, generator=gen, device=self.device, dtype=torch.float32)
        a, b = a.to(torch.bfloat16), b.to(torch.bfloat16)
        out = torch.full((n, n), float("nan"), device=self.device, dtype=torch.bfloat16)
        torch.matmul(a, b, out=out)  # poisoned output: an unwritten element stays NaN
        self.sync()
        if hook_rank(HOOK_NAN) == self.rank:
            out[n // 2, n // 3] = float("nan")
        finite = bool(torch.isfinite(out).all().item())
        nonfinite = int((~torch.isfinite(out)).sum().item())
        ref = torch.matmul(a.to(torch.float64), b.to(torch.float64))
        diff = out.to(torch.float64) - ref
        rel = float(torch.linalg.vector_norm(diff) / torch.linalg.vector_norm(ref))
        del ref, diff
        # Rate: fresh inputs again (never zeros), events around the loop, after warm-up.
        a2 = torch.randn(n, n, generator=gen, device=self.device).to(torch.bfloat16)
        b2 = torch.randn(n, n, generator=gen, device=self.device).to(torch.bfloat16)
        for _ in range(self.args.matmul_warmup):
            torch.matmul(a2, b2, out=out)
        cycles = [self.timed(lambda: torch.matmul(a2, b2, out=out), self.args.matmul_iters,
                             barrier=False) for _ in range(self.args.repeats)]
        seconds = stats.median(cycles)
        tflops = 2.0 * n**3 / seconds / 1e12
        if self.nvml is not None and self.args.load_s > 0:
            self.health["load"] = self.sustained_load(lambda: torch.matmul(a2, b2, out=out),
                                                      seconds)
        return {"rank": self.rank, "finite": finite, "nonfinite_elements": nonfinite,
                "rel_error": rel if math.isfinite(rel) else None, "time_ms": seconds * 1e3,
                "tflops": tflops, "tflops_cycles": [2.0 * n**3 / s / 1e12 for s in cycles]}

    def matmul_ceiling(self, ranks: list[dict[str, Any]]) -> tuple[float | None, str]:
        """The bf16 ceiling: --tflops-ceiling, else the table entry of every rank's model."""
        if self.args.tflops_ceiling is not None:
            return float(self.args.tflops_ceiling), "--tflops-ceiling"
        if self.device.type != "cuda":
            return None, f"no GPU in this run (backend {self.backend})"
        names = sorted({str(r.get("name")) for r in ranks})
        found = [ceiling_for(n) for n in names]
        if len(names) != 1 or found[0] is None:
            missing = [n for n, f in zip(names, found) if f is None]
            return None, (f"no bf16 ceiling for {', '.join(repr(n) for n in missing)} in "
                          f"BF16_CEILINGS" if missing else
                          f"mixed models {names}: no single ceiling")
        return found[0][0], f"BF16_CEILINGS[{names[0]!r}]: {found[0][1]}"

    def matmul_rate(self, mm: list[dict[str, Any]], ceiling: float | None, source: str) -> None:
        """matmul-rate: every rank's cycles against the floor (--min-tflops, else 0.8 x the
        ceiling). No GPU: N/A note; no ceiling for this model: DEFERRED naming it."""
        a = self.args
        floor = a.min_tflops
        if floor is None and ceiling is not None:
            floor = MATMUL_FLOOR_FRACTION * ceiling
        if floor is None:
            if self.device.type != "cuda":
                self.notes.append({"name": "matmul-rate", "status": "N/A",
                                   "detail": f"{source}: a CPU matmul rate has no floor"})
                return
            self.checks.append(check("matmul-rate", "DEFERRED",
                                     f"{source}; give --min-tflops or --tflops-ceiling, or add "
                                     "the model to the table", ceiling_source=source))
            return
        judged = [(m["rank"], stats.judge(m.get("tflops_cycles") or [m["tflops"]], floor,
                                          "higher", a.confidence, " TFLOP/s")) for m in mm]
        data = {"floor_tflops": floor, "ceiling_tflops": ceiling, "ceiling_source": source,
                "floor_definition": "--min-tflops" if a.min_tflops is not None else
                f"{MATMUL_FLOOR_FRACTION} x ceiling",
                "per_rank": [dict(rank=r, **j.as_dict()) for r, j in judged]}
        self.checks.append(timed_check("matmul-rate", judged, "rank", **data))

    def sustained_load(self, op: Any, op_seconds: float) -> dict[str, Any]:
        """Keep the GPU busy with `op` for --load-s seconds while NVML is sampled: clock-event
        reasons need sustained load to show (power and heat build up; NVML's power reading is
        averaged over about a second). Violation-time counters are read before and after."""
        assert self.nvml is not None
        count = max(1, int(self.args.load_s / max(op_seconds, 1e-6)))
        before: dict[str, Any] = {}
        for policy, code in NVML_PERF_POLICY.items():
            self.nvml.read(before, policy, "nvmlDeviceGetViolationStatus", code)
        t0 = time.monotonic()
        with LoadSampler(self.nvml, interval_s=0.01) as sampler:
            for _ in range(count):
                op()
            self.sync()
        after: dict[str, Any] = {}
        for policy, code in NVML_PERF_POLICY.items():
            self.nvml.read(after, policy, "nvmlDeviceGetViolationStatus", code)
        viol = {p: int(after[p].violationTime) - int(before[p].violationTime)
                for p in NVML_PERF_POLICY if p in before and p in after}
        self.health["load_samples"] = sampler.samples
        return {"op": "bf16 matmul", "ops": count, "seconds": round(time.monotonic() - t0, 3),
                "violation_ns": viol}

    # -- timing ---------------------------------------------------------------------------

    def timed(self, op: Any, iters: int, barrier: bool = True) -> float:
        """Average seconds of one `op` on this rank: CUDA events on GPU, perf_counter on CPU."""
        if barrier:
            self.barrier()
        if self.device.type == "cuda":
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                op()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3 / iters
        t0 = time.perf_counter()
        for _ in range(iters):
            op()
        return (time.perf_counter() - t0) / iters

    # -- all-reduce correctness -----------------------------------------------------------

    def allreduce_correctness(self, numel: int) -> dict[str, Any]:
        sent = contribution(numel, self.rank, self.device)
        wrong_rank = hook_rank(HOOK_WRONG_RANK)
        hook_index = numel // 3
        if wrong_rank == self.rank:
            sent[hook_index] += 1.0
        buf = sent.clone()
        dist.all_reduce(buf)
        expected = expected_sum(numel, self.world, self.device)
        bad = (buf != expected).nonzero()
        first = int(bad[0, 0].item()) if bad.numel() else -1
        mine = {"rank": self.rank, "first_bad_index": first, "bad_elements": int(bad.shape[0])}
        if first >= 0:
            mine.update(got=float(buf[first].item()), expected=float(expected[first].item()))
        results = self.gather(mine)
        failing = [r for r in results if r["first_bad_index"] >= 0]
        blame: list[dict[str, Any]] = []
        if failing:
            # Which rank's contribution at the first bad index was not what it should send?
            index = min(r["first_bad_index"] for r in failing)
            want = float(contribution(numel, self.rank, self.device)[index].item())
            have = float(sent[index].item())
            blame = [b for b in self.gather({"rank": self.rank, "index": index, "sent": have,
                                             "should_send": want}) if b["sent"] != b["should_send"]]
        return {"elements": numel, "bytes": numel * 4, "per_rank": results,
                "wrong_contributors": blame}

    # -- bandwidth ------------------------------------------------------------------------

    def bandwidth(self, sizes: list[int]) -> list[dict[str, Any]]:
        rows = []
        for nbytes in sizes:
            numel = nbytes // 4
            buf = contribution(numel, self.rank, self.device) / 1024.0
            for _ in range(self.args.warmup):
                dist.all_reduce(buf)
            self.sync()
            # judged sizes (>= 64 MiB, n >= 2) repeat --repeats cycles: the baseline verdict
            # judges each cycle's busbw (the slowest rank's); the row keeps per-rank medians
            count = self.args.repeats if self.world > 1 and nbytes >= BASELINE_MIN_BYTES else 1
            cycles = []
            for _ in range(count):
                mine = self.timed(lambda: dist.all_reduce(buf), self.args.iters)
                cycles.append([t[0] for t in self.gather([mine])])
            per_rank = [stats.median(c[r] for c in cycles) for r in range(self.world)]
            seconds = max(per_rank)
            algbw, busbw = bandwidths(numel * 4, seconds, self.world)
            rows.append({"bytes": numel * 4, "elements": numel, "time_us": seconds * 1e6,
                         "per_rank_time_us": [t * 1e6 for t in per_rank],
                         "slowest_rank": max(range(self.world), key=lambda r: per_rank[r]),
                         "algbw_GBps": algbw, "busbw_GBps": busbw})
            if count > 1:
                rows[-1]["busbw_cycles_GBps"] = [
                    bandwidths(numel * 4, max(c), self.world)[1] for c in cycles]
            del buf
        return rows

    # -- topology -------------------------------------------------------------------------

    def topology(self, ranks: list[dict[str, Any]]) -> dict[str, Any]:
        topo: dict[str, Any] = {"nvidia_smi": None, "matrix": None, "raw": None,
                                "gpus": [], "note": None}
        smi = shutil.which("nvidia-smi")
        if smi is None:
            topo["note"] = "nvidia-smi not on PATH: no link matrix"
        else:
            topo["nvidia_smi"] = smi
            try:
                done = subprocess.run([smi, "topo", "-m"], capture_output=True, text=True,
                                      timeout=60, check=False)
                topo["raw"] = done.stdout + (done.stderr if done.returncode else "")
                if done.returncode == 0:
                    topo["matrix"] = parse_topo_matrix(done.stdout)
                else:
                    topo["note"] = f"nvidia-smi topo -m exited {done.returncode}"
            except (OSError, subprocess.TimeoutExpired) as exc:
                topo["note"] = f"nvidia-smi topo -m failed: {exc}"
        for r in ranks:
            entry = {"rank": r["rank"], "hostname": r["hostname"], "pci_bus_id": r["pci_bus_id"]}
            entry.update(r.get("numa", {}))
            topo["gpus"].append(entry)
        return topo

    # -- main -----------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        a = self.args
        started = dt.datetime.now(dt.timezone.utc)
        self.init()
        mine = self.inventory()
        mine["numa"] = numa_of(mine.get("pci_bus_id")) if self.device.type == "cuda" else \
            {"numa_node": None, "cpu_affinity": None, "source": "cpu run"}
        ranks = self.gather(mine)
        self.device_checks(ranks)
        if self.want_health:
            self.nvml_open(mine)
        fit = self.gather(self.fit(mine)) if self.device.type == "cuda" else []
        for name in ("fit-cuda", "fit-arch"):
            per = [c for rank_checks in fit for c in rank_checks if c["name"] == name]
            if per:
                bad = [(r, c) for r, c in enumerate(per) if c["status"] != "PASS"]
                chosen = bad[0][1] if bad else per[0]
                self.checks.append(check(name, worst([c["status"] for c in per]),
                                         (f"rank {bad[0][0]}: " if bad else "") + chosen["detail"],
                                         per_rank=[c["data"] for c in per],
                                         bad_ranks=[r for r, _ in bad]))

        mm = self.gather(self.matmul())
        bound = a.matmul_rel_error_bound
        bad_mm = [m for m in mm if not m["finite"] or m["rel_error"] is None
                  or m["rel_error"] > bound]
        if bad_mm:
            m = bad_mm[0]
            why = (f"{m['nonfinite_elements']} non-finite element(s)" if not m["finite"] else
                   f"relative error {m['rel_error']:.3g} > bound {bound:g}")
            detail = f"rank {m['rank']}: bf16 matmul n={a.matmul_n}: {why}"
        else:
            detail = (f"bf16 matmul n={a.matmul_n} finite on every rank; max relative error "
                      f"{max(m['rel_error'] for m in mm):.3g} <= {bound:g} vs float64")
        self.checks.append(check("matmul-bf16", "FAIL" if bad_mm else "PASS", detail,
                                 bad_ranks=[m["rank"] for m in bad_mm]))
        min_tflops = min(m["tflops"] for m in mm)
        ceiling, ceiling_source = self.matmul_ceiling(ranks)
        self.matmul_rate(mm, ceiling, ceiling_source)

        correctness = [self.allreduce_correctness(numel) for numel in self.correctness_sizes()]
        problems = []
        for c in correctness:
            for b in c["wrong_contributors"]:
                problems.append(f"rank {b['rank']} contributed a wrong value at index "
                                f"{b['index']} ({b['sent']:g}, should be {b['should_send']:g})")
            for r in c["per_rank"]:
                if r["first_bad_index"] >= 0:
                    problems.append(f"rank {r['rank']}: sum wrong at first bad index "
                                    f"{r['first_bad_index']} of {c['elements']} (got "
                                    f"{r['got']:g}, expected {r['expected']:g}; "
                                    f"{r['bad_elements']} bad)")
        self.checks.append(check(
            "allreduce-correctness", "FAIL" if problems else "PASS",
            "; ".join(dict.fromkeys(problems)) if problems else
            f"every element equals the exact sum on all {self.world} rank(s) "
            f"({', '.join(str(c['elements']) for c in correctness)} float32 elements)",
            bad_ranks=sorted({r["rank"] for c in correctness for r in c["per_rank"]
                              if r["first_bad_index"] >= 0}),
            wrong_contributors=sorted({b["rank"] for c in correctness
                                       for b in c["wrong_contributors"]})))

        sizes = a.sizes or size_list(a.min_bytes, a.max_bytes, a.factor)
        rows = self.bandwidth(sizes)
        small = self.small_messages([s for s in sizes if s <= a.small_max_bytes])
        topo = self.topology(ranks) if self.rank == 0 else None
        health = None
        if self.want_health:
            per_rank = self.gather(self.health_finish())
            health_checks_, notes = health_checks(per_rank, self.world, a.repeats,
                                                  a.confidence)
            self.checks.extend(health_checks_)
            self.notes.extend(notes)
            health = {"source": "nvidia-ml-py (NVML)", "per_rank": per_rank}
        if a.nccl_tests_log is not None:
            theirs: dict[str, Any] = {}
            try:
                theirs = parse_nccl_tests(a.nccl_tests_log.read_text())
            except OSError as exc:
                self.notes.append({"name": "small-message-time", "status": "N/A",
                                   "detail": f"cannot read {a.nccl_tests_log}: {exc}"})
            verdict_, comparison = small_message_verdict(
                small["sizes"], theirs, str(a.nccl_tests_log), self.world,
                direct_why=small["direct"]["why"], confidence=a.confidence)
            small["nccl_tests"] = comparison
            self.checks.append(verdict_)
        else:  # no comparison asked for: a wrong sum in the timed path still FAILs
            wrong = [f"{human_bytes(r['bytes'])} {m.replace('_', ' ')}: {t['sums']}"
                     for r in small["sizes"] for m, t in (r.get("nccl") or {}).items()
                     if not t.get("sums_ok", True)]
            if wrong:
                self.checks.append(check("small-message-time", "FAIL",
                                         "ncclAllReduce timing gave wrong sums: "
                                         + "; ".join(wrong[:4])))

        if self.hooks:
            self.checks.append(check("test-hooks", "FAIL",
                                     f"test-only fault hooks active ({', '.join(self.hooks)}): "
                                     "this record proves nothing about the hardware",
                                     hooks=self.hooks))
        record = {
            "schema": SCHEMA,
            "status": "ERROR",  # set below, once every check is in
            "started": started.isoformat(),
            "finished": dt.datetime.now(dt.timezone.utc).isoformat(),
            "wall_s": round(time.perf_counter() - _T_START, 3),
            "wall_definition": "rank 0, from the script's start (torch import included) to "
                               "the record; the launcher's own start-up is not counted",
            "world_size": self.world,
            "backend": self.backend,
            "device_type": self.device.type,
            "software": self.software(),
            "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)},
            "expectations": {"model": a.expect_model, "gpus": a.expect_gpus,
                             "min_memory_gib": a.min_memory_gib, "min_tflops": a.min_tflops},
            "ranks": [{k: v for k, v in r.items() if k != "numa"} for r in ranks],
            "checks": self.checks,
            "matmul": {"dtype": "bfloat16", "n": a.matmul_n, "reference": "float64",
                       "rel_error_definition": "||out - ref||_F / ||ref||_F",
                       "rel_error_bound": bound, "warmup": a.matmul_warmup,
                       "iters": a.matmul_iters, "per_rank": mm, "min_tflops": min_tflops,
                       "ceiling_tflops": ceiling, "ceiling_source": ceiling_source,
                       "fraction_of_ceiling": min_tflops / ceiling if ceiling else None,
                       "repeats": a.repeats,
                       "tflops_definition": "per rank: the median of --repeats cycles of iters "
                                            "products (tflops_cycles holds each)"},
            "allreduce_correctness": correctness,
            "bandwidth": {
                "op": "all_reduce", "reduce_op": "sum", "dtype": "float32",
                "in_place": True, "warmup": a.warmup, "iters": a.iters,
                "timer": "cuda-events" if self.device.type == "cuda" else
                "barrier+perf_counter",
                "time_definition": "per-rank average over iters; the slowest rank's average "
                                   "(all_reduce MAX)",
                "algbw_definition": "bytes / time (GB/s = 1e9 B/s)",
                "busbw_formula": "algbw * 2*(n-1)/n",
                "n": self.world, "busbw_factor": busbw_factor(self.world),
                "note": ("n=1: the bus factor is 0, so busbw is 0 by definition; algbw measures "
                         "a local operation, not a link") if self.world == 1 else None,
                "sizes": rows},
            "small_messages": small,
            "topology": topo,
            "health": health,
            "not_applicable": self.notes,
            "baseline": None,
            "test_hooks": self.hooks,
            "error": None,
        }
        if self.rank == 0:
            self.judge_bandwidth(record)
        record["status"] = worst([c["status"] for c in self.checks])
        record["checks"] = self.checks
        return record

    def judge_bandwidth(self, record: dict[str, Any]) -> None:
        a = self.args
        where = a.baseline
        if where == "auto":
            where = str(Path(__file__).resolve().parent / "samples") \
                if self.device.type == "cuda" and self.world > 1 else "off"
        if where == "off":
            if self.world > 1 and self.device.type == "cuda":
                self.notes.append({"name": "bandwidth-verdict", "status": "N/A",
                                   "detail": "--baseline off: bandwidth measured, not judged"})
            return
        if self.world == 1:
            self.notes.append({"name": "bandwidth-verdict", "status": "N/A",
                               "detail": "n=1: busbw is 0 by definition; no link to judge"})
            return
        path, baseline, how = find_baseline(baseline_key(record), Path(where))
        source = f"{path.name} ({how})" if path is not None else how
        record["baseline"] = {"path": str(path) if path else None, "how": how,
                              "key": list(baseline_key(record))}
        self.checks.append(bandwidth_verdict(record, baseline, source, a.baseline_tolerance,
                                             confidence=a.confidence))

    # -- image-to-GPU fit, NVML health, small messages -------------------------------------

    def fit(self, mine: dict[str, Any]) -> list[dict[str, Any]]:
        """This rank's GPU against the running image's torch: CUDA version, arch list."""
        driver: Any = None
        how = None
        try:
            import pynvml as nv  # optional
            nv.nvmlInit()
            try:
                driver, how = nv.nvmlSystemGetCudaDriverVersion(), "NVML"
            finally:
                nv.nvmlShutdown()
        except Exception:  # noqa: BLE001 - no NVML: ask the CUDA driver through torch
            try:
                driver, how = int(torch._C._cuda_getDriverVersion()), "cuDriverGetVersion"
            except Exception:  # noqa: BLE001
                driver = None
        props = torch.cuda.get_device_properties(self.device)
        out = fit_checks(torch.version.cuda, list(torch.cuda.get_arch_list()),
                         (props.major, props.minor), driver,
                         where=f"of {mine.get('name')} ({how or 'driver version unread'})")
        return out

    def nvml_open(self, mine: dict[str, Any]) -> None:
        h = self.health
        h["window"] = [time.monotonic(), None]
        if self.device.type != "cuda":
            h["why"] = f"no GPU in this run (backend {self.backend})"
            return
        try:
            import pynvml as nv
        except ImportError as exc:
            h["why"] = f"nvidia-ml-py is not installed (import pynvml: {exc})"
            return
        try:
            nv.nvmlInit()
            gpu = NvmlGpu(nv, mine.get("uuid"), mine.get("pci_bus_id"), self.local_rank)
        except Exception as exc:  # noqa: BLE001 - no driver library, no permission, …
            h["why"] = f"NVML unusable: {_nvml_error(exc)}"
            return
        try:
            h["driver_cuda"] = nv.nvmlSystemGetCudaDriverVersion()
            h["driver_version"] = nv.nvmlSystemGetDriverVersion()
        except Exception:  # noqa: BLE001 - informative only
            pass
        h.update(available=True, located_by=gpu.located_by, pci_bus_id=mine.get("pci_bus_id"))
        h["before"] = gpu.snapshot()
        gpu.watch_xids()
        self.nvml = gpu

    def health_finish(self) -> dict[str, Any]:
        h = self.health
        gpu = self.nvml
        if gpu is not None:
            h["after"] = gpu.snapshot()
            h["xid_events"] = gpu.drain_xids()
            h["xid_watch_error"] = gpu.events_error
            h["window"][1] = time.monotonic()
            log = read_kernel_log()
            xids = parse_kernel_xids(log.pop("text", ""))
            prefix = _pci_prefix(h.get("pci_bus_id"))
            if prefix:  # NVRM names the GPU by PCI domain:bus:device; keep this rank's only
                xids = [x for x in xids if _pci_prefix(x["pci"] + ".0") == prefix]
            log["xids"] = xids
            h["kernel_log"] = log
            try:
                gpu.nv.nvmlShutdown()
            except Exception:  # noqa: BLE001
                pass
        return h

    def small_messages(self, sizes: list[int]) -> dict[str, Any]:
        """Small all-reduces timed as nccl-tests does: one event pair around the whole loop of
        `iters` operations, no barrier or host work inside it. On GPUs the loop is also captured
        once as a CUDA graph (nccl-tests -G) and one replay is timed: that removes the host's
        per-call launch cost (torch's c10d adds ~15-20 us per eager call)."""
        rows = []
        iters = self.args.iters
        nccl, why = None, None
        for nbytes in sizes:
            numel = nbytes // 4
            buf = contribution(numel, self.rank, self.device) / 1024.0
            for _ in range(self.args.warmup):
                dist.all_reduce(buf)
            self.sync()
            eager = self.timed(lambda: dist.all_reduce(buf), iters)
            graph_s, graph_error, graph_empty = None, None, False
            graph = None
            if self.device.type == "cuda":
                # capture only records (no collective runs), so a rank whose capture fails
                # cannot leave a peer waiting; all ranks replay only if every capture worked
                try:
                    graph = torch.cuda.CUDAGraph()
                    with warnings.catch_warnings(record=True) as caught:
                        warnings.simplefilter("always")
                        with torch.cuda.graph(graph):
                            for _ in range(iters):
                                dist.all_reduce(buf)
                    graph_empty = any("graph is empty" in str(w.message).lower()
                                      for w in caught)
                except Exception as exc:  # noqa: BLE001 - capture unsupported: eager only
                    graph = None
                    graph_error = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
                captured = self.gather(graph is not None)
                if all(captured):
                    graph.replay()  # type: ignore[union-attr]
                    self.sync()
                    self.barrier()
                    start = torch.cuda.Event(enable_timing=True)
                    end = torch.cuda.Event(enable_timing=True)
                    start.record()
                    graph.replay()  # type: ignore[union-attr]
                    end.record()
                    end.synchronize()
                    graph_s = start.elapsed_time(end) / 1e3 / iters
                elif graph_error is None:
                    graph_error = "a peer rank could not capture the graph: eager only"
                del graph
            per_rank = self.gather([eager, graph_s, graph_empty])
            eager_max = max(p[0] for p in per_rank)
            graphs = [p[1] for p in per_rank]
            empty = any(p[2] for p in per_rank)
            graph_max = max(graphs) if all(g is not None for g in graphs) else None
            best = graph_max if graph_max is not None else eager_max
            rows.append({"bytes": nbytes, "time_us": best * 1e6,
                         "timer": "cuda-graph" if graph_max is not None else
                         ("cuda-events" if self.device.type == "cuda" else
                          "barrier+perf_counter"),
                         "eager_us": eager_max * 1e6,
                         "graph_us": graph_max * 1e6 if graph_max is not None else None,
                         "per_rank_eager_us": [p[0] * 1e6 for p in per_rank],
                         "per_rank_graph_us": [p[1] * 1e6 if p[1] is not None else None
                                               for p in per_rank],
                         "graph_error": graph_error, "graph_empty": empty})
            del buf
            if nbytes == sizes[0]:  # the communicator exists now (c10d used it)
                nccl, why = DirectNccl.open(self.backend, self.device)
                if not all(self.gather(nccl is not None)) and nccl is not None:
                    nccl, why = None, "a peer rank could not reach its NCCL communicator"
            rows[-1]["nccl"] = None
            if nccl is not None:
                count = self.args.repeats if nbytes == SMALL_JUDGE_BYTES else 1
                cycles = [self.direct_times(nccl, nbytes) for _ in range(count)]
                rows[-1]["nccl"] = merge_cycles(cycles)
                if count > 1:
                    rows[-1]["nccl_cycles"] = [
                        {m: {k: c[m][k] for k in CYCLE_KEYS} for m in MODES} for c in cycles]
        return {"op": "all_reduce", "dtype": "float32", "in_place": True,
                "warmup": self.args.warmup, "iters": iters,
                "direct": {"available": nccl is not None, "why": why,
                           "repeats": self.args.small_repeats,
                           "lib": nccl.path if nccl is not None else None,
                           "comm": "ProcessGroupNCCL._comm_ptr() of the default group",
                           "timing": "ncclAllReduce through ctypes on a stream of its own, "
                                     "timed as nccl-tests 2.19.6 does by default: host clock "
                                     "from before iters eager calls (or one replay of a CUDA "
                                     "graph of iters calls, -G 1) to the stream's end, / iters "
                                     "(eager_us, graph_us); event_*: the same between one CUDA "
                                     "event pair; each the lowest of repeats loops; per size 'nccl' holds in_place and "
                                     "out_of_place, the slowest rank's, with the timed sums "
                                     "checked; at the judged size the whole measurement "
                                     "runs cycles times (nccl_cycles: each cycle; nccl: "
                                     "their medians)",
                           "cycles": self.args.repeats, "judged_bytes": SMALL_JUDGE_BYTES},
                "timing": "one event pair around the whole loop of iters ops (nccl-tests); "
                          "time_us: the graph replay's per-op time when captured, else eager; "
                          "the slowest rank's; graph_empty: the capture held no GPU work (NCCL "
                          "enqueues none for an in-place all-reduce on one rank)",
                "sizes": rows}

    def direct_times(self, nccl: DirectNccl, nbytes: int) -> dict[str, Any]:
        """ncclAllReduce of `nbytes` float32, in place and out of place, on a stream of its own,
        timed as nccl-tests 2.19.6 does (its default, without -I: the host clock from before
        the loop of iters calls to after the stream has finished, divided by iters; with -G the
        same around the graph launch): eager_us / graph_us. The same loop and one replay are
        also timed between one CUDA event pair (event_eager_us / event_graph_us).
        The sums of what was timed are checked, so a fast path cannot time a no-op unseen: out
        of place the result is the exact sum after the loops and after the replays; in place
        the first call gives the exact sum and a replay (iters sums in a row) n^(iters-1) times
        it. The slowest rank's times; sums_ok only if every rank's were."""
        numel, iters = nbytes // 4, self.args.iters
        send = contribution(numel, self.rank, self.device)
        want = expected_sum(numel, self.world, self.device)
        stream = torch.cuda.Stream(self.device)
        out: dict[str, Any] = {}
        for m in MODES:
            buf = send.clone()
            dst = buf if m == "in_place" else torch.zeros_like(send)
            src = buf if m == "in_place" else send
            problems: list[str] = []
            res: dict[str, Any] = {"eager_us": None, "graph_us": None, "event_eager_us": None,
                                   "event_graph_us": None, "graph_empty": None,
                                   "graph_error": None}

            def expect(what: str, target: torch.Tensor, factor: float = 1.0) -> None:
                self.sync()
                if factor == 1.0:
                    ok = torch.equal(dst, target)
                else:
                    ok = bool(torch.allclose(dst.double(), target.double() * factor,
                                             rtol=1e-5, atol=0.0))
                if not ok:
                    bad = (dst.double() != target.double() * factor).nonzero()
                    i = int(bad[0]) if bad.numel() else -1
                    problems.append(f"rank {self.rank}: {what} wrong at index {i} "
                                    f"({dst[i].item() if i >= 0 else '?'}, should be "
                                    f"{target[i].item() * factor if i >= 0 else '?'})")

            def clocked(launch: Any, per: int) -> tuple[float, float]:
                """(host-clock us, event-pair us) per op of `launch`: each the lowest of
                --small-repeats runs of its own."""
                runs = [clocked_once(launch, per) for _ in range(self.args.small_repeats)]
                return min(r[0] for r in runs), min(r[1] for r in runs)

            def clocked_once(launch: Any, per: int) -> tuple[float, float]:
                self.sync()
                self.barrier()
                t0 = time.perf_counter()
                launch()
                stream.synchronize()
                host = (time.perf_counter() - t0) * 1e6 / per
                self.sync()
                self.barrier()
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record(stream)
                launch()
                end.record(stream)
                end.synchronize()
                return host, start.elapsed_time(end) * 1e3 / per
            try:
                with torch.cuda.stream(stream):
                    args = nccl.args(src, dst)
                    nccl.run(args, 1)
                    expect("first call", want)
                    nccl.run(args, self.args.warmup)
                    res["eager_us"], res["event_eager_us"] = clocked(
                        lambda: nccl.run(args, iters), iters)
                    if m == "out_of_place":
                        expect("after the eager loops", want)
            except Exception as exc:  # noqa: BLE001
                problems.append(" ".join(f"rank {self.rank}: {type(exc).__name__}: {exc}"
                                         .split())[:300])
            graph = None
            try:
                graph = torch.cuda.CUDAGraph()
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                        nccl.run(nccl.args(src, dst), iters)
                res["graph_empty"] = any("graph is empty" in str(w.message).lower()
                                         for w in caught)
            except Exception as exc:  # noqa: BLE001 - capture unsupported: eager only
                graph = None
                res["graph_error"] = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
            if all(self.gather(graph is not None)) and graph is not None:
                g = graph
                with torch.cuda.stream(stream):
                    g.replay()  # warm-up launch
                    buf.copy_(send)
                    if m == "out_of_place":
                        dst.zero_()
                    res["graph_us"], res["event_graph_us"] = clocked(g.replay, iters)
                    if m == "out_of_place":
                        expect("after the graph replays", want)
                    else:  # one more replay from the contribution: iters sums in a row
                        buf.copy_(send)
                        g.replay()
                        factor = float(self.world) ** (iters - 1)
                        if factor * 512 * self.world < 1e37:
                            expect("after a graph replay", want, factor)
            elif res["graph_error"] is None:
                res["graph_error"] = "a peer rank could not capture the graph: eager only"
            del graph
            res["problems"] = problems
            out[m] = res
        per_rank = self.gather(out)
        merged: dict[str, Any] = {}
        for m in MODES:
            rs = [p[m] for p in per_rank]
            worst: dict[str, Any] = {}
            for key in ("eager_us", "graph_us", "event_eager_us", "event_graph_us"):
                vals = [r[key] for r in rs]
                worst[key] = max(vals) if all(v is not None for v in vals) else None
                worst[f"per_rank_{key}"] = vals
            worst["graph_empty"] = any(r["graph_empty"] for r in rs)
            worst["graph_error"] = next((r["graph_error"] for r in rs if r["graph_error"]), None)
            problems = [p for r in rs for p in r["problems"]]
            worst["sums_ok"] = not problems
            if problems:
                worst["sums"] = "; ".join(problems[:4])
            elif m == "in_place" and self.world == 1:
                worst["sums"] = ("equal to the expected sum, trivially: at n=1 NCCL does no work "
                                 "for an in-place all-reduce (the buffer is the rank's own "
                                 "contribution)")
            else:
                worst["sums"] = (f"exact sum of {self.world} rank(s) after the first call, "
                                 + ("the eager loops and the graph replays" if m == "out_of_place"
                                    else f"and x{self.world}^{iters - 1} after the replay"))
            merged[m] = worst
        return merged

    def correctness_sizes(self) -> list[int]:
        big = max(1024, min(self.args.max_bytes, self.args.check_bytes) // 4)
        return [1023, big + 3]  # odd lengths: tails of every chunking scheme

    def software(self) -> dict[str, Any]:
        nccl = None
        if self.backend == "nccl":
            try:
                version = torch.cuda.nccl.version()
                nccl = ".".join(str(x) for x in version) if isinstance(version, tuple) \
                    else str(version)
            except Exception:  # noqa: BLE001 - a version string is informative only
                nccl = None
        driver = None
        smi = shutil.which("nvidia-smi")
        if smi:
            try:
                driver = subprocess.run(
                    [smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                    capture_output=True, text=True, timeout=30, check=False,
                ).stdout.split("\n")[0].strip() or None
            except (OSError, subprocess.TimeoutExpired):
                driver = None
        return {"python": platform.python_version(), "torch": torch.__version__,
                "cuda": torch.version.cuda, "nccl": nccl, "driver": driver,
                "hostname": socket.gethostname(), "kernel": platform.release()}


# ---------------------------------------------------------------------------- output


def timed_lines(record: dict[str, Any]) -> list[str]:
    """One line per judged item of a timed check: band, median, interval, every cycle."""
    out = []
    for c in record["checks"]:
        d = c.get("data") or {}
        items = d.get("per_rank") if c["name"] == "matmul-rate" else \
            d.get("per_ratio") if c["name"] == "small-message-time" else \
            d.get("sizes") if c["name"] == "bandwidth-verdict" else None
        if c["name"] == "nvml-clock-events":
            items = [dict(rank=k, **{kk[7:]: vv for kk, vv in v.items()
                                     if kk.startswith("judged_")})
                     for k, v in (d.get("per_rank") or {}).items()]
        for it in items or []:
            if not isinstance(it, dict) or "samples" not in it:
                continue
            label = it.get("ratio") if c["name"] == "small-message-time" else \
                human_bytes(it["bytes"]) if "bytes" in it else f"rank {it.get('rank')}"
            cycles = ", ".join(f"{x:.3g}" for x in it["samples"])
            lo, hi = it.get("low"), it.get("high")
            span = f"[{lo:.3g}, {hi:.3g}]" if lo is not None and hi is not None else "(none)"
            out.append(f"  {c['name']:<20} {str(label):<22} {it.get('band', '-'):<8} median "
                       f"{stats.fmt(it.get('statistic'))} interval {span} bound "
                       f"{stats.fmt(it.get('bound'))}; cycles: {cycles}")
    return out


def table(record: dict[str, Any]) -> str:
    out = []
    bw = record["bandwidth"]
    out.append(f"GPU preflight: {record['status']}   world_size={record['world_size']} "
               f"backend={record['backend']}   wall {record['wall_s']:.1f} s   "
               f"torch {record['software']['torch']} nccl {record['software']['nccl']}")
    out.append("")
    out.append(f"{'rank':>4}  {'host':<16} {'device':<8} {'name':<24} {'memory GiB':>10}  "
               f"{'pci':<13} {'numa':>4}  cpus")
    gpus = {g["rank"]: g for g in (record["topology"] or {}).get("gpus", [])}
    for r in record["ranks"]:
        g = gpus.get(r["rank"], {})
        out.append(f"{r['rank']:>4}  {r['hostname'][:16]:<16} {r['device']:<8} "
                   f"{str(r['name'])[:24]:<24} {str(r['total_memory_gib']):>10}  "
                   f"{str(r['pci_bus_id']):<13} {str(g.get('numa_node')):>4}  "
                   f"{g.get('cpu_affinity')}")
    out.append("")
    for c in record["checks"]:
        out.append(f"  {c['status']:<8} {c['name']:<22} {c['detail']}")
    spread = timed_lines(record)
    if spread:
        out.append("")
        out.append("timed checks: every cycle (the median and its interval are judged):")
        out.extend(spread)
    mm = record["matmul"]
    out.append("")
    ceiling = (f"{100 * mm['fraction_of_ceiling']:.0f}% of the {mm['ceiling_tflops']:g} TFLOP/s "
               f"ceiling" if mm.get("ceiling_tflops") else "no ceiling for this device")
    out.append(f"bf16 matmul {mm['n']}x{mm['n']}x{mm['n']}: slowest rank "
               f"{mm['min_tflops']:.4g} TFLOP/s (median of {mm.get('repeats', 1)} cycles) = "
               f"{ceiling}; max rel error "
               + ", ".join(f"{m['rel_error']:.2e}" if m["rel_error"] is not None else "nan"
                           for m in mm["per_rank"]))
    out.append("")
    out.append(f"all_reduce {bw['dtype']} in-place, warmup {bw['warmup']}, iters {bw['iters']}, "
               f"timer {bw['timer']}; time = slowest rank's average; algbw = bytes/time; "
               f"busbw = algbw*2(n-1)/n = algbw*{bw['busbw_factor']:.3g} (n={bw['n']})")
    out.append(f"{'bytes':>12} {'size':>9} {'time us':>11} {'algbw GB/s':>11} "
               f"{'busbw GB/s':>11} {'slowest':>7}")
    for row in bw["sizes"]:
        out.append(f"{row['bytes']:>12} {human_bytes(row['bytes']):>9} {row['time_us']:>11.2f} "
                   f"{row['algbw_GBps']:>11.2f} {row['busbw_GBps']:>11.2f} "
                   f"{row['slowest_rank']:>7}")
    if bw.get("note"):
        out.append(f"note: {bw['note']}")
    small = record.get("small_messages") or {}
    if small.get("sizes"):
        out.append("")
        out.append(f"small messages, {small['iters']} ops a loop, slowest rank: c10d = "
                   "torch.distributed, one event pair; nccl = ncclAllReduce on its "
                   "communicator, host clock to the stream's end, as nccl-tests:")
        theirs = {r["bytes"]: r for r in (small.get("nccl_tests") or {}).get("sizes", [])}

        def us(v: Any) -> str:
            return "-" if v is None else f"{v:.2f}"

        def pair(d: dict[str, Any], fmt: str) -> str:
            return "/".join(us(d.get(fmt.format(m))) for m in MODES)
        out.append(f"{'bytes':>12} {'c10d eager':>10} {'c10d graph':>10} "
                   f"{'nccl eager':>13} {'nccl graph':>13} {'nccl-tests':>13} "
                   f"{'nccl-tests -G':>13} {'nccl ev eager':>13} {'nccl ev graph':>13}"
                   "  (us; x/y = in place/out of place; ev = one event pair)")
        for row in small["sizes"]:
            g = us(row.get("graph_us")) + ("*" if row.get("graph_empty") else "")
            direct = {f"{m}_{k}": v for m, t in (row.get("nccl") or {}).items()
                      for k, v in t.items()}
            t = theirs.get(row["bytes"], {})
            out.append(f"{row['bytes']:>12} {row['eager_us']:>10.2f} {g:>10} "
                       f"{pair(direct, '{}_eager_us'):>13} {pair(direct, '{}_graph_us'):>13} "
                       f"{pair(t, 'nccl_tests_eager_{}_us'):>13} "
                       f"{pair(t, 'nccl_tests_graph_{}_us'):>13} "
                       f"{pair(direct, '{}_event_eager_us'):>13} "
                       f"{pair(direct, '{}_event_graph_us'):>13}")
        if any(row.get("graph_empty") for row in small["sizes"]):
            out.append("  * the captured CUDA graph held no GPU work")
        why = (small.get("direct") or {}).get("why")
        if why:
            out.append(f"  nccl: not timed directly: {why}")
    for note in record.get("not_applicable") or []:
        out.append(f"  N/A      {note['name']:<22} {note['detail']}")
    topo = record["topology"] or {}
    matrix = topo.get("matrix") or {}
    if matrix.get("links") or matrix.get("affinity"):
        out.append("")
        pairs = [f"{a}-{b} {link}" for a, row in matrix.get("links", {}).items()
                 for b, link in row.items() if a < b]
        out.append("topology (nvidia-smi topo -m): " + ("; ".join(pairs) or "no GPU pairs"))
        for dev, values in matrix.get("affinity", {}).items():
            out.append(f"  {dev}: " + ", ".join(f"{k} {v}" for k, v in values.items()))
    if topo.get("note"):
        out.append(f"topology: {topo['note']}")
    return "\n".join(out)


class _OneLineParser(argparse.ArgumentParser):
    """Bad input: one line `preflight: error: <what>`, exit 2 (no usage dump)."""

    def error(self, message: str) -> Any:  # type: ignore[override]
        print(f"preflight: error: {' '.join(message.split())}", file=sys.stderr, flush=True)
        raise SystemExit(2)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = _OneLineParser(description=__doc__.split("\n\n")[0],
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
                        "them, 'off'; auto: the samples/ folder beside this script on GPUs")
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


if __name__ == "__main__":
    sys.exit(main())
