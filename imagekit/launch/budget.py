"""startupProbe budget from observed startup phases, with a margin.

The record's first SGLang start: weight loading 1,481.82 s on the slowest rank plus 84.7 s of
decode CUDA graph capture is already 1,566.5 s; with a 25 % margin and a minute for process start
it needs ~34 minutes, so a 30-minute startupProbe could not cover it even before the piecewise
graphs (42 buckets) began. The budget is therefore derived from what a log showed, never from
"GPU memory got allocated". A phase that began but did not finish makes the derived number a
lower bound: enough to call a too-small budget FAIL, not enough to call any budget PASS.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field

from imagekit.launch.startup_log import StartupReport
from imagekit.results import CheckResult, Status

DEFAULT_MARGIN = 0.25
DEFAULT_OVERHEAD_S = 60.0


class RequiredStartup(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    observed_seconds: float
    required_seconds: int
    complete: bool  # False: some phase began and never finished; required is a lower bound
    phases: dict[str, float]
    missing: list[str] = []


class ProbeBudget(BaseModel):
    """startupProbe fields: the kubelet allows failure_threshold × period_seconds."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    period_seconds: int = Field(10, ge=1)
    failure_threshold: int = Field(ge=1)
    timeout_seconds: int = Field(5, ge=1)

    @property
    def total_seconds(self) -> int:
        return self.period_seconds * self.failure_threshold

    @classmethod
    def covering(cls, seconds: float, period_seconds: int = 10) -> ProbeBudget:
        return cls(period_seconds=period_seconds,
                   failure_threshold=max(1, math.ceil(seconds / period_seconds)))


def required_startup_seconds(report: StartupReport, margin: float = DEFAULT_MARGIN,
                             overhead_s: float = DEFAULT_OVERHEAD_S) -> RequiredStartup:
    """Sum of the phases the log showed (slowest rank each), times (1 + margin), plus overhead."""
    phases: dict[str, float] = {}
    missing: list[str] = []
    if report.weight_load_seconds is not None:
        phases["weight_load"] = report.weight_load_seconds
    else:
        missing.append("weight_load (no 'Load weight end' in the log)")
    if report.cuda_graph_seconds is not None:
        phases["cuda_graph_capture"] = report.cuda_graph_seconds
    if report.piecewise.began:
        if report.piecewise.seconds is not None:
            phases["piecewise_cuda_graph_capture"] = report.piecewise.seconds
        else:
            missing.append(f"piecewise_cuda_graph_capture (began over "
                           f"{len(report.piecewise.num_tokens)} token buckets, never finished)")
    observed = sum(phases.values())
    required = math.ceil(observed * (1 + margin) + overhead_s)
    return RequiredStartup(observed_seconds=round(observed, 3), required_seconds=required,
                           complete=not missing, phases=phases, missing=missing)


def startup_budget_check(report: StartupReport, configured_seconds: int,
                         margin: float = DEFAULT_MARGIN,
                         overhead_s: float = DEFAULT_OVERHEAD_S) -> CheckResult:
    """Is a startupProbe of `configured_seconds` enough for what this log showed?"""
    need = required_startup_seconds(report, margin, overhead_s)
    data = {"configured_seconds": configured_seconds, **need.model_dump()}
    phase_text = ", ".join(f"{k} {v:.1f} s" for k, v in need.phases.items()) or "no phases"
    if configured_seconds < need.required_seconds:
        bound = "at least " if not need.complete else ""
        return CheckResult(
            name="startup_budget", status=Status.FAIL, data=data,
            detail=f"startupProbe allows {configured_seconds} s but the start needs {bound}"
                   f"{need.required_seconds} s ({phase_text}; margin {margin:.0%} + "
                   f"{overhead_s:.0f} s)")
    if not need.complete:
        return CheckResult(
            name="startup_budget", status=Status.DEFERRED, data=data,
            detail=f"cannot confirm {configured_seconds} s is enough: "
                   f"{'; '.join(need.missing)}")
    return CheckResult(
        name="startup_budget", status=Status.PASS, data=data,
        detail=f"startupProbe {configured_seconds} s covers {need.required_seconds} s "
               f"({phase_text}; margin {margin:.0%} + {overhead_s:.0f} s)")
