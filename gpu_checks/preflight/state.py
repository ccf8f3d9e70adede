"""The run's state shared by every part: ranks, backend, device, the process group and the
collectives every check uses (barrier, gather, timed)."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import tempfile
import time
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from .common import TEST_HOOKS

if TYPE_CHECKING:
    from .health import NvmlGpu


class Base:
    """Ranks, backend and device of this process; the collectives every part uses."""

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
