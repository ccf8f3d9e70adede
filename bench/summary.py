"""Print every benchmark result of a run side by side: ours vs the peer measured in the same run.

Each bench script writes DIR/<name>.json with at least name, ours_s, peer_s, ratio, goal, met
(ratio = ours / peer time, lower is better, unless the file says otherwise); a nested figure
without `met` is context, not a goal. Exits 1 when a goal was missed, so `make bench` says so
plainly; the numbers are kept in DIR either way.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def rows(result: dict, prefix: str = "") -> list[tuple[str, dict]]:
    found = [(prefix + str(result.get("name", "?")), result)]
    for key, value in result.items():
        if isinstance(value, dict) and "ratio" in value:
            found += rows({"name": value.get("name", key), **value}, prefix=f"  ")
    return found


def main(directory: str) -> int:
    results = sorted(Path(directory).glob("*.json"))
    if not results:
        print(f"no benchmark results in {directory}")
        return 1
    missed = 0
    print(f"{'benchmark':40} {'ours s':>9} {'peer s':>9} {'ratio':>7} {'goal':>7}  verdict")
    for path in results:
        for name, result in rows(json.loads(path.read_text())):
            if "met" not in result:  # a figure shown for context, with no goal of its own
                verdict = "info"
            else:
                verdict = "met" if result["met"] else "MISSED"
                missed += not result["met"]
            print(f"{name[:40]:40} {result.get('ours_s', float('nan')):>9} "
                  f"{result.get('peer_s', float('nan')):>9} {result.get('ratio', '?'):>7} "
                  f"{result.get('goal', '-'):>7}  {verdict}")
        cpu = json.loads(path.read_text()).get("cpu_s")
        if cpu:  # whole-process CPU seconds, ours and the peers', from the same run
            print("  cpu s (median): " + ", ".join(f"{k} {v}" for k, v in cpu.items()))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "bench/results"))
