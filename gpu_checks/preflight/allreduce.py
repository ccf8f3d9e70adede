"""All-reduce: exact sums of every rank's contribution (odd lengths), and algbw/busbw per size
with nccl-tests' definitions."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from . import stats
from .common import HOOK_WRONG_RANK, bandwidths, hook_rank
from .state import Base
from .verdicts import BASELINE_MIN_BYTES


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


class AllReducePart(Base):

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
        mine: dict[str, Any] = {"rank": self.rank, "first_bad_index": first,
                                "bad_elements": int(bad.shape[0])}
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
            # judged sizes (>= 64 MiB, n >= 2) repeat --repeats cycles: the baseline verdict
            # judges each cycle's busbw (the slowest rank's); the row keeps per-rank medians
            count = self.args.repeats if self.world > 1 and nbytes >= BASELINE_MIN_BYTES else 1
            cycles = []
            for _ in range(count):
                mine = self.timed(lambda b=buf: dist.all_reduce(b), self.args.iters)
                cycles.append([t[0] for t in self.gather([mine])])
            per_rank = [stats.median(c[r] for c in cycles) for r in range(self.world)]
            seconds = max(per_rank)
            algbw, busbw = bandwidths(numel * 4, seconds, self.world)
            rows.append({"bytes": numel * 4, "elements": numel, "time_us": seconds * 1e6,
                         "per_rank_time_us": [t * 1e6 for t in per_rank],
                         "slowest_rank": max(range(self.world), key=lambda r: per_rank[r]),
                         "algbw_GBps": algbw, "busbw_GBps": busbw})
            if count > 1:
                rows[-1]["busbw_cycles_GBps"] = [
                    bandwidths(numel * 4, max(c), self.world)[1] for c in cycles]
            del buf
        return rows

    def correctness_sizes(self) -> list[int]:
        big = max(1024, min(self.args.max_bytes, self.args.check_bytes) // 4)
        return [1023, big + 3]  # odd lengths: tails of every chunking scheme
