"""bench/summary.py: each goal judged on the interval of its paired rounds."""

from __future__ import annotations

import importlib.util
import json
import sys
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
