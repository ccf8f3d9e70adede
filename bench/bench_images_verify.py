"""`images verify`: a no-op rerun against the cold run it repeats (goal: <= 10% of it).

Cold = `imagekit images verify --no-cache` on a fresh evidence store: both fixed images rebuilt
without BuildKit's cache, pushed to staging, every probe run inside, verify-copy of the mirror.
No-op = the same command again without changes (median of 3): the records are keyed by base
digest, Dockerfile directory, build args and probe versions, so nothing is rebuilt or re-probed.
The stand-ins are made first and not timed (they are `imagekit standins build`'s business).
Both are timed as whole CLI invocations, interpreter start included.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GOAL = 0.10


def run(argv: list[str], env: dict[str, str]) -> float:
    started = time.monotonic()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    elapsed = time.monotonic() - started
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-3000:] + done.stderr[-3000:])
        raise SystemExit(f"{' '.join(argv[2:])} exited {done.returncode}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    ik = [sys.executable, "-m", "imagekit"]
    with tempfile.TemporaryDirectory(prefix="bench-images-verify-") as evidence:
        env = {**os.environ, "IMAGEKIT_EVIDENCE_DIR": evidence}
        run([*ik, "standins", "build"], env)
        cold = run([*ik, "images", "verify", "--no-cache", "--json"], env)
        noops = [run([*ik, "images", "verify", "--json"], env) for _ in range(args.repeat)]
    noop = statistics.median(noops)
    ratio = noop / cold
    result = {"name": "images-verify-noop-vs-cold", "ours_s": round(noop, 2),
              "peer_s": round(cold, 2), "ratio": round(ratio, 4), "goal": GOAL,
              "met": ratio <= GOAL, "noop_runs_s": [round(x, 2) for x in noops],
              "peer": "the cold run (--no-cache, fresh evidence) of the same command"}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "images_verify.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"images verify: cold {cold:.1f} s, no-op rerun {noop:.2f} s (median of "
          f"{len(noops)}), ratio {ratio:.3f} (goal <= {GOAL})")
    return 0 if result["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
