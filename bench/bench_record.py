"""Benchmark at record scale: the generated 63-layer image (tests/registry/record.py, ~1.4 GB
uncompressed at full size, an official gzip -6 copy and a gzip -1 mirror), each row against
crane and skopeo in the same run, every process measured from outside (wall clock, and peak
RSS and CPU of exactly that program by GNU time, record.run_measured):

- `verify-copy`: `imagekit verify-mirror OFFICIAL MIRROR --diffids` vs `crane validate --remote
  MIRROR` (downloads, decompresses and re-hashes every layer) and `skopeo copy docker://MIRROR
  dir:` (downloads and checks every blob's digest: the nearest skopeo has); goal <= 0.5x crane;
- `promote`: `imagekit promote SRC --to DST` (read-back and evidence included) vs `crane copy`
  and `skopeo copy`, each into a freshly started EMPTY docker-registry; goal <= 1.0x crane, and
  client CPU <= 1.5x crane's;
- `promote through a cutting relay`: the same through tests/registry/proxy.py cutting every blob
  download after 24-64 MiB (times --scale; a relay that drops long transfers); ours must PASS,
  and the relay's own count of blob bytes sent over the image's bytes is reported; a peer that
  fails is reported as failed (exit code), not timed.

The image is generated once and cached by content (IMAGEKIT_RECORD_CACHE, default
/var/lib/imagekit/bench/record), pushed once into a source registry kept in that cache.

    python bench/bench_record.py --out bench/results [--scale 1.0] [--rounds 1] [--port-base 5130]

Writes DIR/record.json (rows nested as bench/summary.py reads them).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from imagekit.registry import RegistryClient  # noqa: E402
from tests.registry import record  # noqa: E402
from tests.registry.proxy import FaultProxy  # noqa: E402
from tests.registry.scratch import ScratchRegistry  # noqa: E402

MIB = 1 << 20
GOAL_PROMOTE = 1.0
GOAL_CPU = 1.5
GOAL_VERIFY = 0.5
REGISTRY_BIN = os.environ.get("IMAGEKIT_BENCH_REGISTRY_BIN") or shutil.which(
    "docker-registry") or "/usr/bin/docker-registry"


def peers(wanted: list[str]) -> dict[str, str]:
    found = {tool: shutil.which(tool) for tool in wanted}
    if all(found.values()):
        return {tool: str(path) for tool, path in found.items()}
    from imagekit.infra.peers import ensure_peer  # noqa: PLC0415
    return {tool: str(ensure_peer(tool)) for tool in wanted}


def row(name: str, runs: dict[str, list[record.Measured]], goal: float | None = None,
        extra: dict | None = None) -> dict:
    """One bench row: ours vs crane (ratio), skopeo beside it; medians of the passing runs."""
    def figures(tool: str) -> dict:
        done = [m for m in runs.get(tool, []) if m.code == 0]
        failed = [m for m in runs.get(tool, []) if m.code != 0]
        if not done:
            return {"ok": False, "exit": failed[0].code if failed else None,
                    "error": " ".join(failed[0].stderr.split())[-600:]
                    if failed else "not run"}
        return {"ok": True, "s": round(statistics.median(m.seconds for m in done), 3),
                "cpu_s": round(statistics.median(m.cpu_s for m in done), 3),
                "peak_rss_mb": round(max(m.peak_rss_mb for m in done), 1),
                "rounds_s": [round(m.seconds, 3) for m in done], "failed_runs": len(failed)}
    ours, crane, skopeo = figures("ours"), figures("crane"), figures("skopeo")
    result = {"name": name, "ours": ours, "crane": crane, "skopeo": skopeo}
    if ours["ok"] and crane["ok"]:
        result.update(ours_s=ours["s"], peer_s=crane["s"],
                      ratio=round(ours["s"] / crane["s"], 3),
                      cpu_ratio=round(ours["cpu_s"] / max(crane["cpu_s"], 1e-3), 3))
    elif ours["ok"]:
        result.update(ours_s=ours["s"], peer_s=float("nan"), ratio=float("nan"))
    if goal is not None:
        result["goal"] = goal
        result["met"] = bool(ours["ok"] and crane["ok"] and result["ratio"] <= goal)
    result.update(extra or {})
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--scale", type=float,
                        default=float(os.environ.get("IMAGEKIT_RECORD_BENCH_SCALE", "1.0")))
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--port-base", type=int,
                        default=int(os.environ.get("IMAGEKIT_BENCH_RECORD_PORT_BASE", "5130")),
                        help="two consecutive loopback ports (source, destination)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    tools = peers(["crane", "skopeo"])
    image = record.generate(args.scale, log=lambda line: print(line, flush=True))
    ik = [sys.executable, "-m", "imagekit"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(Path(__file__).resolve().parents[1])]
        + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]),
        # bytecode cached as an installed imagekit has it (see bench_promote.py)
        "PYTHONPYCACHEPREFIX": str(record.cache_root() / "pycache")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    subprocess.run([*ik, "--help"], env=env, stdout=subprocess.DEVNULL, check=True)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(Path(__file__).resolve()
                    .parents[1] / "imagekit")], env=env, stdout=subprocess.DEVNULL, check=False)
    source = ScratchRegistry(record.cache_root() / f"registry-{image.layout['key']}",
                             args.port_base, binary=REGISTRY_BIN).start()
    dest_root = Path(tempfile.mkdtemp(prefix="imagekit-record-dst-"))
    dest_port = args.port_base + 1
    runs: dict[str, dict[str, list[record.Measured]]] = {
        "verify": {}, "promote": {}, "relay": {}}
    relay_ratios: list[float] = []
    cut = (max(MIB // 4, int(24 * MIB * args.scale)), max(MIB // 2, int(64 * MIB * args.scale)))
    cuts: list[int] = []
    load_before = os.getloadavg()
    try:
        with RegistryClient(source.address) as client:
            official = record.push_record(client, image, "official")
            mirror = record.push_record(client, image, "mirror")
        total = image.total_bytes("official")
        repo_path = official.split("/", 1)[1]
        dst_ref = f"127.0.0.1:{dest_port}/{repo_path}"

        def fresh() -> ScratchRegistry:
            shutil.rmtree(dest_root, ignore_errors=True)
            return ScratchRegistry(dest_root, dest_port, binary=REGISTRY_BIN).start()

        def commands(src: str) -> dict[str, list[str]]:
            evidence = tempfile.mkdtemp(prefix="bench-evidence-")
            return {
                "ours": [*ik, "promote", src, "--to", dst_ref, "--json", "--evidence-dir",
                         evidence, "--force", "--reason", "record-scale benchmark"],
                "crane": [tools["crane"], "copy", "--insecure", src, dst_ref],
                "skopeo": [tools["skopeo"], "copy", "--src-tls-verify=false",
                           "--dest-tls-verify=false", "--quiet", f"docker://{src}",
                           f"docker://{dst_ref}"]}

        for _ in range(args.rounds):
            # promote, direct
            for tool, argv in commands(official).items():
                dest = fresh()
                try:
                    runs["promote"].setdefault(tool, []).append(
                        record.run_measured(argv, env=env if tool == "ours" else None))
                finally:
                    dest.stop()
            # promote through the cutting relay
            for tool in ("ours", "crane", "skopeo"):
                dest = fresh()
                try:
                    with FaultProxy(source.address, cut_blobs=cut) as relay:
                        src = f"{relay.address}/{repo_path}"
                        measured = record.run_measured(commands(src)[tool],
                                                       env=env if tool == "ours" else None)
                        runs["relay"].setdefault(tool, []).append(measured)
                        if tool == "ours" and measured.code == 0:
                            relay_ratios.append(relay.stats["blob_bytes"] / total)
                            cuts.append(relay.stats["cut-blob"])
                finally:
                    dest.stop()
            # verify-mirror --diffids official vs the recompressed mirror
            with tempfile.TemporaryDirectory(prefix="bench-evidence-") as evidence, \
                    tempfile.TemporaryDirectory(prefix="bench-skopeo-dir-") as target:
                for tool, argv in {
                        "ours": [*ik, "verify-mirror", official, mirror, "--diffids", "--json",
                                 "--evidence-dir", evidence],
                        "crane": [tools["crane"], "validate", "--insecure", "--remote", mirror],
                        "skopeo": [tools["skopeo"], "copy", "--src-tls-verify=false",
                                   "--quiet", f"docker://{mirror}", f"dir:{target}/m"],
                }.items():
                    runs["verify"].setdefault(tool, []).append(
                        record.run_measured(argv, env=env if tool == "ours" else None))
                    shutil.rmtree(f"{target}/m", ignore_errors=True)
    finally:
        source.stop()
        shutil.rmtree(dest_root, ignore_errors=True)
    load_after = os.getloadavg()

    promote_row = row("record: promote vs crane copy", runs["promote"], GOAL_PROMOTE)
    if "cpu_ratio" in promote_row:
        promote_row["cpu_goal"] = GOAL_CPU
        promote_row["cpu_met"] = promote_row["cpu_ratio"] <= GOAL_CPU
        promote_row["met"] = promote_row["met"] and promote_row["cpu_met"]
    relay_row = row("record: promote via cutting relay", runs["relay"], extra={
        "relay_cut_every_mib": [round(c / MIB, 2) for c in cut], "relay_cuts": cuts,
        "relay_bytes_ratio": [round(r, 6) for r in relay_ratios]})
    relay_row["goal"] = "ours PASS"
    relay_row["met"] = bool(relay_row["ours"]["ok"] and relay_ratios
                            and max(relay_ratios) <= 1.01)
    verify_row = row("record: verify-mirror --diffids vs crane validate", runs["verify"],
                     GOAL_VERIFY)
    result = {
        "name": "record-scale", "scale": args.scale, "layers": record.LAYERS,
        "uncompressed_bytes": image.uncompressed_bytes, "official_bytes": total,
        "mirror_bytes": image.total_bytes("mirror"), "rounds": args.rounds,
        "generated_s": image.layout.get("generated_s"), "cpus": os.cpu_count(),
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in load_after],
        "promote": promote_row, "relay": relay_row, "verify_copy": verify_row,
        "measured": "wall clock per process; peak RSS and CPU of that program by GNU time "
                    "(the kernel's rusage of the child), measured from outside",
    }
    (args.out / "record.json").write_text(json.dumps(result, indent=2) + "\n")
    for r in (verify_row, promote_row, relay_row):
        def fmt(f: dict) -> str:
            return (f"{f['s']:.2f}s cpu {f['cpu_s']:.2f}s rss {f['peak_rss_mb']:.0f}MB"
                    if f["ok"] else f"FAILED (exit {f.get('exit')}: {f.get('error', '')[:120]})")
        print(f"{r['name']}: imagekit {fmt(r['ours'])} | crane {fmt(r['crane'])} | skopeo "
              f"{fmt(r['skopeo'])} | ratio {r.get('ratio')} cpu ratio {r.get('cpu_ratio')} "
              f"goal {r.get('goal')} {'MET' if r.get('met') else 'NOT MET'}")
    print(f"relay: {cuts} cuts, bytes ratio {relay_ratios}; image {total / 1e6:.0f} MB "
          f"({image.uncompressed_bytes / 1e6:.0f} MB uncompressed), {record.LAYERS} layers; "
          f"load {load_before[0]:.1f} -> {load_after[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
