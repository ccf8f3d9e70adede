"""BF16 matmul: finite and correct against a float64 reference, and its rate against the
model's ceiling (BF16_CEILINGS), judged on the median of --repeats cycles."""

from __future__ import annotations

import math
import os
import time
from typing import Any

import torch

from . import stats
from .common import HOOK_NAN, check, hook_rank, timed_check
from .health import NVML_PERF_POLICY, LoadSampler
from .state import Base

BF16_CEILING_TFLOPS = 790.0  # H200, 8192^3 bf16 on random data, measured on NVIDIA H200s
#: Dense bf16 ceiling per device model, keyed by the name NVML (and torch) reports. H200: measured
#: on NVIDIA H200s (769-805 TFLOP/s on 8192^3 random data). The others: the vendor's dense bf16
#: datasheet figure x 0.8, the fraction the measured H200 reaches of its own datasheet figure
#: (790 / 989) -- leads, not readings. A model not in the table: matmul-rate is DEFERRED.
BF16_CEILINGS: dict[str, tuple[float, str]] = {
    "NVIDIA H200": (790.0, "measured on NVIDIA H200s (8192^3, random data)"),
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
MATMUL_REL_ERROR_BOUND = 1e-2  # bf16 operands and output: ~1e-3 expected; NaN never passes


class MatmulPart(Base):

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
