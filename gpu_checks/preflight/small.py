"""Small messages: ncclAllReduce timed as nccl-tests does (ctypes on torch's own communicator,
host clock around the loop, eager and one CUDA graph replay), and nccl-tests' own output parsed."""

from __future__ import annotations

import ctypes
import re
import time
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from . import stats
from .allreduce import contribution, expected_sum
from .common import MODES, SMALL_JUDGE_BYTES, hook_delay_us, spin_us
from .state import Base

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
            old: Any = runs.setdefault(mode, {}).get(int(cells[0]))
            merged: dict[str, Any] = dict(new) if old is None else \
                {k: min(v, old[k]) for k, v in new.items() if not k.endswith("_cycles")}
            for k, v in new.items():  # every cycle too: the verdict compares distributions
                merged[f"{k}_cycles"] = (old or {}).get(f"{k}_cycles", []) + [v]
            runs[mode][int(cells[0])] = merged
    return runs


NCCL_FLOAT32, NCCL_SUM = 7, 0  # ncclDataType_t ncclFloat32, ncclRedOp_t ncclSum (nccl.h)


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
             maps: str | None = None) -> tuple[DirectNccl | None, str | None]:
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


class SmallPart(Base):

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
            eager = self.timed(lambda b=buf: dist.all_reduce(b), iters)
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
                                     "event pair; each the lowest of repeats loops; per size "
                                     "'nccl' holds in_place and out_of_place, the slowest "
                                     "rank's, with the timed sums "
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
