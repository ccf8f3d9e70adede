"""bench/bench_load_client.py runs both loops against its own zero-latency server process and
writes the ratio record (a tiny run here; `make bench` runs the real size)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "bench_load_client.py"


def test_bench_script_writes_ratio_record(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(tmp_path), "--requests", "60",
         "--repeats", "1", "--concurrency", "4", "--chunks", "4"],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    record = json.loads((tmp_path / "load_client.json").read_text())
    assert record["name"] == "load_client" and record["goal"] == 1.2
    assert record["ours_s"] > 0 and record["peer_s"] > 0
    assert abs(record["ratio"] - record["ours_s"] / record["peer_s"]) < 0.005
    assert record["met"] == (record["ratio"] <= 1.2)
    assert record["requests"] == 60 and record["ours_requests_per_s"] > 0
    assert "client_overhead_per_request_ms" in record
    assert result.stdout.startswith("load_client: ours ") and "ratio" in result.stdout
