"""`cluster gpu-preflight --nodes N`: the verdict on a many-Pod preflight run.

`imagekit.cluster.gpujob` runs the job and brings back every Pod's log and the JSON record
(written by the world's rank 0); here the record goes into evidence under the image digest
through `imagekit.gpu.record_preflight` (kind `gpu-preflight`, beside the job's own `gpu-job`
attempt), and three checks are added on top of the record's own:

- `world`: the record covers every rank the job was asked for (N × K Pods × ranks per Pod),
  each rank once — a world that silently came up smaller is no pass;
- `allreduce_every_rank`: every rank reported every correctness buffer with no bad element;
- `busbw_formula`: every size's busbw = algbw × 2(n-1)/n for the record's n.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass
from pathlib import Path

from imagekit.cluster.gpujob import GpuJobOptions, GpuJobRun, run_gpu_job
from imagekit.evidence import EvidenceStore
from imagekit.gpu import PreflightRecord, RecordedPreflight, busbw_factor, record_preflight
from imagekit.kube import Kube
from imagekit.oci import ImageReference
from imagekit.results import CheckReport, CheckResult, Status


@dataclass
class GpuJobResult:
    report: CheckReport
    run: GpuJobRun
    recorded: RecordedPreflight | None


def record_checks(record: PreflightRecord, world: int) -> list[CheckResult]:
    """The job-level checks on a validated record (pure; unit-tested with bad records)."""
    checks: list[CheckResult] = []
    ranks = sorted(r.rank for r in record.ranks)
    if record.world_size == world and ranks == list(range(world)):
        checks.append(CheckResult(name="world", status=Status.PASS,
                                  detail=f"{world} rank(s) reported, each once",
                                  data={"world_size": world,
                                        "hosts": sorted({r.hostname for r in record.ranks})}))
    else:
        checks.append(CheckResult(name="world", status=Status.FAIL,
                                  detail=f"asked for a world of {world}; the record has "
                                         f"world_size {record.world_size} and ranks {ranks}",
                                  data={"world_size": record.world_size, "ranks": ranks}))
    bad = [(c.bytes, r.rank) for c in record.allreduce_correctness for r in c.per_rank
           if r.first_bad_index != -1 or r.bad_elements]
    seen = [sorted(r.rank for r in c.per_rank) for c in record.allreduce_correctness]
    if not record.allreduce_correctness:
        checks.append(CheckResult(name="allreduce_every_rank", status=Status.FAIL,
                                  detail="the record has no all-reduce correctness buffers"))
    elif bad or any(s != list(range(world)) for s in seen):
        checks.append(CheckResult(name="allreduce_every_rank", status=Status.FAIL,
                                  detail=f"bad (bytes, rank): {bad}; ranks per buffer: {seen}"))
    else:
        checks.append(CheckResult(
            name="allreduce_every_rank", status=Status.PASS,
            detail=f"{len(record.allreduce_correctness)} buffer(s) exact on all {world} ranks"))
    bw = record.bandwidth
    if bw is None or not bw.sizes:
        checks.append(CheckResult(name="busbw_formula", status=Status.FAIL,
                                  detail="the record has no bandwidth rows"))
    else:
        factor = busbw_factor(bw.n)
        wrong = [row.bytes for row in bw.sizes
                 if not math.isclose(row.busbw_GBps, row.algbw_GBps * factor, rel_tol=1e-9,
                                     abs_tol=1e-12)]
        checks.append(CheckResult(
            name="busbw_formula", status=Status.FAIL if wrong or bw.n != world else Status.PASS,
            detail=(f"busbw = algbw x 2(n-1)/n = algbw x {factor:.3g} at n={bw.n} for all "
                    f"{len(bw.sizes)} sizes") if not wrong and bw.n == world else
            f"n={bw.n} (world {world}); sizes off the formula: {wrong}",
            data={"n": bw.n, "factor": factor,
                  "rows": [{"bytes": r.bytes, "algbw_GBps": r.algbw_GBps,
                            "busbw_GBps": r.busbw_GBps} for r in bw.sizes]}))
    return checks


def gpu_preflight_job(kube: Kube, pinned: ImageReference, options: GpuJobOptions,
                      store: EvidenceStore, submit: bool) -> GpuJobResult:
    run = run_gpu_job(kube, pinned, options, store, submit)
    checks = list(run.checks)
    recorded = None
    if run.submitted:
        if run.record_json is None:
            checks.append(CheckResult(name="preflight_record", status=Status.FAIL,
                                      detail="no Pod's log carries the preflight JSON record"))
        else:
            with tempfile.TemporaryDirectory(prefix="imagekit-gpujob-") as tmp:
                path = Path(tmp) / "preflight.json"
                path.write_bytes(run.record_json)
                log = Path(tmp) / "pods.log"
                log.write_text("".join(f"===== {pod} =====\n{text}\n"
                                       for pod, text in sorted(run.logs.items())))
                recorded = record_preflight(path, store, digest=pinned.digest,
                                            name=None, log=log)
            record = recorded.record
            checks.append(CheckResult(name="preflight_record", status=record.status,
                                      detail=f"record {record.status} (world "
                                             f"{record.world_size}); evidence "
                                             f"{recorded.evidence}"))
            checks.extend(record.checks)   # the script's own: matmul, all-reduce, ...
            checks.extend(record_checks(record, options.pods * options.nproc_per_pod))
    report = CheckReport.of(str(pinned), checks, digest=str(pinned.digest),
                            evidence=run.evidence)
    return GpuJobResult(report=report, run=run, recorded=recorded)
