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
"""

from __future__ import annotations

import time

_T_START = time.perf_counter()  # wall time counts torch's import too

import argparse
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
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

SCHEMA = "imagekit.gpu-preflight/v1"
BF16_CEILING_TFLOPS = 790.0  # H200, 8192^3 bf16 on random data, measured on this workplace's H200s
MATMUL_REL_ERROR_BOUND = 1e-2  # bf16 operands and output: ~1e-3 expected; NaN never passes
HOOK_WRONG_RANK = "PREFLIGHT_TEST_WRONG_RANK"
HOOK_NAN = "PREFLIGHT_TEST_NAN"
TEST_HOOKS = (HOOK_WRONG_RANK, HOOK_NAN)
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
        self.hooks = {k: os.environ[k] for k in TEST_HOOKS if os.environ.get(k)}

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
        seconds = self.timed(lambda: torch.matmul(a2, b2, out=out), self.args.matmul_iters,
                             barrier=False)
        tflops = 2.0 * n**3 / seconds / 1e12
        return {"rank": self.rank, "finite": finite, "nonfinite_elements": nonfinite,
                "rel_error": rel if math.isfinite(rel) else None, "time_ms": seconds * 1e3,
                "tflops": tflops}

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
            mine = self.timed(lambda: dist.all_reduce(buf), self.args.iters)
            times = torch.tensor([mine], dtype=torch.float64, device=self.device)
            slowest = times.clone()
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
            per_rank = [t[0] for t in self.gather([mine])]
            seconds = float(slowest.item())
            algbw, busbw = bandwidths(numel * 4, seconds, self.world)
            rows.append({"bytes": numel * 4, "elements": numel, "time_us": seconds * 1e6,
                         "per_rank_time_us": [t * 1e6 for t in per_rank],
                         "slowest_rank": max(range(self.world), key=lambda r: per_rank[r]),
                         "algbw_GBps": algbw, "busbw_GBps": busbw})
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
        if a.min_tflops is not None:
            slow = [m for m in mm if m["tflops"] < a.min_tflops]
            self.checks.append(check(
                "matmul-rate", "FAIL" if slow else "PASS",
                (f"rank {slow[0]['rank']}: {slow[0]['tflops']:.1f} TFLOP/s < {a.min_tflops}"
                 if slow else f"slowest rank {min_tflops:.1f} TFLOP/s >= {a.min_tflops}")))

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
        topo = self.topology(ranks) if self.rank == 0 else None

        if self.hooks:
            self.checks.append(check("test-hooks", "FAIL",
                                     f"test-only fault hooks active ({', '.join(self.hooks)}): "
                                     "this record proves nothing about the hardware",
                                     hooks=self.hooks))
        status = worst([c["status"] for c in self.checks])
        record = {
            "schema": SCHEMA,
            "status": status,
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
                       "ceiling_tflops": a.tflops_ceiling,
                       "fraction_of_ceiling": min_tflops / a.tflops_ceiling},
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
            "topology": topo,
            "test_hooks": self.hooks,
            "error": None,
        }
        return record

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
    mm = record["matmul"]
    out.append("")
    out.append(f"bf16 matmul {mm['n']}x{mm['n']}x{mm['n']}: slowest rank "
               f"{mm['min_tflops']:.4g} TFLOP/s = {100 * mm['fraction_of_ceiling']:.0f}% of the "
               f"{mm['ceiling_tflops']:g} TFLOP/s ceiling; max rel error "
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


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
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
    p.add_argument("--tflops-ceiling", type=float, default=BF16_CEILING_TFLOPS)
    p.add_argument("--min-tflops", type=float, default=None,
                   help="FAIL when a rank's bf16 rate is below this (not checked by default)")
    p.add_argument("--timeout-s", type=int, default=300, help="collective timeout")
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
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))
    try:
        for hook in TEST_HOOKS:
            hook_rank(hook)
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
