"""bench/bench_timing.py writes the record `make bench` summarises (a quick run without the
vLLM peer here: the figures of so few requests are not judged, only the record's shape)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.serial


def test_bench_timing_writes_its_record(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "bench_timing.py"), "--out", str(tmp_path),
         "--quick", "--no-vllm", "--repeats", "1"],
        capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    record = json.loads((tmp_path / "timing.json").read_text())
    assert record["name"] == "timing" and record["peer"] == "not installed"
    assert record["ours_cpu_per_request_ms"]["in_load"] > 0
    rows = [k for k in record if k.startswith("accuracy_")]
    assert rows == ["accuracy_c1-itl10ms", "accuracy_c16-itl10ms", "accuracy_c64-itl10ms",
                    "accuracy_rate170-itl10ms", "accuracy_c256-itl10ms",
                    "accuracy_c256-itl20ms"]
    for key in rows:
        assert record[key]["row"] is True and isinstance(record[key]["met"], bool)
        assert set(record[key]["truth_ms"]) == {"ttft", "itl", "tpot", "e2e"}
    assert record["accuracy_rate170-itl10ms"]["scheduled_rate"] > 0
    lag = record["accuracy_c256-itl10ms"]["imagekit_read_lag_ms"]
    assert 0 < lag["p50"] <= lag["p99"] <= lag["max"], lag
    summary = subprocess.run([sys.executable, str(REPO / "bench" / "summary.py"),
                              str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert "accuracy c256" in summary.stdout, summary.stdout
