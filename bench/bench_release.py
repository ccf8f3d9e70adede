"""Benchmark: a release (two images) in one `imagekit promote` against `crane copy` of the same
two, one after the other, as a script runs them; crane measured in the same run.

Every round goes into a freshly started EMPTY docker-registry, the tools interleaved (ours,
crane pair, ours, ...) so load from other work on the machine falls on both alike; each round's
ratio (ours / crane's pair of the same round) is kept, and bench/summary.py judges each goal by
the interval of the paired rounds' median:

- `pair`: two generated images of one base (two shared layers, two of their own, `--layer-mb`
  each; the two stand-in engine images of a release share their CUDA base the same way):
  `imagekit promote A B --to DST/release` <= 0.9x `crane copy A DST/release/a` then
  `crane copy B DST/release/b`;
- `record pair`: the record-scale image (tests/registry/record.py, 63 layers) as its official
  gzip -6 copy and its gzip -1 mirror: two 63-layer images, no blob in common, <= 0.85x;
- `record one`: the official copy alone, `imagekit promote` <= 1.05x `crane copy`.

Every process is measured from outside (record.run_measured: wall clock, and peak RSS and CPU
of exactly that program by GNU time).

    python bench/bench_release.py --out bench/results [--rounds 3] [--scale 1.0]
                                  [--layer-mb 50] [--port-base 5140]

Writes DIR/release.json (rows nested as bench/summary.py reads them).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_promote import cli_process  # noqa: E402  (bench/ is on sys.path: the script's folder)

from imagekit.registry import RegistryClient  # noqa: E402
from tests.registry import record  # noqa: E402
from tests.registry.scratch import ScratchRegistry  # noqa: E402

GOAL_PAIR = 0.9
GOAL_RECORD_PAIR = 0.85
GOAL_RECORD_ONE = 1.05
REGISTRY_BIN = os.environ.get("IMAGEKIT_BENCH_REGISTRY_BIN") or shutil.which(
    "docker-registry") or "/usr/bin/docker-registry"
CACHE = Path(os.environ.get("IMAGEKIT_BENCH_CACHE", "/tmp/imagekit-bench"))


def crane() -> str:
    found = shutil.which("crane")
    if found:
        return found
    from imagekit.infra.peers import ensure_peer  # noqa: PLC0415
    return str(ensure_peer("crane"))


def pair_images(registry: ScratchRegistry, layer_mb: int) -> list[str]:
    """Two images of one base, pushed once (cached in the source registry's folder)."""
    from tests.registry.images import layer_tar, push_image  # noqa: PLC0415

    refs = []
    with RegistryClient(registry.address) as client:
        base = None
        for name, seed in (("vllm", 2001), ("sglang", 2002)):
            repo, tag = f"bench/{name}", f"b{layer_mb}"
            refs.append(f"{registry.address}/{repo}:{tag}")
            if client.manifest_exists(repo, tag) is not None:
                continue
            if base is None:
                base = [layer_tar(2000 + i, layer_mb << 20) for i in range(2)]
            own = [layer_tar(seed * 10 + i, layer_mb << 20) for i in range(2)]
            push_image(client, repo, tag, [*base, *own], compression="gzip", level=1)
    return refs


def row(name: str, ours: list[record.Measured], peer: list[list[record.Measured]],
        goal: float, peer_text: str) -> dict:
    """One goal: ours vs the peer's processes of the same round summed, paired by round."""
    for measured in [*ours, *(m for group in peer for m in group)]:
        if measured.code != 0:
            raise SystemExit(f"{name}: a process exited {measured.code}: "
                             f"{measured.stderr[-1500:]}")
    ours_s = [m.seconds for m in ours]
    peer_s = [sum(m.seconds for m in group) for group in peer]
    ratios = [a / b for a, b in zip(ours_s, peer_s, strict=True)]
    result = {
        "name": name, "ours_s": round(statistics.median(ours_s), 3),
        "peer_s": round(statistics.median(peer_s), 3),
        "ratio": round(statistics.median(ours_s) / statistics.median(peer_s), 3),
        "goal": goal, "peer": peer_text,
        "ours_rounds_s": [round(s, 3) for s in ours_s],
        "peer_rounds_s": [round(s, 3) for s in peer_s],
        "round_ratios": [round(r, 3) for r in ratios],
        "ours_cpu_s": round(statistics.median(m.cpu_s for m in ours), 3),
        "peer_cpu_s": round(statistics.median(sum(m.cpu_s for m in g) for g in peer), 3),
        "ours_peak_rss_mb": round(max(m.peak_rss_mb for m in ours), 1),
        "peer_peak_rss_mb": round(max(m.peak_rss_mb for g in peer for m in g), 1)}
    from summary import goal_verdict  # bench/summary.py (this folder is on sys.path)
    result["noise"] = goal_verdict(result)
    result["met"] = result["noise"]["verdict"] == "met"
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--layer-mb", type=int, default=50)
    parser.add_argument("--scale", type=float,
                        default=float(os.environ.get("IMAGEKIT_RECORD_BENCH_SCALE", "1.0")))
    parser.add_argument("--port-base", type=int,
                        default=int(os.environ.get("IMAGEKIT_BENCH_RELEASE_PORT_BASE", "5140")),
                        help="two consecutive loopback ports (source, destination)")
    parser.add_argument("--only", choices=("pair", "record"), default=None)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    CACHE.mkdir(parents=True, exist_ok=True)
    tool = crane()
    ik, env = cli_process(CACHE)     # bytecode cached as an installed imagekit has it
    source = ScratchRegistry(CACHE / "release-src", args.port_base, binary=REGISTRY_BIN).start()
    dest_root = Path(tempfile.mkdtemp(prefix="imagekit-release-dst-"))
    dest = f"127.0.0.1:{args.port_base + 1}"
    load_before = os.getloadavg()
    rows: dict[str, dict] = {}

    def fresh() -> ScratchRegistry:
        shutil.rmtree(dest_root, ignore_errors=True)
        return ScratchRegistry(dest_root, args.port_base + 1, binary=REGISTRY_BIN).start()

    def ours(refs: list[str]) -> record.Measured:
        registry = fresh()
        try:
            with tempfile.TemporaryDirectory(prefix="bench-evidence-") as evidence:
                return record.run_measured(
                    [*ik, "promote", *refs, "--to", f"{dest}/release", "--json",
                     "--evidence-dir", evidence, "--force", "--reason", "release benchmark"],
                    timeout=1800, env=env)
        finally:
            registry.stop()

    def cranes(refs: list[str], names: list[str]) -> list[record.Measured]:
        registry = fresh()
        try:
            return [record.run_measured([tool, "copy", "--insecure", ref,
                                         f"{dest}/release/{name}"], timeout=1800)
                    for ref, name in zip(refs, names, strict=True)]
        finally:
            registry.stop()

    def measure(refs: list[str], tags: list[str]) -> tuple[list, list]:
        mine, theirs = [], []
        for _ in range(args.rounds):  # interleaved
            mine.append(ours(refs))
            theirs.append(cranes(refs, tags))
        return mine, theirs

    try:
        if args.only in (None, "pair"):
            refs = pair_images(source, args.layer_mb)
            mine, theirs = measure(refs, [r.split("/", 2)[2].replace("bench/", "")
                                          for r in refs])
            rows["pair"] = row(f"release: 2 images x {4 * args.layer_mb} MB (shared base)",
                               mine, theirs, GOAL_PAIR, "crane copy A; crane copy B")
        if args.only in (None, "record"):
            image = record.generate(args.scale, log=lambda line: print(line, flush=True))
            with RegistryClient(source.address) as client:
                official = record.push_record(client, image, "official")
                mirror = record.push_record(client, image, "mirror")
            tag = official.rsplit("/", 1)[1]
            mine, theirs = measure([official, mirror], [tag, mirror.rsplit("/", 1)[1]])
            rows["record_pair"] = row(f"release: 2 record images, 63 layers (x{args.scale})",
                                      mine, theirs, GOAL_RECORD_PAIR,
                                      "crane copy OFFICIAL; crane copy MIRROR")
            mine, theirs = measure([official], [tag])
            rows["record_one"] = row(f"release: 1 record image, 63 layers (x{args.scale})",
                                     mine, theirs, GOAL_RECORD_ONE, "crane copy OFFICIAL")
    finally:
        source.stop()
        shutil.rmtree(dest_root, ignore_errors=True)
    load_after = os.getloadavg()
    first = next(iter(rows.values()))
    result = {**first, "name": first["name"], **{k: v for k, v in rows.items()
                                                 if v is not first},
              "cpus": os.cpu_count(), "rounds": args.rounds,
              "loadavg_before": [round(x, 2) for x in load_before],
              "loadavg_after": [round(x, 2) for x in load_after],
              "measured": "wall clock per process; the peer's two processes summed per round; "
                          "peak RSS and CPU of each program by GNU time"}
    (args.out / "release.json").write_text(json.dumps(result, indent=2) + "\n")
    for figure in rows.values():
        noise = figure["noise"]
        interval = noise["interval"]
        print(f"{figure['name']}: imagekit {figure['ours_s']:.2f}s vs {figure['peer']} "
              f"{figure['peer_s']:.2f}s: {figure['ratio']:.3f}x (paired rounds "
              f"{figure['round_ratios']}, interval {interval}), goal <= {figure['goal']}: "
              f"{noise['verdict']}; cpu {figure['ours_cpu_s']}s vs {figure['peer_cpu_s']}s; "
              f"peak RSS {figure['ours_peak_rss_mb']} MB vs {figure['peer_peak_rss_mb']} MB")
    print(f"load average {load_before[0]:.1f} -> {load_after[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
