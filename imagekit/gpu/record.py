"""The GPU preflight record (`python -m preflight --json`), as a strict pydantic model.

Why strict: the record is evidence that a node's GPUs compute and communicate correctly. A record
that has been edited, truncated or produced by another version must not be mistaken for one; so
unknown fields are refused, and the numbers must agree with each other (busbw = algbw × 2(n−1)/n
with n = world_size, algbw = bytes / time, the status = the worst of the checks, no PASS while a
test-only fault hook was active).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from imagekit.errors import InvalidInput
from imagekit.evidence.kinds import NoiseVerdict
from imagekit.results import CheckResult, Status, overall

SCHEMA = "imagekit.gpu-preflight/v1"
_REL = 1e-6  # numbers are floats written by json; agreement to a millionth is plenty


def busbw_factor(n: int) -> float:
    """nccl-tests' all-reduce bus factor 2(n−1)/n (0 at n=1: one rank drives no link)."""
    if n < 1:
        raise ValueError(f"world size must be >= 1, not {n}")
    return 2.0 * (n - 1) / n


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=_REL, abs_tol=1e-12)


class _Fact(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Software(_Fact):
    python: str
    torch: str
    cuda: str | None
    nccl: str | None
    driver: str | None
    hostname: str
    kernel: str


class Expectations(_Fact):
    model: str | None
    gpus: int | None
    min_memory_gib: float | None
    min_tflops: float | None


class RankInfo(_Fact):
    rank: int = Field(ge=0)
    local_rank: int = Field(ge=0)
    hostname: str
    device: str
    visible_devices: int = Field(ge=0)
    name: str
    total_memory_bytes: int | None
    total_memory_gib: float | None
    compute_capability: str | None
    multiprocessors: int | None
    uuid: str | None
    pci_bus_id: str | None


class MatmulRank(_Fact):
    rank: int = Field(ge=0)
    finite: bool
    nonfinite_elements: int = Field(ge=0)
    rel_error: float | None
    time_ms: float = Field(gt=0)
    tflops: float = Field(gt=0)
    #: every cycle's rate (--repeats); tflops is their median. Absent in records before repeats.
    tflops_cycles: list[float] = []


class Matmul(_Fact):
    dtype: Literal["bfloat16"]
    n: int = Field(ge=1)
    reference: Literal["float64"]
    rel_error_definition: str
    rel_error_bound: float = Field(gt=0)
    warmup: int = Field(ge=0)
    iters: int = Field(ge=1)
    per_rank: list[MatmulRank]
    min_tflops: float
    #: from the table keyed by the NVML name (or --tflops-ceiling); None: a model not in it
    ceiling_tflops: float | None = Field(default=None, gt=0)
    ceiling_source: str | None = None
    fraction_of_ceiling: float | None
    repeats: int = Field(default=1, ge=1)
    tflops_definition: str | None = None


class CorrectnessRank(_Fact):
    rank: int = Field(ge=0)
    first_bad_index: int = Field(ge=-1)
    bad_elements: int = Field(ge=0)
    got: float | None = None
    expected: float | None = None


class WrongContributor(_Fact):
    rank: int = Field(ge=0)
    index: int = Field(ge=0)
    sent: float
    should_send: float


class Correctness(_Fact):
    elements: int = Field(ge=1)
    bytes: int = Field(ge=4)
    per_rank: list[CorrectnessRank]
    wrong_contributors: list[WrongContributor]


class BandwidthRow(_Fact):
    bytes: int = Field(ge=4)
    elements: int = Field(ge=1)
    time_us: float = Field(gt=0)
    per_rank_time_us: list[float]
    slowest_rank: int = Field(ge=0)
    algbw_GBps: float = Field(ge=0)
    busbw_GBps: float = Field(ge=0)
    #: judged sizes (>= 64 MiB, n >= 2): each cycle's busbw (the slowest rank's)
    busbw_cycles_GBps: list[float] = []


class Bandwidth(_Fact):
    op: Literal["all_reduce"]
    reduce_op: Literal["sum"]
    dtype: Literal["float32"]
    in_place: bool
    warmup: int = Field(ge=0)
    iters: int = Field(ge=1)
    timer: Literal["cuda-events", "barrier+perf_counter"]
    time_definition: str
    algbw_definition: str
    busbw_formula: Literal["algbw * 2*(n-1)/n"]
    n: int = Field(ge=1)
    busbw_factor: float
    note: str | None
    sizes: list[BandwidthRow]

    @model_validator(mode="after")
    def _consistent(self) -> Bandwidth:
        if not _close(self.busbw_factor, busbw_factor(self.n)):
            raise ValueError(f"busbw_factor {self.busbw_factor} is not 2(n-1)/n for n={self.n}")
        for row in self.sizes:
            if row.bytes != row.elements * 4:
                raise ValueError(f"{row.bytes} bytes is not {row.elements} float32 elements")
            if not _close(row.algbw_GBps, row.bytes / (row.time_us * 1e-6) / 1e9):
                raise ValueError(f"algbw at {row.bytes} B is not bytes/time")
            if not _close(row.busbw_GBps, row.algbw_GBps * self.busbw_factor):
                raise ValueError(f"busbw at {row.bytes} B is not algbw*2(n-1)/n")
            if len(row.per_rank_time_us) != self.n or row.slowest_rank >= self.n:
                raise ValueError(f"per-rank times at {row.bytes} B do not cover n={self.n}")
            if not _close(row.time_us, max(row.per_rank_time_us)):
                raise ValueError(f"time at {row.bytes} B is not the slowest rank's")
        return self


class DirectTime(_Fact):
    """One mode (in place / out of place) of ncclAllReduce called on torch's own communicator:
    eager_us / graph_us timed as nccl-tests does (host clock around the loop to the stream's
    end), event_*: between one CUDA event pair; the slowest rank's; the timed sums checked."""

    eager_us: float | None = Field(default=None, ge=0)
    graph_us: float | None = Field(default=None, ge=0)
    event_eager_us: float | None = Field(default=None, ge=0)
    event_graph_us: float | None = Field(default=None, ge=0)
    per_rank_eager_us: list[float | None] = []
    per_rank_graph_us: list[float | None] = []
    per_rank_event_eager_us: list[float | None] = []
    per_rank_event_graph_us: list[float | None] = []
    graph_empty: bool = False
    graph_error: str | None = None
    sums_ok: bool
    sums: str


class CycleTime(_Fact):
    """One cycle of the direct ncclAllReduce timing at the judged size."""

    eager_us: float | None = Field(default=None, ge=0)
    graph_us: float | None = Field(default=None, ge=0)
    event_eager_us: float | None = Field(default=None, ge=0)
    event_graph_us: float | None = Field(default=None, ge=0)
    sums_ok: bool


class DirectNccl(_Fact):
    """Whether the nccl-tests-like timing ran, and why not (gloo, no _comm_ptr(), no libnccl)."""

    available: bool
    why: str | None
    repeats: int = Field(default=1, ge=1)
    #: --repeats cycles of the whole measurement at the judged size (judged_bytes)
    cycles: int = Field(default=1, ge=1)
    judged_bytes: int | None = None
    lib: str | None
    comm: str
    timing: str


class SmallMessageRow(_Fact):
    bytes: int = Field(ge=4)
    time_us: float = Field(gt=0)
    timer: Literal["cuda-graph", "cuda-events", "barrier+perf_counter"]
    eager_us: float = Field(gt=0)
    graph_us: float | None
    per_rank_eager_us: list[float]
    per_rank_graph_us: list[float | None]
    graph_error: str | None
    graph_empty: bool = False
    #: ncclAllReduce on the process group's communicator (None where it could not run)
    nccl: dict[Literal["in_place", "out_of_place"], DirectTime] | None = None
    #: at the judged size: each cycle's times (nccl then holds their medians)
    nccl_cycles: list[dict[Literal["in_place", "out_of_place"], CycleTime]] = []


class SmallMessages(_Fact):
    """Small all-reduces: torch c10d's times (one event pair around the loop; context) and,
    per row, ncclAllReduce on the same communicator timed as nccl-tests does (`nccl`)."""

    op: Literal["all_reduce"]
    dtype: Literal["float32"]
    in_place: bool
    warmup: int = Field(ge=0)
    iters: int = Field(ge=1)
    timing: str
    sizes: list[SmallMessageRow]
    direct: DirectNccl | None = None
    #: the same sizes from nccl-tests' all_reduce_perf on the same machine, when given
    nccl_tests: dict[str, Any] | None = None


class NotApplicable(_Fact):
    """A check that does not apply on this hardware, and why (never counted as a PASS)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    name: str
    status: Literal["N/A"]
    detail: str


class BaselineRef(_Fact):
    path: str | None
    how: str
    key: list[Any]


class TopoMatrix(_Fact):
    devices: list[str]
    links: dict[str, dict[str, str]]
    affinity: dict[str, dict[str, str]]


class TopoGpu(_Fact):
    rank: int = Field(ge=0)
    hostname: str
    pci_bus_id: str | None
    numa_node: int | None
    cpu_affinity: str | None
    source: str


class Topology(_Fact):
    nvidia_smi: str | None
    matrix: TopoMatrix | None
    raw: str | None
    gpus: list[TopoGpu]
    note: str | None


class PreflightRecord(_Fact):
    """One preflight run. An ERROR record (the run broke) carries only schema, status, error."""

    schema_: Literal["imagekit.gpu-preflight/v1"] = Field(alias="schema")
    status: Status
    error: str | None = None
    started: str | None = None
    finished: str | None = None
    wall_s: float | None = None
    wall_definition: str | None = None
    world_size: int | None = Field(default=None, ge=1)
    backend: Literal["nccl", "gloo"] | None = None
    device_type: Literal["cuda", "cpu"] | None = None
    software: Software | None = None
    env: dict[str, str] = {}
    expectations: Expectations | None = None
    ranks: list[RankInfo] = []
    checks: list[CheckResult] = []
    matmul: Matmul | None = None
    allreduce_correctness: list[Correctness] = []
    bandwidth: Bandwidth | None = None
    topology: Topology | None = None
    small_messages: SmallMessages | None = None
    #: NVML readings per rank as read (counters differ by GPU and driver: kept as data)
    health: dict[str, Any] | None = None
    not_applicable: list[NotApplicable] = []
    baseline: BaselineRef | None = None
    test_hooks: dict[str, str] = {}

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="after")
    def _consistent(self) -> PreflightRecord:
        if self.status is Status.ERROR and not self.checks:
            if not self.error:
                raise ValueError("an ERROR record without checks must say its error")
            return self
        missing = [name for name in ("world_size", "backend", "software", "matmul", "bandwidth")
                   if getattr(self, name) is None]
        if missing or not self.checks:
            raise ValueError(f"a finished record needs {', '.join(missing) or 'checks'}")
        assert self.world_size is not None and self.bandwidth is not None
        assert self.matmul is not None
        if self.status is not overall(self.checks):
            raise ValueError(f"status {self.status} is not the worst of its checks "
                             f"({overall(self.checks)})")
        if [r.rank for r in self.ranks] != list(range(self.world_size)):
            raise ValueError(f"ranks do not list 0..{self.world_size - 1} once each")
        if self.bandwidth.n != self.world_size:
            raise ValueError(f"bandwidth n={self.bandwidth.n} is not world_size "
                             f"{self.world_size}")
        if len(self.matmul.per_rank) != self.world_size:
            raise ValueError("matmul results do not cover every rank")
        if self.test_hooks and self.status is Status.PASS:
            raise ValueError("a record made with test-only fault hooks cannot PASS")
        return self

    # -- convenient views ---------------------------------------------------------------

    @property
    def peak(self) -> BandwidthRow | None:
        """The size with the highest bus bandwidth (algbw when n = 1, where busbw is 0)."""
        if self.bandwidth is None or not self.bandwidth.sizes:
            return None
        key = "busbw_GBps" if (self.world_size or 1) > 1 else "algbw_GBps"
        return max(self.bandwidth.sizes, key=lambda row: getattr(row, key))

    @property
    def gpu_names(self) -> list[str]:
        return sorted({r.name for r in self.ranks})


#: the preflight's timed checks and where each keeps its judged items in its data
TIMED_ITEMS = {"matmul-rate": ("per_rank", "rank"), "small-message-time": ("per_ratio", "ratio"),
               "bandwidth-verdict": ("sizes", "bytes")}


def timed_verdicts(record: PreflightRecord) -> list[NoiseVerdict]:
    """Every judged item of the record's timed checks, typed: its cycles, median, interval."""
    out: list[NoiseVerdict] = []

    def add(check: str, item: str, d: dict[str, Any]) -> None:
        if "band" not in d or "samples" not in d:
            return
        out.append(NoiseVerdict(
            check=check, item=item, band=d["band"], statistic=d.get("statistic"),
            low=d.get("low"), high=d.get("high"), bound=d.get("bound"),
            better=d.get("better"), samples=list(d.get("samples") or []),
            baseline_samples=list(d.get("baseline_samples") or []),
            confidence=d.get("confidence"), statistic_definition=d.get("statistic_definition"),
            interval_definition=d.get("interval_definition"), why=d.get("why")))

    for c in record.checks:
        if c.name in TIMED_ITEMS:
            key, label = TIMED_ITEMS[c.name]
            for it in c.data.get(key) or []:
                if isinstance(it, dict):
                    add(c.name, f"{label} {it.get(label)}", it)
        elif c.name == "nvml-clock-events":
            for rank, d in (c.data.get("per_rank") or {}).items():
                if isinstance(d, dict):
                    add(c.name, f"rank {rank}", {k[7:]: v for k, v in d.items()
                                                 if k.startswith("judged_")})
    return out


def load_record(path: Path) -> PreflightRecord:
    """Read and validate a record; anything else is one-line InvalidInput (exit 2)."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise InvalidInput(f"cannot read GPU preflight record: {exc.strerror}",
                           where=str(path)) from None
    try:
        data: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"not JSON: {exc.msg} at line {exc.lineno}", where=str(path)) \
            from None
    try:
        return PreflightRecord.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(part) for part in first["loc"]) or "record"
        raise InvalidInput(f"not a GPU preflight record ({exc.error_count()} problem(s)); "
                           f"{loc}: {first['msg']}", where=str(path)) from None
