"""The bandwidth verdict against a committed baseline, and the small-message comparison with
nccl-tests (its output as printed on an H200)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from types import ModuleType

import pytest

SAMPLES = Path(__file__).resolve().parents[2] / "gpu_checks" / "samples"
PAIR = SAMPLES / "2026-11-29-h200x2.json"


#: the spread of five real cycles (matmul TFLOP/s of one H200 preflight, 2026-12-01 stability
#: sample b, run 1: 793, 775, 750, 683, 675) relative to their median: the noise of a busbw cycle
NOISE = [793 / 750, 775 / 750, 1.0, 683 / 750, 675 / 750]


def _pair(cycles: bool = True) -> dict:
    """The committed H200 pair record; with `cycles`, five noisy cycles at the judged sizes
    (the record predates --repeats and holds one value per size)."""
    record = json.loads(PAIR.read_text())
    if cycles:
        for row in record["bandwidth"]["sizes"]:
            if row["bytes"] >= 64 << 20:
                row["busbw_cycles_GBps"] = [row["busbw_GBps"] * f for f in NOISE]
    return record


def _scaled(record: dict, factor: float, sizes: set[int] | None = None, rank: int = 1) -> dict:
    out = copy.deepcopy(record)
    for row in out["bandwidth"]["sizes"]:
        if sizes is None or row["bytes"] in sizes:
            row["busbw_GBps"] *= factor
            row["algbw_GBps"] *= factor
            row["slowest_rank"] = rank
            row["busbw_cycles_GBps"] = [b * factor for b in row.get("busbw_cycles_GBps", [])]
    return out


def test_baseline_is_found_by_model_count_and_topology(preflight: ModuleType) -> None:
    key = preflight.baseline_key(_pair())
    assert key == ("NVIDIA H200", 2, "NV18x1")
    path, record, how = preflight.find_baseline(key, SAMPLES)
    # the first run of a kind is its baseline: the earliest PASS record of that key
    assert path is not None and path.name == "2026-11-29-h200x2.json", path
    assert record is not None and record["status"] == "PASS" and "earliest" in how
    four = preflight.baseline_key(json.loads((SAMPLES / "2026-11-29-h200x4.json").read_text()))
    assert four == ("NVIDIA H200", 4, "NV18x6")
    assert preflight.find_baseline(("NVIDIA B200", 8, "NV18x28"), SAMPLES)[0] is None


def test_same_bandwidth_passes(preflight: ModuleType) -> None:
    base = _pair()
    result = preflight.bandwidth_verdict(_scaled(base, 0.95), base, "pair")
    assert result["status"] == "PASS"
    assert [r["bytes"] for r in result["data"]["sizes"]] == [64 << 20, 128 << 20, 256 << 20,
                                                            512 << 20, 1 << 30]


def test_slow_sizes_fail_naming_sizes_and_slowest_rank(preflight: ModuleType) -> None:
    base = _pair()
    slow = _scaled(base, 0.7, sizes={256 << 20, 1 << 30}, rank=1)
    result = preflight.bandwidth_verdict(slow, base, "pair")
    assert result["status"] == "FAIL"
    assert "256 MiB" in result["detail"] and "1 GiB" in result["detail"]
    assert "512 MiB" not in result["detail"] and "slowest rank 1" in result["detail"]
    # small sizes never count: a slow 1 KiB is latency, not bandwidth
    assert preflight.bandwidth_verdict(_scaled(base, 0.1, sizes={1024}), base,
                                       "pair")["status"] == "PASS"
    # the tolerance is an option
    assert preflight.bandwidth_verdict(slow, base, "pair", tolerance=0.45)["status"] == "PASS"


def test_bandwidth_inside_the_noise_band_is_a_pass_with_a_note(preflight: ModuleType) -> None:
    """0.88x: the cycles' interval (0.79..0.93) straddles 0.9: not a FAIL, named as noise;
    one cycle only (a record before --repeats): DEFERRED, never a PASS."""
    base = _pair()
    near = preflight.bandwidth_verdict(_scaled(base, 0.88), base, "pair")
    assert near["status"] == "PASS" and near["data"]["band"] == "NOISE", near["detail"]
    assert "within noise" in near["detail"] and len(near["data"]["within_noise"]) == 5
    assert all(len(r["samples"]) == 5 for r in near["data"]["sizes"])
    single = preflight.bandwidth_verdict(_scaled(_pair(cycles=False), 0.5), base, "pair")
    assert single["status"] == "DEFERRED" and "too few samples" in single["detail"]


def test_no_baseline_or_one_gpu_is_deferred(preflight: ModuleType) -> None:
    result = preflight.bandwidth_verdict(_pair(), None, "no PASS record of 2x NVIDIA H200")
    assert result["status"] == "DEFERRED" and "no baseline" in result["detail"]
    one = json.loads((SAMPLES / "2026-11-29-h200x1.json").read_text())
    assert "n=1" in preflight.bandwidth_verdict(one, one, "x1")["detail"]


def test_cpu_run_against_a_baseline_folder(preflight: ModuleType, runs, tmp_path: Path) -> None:
    """End to end on gloo: the world2 run is the baseline of a folder; judged against it the
    same record passes and a slowed copy fails (sizes here are small, so min_bytes is 1 KiB;
    the CPU run repeats only >= 64 MiB, so cycles are added here)."""
    record = copy.deepcopy(runs["world2"].record)
    for row in record["bandwidth"]["sizes"]:
        row["busbw_cycles_GBps"] = [row["busbw_GBps"] * f for f in NOISE]
    assert record is not None
    (tmp_path / "base.json").write_text(json.dumps(record))
    key = preflight.baseline_key(record)
    assert key[1:] == (2, "cpu")
    path, base, _ = preflight.find_baseline(key, tmp_path)
    assert path == tmp_path / "base.json"
    assert preflight.bandwidth_verdict(record, base, "base", min_bytes=1024)["status"] == "PASS"
    slowed = _scaled(record, 0.5)
    assert preflight.bandwidth_verdict(slowed, base, "base", min_bytes=1024)["status"] == "FAIL"


#: nccl-tests -N 3: each size printed three times (constant here, so the interval of the ratio
#: is one point and the bound is exact; test_stats.py covers noisy samples)
NCCL_TESTS = """\
# Collective test starting: all_reduce_perf
# nThread 1 nGpus 2 minBytes 1024 maxBytes 1048576 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0 unalign: 0
        1024           256     float     sum      -1    20.10    0.05    0.05       0    19.80    0.05    0.05       0
        2048           512     float     sum      -1    20.50    0.10    0.10       0    20.20    0.10    0.10       0
        1024           256     float     sum      -1    20.10    0.05    0.05       0    19.80    0.05    0.05       0
        1024           256     float     sum      -1    20.10    0.05    0.05       0    19.80    0.05    0.05       0
