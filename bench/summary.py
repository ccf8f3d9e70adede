"""Print every benchmark result of a run side by side: ours vs the peer measured in the same run,
each goal ratio with its interval over the paired rounds.

Each bench script writes DIR/<name>.json with at least name, ours_s, peer_s, ratio, goal, met
(ratio = ours / peer time, lower is better, unless the file says `"better": "higher"`); a
nested figure without `met` is context, not a goal. The paired rounds are `round_ratios` (or
`ours_rounds_s` / `peer_rounds_s`, round by round); their median's order-statistic interval
(imagekit/stats.py, 90 %) decides: "met" only when the interval's worse end meets the goal,
"missed" when its better end misses it, "within noise" otherwise. Fewer rounds than a 90 %
interval needs (5): the interval is (min, max) with its own, lower coverage, said beside it.
Exits 1 when a goal was missed, so `make bench` says so plainly; the numbers are kept in DIR
either way. A nested figure marked `"row": true` is a row even without a ratio (an outcome
goal such as a peak RSS bound, its `value` printed beside the verdict); a goal marked
`"reference": true` is judged and printed but not counted as missed (a goal of another row,
shown for comparison). The large-image row (`bench/bench_release.py --only large`, its own
release-large.json, not part of `make bench`) is printed as "not measured" when its file is
absent.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from imagekit import stats  # noqa: E402


def round_ratios(result: dict) -> list[float]:
    if result.get("round_ratios"):
        return [float(r) for r in result["round_ratios"]]
    ours, peer = result.get("ours_rounds_s"), result.get("peer_rounds_s")
    if ours and peer and len(ours) == len(peer):
        return [a / b for a, b in zip(ours, peer, strict=True) if b]
    runs = result.get("runs_s") or {}
    if runs.get("ours") and runs.get("peer") and len(runs["ours"]) == len(runs["peer"]):
        return [a / b for a, b in zip(runs["ours"], runs["peer"], strict=True) if b]
    return []


def goal_verdict(result: dict, confidence: float = stats.CONFIDENCE) -> dict[str, Any]:
    """{"verdict", "interval", "coverage", "rounds", "note"} of one goal over its paired rounds."""
    if not isinstance(result.get("goal"), (int, float)) or isinstance(result["goal"], bool):
        # a goal that is an outcome, not a ratio ("ours PASS" through the cutting relay)
        note = f"goal: {result.get('goal')}" if "value" not in result else str(result["value"])
        return {"verdict": "met" if result.get("met") else "missed", "rounds": None,
                "median_ratio": None, "interval": None, "coverage": None,
                "note": note, "rule": "an outcome: met when it held"}
    ratios = round_ratios(result)
    better = "higher" if result.get("better") == "higher" else "lower"
    summary = stats.summarize(ratios, confidence)
    note = None
    if summary.low is None and len(ratios) >= 2:  # too few for the confidence: (min, max)
        coverage = 1 - 2 * 0.5 ** len(ratios)
        summary = stats.Summary(ratios, len(ratios), summary.statistic, min(ratios),
                                max(ratios), coverage, confidence)
        note = (f"{len(ratios)} rounds: (min, max) covers the median {coverage:.0%} only "
                f"(a {confidence:.0%} interval needs {stats.min_samples(confidence)})")
    verdict = stats.goal_band(summary, float(result["goal"]), better)
    return {"verdict": verdict, "rounds": len(ratios), "median_ratio": summary.statistic,
            "interval": [summary.low, summary.high] if summary.low is not None else None,
            "coverage": summary.coverage, "note": note,
            "rule": "met: the interval's worse end meets the goal; missed: its better end "
                    "misses it; within noise: otherwise"}


def rows(result: dict, prefix: str = "") -> list[tuple[str, dict]]:
    found = [(prefix + str(result.get("name", "?")), result)]
    for key, value in result.items():
        if isinstance(value, dict) and ("ratio" in value or value.get("row") is True):
            found += rows({"name": value.get("name", key), **value}, prefix="  ")
    return found


#: the row of bench_release.py --only large, printed as not measured while its file is absent
LARGE_FILE = "release-large.json"
LARGE_NOT_MEASURED = ("large: 8 GB+ image, 63 layers", "not measured (python "
                      "bench/bench_release.py --out DIR --only large --large-gb 8)")


def _num(x: Any, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}g}" if isinstance(x, float) else str(x)


def main(directory: str) -> int:
    results = sorted(Path(directory).glob("*.json"))
    if not results:
        print(f"no benchmark results in {directory}")
        return 1
    missed = 0
    print(f"{'benchmark':32} {'ours s':>8} {'peer s':>8} {'ratio':>7} {'interval':>15} "
          f"{'goal':>6}  verdict")
    for path in results:
        for name, result in rows(json.loads(path.read_text())):
            span = ""
            if "met" not in result:  # a figure shown for context, with no goal of its own
                verdict, note = "info", None
            else:
                v = goal_verdict(result)
                verdict, note = v["verdict"], v["note"]
                if v["interval"]:
                    span = f"[{v['interval'][0]:.3f}, {v['interval'][1]:.3f}]"
                if result.get("reference") is True:
                    note = "reference goal, not counted" + (f"; {note}" if note else "")
                else:
                    missed += verdict == "missed"
                if verdict == "too few rounds":
                    verdict = "too few rounds to judge"
            shown = verdict.upper() if verdict == "missed" else verdict
            print(f"{name[:32]:32} {_num(result.get('ours_s')):>8} "
                  f"{_num(result.get('peer_s')):>8} {_num(result.get('ratio')):>7} "
                  f"{span:>15} {_num(result.get('goal', '-')):>6}  {shown}"
                  + (f"  ({note})" if note else ""))
        cpu = json.loads(path.read_text()).get("cpu_s")
        if cpu:  # whole-process CPU seconds, ours and the peers', from the same run
            print("  cpu s (median): " + ", ".join(f"{k} {v}" for k, v in cpu.items()))
    if not (Path(directory) / LARGE_FILE).exists():
        name, verdict = LARGE_NOT_MEASURED
        print(f"{name[:32]:32} {'-':>8} {'-':>8} {'-':>7} {'':>15} {'-':>6}  {verdict}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "bench/results"))
