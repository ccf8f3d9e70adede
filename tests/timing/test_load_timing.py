"""The load client's timings against a known truth: the reference server (truthserver/main.go)
answers on a fixed schedule and records when each request arrived and each chunk was flushed;
the goal is the client's TTFT, ITL, TPOT and E2E p50/p90/p99 within 2 % or 1 ms (whichever is
larger) of the server's, and an open-loop round's arrival rate within 2 % of its schedule.
Every figure of every round is held to that bound, unless the round says it was client-bound
(its reads came a whole gap late) or some of its events shared a read with the next (at most
5 % of them): the medians, TPOT and E2E are then still held. The whole
table is printed, and `make bench` adds 256 in flight and vllm bench serve beside it.

`serial`: a timing figure taken while other tests load the machine measures that load, not the
client; these run alone, after the parallel phase."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from imagekit.acceptance import client, kernel_stamps
from imagekit.acceptance.client import ChatClient
from imagekit.acceptance.load import BodyFactory, Calibration, arrivals, run_round
from imagekit.acceptance.models import RoundResult, RoundSpec
from tests.conftest import IN_CI
from tests.timing import runs, truth

pytestmark = pytest.mark.serial

TTFT_MS, ITL_MS, TOKENS = 50.0, 10.0, 32
#: how long the client's event loop is held at a time in the client-bound case: three gaps, so
#: a read waits past a whole gap at p99 whatever the phase of the hold against the arrivals
#: (at 15 ms, 1.5 gaps, its p99 sat at 9.4-10.0 ms, on the 10 ms bound, and failed as often
#: as it passed)
HOLD_S = 3 * ITL_MS / 1e3
#: (concurrency, requests, Poisson rate): ~5 s at c=1, about a second each above; the open-loop
#: rate is the c=64 round's throughput (64 in flight / 0.36 s per request), so as many
#: requests are in flight as in the heaviest closed round
ROUNDS = [(1, 12, None), (16, 64, None), (64, 256, None), (64, 300, 170.0)]


@pytest.fixture(scope="module")
def server():
    try:
        binary = truth.build()
    except truth.NoGoToolchain as exc:
        if IN_CI:
            raise
        pytest.skip(str(exc))
    with truth.TruthServer(binary, ttft_ms=TTFT_MS, itl_ms=ITL_MS, role_chunk=True) as ref:
        yield ref


def test_the_truth_is_the_kernels_arrival(server: truth.TruthServer) -> None:
    """The server's arrival is when the request's bytes reached the machine, not when its
    handler began (which, at hundreds of requests at once on 2 cores, is milliseconds later:
    time a client waits too); both are kept."""
    server.reset()
    in_process_round(server.url, 8, 16)
    records = server.records()
    assert len(records) == 16
    assert {r.arrival_source for r in records} == {"kernel"}
    assert all(r.arrival_s <= r.handler_s for r in records)


def split_by_round(records: list[truth.TruthRecord], sizes: list[int]
                   ) -> list[list[truth.TruthRecord]]:
    """Rounds run one after another, so arrival order splits the server's records."""
    ordered = sorted(records, key=lambda r: r.arrival_s)
    out, at = [], 0
    for size in sizes:
        out.append(ordered[at:at + size])
        at += size
    assert at == len(ordered), f"{len(ordered)} requests reached the server, {at} expected"
    return out


def rate_rows(result: dict, records: list[truth.TruthRecord]) -> tuple[float, float, float]:
    """(asked, scheduled, achieved) requests/s: the schedule is what the client drew for the
    asked rate (a finite Poisson sample's own rate), achieved is as the server saw arrivals."""
    spec = RoundSpec.model_validate(result["spec"])
    schedule = arrivals(spec)
    scheduled = (len(schedule) - 1) / schedule[-1]
    achieved = truth.arrival_rate(records)
    assert achieved is not None
    return spec.rate or 0.0, scheduled, achieved


