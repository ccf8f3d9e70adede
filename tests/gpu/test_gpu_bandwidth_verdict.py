"""The bandwidth verdict against a committed baseline, and the small-message comparison with
nccl-tests (its output as printed on the lent H200)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from types import ModuleType

import pytest

SAMPLES = Path(__file__).resolve().parents[2] / "gpu_checks" / "samples"
PAIR = SAMPLES / "2026-11-29-h200x2.json"


def _pair() -> dict:
    return json.loads(PAIR.read_text())


def _scaled(record: dict, factor: float, sizes: set[int] | None = None, rank: int = 1) -> dict:
    out = copy.deepcopy(record)
    for row in out["bandwidth"]["sizes"]:
        if sizes is None or row["bytes"] in sizes:
            row["busbw_GBps"] *= factor
            row["algbw_GBps"] *= factor
            row["slowest_rank"] = rank
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
    slow = _scaled(base, 0.8, sizes={256 << 20, 1 << 30}, rank=1)
    result = preflight.bandwidth_verdict(slow, base, "pair")
    assert result["status"] == "FAIL"
    assert "256 MiB" in result["detail"] and "1 GiB" in result["detail"]
    assert "512 MiB" not in result["detail"] and "slowest rank 1" in result["detail"]
    # small sizes never count: a slow 1 KiB is latency, not bandwidth
    assert preflight.bandwidth_verdict(_scaled(base, 0.1, sizes={1024}), base,
                                       "pair")["status"] == "PASS"
    # the tolerance is an option
    assert preflight.bandwidth_verdict(slow, base, "pair", tolerance=0.25)["status"] == "PASS"


def test_no_baseline_or_one_gpu_is_deferred(preflight: ModuleType) -> None:
    result = preflight.bandwidth_verdict(_pair(), None, "no PASS record of 2x NVIDIA H200")
    assert result["status"] == "DEFERRED" and "no baseline" in result["detail"]
    one = json.loads((SAMPLES / "2026-11-29-h200x1.json").read_text())
    assert "n=1" in preflight.bandwidth_verdict(one, one, "x1")["detail"]


def test_cpu_run_against_a_baseline_folder(preflight: ModuleType, runs, tmp_path: Path) -> None:
    """End to end on gloo: the world2 run is the baseline of a folder; judged against it the
    same record passes and a slowed copy fails (sizes here are small, so min_bytes is 1 KiB)."""
    record = runs["world2"].record
    assert record is not None
    (tmp_path / "base.json").write_text(json.dumps(record))
    key = preflight.baseline_key(record)
    assert key[1:] == (2, "cpu")
    path, base, _ = preflight.find_baseline(key, tmp_path)
    assert path == tmp_path / "base.json"
    assert preflight.bandwidth_verdict(record, base, "base", min_bytes=1024)["status"] == "PASS"
    slowed = _scaled(record, 0.5)
    assert preflight.bandwidth_verdict(slowed, base, "base", min_bytes=1024)["status"] == "FAIL"


NCCL_TESTS = """\
# Collective test starting: all_reduce_perf
# nThread 1 nGpus 2 minBytes 1024 maxBytes 1048576 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0 unalign: 0
        1024           256     float     sum      -1    20.10    0.05    0.05       0    19.80    0.05    0.05       0
        2048           512     float     sum      -1    20.50    0.10    0.10       0    20.20    0.10    0.10       0
# nThread 1 nGpus 2 minBytes 1024 maxBytes 1048576 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 1 unalign: 0
        1024           256     float     sum      -1     9.10    0.11    0.11       0     9.00    0.11    0.11       0
"""


def _ours(graph_us: float, eager_us: float = 50.0) -> list[dict]:
    return [{"bytes": 1024, "time_us": graph_us, "timer": "cuda-graph", "eager_us": eager_us,
             "graph_us": graph_us, "graph_empty": False}]


def test_nccl_tests_output_is_parsed_per_mode(preflight: ModuleType) -> None:
    parsed = preflight.parse_nccl_tests(NCCL_TESTS)
    assert parsed["eager"][1024] == {"out_of_place_us": 20.10, "in_place_us": 19.80}
    assert parsed["graph"][1024]["in_place_us"] == 9.00
    real = (SAMPLES / "2026-12-01-h200x1-nccl-tests.txt").read_text()
    h200 = preflight.parse_nccl_tests(real)
    assert set(h200) == {"eager", "graph"} and 1024 in h200["eager"]


@pytest.mark.parametrize("graph_us,status", [(12.0, "PASS"), (29.7, "PASS"), (30.0, "FAIL")])
def test_small_message_time_within_one_and_a_half_of_nccl_tests(preflight: ModuleType,
                                                                 graph_us: float,
                                                                 status: str) -> None:
    result, data = preflight.small_message_verdict(_ours(graph_us),
                                                   preflight.parse_nccl_tests(NCCL_TESTS),
                                                   "log", world=2)
    assert result is not None and result["status"] == status
    assert "vs nccl-tests 19.80 us" in result["detail"]
    assert data["sizes"][0]["nccl_tests_graph_in_place_us"] == 9.00


def test_small_message_comparison_is_not_applicable_on_one_gpu(preflight: ModuleType) -> None:
    result, data = preflight.small_message_verdict(_ours(1.4, 24.5),
                                                   preflight.parse_nccl_tests(NCCL_TESTS),
                                                   "log", world=1)
    assert result is None and data["sizes"][0]["ours_eager_us"] == 24.5
    missing, _ = preflight.small_message_verdict(_ours(12.0), {}, "none", world=2)
    assert missing is not None and missing["status"] == "DEFERRED"
