"""Promote at crane's speed: `imagekit promote` as a process vs `crane copy`,
paired and interleaved (crane, imagekit, crane, imagekit, ...) so the machine's load falls on
both, at record scale (tests/registry/record.py: 63 layers, ~1.1 GB gzip'ed) and on the 4 x
150 MB image of bench_promote.py, each run into a freshly started EMPTY docker-registry.

The primary figure is CLIENT CPU seconds (user + system of the whole process tree, from
outside: `resource.getrusage(RUSAGE_CHILDREN)` around each run); the wall ratio is the median
of the per-pair ratios. The registries' own CPU is recorded per run (it is the same whoever the
client is, and on 2 cores it is the floor under any client's wall time). imagekit's run includes
its read-back and its evidence, exactly as a user runs it: by default the `imagekit` program of
this tree's wheel installed by pip into a fresh venv (bench/installed.py: no test extra, bytecode
compiled by pip); `--checkout` runs `python -m imagekit` from this checkout's venv instead.

    python bench/bench_parity.py [--out bench/results] [--pairs 3] [--port-base 5140]
                                 [--only record|small] [--scale 1.0] [--profile DIR]
                                 [--baseline DIR] [--checkout]

`--baseline DIR`: a checkout of other imagekit code (e.g. `git worktree add /tmp/base main`) run
as a third tool in every round (crane, baseline, this checkout), so a before/after figure is
taken under the same load: its medians and its ratio to crane are printed beside this one's.

`--profile DIR`: one extra imagekit run per image under `py-spy record` (all threads, native
frames off, 100 Hz; a speedscope JSON and a raw flame file) for where the CPU goes.

Prints one line per image: the medians, both ratios and their goals (record: wall <= 1.0x,
client CPU <= 1.5x; 4 x 150 MB: wall <= 1.15x), MET / NOT MET. Writes DIR/parity.json.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import installed  # noqa: E402
from bench_promote import ensure_image, process_cpu  # noqa: E402

from imagekit.registry import RegistryClient  # noqa: E402
from tests.registry import record  # noqa: E402
from tests.registry.scratch import ScratchRegistry  # noqa: E402

GOALS: dict[str, dict[str, float | None]] = {
    "record": {"wall": 1.0, "cpu": 1.5}, "small": {"wall": 1.15, "cpu": None}}
REGISTRY_BIN = os.environ.get("IMAGEKIT_BENCH_REGISTRY_BIN") or shutil.which(
    "docker-registry") or "/usr/bin/docker-registry"


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(argv: list[str], env: dict[str, str] | None, cwd: str | None = None
        ) -> tuple[float, float, str]:
    """(wall s, CPU s of the process tree, error tail or '') of one run."""
    cpu = children_cpu()
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, check=False)
    wall = time.perf_counter() - started
    error = "" if done.returncode == 0 else (
        f"exit {done.returncode}: " + " ".join((done.stderr or done.stdout)
                                               .decode(errors="replace").split())[-400:])
    return wall, children_cpu() - cpu, error


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--port-base", type=int, default=5140,
                        help="three consecutive loopback ports (record source, small source, "
                             "destination)")
    parser.add_argument("--only", choices=["record", "small"])
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--profile", type=Path)
    parser.add_argument("--baseline", type=Path,
                        help="other imagekit code (its checkout root), measured in every round")
    parser.add_argument("--checkout", action="store_true",
                        help="run this checkout (python -m imagekit) instead of the installed "
                             "wheel")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    crane = shutil.which("crane") or "/usr/bin/crane"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]),
        # bytecode cached as an installed imagekit has it (see bench_promote.py)
        "PYTHONPYCACHEPREFIX": str(record.cache_root() / "pycache")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    ik = [sys.executable, "-m", "imagekit"]
    subprocess.run([*ik, "--help"], env=env, stdout=subprocess.DEVNULL, check=True)
    ours_env: dict[str, str] | None = env
    if not args.checkout:  # the user's program, its environment without this checkout's paths
        ik = [str(installed.install(record.cache_root() / "user-venv"))]
        ours_env = {k: v for k, v in os.environ.items()
                    if k not in ("PYTHONPATH", "PYTHONPYCACHEPREFIX", "PYTHONDONTWRITEBYTECODE")}
    print(f"imagekit as: {' '.join(ik)}", flush=True)
    # bytecode for the code run as `python -m imagekit` (the installed wheel has pip's)
    for code in [*([ROOT] if args.checkout else []),
                 *([args.baseline.resolve()] if args.baseline else [])]:
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(code / "imagekit")],
                       env=env, stdout=subprocess.DEVNULL, check=False)
    started = time.monotonic()
    sources: dict[str, tuple[ScratchRegistry, str]] = {}
    try:
        if args.only in (None, "record"):
            image = record.generate(args.scale, log=lambda line: print(line, flush=True))
            reg = ScratchRegistry(record.cache_root() / f"registry-{image.layout['key']}",
                                  args.port_base, binary=REGISTRY_BIN).start()
            with RegistryClient(reg.address) as client:
                sources["record"] = (reg, record.push_record(client, image, "official"))
        if args.only in (None, "small"):
            cache = Path(os.environ.get("IMAGEKIT_BENCH_CACHE", "/tmp/imagekit-bench"))
            reg = ScratchRegistry(cache / "src-registry", args.port_base + 1,
                                  binary=REGISTRY_BIN).start()
            sources["small"] = (reg, ensure_image(reg, 4, 150)[0])
        dest_port = args.port_base + 2
        dest_root = Path(tempfile.mkdtemp(prefix="imagekit-parity-dst-"))
        load_before = os.getloadavg()
        results: dict[str, dict] = {}
        for name, (src_reg, src) in sources.items():
            repo_path = src.split("/", 1)[1]
            dst = f"127.0.0.1:{dest_port}/{repo_path}"
            tools = ["crane", *(["baseline"] if args.baseline else []), "ours"]
            rounds: dict[str, list[dict]] = {tool: [] for tool in tools}
            for _ in range(args.pairs):
                for tool in tools:
                    evidence = tempfile.mkdtemp(prefix="parity-evidence-")
                    program = ik if tool == "ours" else [sys.executable, "-m", "imagekit"]
                    argv = [crane, "copy", "--insecure", src, dst] if tool == "crane" else [
                        *program, "promote", src, "--to", dst, "--json", "--evidence-dir", evidence,
                        "--force", "--reason", "parity benchmark"]
                    tool_env, cwd = {"crane": None, "ours": ours_env}.get(tool, env), None
                    if tool == "baseline":  # `python -m` puts the cwd first on sys.path
                        cwd = str(args.baseline.resolve())
                        tool_env = {**env, "PYTHONPATH": cwd}
                    shutil.rmtree(dest_root, ignore_errors=True)
                    dest = ScratchRegistry(dest_root, dest_port, binary=REGISTRY_BIN).start()
                    try:
                        src_cpu, dst_cpu = process_cpu(src_reg), process_cpu(dest)
                        wall, cpu, error = run(argv, tool_env, cwd)
                        rounds[tool].append({
                            "s": round(wall, 3), "cpu_s": round(cpu, 3), "error": error,
                            "src_registry_cpu_s": round(process_cpu(src_reg) - src_cpu, 3),
                            "dst_registry_cpu_s": round(process_cpu(dest) - dst_cpu, 3),
                            "load1": round(os.getloadavg()[0], 2)})
                    finally:
                        dest.stop()
                        shutil.rmtree(evidence, ignore_errors=True)
                    print(f"{name} {tool}: {rounds[tool][-1]}", flush=True)
            ok = all(not r["error"] for rs in rounds.values() for r in rs)
            baseline: dict[str, object] = {}
            if args.baseline:
                base_pairs = list(zip(rounds["crane"], rounds["baseline"], strict=True))
                baseline = {"baseline": {
                    "code": str(args.baseline), "runs": rounds["baseline"],
                    "s": statistics.median(b["s"] for _, b in base_pairs),
                    "cpu_s": statistics.median(b["cpu_s"] for _, b in base_pairs),
                    "wall_ratio": round(statistics.median(
                        b["s"] / c["s"] for c, b in base_pairs), 3),
                    "cpu_ratio": round(statistics.median(
                        b["cpu_s"] / max(c["cpu_s"], 1e-3) for c, b in base_pairs), 3)}}
            pairs = list(zip(rounds["crane"], rounds["ours"], strict=True))
            wall_ratio = statistics.median(o["s"] / c["s"] for c, o in pairs)
            cpu_ratio = statistics.median(o["cpu_s"] / max(c["cpu_s"], 1e-3) for c, o in pairs)
            goal = GOALS[name]
            results[name] = {
                # bench/summary.py's row: ratio = wall, ours / crane, per pair in round_ratios
                "name": f"parity {name}: promote vs crane copy",
                "ours_s": statistics.median(o["s"] for _, o in pairs),
                "peer_s": statistics.median(c["s"] for c, _ in pairs),
                "ratio": round(wall_ratio, 3), "goal": goal["wall"],
                "met": bool(ok and wall_ratio <= (goal["wall"] or 0)),
                "round_ratios": [round(o["s"] / c["s"], 3) for c, o in pairs],
                "ok": ok, "pairs": pairs, "wall_ratio": round(wall_ratio, 3),
                "cpu_ratio": round(cpu_ratio, 3), "wall_goal": goal["wall"],
                "cpu_goal": goal["cpu"],
                "crane_s": statistics.median(c["s"] for c, _ in pairs),
                "crane_cpu_s": statistics.median(c["cpu_s"] for c, _ in pairs),
                "ours_cpu_s": statistics.median(o["cpu_s"] for _, o in pairs),
                "wall_met": ok and wall_ratio <= goal["wall"],
                "cpu_met": None if goal["cpu"] is None else ok and cpu_ratio <= goal["cpu"],
                **baseline}
            if args.profile:
                args.profile.mkdir(parents=True, exist_ok=True)
                shutil.rmtree(dest_root, ignore_errors=True)
                dest = ScratchRegistry(dest_root, dest_port, binary=REGISTRY_BIN).start()
                evidence = tempfile.mkdtemp(prefix="parity-evidence-")
                try:
                    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
                    subprocess.run([spy, "record", "-s", "-r", "100", "-f", "raw", "-o",
                                    str(args.profile / f"{name}.raw.txt"), "--",
                                    *ik, "promote", src, "--to", dst, "--json",
                                    "--evidence-dir", evidence, "--force", "--reason",
                                    "profile"], env=ours_env, stdout=subprocess.DEVNULL,
                                   check=False)
                finally:
                    dest.stop()
                    shutil.rmtree(evidence, ignore_errors=True)
        shutil.rmtree(dest_root, ignore_errors=True)
    finally:
        for reg, _ in sources.values():
            reg.stop()
    result: dict[str, object] = {"name": "promote-parity", "cpus": os.cpu_count(),
              "imagekit": " ".join(ik), "installed_wheel": not args.checkout,
              "loadavg_before": [round(x, 2) for x in load_before],
              "loadavg_after": [round(x, 2) for x in os.getloadavg()],
              "seconds": round(time.monotonic() - started, 1), **results,
              "measured": "wall clock per process; CPU = user+sys of the process tree "
                          "(RUSAGE_CHILDREN around each run); pairs crane then imagekit"}
    (args.out / "parity.json").write_text(json.dumps(result, indent=2) + "\n")
    for name, r in results.items():
        cpu_goal = f" (goal <= {r['cpu_goal']})" if r["cpu_goal"] else ""
        print(f"{name}: imagekit {r['ours_s']:.2f}s cpu {r['ours_cpu_s']:.2f}s | crane "
              f"{r['crane_s']:.2f}s cpu {r['crane_cpu_s']:.2f}s | wall {r['wall_ratio']}x "
              f"(goal <= {r['wall_goal']}) {'MET' if r['wall_met'] else 'NOT MET'} | "
              f"cpu {r['cpu_ratio']}x{cpu_goal}"
              + ("" if r["cpu_met"] is None else f" {'MET' if r['cpu_met'] else 'NOT MET'}"))
        if "baseline" in r:
            b = r["baseline"]
            print(f"  baseline {b['code']}: {b['s']:.2f}s cpu {b['cpu_s']:.2f}s | wall "
                  f"{b['wall_ratio']}x | cpu {b['cpu_ratio']}x")
    print(f"load {load_before[0]:.2f} -> {os.getloadavg()[0]:.2f} on {os.cpu_count()} cpus; "
          f"{result['seconds']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
