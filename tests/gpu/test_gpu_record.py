"""The preflight JSON as a pydantic model, and `imagekit gpu-record` writing it into evidence."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from imagekit.evidence import EvidenceStore
from imagekit.gpu import PreflightRecord
from imagekit.results import Status

SAMPLES = Path(__file__).resolve().parents[2] / "gpu_checks" / "samples"
REAL = sorted(p for p in SAMPLES.glob("*.json") if "faults" not in p.name)
FAULTS = SAMPLES / "2026-11-29-h200x2-faults.json"
DIGEST = "sha256:" + "e" * 64


def sample(name: str = "2026-11-29-h200x2.json") -> dict[str, Any]:
    return json.loads((SAMPLES / name).read_text())


def test_the_real_samples_are_there() -> None:
    assert {p.name for p in REAL} >= {"2026-11-29-h200x1.json", "2026-11-29-h200x2.json"}


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name)
def test_real_h200_samples_validate(path: Path) -> None:
    record = PreflightRecord.model_validate_json(path.read_text())
    assert record.status is Status.PASS and record.backend == "nccl"
    assert record.gpu_names == ["NVIDIA H200"]
    assert record.bandwidth is not None and record.bandwidth.sizes[0].bytes == 1024
    assert record.bandwidth.sizes[-1].bytes == 1 << 30
    assert record.env.get("NCCL_NVLS_ENABLE", "0") == "0"


def test_fault_hooks_on_real_gpus_fail_naming_each_culprit() -> None:
    """Recorded on the H200 pair with NCCL: wrong contribution on rank 1, NaN on rank 0."""
    record = PreflightRecord.model_validate_json(FAULTS.read_text())
    assert record.status is Status.FAIL and record.backend == "nccl"
    checks = {c.name: c for c in record.checks}
    assert checks["matmul-bf16"].data["bad_ranks"] == [0]
    assert checks["allreduce-correctness"].data["wrong_contributors"] == [1]
    assert record.test_hooks == {"PREFLIGHT_TEST_WRONG_RANK": "1", "PREFLIGHT_TEST_NAN": "0"}


def test_pair_sample_reads_nvlink_and_bandwidth() -> None:
    record = PreflightRecord.model_validate(sample())
    assert record.world_size == 2 and record.bandwidth is not None
    assert record.bandwidth.busbw_factor == 1.0
    assert record.topology is not None and record.topology.matrix is not None
    assert record.topology.matrix.links["GPU0"]["GPU1"] == "NV18"
    assert record.peak is not None and record.peak.busbw_GBps > 100


def _invalid(data: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as info:
        PreflightRecord.model_validate(data)
    return str(info.value)


def test_tampered_busbw_is_refused() -> None:
    data = sample()
    data["bandwidth"]["sizes"][-1]["busbw_GBps"] *= 2
    assert "busbw" in _invalid(data)


def test_busbw_factor_must_match_world_size() -> None:
    data = sample()
    data["bandwidth"]["busbw_factor"] = 1.75
    assert "2(n-1)/n" in _invalid(data)


def test_pass_with_a_failed_check_is_refused() -> None:
    data = sample()
    data["checks"][0]["status"] = "FAIL"
    assert "worst of its checks" in _invalid(data)


def test_unknown_field_is_refused() -> None:
    data = sample()
    data["surprise"] = 1
    assert "surprise" in _invalid(data)


def test_test_hooks_cannot_pass() -> None:
    data = sample()
    data["test_hooks"] = {"PREFLIGHT_TEST_NAN": "0"}
    assert "test-only" in _invalid(data)


def test_error_record_is_short_but_must_say_why() -> None:
    ok = PreflightRecord.model_validate({"schema": "imagekit.gpu-preflight/v1",
                                         "status": "ERROR", "error": "RuntimeError: nccl"})
    assert ok.status is Status.ERROR
    _invalid({"schema": "imagekit.gpu-preflight/v1", "status": "ERROR"})
    _invalid({"schema": "imagekit.gpu-preflight/v1", "status": "PASS"})


def cli(*args: str, evidence: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "imagekit", "gpu-record", *args,
                           "--evidence-dir", str(evidence)],
                          capture_output=True, text=True, timeout=60)


def test_gpu_record_keeps_the_file_byte_for_byte(tmp_path: Path) -> None:
    source = SAMPLES / "2026-11-29-h200x2.json"
    done = cli(str(source), "--evidence-key", DIGEST, "--log",
               str(SAMPLES / "2026-11-29-h200x2.log"), "--json", evidence=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["status"] == "PASS" and report["digest"] == DIGEST
    store = EvidenceStore(tmp_path)
    [attempt] = store.attempts(DIGEST, "gpu-preflight")
    assert attempt.status is Status.PASS
    assert {c.name for c in attempt.checks} >= {"allreduce-correctness", "matmul-bf16"}
    path = store.path_of(attempt)
    assert (path / "preflight.json").read_bytes() == source.read_bytes()
    assert (path / "preflight.log").is_file()
    assert "busbw" in attempt.summary


def test_gpu_record_fail_record_exits_1_and_is_still_kept(tmp_path: Path) -> None:
    data = copy.deepcopy(sample())
    data["checks"][-1]["status"] = "FAIL"
    data["checks"][-1]["detail"] = "rank 1: sum wrong at first bad index 7"
    data["status"] = "FAIL"
    bad = tmp_path / "fail.json"
    bad.write_text(json.dumps(data))
    done = cli(str(bad), "--evidence-key", "node-a", evidence=tmp_path / "ev")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == \
        [f"imagekit: error: GPU preflight verdict is FAIL ({bad})"]
    [attempt] = EvidenceStore(tmp_path / "ev").attempts("node-a", "gpu-preflight")
    assert attempt.status is Status.FAIL


@pytest.mark.parametrize("content", ["not json", '{"schema": "other"}', "[]"])
def test_gpu_record_bad_input_is_one_line_exit_2(tmp_path: Path, content: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    done = cli(str(bad), evidence=tmp_path / "ev")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("imagekit: error: ")
    assert not (tmp_path / "ev").exists() or not EvidenceStore(tmp_path / "ev").keys()
