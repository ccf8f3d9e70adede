"""Pure parts of the GPU preflight package (gpu_checks/preflight): the bandwidth formulas,
sizes, topology parsing."""

from __future__ import annotations

import argparse
from pathlib import Path
from types import ModuleType

import pytest

from imagekit.gpu import busbw_factor as model_busbw_factor

SAMPLES = Path(__file__).resolve().parents[2] / "gpu_checks" / "samples"


@pytest.mark.parametrize("n,factor", [(1, 0.0), (2, 1.0), (8, 1.75)])
def test_busbw_factor_is_nccl_tests_2_n_minus_1_over_n(preflight: ModuleType, n: int,
                                                        factor: float) -> None:
    assert preflight.busbw_factor(n) == factor
    assert model_busbw_factor(n) == factor


@pytest.mark.parametrize("n", [1, 2, 8])
def test_bandwidths_from_bytes_and_slowest_time(preflight: ModuleType, n: int) -> None:
    algbw, busbw = preflight.bandwidths(1 << 30, 0.004, n)
    assert algbw == pytest.approx((1 << 30) / 0.004 / 1e9)
    assert busbw == pytest.approx(algbw * 2 * (n - 1) / n)


def test_busbw_factor_refuses_an_empty_world(preflight: ModuleType) -> None:
    with pytest.raises(ValueError):
        preflight.busbw_factor(0)


def test_sizes(preflight: ModuleType) -> None:
    assert preflight.parse_size("1K") == 1024
    assert preflight.parse_size("64MiB") == 64 << 20
    assert preflight.parse_size("1G") == 1 << 30
    assert preflight.parse_size("4096") == 4096
    with pytest.raises(argparse.ArgumentTypeError):
        preflight.parse_size("1Q")
    default = preflight.size_list(1024, 1 << 30, 2)
    assert default[0] == 1024 and default[-1] == 1 << 30 and len(default) == 21
    args = preflight.parse_args(["--backend", "gloo", "--sizes", "1K,1M"])
    assert args.sizes == [1024, 1 << 20]
    with pytest.raises(SystemExit):
        preflight.parse_args(["--backend", "gloo", "--sizes", "1023"])


def test_exact_all_reduce_values(preflight: ModuleType) -> None:
    import torch

    cpu = torch.device("cpu")
    total = sum(preflight.contribution(4099, r, cpu) for r in range(8))
    assert torch.equal(total, preflight.expected_sum(4099, 8, cpu))
    assert not torch.equal(preflight.contribution(64, 0, cpu), preflight.contribution(64, 1, cpu))
    assert preflight.contribution(4099, 3, cpu).abs().max() <= 512


def test_topology_of_the_real_h200_pair(preflight: ModuleType) -> None:
    text = (SAMPLES / "2026-11-29-h200x2-topo-nvlink.txt").read_text()
    parsed = preflight.parse_topo_matrix(text)
    assert parsed["devices"] == ["GPU0", "GPU1"]
    assert parsed["links"] == {"GPU0": {"GPU1": "NV18"}, "GPU1": {"GPU0": "NV18"}}
    assert parsed["affinity"]["GPU1"]["CPU Affinity"] == "0-31"
    assert parsed["affinity"]["GPU0"]["NUMA Affinity"] == "0"


def test_topology_of_an_eight_gpu_two_socket_node(preflight: ModuleType) -> None:
    header = "\t\x1b[4m" + "\t".join(f"GPU{i}" for i in range(8)) + \
        "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m"
    rows = []
    for i in range(8):
        links = "\t".join(" X " if i == j else "NV18" for j in range(8))
        cpus, numa = ("0-191", "0") if i < 4 else ("192-383", "1")
        rows.append(f"GPU{i}\t{links}\t{cpus}\t{numa}\t\tN/A")
    parsed = preflight.parse_topo_matrix("\n".join([header, *rows, "", "Legend:", ""]))
    assert len(parsed["devices"]) == 8
    assert all(link == "NV18" for row in parsed["links"].values() for link in row.values())
    assert parsed["affinity"]["GPU5"] == {"CPU Affinity": "192-383", "NUMA Affinity": "1",
                                          "GPU NUMA ID": "N/A"}


def test_topology_without_a_matrix_is_empty_not_an_error(preflight: ModuleType) -> None:
    assert preflight.parse_topo_matrix("No devices were found") == \
        {"devices": [], "links": {}, "affinity": {}}


def test_numa_and_affinity_from_sysfs(preflight: ModuleType, tmp_path: Path) -> None:
    dev = tmp_path / "0000:18:00.0"
    dev.mkdir()
    (dev / "numa_node").write_text("1\n")
    (dev / "local_cpulist").write_text("192-383\n")
    found = preflight.numa_of("00000000:18:00.0", sysfs=tmp_path)
    assert (found["numa_node"], found["cpu_affinity"]) == (1, "192-383")
    missing = preflight.numa_of("0000:99:00.0", sysfs=tmp_path)
    assert (missing["numa_node"], missing["cpu_affinity"]) == (None, None)


def test_asked_for_gpu_checks_on_cpu_is_deferred_not_passed(preflight: ModuleType, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    import json

    from imagekit.gpu import PreflightRecord

    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "PREFLIGHT_TEST_NAN",
                "PREFLIGHT_TEST_WRONG_RANK"):
        monkeypatch.delenv(var, raising=False)
    out = tmp_path / "deferred.json"
    code = preflight.main(["--backend", "gloo", "--max-bytes", "4K", "--check-bytes", "4K",
                           "--matmul-n", "32", "--expect-model", "H200", "--json", str(out)])
    record = PreflightRecord.model_validate_json(out.read_text())
    assert code == 1 and record.status.value == "DEFERRED"
    deferred = [c for c in record.checks if c.name == "device-model"]
    assert deferred and "no GPU in this run" in deferred[0].detail
    assert json.loads(out.read_text())["backend"] == "gloo"


def test_nccl_without_cuda_is_an_error_record(preflight: ModuleType, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    from imagekit.gpu import PreflightRecord

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "error.json"
    code = preflight.main(["--backend", "nccl", "--json", str(out)])
    assert code == 2
    record = PreflightRecord.model_validate_json(out.read_text())
    assert record.status.value == "ERROR" and "no CUDA device" in (record.error or "")
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("preflight: error: rank 0: RuntimeError")