# nThread 1 nGpus 2 minBytes 1024 maxBytes 1048576 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 1 unalign: 0
        1024           256     float     sum      -1     9.10    0.11    0.11       0     9.00    0.11    0.11       0
        1024           256     float     sum      -1     9.10    0.11    0.11       0     9.00    0.11    0.11       0
        1024           256     float     sum      -1     9.10    0.11    0.11       0     9.00    0.11    0.11       0
"""


def _direct(eager: float, graph: float | None, sums_ok: bool = True) -> dict:
    return {"eager_us": eager, "graph_us": graph, "graph_empty": False, "sums_ok": sums_ok,
            "sums": "exact" if sums_ok else "rank 1: first call wrong at index 3 (5.0, should "
                                            "be 6.0)"}


def _ours(eager: float = 19.0, graph: float | None = 9.0, out_eager: float = 20.0,
          out_graph: float | None = 9.0, sums_ok: bool = True, direct: bool = True) -> list:
    """A 1 KiB row as small_messages writes it: c10d times (context) and, when `direct`, the
    ncclAllReduce times in place / out of place, five equal cycles."""
    nccl = {"in_place": _direct(eager, graph, sums_ok),
            "out_of_place": _direct(out_eager, out_graph)} if direct else None
    row = {"bytes": 1024, "time_us": 1.0, "timer": "cuda-graph", "eager_us": 50.0,
           "graph_us": 1.0, "graph_empty": False, "nccl": nccl}
    if nccl:
        row["nccl_cycles"] = [copy.deepcopy(nccl) for _ in range(5)]
    return [row]


def test_nccl_tests_output_is_parsed_per_mode(preflight: ModuleType) -> None:
    parsed = preflight.parse_nccl_tests(NCCL_TESTS)
    assert parsed["eager"][1024] == {"out_of_place_us": 20.10, "in_place_us": 19.80,
                                     "out_of_place_us_cycles": [20.10] * 3,
                                     "in_place_us_cycles": [19.80] * 3}
    assert parsed["graph"][1024]["in_place_us"] == 9.00
    real = (SAMPLES / "2026-12-01-h200x1-nccl-tests.txt").read_text()
    h200 = preflight.parse_nccl_tests(real)
    assert set(h200) == {"eager", "graph"} and 1024 in h200["eager"]


@pytest.mark.parametrize("eager,status", [(12.0, "PASS"), (29.7, "PASS"), (29.71, "FAIL")])
def test_small_message_time_within_one_and_a_half_of_nccl_tests(preflight: ModuleType,
                                                                 eager: float,
                                                                 status: str) -> None:
    """Like for like: our eager ncclAllReduce vs nccl-tests' default, our graph vs -G; the
    worst ratio decides (19.80 us in place eager x 1.5 = 29.70)."""
    result, data = preflight.small_message_verdict(_ours(eager=eager),
                                                   preflight.parse_nccl_tests(NCCL_TESTS),
                                                   "log", world=2)
    assert result["status"] == status, result["detail"]
    assert f"eager {eager:.2f} vs 19.80 us" in result["detail"]
    assert data["judged"] == ["out_of_place", "in_place"]
    assert data["ratios"]["in_place_graph"] == pytest.approx(1.0)
    assert data["ratio"] == pytest.approx(max(eager / 19.8, 1.0))
    assert data["sizes"][0]["nccl_tests_graph_in_place_us"] == 9.00
    assert data["sizes"][0]["ours_nccl_in_place_eager_us"] == eager


def test_slow_graph_replay_fails_too(preflight: ModuleType) -> None:
    result, data = preflight.small_message_verdict(_ours(graph=14.0),
                                                   preflight.parse_nccl_tests(NCCL_TESTS),
                                                   "log", world=2)
    assert result["status"] == "FAIL" and "ratio in_place_graph: 1.56x" in result["detail"]


def test_wrong_sums_in_the_timed_path_fail(preflight: ModuleType) -> None:
    result, _ = preflight.small_message_verdict(_ours(sums_ok=False),
                                                preflight.parse_nccl_tests(NCCL_TESTS),
                                                "log", world=2)
    assert result["status"] == "FAIL" and "index 3" in result["detail"]


def test_one_gpu_judges_out_of_place_and_says_in_place_does_no_work(
        preflight: ModuleType) -> None:
    """n = 1: in place is an empty call on both sides (kept as data, not judged), even when
    its sums are trivially right or its time far off; out of place copies and is judged."""
    theirs = preflight.parse_nccl_tests(NCCL_TESTS)
    result, data = preflight.small_message_verdict(_ours(eager=99.0, sums_ok=False), theirs,
                                                   "log", world=1)
    assert result["status"] == "PASS", result["detail"]
    assert data["judged"] == ["out_of_place"] and set(data["ratios"]) == {
        "out_of_place_eager", "out_of_place_graph"}
    assert "n=1: NCCL does no work for an in-place all-reduce" in result["detail"]
    assert "in place (not judged)" in result["detail"]
    slow, _ = preflight.small_message_verdict(_ours(out_eager=40.0), theirs, "log", world=1)
    assert slow["status"] == "FAIL" and "ratio out_of_place_eager: 1.99x" in slow["detail"]


def test_small_message_comparison_is_deferred_without_direct_timing(
        preflight: ModuleType) -> None:
    theirs = preflight.parse_nccl_tests(NCCL_TESTS)
    gloo, data = preflight.small_message_verdict(
        _ours(direct=False), theirs, "log", world=2,
        direct_why="backend gloo on cpu: no NCCL communicator to call")
    assert gloo["status"] == "DEFERRED" and "backend gloo on cpu" in gloo["detail"]
    assert data["sizes"][0]["ours_eager_us"] == 50.0  # c10d's time kept as context
    missing, _ = preflight.small_message_verdict(_ours(), {}, "none", world=2)
    assert missing["status"] == "DEFERRED" and "no nccl-tests" in missing["detail"]


MAPS = """\
7f00aa000000-7f00aa200000 r-xp 00000000 fd:01 1234  /usr/lib/x86_64-linux-gnu/libc.so.6
7f00ab000000-7f00ac000000 r-xp 00000000 fd:01 5678  /venv/site-packages/nvidia/nccl/lib/libnccl.so.2
7f00ad000000-7f00ad100000 rw-p 00000000 00:00 0
"""


def test_libnccl_is_found_in_the_process_maps(preflight: ModuleType) -> None:
    assert preflight.find_libnccl(MAPS) == "/venv/site-packages/nvidia/nccl/lib/libnccl.so.2"
    assert preflight.find_libnccl(MAPS.replace("libnccl.so.2", "libfoo.so")) is None


class _Impl:
    def __init__(self, ptr: int | None) -> None:
        if ptr is not None:
            self._comm_ptr = lambda: ptr


class _Group:
    def __init__(self, impl: _Impl) -> None:
        self.impl = impl

    def _get_backend(self, device: object) -> _Impl:
        return self.impl


def test_direct_nccl_falls_back_saying_why(preflight: ModuleType) -> None:
    import torch
    cuda = torch.device("cuda", 0)
    nccl, why = preflight.DirectNccl.open("gloo", torch.device("cpu"))
    assert nccl is None and "backend gloo on cpu" in why
    nccl, why = preflight.DirectNccl.open("nccl", cuda, _Group(_Impl(None)), MAPS)
    assert nccl is None and "no _comm_ptr()" in why
    nccl, why = preflight.DirectNccl.open("nccl", cuda, _Group(_Impl(0)), MAPS)
    assert nccl is None and "not created yet" in why
    nccl, why = preflight.DirectNccl.open("nccl", cuda, _Group(_Impl(0x1234)),
                                          MAPS.replace("libnccl.so.2", "libfoo.so"))
    assert nccl is None and "no libnccl" in why
    # a libnccl that cannot be loaded: the reason, not a crash
    nccl, why = preflight.DirectNccl.open("nccl", cuda, _Group(_Impl(0x1234)), MAPS)
    assert nccl is None and "OSError" in why


def test_repeated_nccl_tests_cycles_keep_the_lowest_time(preflight: ModuleType) -> None:
    """-N 3 prints each size three times: the lowest of each column is kept, as the preflight
    keeps the lowest of its --small-repeats loops."""
    cycles = NCCL_TESTS + NCCL_TESTS.replace("19.80", "18.00").replace("9.10", "12.00")
    parsed = preflight.parse_nccl_tests(cycles)
    low = {k: v for k, v in parsed["eager"][1024].items() if not k.endswith("_cycles")}
    assert low == {"out_of_place_us": 20.10, "in_place_us": 18.00}
    assert parsed["eager"][1024]["in_place_us_cycles"] == [19.8] * 3 + [18.0] * 3
    assert parsed["graph"][1024]["out_of_place_us"] == 9.10
    assert preflight.parse_args(["--small-repeats", "2"]).small_repeats == 2
    with pytest.raises(SystemExit):
        preflight.parse_args(["--small-repeats", "0"])


def test_the_real_h200_nccl_timing_is_recomputed_from_its_files(preflight: ModuleType) -> None:
    """The committed H200 record (2026-12-01, ncclAllReduce on torch's communicator): its verdict
    is what its own rows and the committed nccl-tests output give again, and the timed sums held."""
    record = json.loads((SAMPLES / "2026-12-01-h200x1-nccltime.json").read_text())
    small = record["small_messages"]
    assert small["direct"]["available"] and "libnccl" in small["direct"]["lib"]
    row = small["sizes"][0]
    assert row["bytes"] == 1024 and all(t["sums_ok"] for t in row["nccl"].values())
    assert row["nccl"]["in_place"]["graph_empty"] and not row["nccl"]["out_of_place"]["graph_empty"]
    theirs = preflight.parse_nccl_tests(
        (SAMPLES / "2026-12-01-h200x1-nccltime-nccl-tests.txt").read_text())
    again, data = preflight.small_message_verdict(small["sizes"], theirs, "sample", world=1)
    recorded = next(c for c in record["checks"] if c["name"] == "small-message-time")
    assert recorded["status"] == "PASS"
    # one cycle of ours (a record before --repeats): too few to judge now, never a PASS
    assert again["status"] == "DEFERRED" and "too few samples" in again["detail"]