def test_imagekit_bench_keeps_the_truth(server: truth.TruthServer, tmp_path: Path) -> None:
    server.reset()
    matrix = runs.matrix_toml("truth-model", [
        {"concurrency": c, "requests": n, "rate": rate} for c, n, rate in ROUNDS], TOKENS)
    run, results = runs.imagekit_bench(server.url, matrix, tmp_path)
    assert run.returncode == 0, run.output[-3000:]
    assert len(results) == len(ROUNDS)
    out = json.loads(run.output[run.output.index("{"):])
    assert [r["spec"] for r in out["rounds"]] == [r["spec"] for r in results]
    assert all(r["definitions"]["ttft"].startswith("start to the socket read")
               and r["definitions"]["stamps"] == kernel_stamps.KERNEL for r in out["rounds"])
    split = split_by_round([r for r in server.records() if r.tokens == TOKENS],
                           [n for _, n, _ in ROUNDS])
    failures = []
    for result, records in zip(results, split, strict=True):
        rows = truth.compare(runs.round_figures(result).stats, truth.truth_stats(records))
        spec = result["spec"]
        print(truth.table(f"c={spec['concurrency']} rate={spec['rate']} "
                          f"({spec['requests']} requests)", rows))
        events = result["itl"]["count"] + result["completed"]
        if result["client_bound"]:
            # the client said its reads came a gap late: its tails are its own, and it must
            # say so with the lag that made them (a miss without this mark fails below)
            print(f"client-bound: {result['client_bound_reason']}")
            assert result["read_lag"]["p99"] >= result["itl"]["p50"]
            held = [r for r in rows if r.quantile == "p50" or r.metric in ("tpot", "e2e")]
        elif result["shared_reads"]:
            # a few events came in one read with the next (the server, held back by a busy
            # machine, sent a late chunk right before an on-time one, closer than the
            # client's read lag): their tails are not held, and they must stay few (2.6 % seen
            # with a test suite running beside; a client that merged reads of its own would
            # share most)
            print(f"{result['shared_reads']} of {events} events shared a read: tails not held")
            assert result["shared_reads"] <= 0.05 * events, result["shared_reads"]
            held = [r for r in rows if r.quantile == "p50" or r.metric in ("tpot", "e2e")]
        else:
            held = rows
        failures += [f"c={spec['concurrency']} rate={spec['rate']} {r.metric} {r.quantile}: "
                     f"{r.client_s * 1e3:.2f} ms vs truth {r.truth_s * 1e3:.2f} ms"
                     for r in held if not r.within]
        if spec["rate"]:
            asked, scheduled, achieved = rate_rows(result, records)
            print(f"rate: asked {asked:g}/s, scheduled {scheduled:.2f}/s, achieved "
                  f"{achieved:.2f}/s at the server")
            if abs(achieved - scheduled) > truth.RELATIVE * scheduled:
                failures.append(f"achieved rate {achieved:.2f}/s vs scheduled "
                                f"{scheduled:.2f}/s")
    assert failures == []


def in_process_round(url: str, concurrency: int, requests: int) -> RoundResult:
    """One round in this process, on the load client's own event loop (run_client)."""
    spec = RoundSpec(index=1, concurrency=concurrency, input_tokens=64, output_tokens=TOKENS,
                     requests=requests)
    factory = BodyFactory("truth-model", spec, Calibration(), {"ignore_eos": True})

    async def go() -> RoundResult:
        async with ChatClient(url, connections=concurrency + 4) as client:
            return await run_round(client, spec, factory)

    return client.run_client(go())


def _late_delivery(monkeypatch: pytest.MonkeyPatch) -> None:
    """The transport hands every read to the client 5 ms after it came off the socket."""
    deliver = client._StampingHandler.data_received

    def late(self: client._StampingHandler, data: bytes) -> None:
        asyncio.get_running_loop().call_later(0.005, deliver, self, data)

    monkeypatch.setattr(client._StampingHandler, "data_received", late)


