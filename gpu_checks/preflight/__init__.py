"""GPU preflight: device inventory, BF16 matmul correctness and rate, all-reduce correctness and
bandwidth, topology, NVML health, small-message timing. One JSON record plus a readable table.

Why this exists: a node can report the right GPU count and still compute garbage (a bad HBM
stack, a flaky NVLink lane, a wrong driver) -- a served model then answers nonsense rather than
crashing. This package proves, before any model is loaded, that every GPU is the model and size
we expect, that a BF16 matrix product gives finite and correct numbers, and that NCCL all-reduce
sums every element exactly, and it measures the all-reduce bandwidth with nccl-tests'
definitions.

A standalone package: torch, the standard library and (optionally) nvidia-ml-py, relative imports
only, no imagekit import. So it runs inside any engine image from a plain directory -- a
ConfigMap mounted with items laid out as `preflight/<module>.py` -- with one process per GPU::

    cd /imagekit && python -m torch.distributed.run --nproc-per-node 8 -m preflight --json out.json

or plainly (`python -m preflight`) as a world of one; in a checkout, from `gpu_checks`
(`make gpu-preflight` does that). imagekit imports it as `preflight` (its stats
and fit modules are imagekit's too). Backend `nccl` on GPUs, `gloo` on CPUs, same code path. It
never changes a GPU setting and never scrubs the environment: the NVLink-multicast-off variables
(NCCL_NVLS_ENABLE=0, ...) reach NCCL and `nvidia-smi` as they came.

Modules: `common` (record pieces, sizes, hooks), `fit` (image-to-GPU fit rules, stdlib only),
`stats` (median of cycles and its interval, stdlib only), `state` (ranks, process group),
`devices`, `health` (NVML readings), `health_verdicts` (the nvml-* checks), `matmul`,
`allreduce`, `small` (small messages), `verdicts` (baseline and nccl-tests comparisons), `table`,
`run` (the whole preflight), `cli` (arguments, exit status), `__main__`. Importing this package
imports nothing but the standard library.

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
median of the cycles with its order-statistic interval (stats.py): FAIL only when the whole
interval is past the bound, PASS "within noise" when it straddles it, DEFERRED when too few
cycles give no interval. Every cycle's value is in the record.
"""

from __future__ import annotations

import time

#: wall time counts torch's import too: `python -m preflight` imports this package first
T_START = time.perf_counter()
