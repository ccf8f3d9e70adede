"""The preflight script, launched as on GPUs (torch.distributed.run) but on CPUs with gloo."""

from __future__ import annotations

import pytest

from imagekit.gpu import PreflightRecord, busbw_factor
from imagekit.results import Status
from tests.gpu.conftest import Run


def _check(run: Run, name: str) -> dict:
    assert run.record is not None, run.stderr[-2000:]
    found = [c for c in run.record["checks"] if c["name"] == name]
    assert len(found) == 1, run.record["checks"]
    return found[0]


@pytest.mark.parametrize("name", ["world1", "world2", "world4"])
def test_healthy_worlds_pass_and_validate(runs: dict[str, Run], name: str) -> None:
    run = runs[name]
    assert run.returncode == 0, run.stderr[-3000:]
    record = PreflightRecord.model_validate(run.record)
    assert record.status is Status.PASS
    assert record.world_size == run.nproc and record.backend == "gloo"
    assert [r.rank for r in record.ranks] == list(range(run.nproc))
    assert {c.name for c in record.checks} == {"matmul-bf16", "allreduce-correctness"}
    bw = record.bandwidth
    assert bw is not None and bw.n == run.nproc
    assert (bw.warmup, bw.iters) == (5, 20)
    assert [row.bytes for row in bw.sizes] == [1024, 2048, 4096, 8192]
    for row in bw.sizes:
        assert row.time_us == max(row.per_rank_time_us)
        assert row.busbw_GBps == pytest.approx(row.algbw_GBps * busbw_factor(run.nproc))
        assert row.algbw_GBps > 0
    assert record.matmul is not None
    assert all(m.finite and m.rel_error is not None and 0 < m.rel_error < 1e-2
               for m in record.matmul.per_rank)
    # every correctness buffer, every rank: no bad element
    assert all(r.first_bad_index == -1 for c in record.allreduce_correctness for r in c.per_rank)
    assert "GPU preflight: PASS" in run.stdout and "busbw" in run.stdout


def test_world_of_one_states_busbw_is_zero_by_definition(runs: dict[str, Run]) -> None:
    record = runs["world1"].record
    assert record is not None
    assert record["bandwidth"]["busbw_factor"] == 0.0
    assert all(row["busbw_GBps"] == 0.0 for row in record["bandwidth"]["sizes"])
    assert "busbw is 0 by definition" in record["bandwidth"]["note"]


def test_environment_reaches_the_ranks_unchanged(runs: dict[str, Run]) -> None:
    """NVLink-multicast-off settings must survive the launcher and the script."""
    record = runs["world1"].record
    assert record is not None and record["env"].get("NCCL_NVLS_ENABLE") == "0"


def test_wrong_contribution_fails_naming_the_rank(runs: dict[str, Run]) -> None:
    run = runs["faults"]
    assert run.returncode == 1
    check = _check(run, "allreduce-correctness")
    assert check["status"] == "FAIL"
    assert check["data"]["wrong_contributors"] == [2]
    assert "rank 2 contributed a wrong value at index 341" in check["detail"]
    assert "first bad index 341" in check["detail"]
    assert check["data"]["bad_ranks"] == [0, 1, 2]  # every rank received the wrong sum
    assert run.record is not None and run.record["status"] == "FAIL"
    assert _check(run, "test-hooks")["status"] == "FAIL"
    PreflightRecord.model_validate(run.record)


def test_nan_in_matmul_fails_naming_the_rank(runs: dict[str, Run]) -> None:
    run = runs["faults"]
    check = _check(run, "matmul-bf16")
    assert check["status"] == "FAIL"
    assert check["data"]["bad_ranks"] == [1]
    assert check["detail"] == "rank 1: bf16 matmul n=64: 1 non-finite element(s)"


def test_standalone_world_of_one_catches_nan(runs: dict[str, Run]) -> None:
    run = runs["standalone_nan"]
    assert run.returncode == 1, run.stderr[-2000:]
    record = PreflightRecord.model_validate(run.record)
    assert record.world_size == 1 and record.status is Status.FAIL
    assert _check(run, "matmul-bf16")["detail"] == \
        "rank 0: bf16 matmul n=64: 1 non-finite element(s)"
    assert _check(run, "allreduce-correctness")["status"] == "PASS"
    assert "GPU preflight: FAIL" in run.stdout
