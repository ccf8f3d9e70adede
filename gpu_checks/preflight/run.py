"""The whole preflight: every part in order, one record."""

from __future__ import annotations

import datetime as dt
import os
import time
from pathlib import Path
from typing import Any

from . import T_START
from .allreduce import AllReducePart
from .common import ENV_PREFIXES, SCHEMA, busbw_factor, check, human_bytes, size_list, worst
from .devices import DevicesPart, numa_of
from .health import HealthPart
from .health_verdicts import health_checks
from .matmul import MatmulPart
from .small import SmallPart, parse_nccl_tests
from .verdicts import (
    bandwidth_verdict,
    baseline_key,
    default_baselines,
    find_baseline,
    small_message_verdict,
)


class Preflight(DevicesPart, HealthPart, MatmulPart, AllReducePart, SmallPart):
    """Every check in order; `run()` returns the record (rank 0's is complete)."""

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
            "wall_s": round(time.perf_counter() - T_START, 3),
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
            found = default_baselines()
            where = (str(found) if found else "") \
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
        path, baseline, how = find_baseline(baseline_key(record), Path(where) if where else None)
        source = f"{path.name} ({how})" if path is not None else how
        record["baseline"] = {"path": str(path) if path else None, "how": how,
                              "key": list(baseline_key(record))}
        self.checks.append(bandwidth_verdict(record, baseline, source, a.baseline_tolerance,
                                             confidence=a.confidence))
