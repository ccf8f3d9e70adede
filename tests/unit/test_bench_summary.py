"""bench/summary.py: each goal judged on the interval of its paired rounds."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _summary():
    spec = importlib.util.spec_from_file_location("bench_summary", REPO / "bench" / "summary.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_promote_figures_get_their_interval_verdicts(capsys) -> None:
    summary = _summary()
    result = json.loads((REPO / "bench" / "results" / "promote.json").read_text())
    promote = summary.goal_verdict(result)
    assert promote["verdict"] == "missed" and promote["interval"] == [1.215, 1.658]
    verify = summary.goal_verdict(result["verify_copy"])
    # rounds 0.461 … 0.509 against <= 0.5: the worse end misses, the better end meets
    assert verify["verdict"] == "within noise" and verify["interval"] == [0.461, 0.509]
    assert summary.main(str(REPO / "bench" / "results")) == 1  # promote is missed
    out = capsys.readouterr().out
    assert "[1.215, 1.658]" in out and "within noise" in out and "MISSED" in out


def test_goal_bands_and_too_few_rounds(tmp_path: Path) -> None:
    summary = _summary()
    met = {"goal": 0.8, "met": True, "round_ratios": [0.5, 0.6, 0.55, 0.7, 0.65]}
    assert summary.goal_verdict(met)["verdict"] == "met"
    three = {"goal": 0.8, "met": True, "ours_rounds_s": [1, 1, 1], "peer_rounds_s": [2, 2, 2]}
    v = summary.goal_verdict(three)
    assert v["verdict"] == "met" and "covers the median 75% only" in v["note"]
    higher = {"goal": 2.0, "met": True, "better": "higher", "round_ratios": [2.5, 2.6, 2.4,
                                                                             2.7, 2.55]}
    assert summary.goal_verdict(higher)["verdict"] == "met"
    one = {"goal": 1.1, "met": True, "runs_s": {"ours": [1.0], "peer": [1.0]}}
    assert summary.goal_verdict(one)["verdict"] == "too few rounds"
    (tmp_path / "x.json").write_text(json.dumps({"name": "x", "ratio": 0.6, **met}))
    assert summary.main(str(tmp_path)) == 0


def _large(kill_met: bool) -> dict:
    """release-large.json as bench/bench_release.py --only large writes it (abridged)."""
    return {
        "name": "large 8 GB: promote vs crane", "ours_s": 120.0, "peer_s": 100.0, "ratio": 1.2,
        "goal": 1.05, "met": False, "reference": True, "round_ratios": [1.15, 1.25],
        "ours_peak_rss_mb": 90.0,
        "rss": {"name": "large: peak RSS of promote", "row": True, "ratio": None,
                "goal": "<= 200 MB", "met": True, "value": "91 MB", "peak_rss_mb": 91.0},
        "kill_rerun": {"name": "large: kill -9 halfway + rerun", "row": True,
                       "ratio": 1.02 if kill_met else 1.31, "goal": "<= 1.05x",
                       "met": kill_met, "value": "1.020x the image's bytes",
                       "bytes_killed_run": 4_000_000_000, "bytes_rerun": 4_100_000_000},
        "image": {"compressed_bytes": 8_002_000_000, "layers": 63},
    }


def test_the_large_row_is_printed_with_its_outcomes(tmp_path: Path, capsys) -> None:
    summary = _summary()
    (tmp_path / "release-large.json").write_text(json.dumps(_large(kill_met=True)))
    # the time ratio misses record one's 1.05x, but that goal is a reference: not counted
    assert summary.main(str(tmp_path)) == 0
    out = capsys.readouterr().out
    lines = {line.split("  ")[0].strip(): line for line in out.splitlines()}
    assert "reference goal, not counted" in lines["large 8 GB: promote vs crane"]
    assert "[1.150, 1.250]" in lines["large 8 GB: promote vs crane"]
    rss = next(line for line in out.splitlines() if "peak RSS of promote" in line)
    assert "met" in rss and "91 MB" in rss and "<= 200 MB" in rss
    kill = next(line for line in out.splitlines() if "kill -9 halfway" in line)
    assert "1.02" in kill and "met" in kill and "MISSED" not in kill
    assert "not measured" not in out
    (tmp_path / "release-large.json").write_text(json.dumps(_large(kill_met=False)))
    assert summary.main(str(tmp_path)) == 1  # a missed outcome goal counts
    kill = next(line for line in capsys.readouterr().out.splitlines() if "kill -9" in line)
    assert "MISSED" in kill and "1.31" in kill


def test_the_large_row_is_not_measured_when_its_file_is_absent(tmp_path: Path,
                                                              capsys) -> None:
    summary = _summary()
    (tmp_path / "release.json").write_text(json.dumps(
        {"name": "release pair", "ratio": 0.8, "goal": 0.9, "met": True,
         "round_ratios": [0.8, 0.7, 0.85, 0.75, 0.8]}))
    assert summary.main(str(tmp_path)) == 0  # "not measured" is no missed goal
    out = capsys.readouterr().out
    [line] = [line for line in out.splitlines() if line.startswith("large:")]
    assert "8 GB" in line and "not measured" in line and "--only large" in line