def _early_stamps(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every read's stamp says 5 ms before the bytes came (a stamp later than the stream's own
    clock is refused by the client, so the wrong stamp that can slip through is an early one)."""
    kernel = client.read_stamp

    def early() -> float:
        stamp = kernel()
        return (stamp if stamp is not None else time.perf_counter()) - 0.005

    monkeypatch.setattr(client, "read_stamp", early)


@pytest.mark.parametrize("fault", [_late_delivery, _early_stamps], ids=["delivery", "stamps"])
def test_a_client_off_by_5ms_per_read_is_caught(server: truth.TruthServer,
                                                monkeypatch: pytest.MonkeyPatch,
                                                fault: Callable[[pytest.MonkeyPatch], None]
                                                ) -> None:
    """The same check on a client 5 ms off on every read, late by its transport or early by its
    stamps: TTFT and E2E drift past their bounds, so the check can fail."""
    fault(monkeypatch)
    server.reset()
    result = in_process_round(server.url, 4, 16)
    assert result.definitions is not None and not result.client_bound
    assert result.definitions.stamps.startswith(kernel_stamps.KERNEL)
    rows = truth.compare({m: getattr(result, m) for m in truth.METRICS},
                         truth.truth_stats(server.records()))
    print(truth.table(f"client off by 5 ms per read ({fault.__name__})", rows))
    caught = {(r.metric, r.quantile) for r in rows if not r.within}
    assert {("ttft", "p50"), ("ttft", "p99")} <= caught, caught


def test_vllm_bench_serve_measures_its_own_definitions(server: truth.TruthServer,
                                                       tmp_path: Path) -> None:
    """vllm bench serve against the same server: its ITL counts role -> first token as a gap
    and its TPOT divides (E2E - its TTFT), so both match the server's truth computed by ITS
    definitions (docs/design/load-timing.md); its TTFT ends at the empty role chunk, so it
    reads far below the time to the first token (its clock also starts before its own send
    queue, which adds its client's overhead at 16 requests in flight)."""
    python = runs.vllm_python()
    if python is None:
        if IN_CI:
            pytest.fail("the vLLM CPU venv is not installed (imagekit.infra.engines)")
        pytest.skip("the vLLM CPU venv is not installed (imagekit.infra.engines)")
    server.reset()
    run, figures = runs.vllm_bench(python, server.url, tmp_path, requests=64,
                                   output_tokens=TOKENS, concurrency=16)
    assert run.returncode == 0 and figures is not None, run.output[-3000:]
    records = [r for r in server.records() if r.tokens == TOKENS]
    theirs, ours = truth.vllm_definitions(records), truth.truth_stats(records)
    rows = truth.compare(figures.stats, theirs, ("p50",))
    print(truth.table("vllm bench serve vs the truth by its own definitions", rows,
                      {"truth (ours)": ours}))
    judged = {r.metric: r for r in rows}
    assert judged["itl"].within and judged["tpot"].within, rows
    # its TPOT is not the time per token: the real TTFT is spread over the tokens
    assert figures.stats["tpot"].p50 > ours["tpot"].p50 * 1.1
    # its TTFT is the role chunk's: far below the time to the first token
    assert figures.stats["ttft"].p50 is not None and ours["ttft"].p50 is not None
    assert figures.stats["ttft"].p50 < ours["ttft"].p50 / 2


def test_a_client_behind_its_reads_says_so(server: truth.TruthServer) -> None:
    """A round whose event loop is held 30 ms at a time (the client's own CPU, as with too
    many streams for one process) is marked client-bound with its read lag; the same round
    with the loop free is not, and its read lag stays well under a gap."""

    def round_with(hog: bool) -> RoundResult:
        spec = RoundSpec(index=1, concurrency=8, input_tokens=64, output_tokens=TOKENS,
                         requests=16)
        factory = BodyFactory("truth-model", spec, Calibration(), {"ignore_eos": True})

        async def hold_the_loop() -> None:
            while True:
                until = time.perf_counter() + HOLD_S
                while time.perf_counter() < until:
                    pass
                await asyncio.sleep(0.002)

        async def go() -> RoundResult:
            holder = asyncio.create_task(hold_the_loop()) if hog else None
            try:
                async with ChatClient(server.url, connections=12) as http:
                    return await run_round(http, spec, factory)
            finally:
                if holder is not None:
                    holder.cancel()

        return client.run_client(go())

    server.reset()
    free = round_with(hog=False)
    assert free.read_lag is not None and free.read_lag.p99 is not None
    assert not free.client_bound and free.read_lag.p99 < ITL_MS / 2e3, free.read_lag
    held = round_with(hog=True)
    assert held.client_bound, held.read_lag
    assert held.client_bound_reason and "at or above the median gap" in held.client_bound_reason
