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

Not in the default run: `--only large` (`--large-gb N`, default 8, or IMAGEKIT_BENCH_LARGE_GB),
one image of N GB (tests/registry/record.py `plan_large`: 63 layers of random content, three of
N/8 GB each, gzip -1, generated streamed and cached by content), written to its own
DIR/release-large.json:

- `imagekit promote` vs `crane copy`, `--rounds` (default 2 here) interleaved, each into a fresh
  empty registry: the ratio is reported against the 1.05x of `record one` for reference only;
- peak RSS of every `imagekit promote` process of the row (the rounds, the killed run, the
  rerun): <= 200 MB;
- kill -9 halfway: `imagekit promote` into a fresh registry through a relay that counts the
  bytes sent to it (tests/registry/throttle.py, no rate limit), killed when the relay has
  forwarded half the image's compressed bytes, then the same command again to completion
  through the same relay: (bytes of the killed run + bytes of the rerun) / the image's bytes
  <= 1.05x, the rerun exiting 0 with the image read back. The rerun resumes what the upload
  journal and the registry allow (imagekit/registry/push.py); its notes are kept in the JSON.

Disk: the generated image (about N GB, kept in the record cache), the source registry (about
N GB, kept under the bench cache so a rerun skips the push) and one destination at a time
(about N GB, removed after each round).

Every process is measured from outside (record.run_measured: wall clock, and peak RSS and CPU
of exactly that program by GNU time).

    python bench/bench_release.py --out bench/results [--rounds 3] [--scale 1.0]
                                  [--layer-mb 50] [--port-base 5140]
    python bench/bench_release.py --out bench/results --only large [--large-gb 8]

Writes DIR/release.json (rows nested as bench/summary.py reads them); `--only large` writes
DIR/release-large.json instead and leaves release.json as it is.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_promote import cli_process  # noqa: E402  (bench/ is on sys.path: the script's folder)

from imagekit.oci.digest import Digest  # noqa: E402
from imagekit.registry import RegistryClient  # noqa: E402
from tests.registry import record  # noqa: E402
from tests.registry.scratch import ScratchRegistry  # noqa: E402
from tests.registry.throttle import Throttle  # noqa: E402

GOAL_PAIR = 0.9
GOAL_RECORD_PAIR = 0.85
GOAL_RECORD_ONE = 1.05
GOAL_LARGE_RSS_MB = 200
GOAL_LARGE_RERUN = 1.05  # bytes sent by the killed run and the rerun / the image's bytes
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


def _du(path: Path) -> int:
    """Bytes of the files under `path` (what it holds on disk, about)."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def _hwm_kb(pid: int) -> int:
    """The peak RSS so far (VmHWM) of a running process, 0 once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _hop(stdout: str) -> dict:
    """The last hop of a one-image `promote --json`."""
    result = json.loads(stdout)
    if "hops" not in result and result.get("images"):
        result = result["images"][0].get("result") or result["images"][0]
    return result["hops"][-1]


def kill_and_rerun(ik: list[str], env: dict[str, str], source: str, image: record.RecordImage,
                   dest: ScratchRegistry, relay_port: int, work: Path) -> dict:
    """`imagekit promote` through a counting relay, kill -9 once half the image's bytes went
    through, then the same command to completion: the bytes of each, and the rerun's verdict."""
    image_bytes = image.total_bytes("official")
    half = image_bytes // 2
    target = f"127.0.0.1:{relay_port}/large/copy:v1"
    argv = [*ik, "promote", source, "--to", target, "--json", "--evidence-dir",
            str(work / "evidence"), "--force", "--reason", "large benchmark: kill -9 and rerun"]
    env = {**env, "IMAGEKIT_UPLOAD_JOURNAL": str(work / "journal")}
    with Throttle(dest.address, relay_port, None) as relay:
        started = time.monotonic()
        killed_log = (work / "killed.stderr").open("wb")
        killed = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=killed_log)
        peak_kb = 0
        while killed.poll() is None and relay.client_bytes < half:
            peak_kb = max(peak_kb, _hwm_kb(killed.pid))
            time.sleep(0.01)
        at_kill = relay.client_bytes
        if killed.poll() is None:
            peak_kb = max(peak_kb, _hwm_kb(killed.pid))
            killed.send_signal(signal.SIGKILL)
        killed.wait()
        killed_log.close()
        killed_err = (work / "killed.stderr").read_bytes()
        killed_s = time.monotonic() - started
        settled = -1  # what was in flight when it died still reaches the relay: let it land
        while settled != relay.client_bytes:
            settled = relay.client_bytes
            time.sleep(0.5)
        bytes_killed = relay.client_bytes
        journal = sorted(p.name for p in (work / "journal").glob("*.json"))
        relay.reset()
        rerun = record.run_measured(argv, timeout=3600, env=env)
        bytes_rerun = relay.client_bytes
    verified, read_back, notes, digest, blobs = False, None, [], None, []
    expected = str(image.manifest("official").digest)
    if rerun.code == 0:
        hop = _hop(rerun.stdout)
        notes, digest, blobs = hop.get("notes", []), hop.get("digest"), hop.get("blobs", [])
        verified = bool(hop.get("verified")) and digest == expected
        with RegistryClient(dest.address) as client:  # read back past the relay
            read_back = str(client.get_manifest("large/copy", "v1").digest)
            present = all(client.blob_exists("large/copy", Digest.parse(d["digest"]))
                          for d in image.descriptors("official"))
        verified = verified and read_back == expected and present
    ratio = (bytes_killed + bytes_rerun) / image_bytes
    held = killed.returncode == -signal.SIGKILL
    landed = [b for b in blobs if b.get("action") == "skipped"]  # committed by the killed run
    again = [b for b in blobs if b.get("action") == "copied"]
    landed_bytes = sum(b["size"] for b in landed)
    return {
        "name": "large: kill -9 halfway + rerun",
        "row": True, "ratio": round(ratio, 4), "goal": f"<= {GOAL_LARGE_RERUN}x",
        "goal_text": f"(bytes of the killed run + the rerun) <= {GOAL_LARGE_RERUN}x the image's "
                     "bytes, the rerun exiting 0 with the image read back",
        "met": bool(held and rerun.code == 0 and verified and ratio <= GOAL_LARGE_RERUN),
        "value": f"{ratio:.3f}x the image's bytes ({bytes_killed / 1e6:.0f} MB killed run + "
                 f"{bytes_rerun / 1e6:.0f} MB rerun of {image_bytes / 1e6:.0f} MB)",
        "image_bytes": image_bytes, "kill_at_bytes": half, "bytes_at_kill_signal": at_kill,
        "bytes_killed_run": bytes_killed, "bytes_rerun": bytes_rerun,
        "bytes_total": bytes_killed + bytes_rerun,
        "killed_exit": killed.returncode, "killed_after_s": round(killed_s, 2),
        "killed_peak_rss_mb": round(peak_kb / 1024, 1),
        "killed_stderr_tail": killed_err.decode(errors="replace")[-500:],
        "journal_entries_after_kill": len(journal),
        "blobs_landed_by_killed_run": len(landed), "bytes_landed_by_killed_run": landed_bytes,
        "blobs_sent_by_rerun": len(again),
        "bytes_resumed_by_rerun": sum(b["size"] - b.get("bytes_moved", 0) for b in again),
        # sent by the killed run into uploads the rerun could not use (in flight at the kill,
        # restarted from byte 0), HTTP headers included
        "bytes_lost": bytes_killed - landed_bytes,
        "rerun_exit": rerun.code, "rerun_s": round(rerun.seconds, 2),
        "rerun_cpu_s": round(rerun.cpu_s, 2), "rerun_peak_rss_mb": round(rerun.peak_rss_mb, 1),
        "rerun_verified": verified, "rerun_digest": digest, "read_back": read_back,
        "rerun_notes": notes,
        "rerun_stderr_tail": "" if rerun.code == 0 else rerun.stderr[-1500:],
        "measured": "bytes the relay forwarded client -> registry (request bodies and "
                    "headers); the killed run's count includes what was in flight when it died",
    }


def large(args: argparse.Namespace, tool: str, ik: list[str], env: dict[str, str]) -> int:
    """The `--only large` row: DIR/release-large.json."""
    total = int(args.large_gb * 1e9)
    rounds = args.rounds or 2
    started = time.monotonic()
    image = record.generate(log=lambda line: print(line, flush=True), total_bytes=total)
    generate_s = time.monotonic() - started
    image_bytes = image.total_bytes("official")
    label = f"large {args.large_gb:g} GB"
    source = ScratchRegistry(CACHE / f"release-large-src-{image.layout['key']}", args.port_base,
                             binary=REGISTRY_BIN).start()
    dest_root = Path(tempfile.mkdtemp(prefix="imagekit-release-large-dst-"))
    dest_port, relay_port = args.port_base + 1, args.port_base + 2
    work = Path(tempfile.mkdtemp(prefix="imagekit-release-large-"))
    env = {**env, "IMAGEKIT_UPLOAD_JOURNAL": str(work / "rounds-journal")}
    load_before = os.getloadavg()
    dest_bytes: list[int] = []

    def fresh() -> ScratchRegistry:
        shutil.rmtree(dest_root, ignore_errors=True)
        return ScratchRegistry(dest_root, dest_port, binary=REGISTRY_BIN).start()

    try:
        started = time.monotonic()
        with RegistryClient(source.address) as client:
            official = record.push_record(client, image, "official")
        push_s = time.monotonic() - started
        print(f"{label}: {image_bytes / 1e6:.0f} MB pushed to {official} in {push_s:.0f} s",
              flush=True)
        mine: list[record.Measured] = []
        theirs: list[list[record.Measured]] = []
        for n in range(rounds):  # interleaved, each into a fresh empty registry
            registry = fresh()
            try:
                with tempfile.TemporaryDirectory(prefix="bench-evidence-") as evidence:
                    mine.append(record.run_measured(
                        [*ik, "promote", official, "--to", f"{registry.address}/release",
                         "--json", "--evidence-dir", evidence, "--force", "--reason",
                         "release benchmark"], timeout=3600, env=env))
                dest_bytes.append(_du(dest_root))
            finally:
                registry.stop()
            registry = fresh()
            try:
                theirs.append([record.run_measured(
                    [tool, "copy", "--insecure", official,
                     f"{registry.address}/release/large:official"], timeout=3600)])
            finally:
                registry.stop()
            print(f"{label} round {n + 1}: imagekit {mine[-1].seconds:.1f} s "
                  f"(exit {mine[-1].code}, peak RSS {mine[-1].peak_rss_mb:.0f} MB), crane "
                  f"{theirs[-1][0].seconds:.1f} s (exit {theirs[-1][0].code})", flush=True)
        result = row(f"{label}: promote vs crane", mine, theirs, GOAL_RECORD_ONE,
                     "crane copy")
        result["reference"] = True  # reported against record one's goal, not a goal of its own
        registry = fresh()
        try:
            kill = kill_and_rerun(ik, env, official, image, registry, relay_port, work)
            dest_bytes.append(_du(dest_root))
        finally:
            registry.stop()
        peaks = [m.peak_rss_mb for m in mine] + [kill["killed_peak_rss_mb"],
                                                 kill["rerun_peak_rss_mb"]]
        rss = {"name": "large: peak RSS of promote", "row": True, "ratio": None,
               "goal": f"<= {GOAL_LARGE_RSS_MB} MB", "met": max(peaks) <= GOAL_LARGE_RSS_MB,
               "value": f"{max(peaks):.0f} MB", "peak_rss_mb": round(max(peaks), 1),
               "rounds_peak_rss_mb": [round(m.peak_rss_mb, 1) for m in mine],
               "killed_peak_rss_mb": kill["killed_peak_rss_mb"],
               "rerun_peak_rss_mb": kill["rerun_peak_rss_mb"],
               "measured": "GNU time's %M for the rounds and the rerun; VmHWM polled every "
                           "10 ms for the killed run"}
        disk = {"image_cache_bytes": _du(image.root),
                "source_registry_bytes": _du(source.root / "data"),
                "destination_bytes_max": max(dest_bytes),
                "note": "the cache and the source registry stay (a rerun of the row skips "
                        "generating and pushing); one destination exists at a time"}
    finally:
        source.stop()
        shutil.rmtree(dest_root, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
    load_after = os.getloadavg()
    result.update({
        "rss": rss, "kill_rerun": kill,
        "image": {"content_bytes": total, "compressed_bytes": image_bytes,
                  "uncompressed_bytes": image.uncompressed_bytes, "layers": record.LAYERS,
                  "largest_layers_bytes": sorted(d["size"] for d in
                                                 image.descriptors("official"))[-3:],
                  "cache": str(image.root), "generated_s": image.layout.get("generated_s"),
                  "this_run_generate_s": round(generate_s, 1), "push_s": round(push_s, 1)},
        "disk": disk, "cpus": os.cpu_count(), "rounds": rounds,
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in load_after],
        "measured": "wall clock per process, peak RSS and CPU of each program by GNU time; "
                    "each round into a fresh empty docker-registry"})
    (args.out / "release-large.json").write_text(json.dumps(result, indent=2) + "\n")
    noise = result["noise"]
    print(f"{result['name']}: imagekit {result['ours_s']:.2f}s vs crane copy "
          f"{result['peer_s']:.2f}s: {result['ratio']:.3f}x (paired rounds "
          f"{result['round_ratios']}), reference goal <= {GOAL_RECORD_ONE}: {noise['verdict']}; "
          f"cpu {result['ours_cpu_s']}s vs {result['peer_cpu_s']}s")
    print(f"{label}: peak RSS of promote {rss['value']} (rounds {rss['rounds_peak_rss_mb']}, "
          f"killed run {rss['killed_peak_rss_mb']}, rerun {rss['rerun_peak_rss_mb']}), "
          f"goal {rss['goal']}: {'met' if rss['met'] else 'missed'}")
    print(f"{label}: kill -9 at {kill['bytes_at_kill_signal'] / 1e6:.0f} MB, killed run sent "
          f"{kill['bytes_killed_run'] / 1e6:.0f} MB, rerun (exit {kill['rerun_exit']}, "
          f"verified {kill['rerun_verified']}) sent {kill['bytes_rerun'] / 1e6:.0f} MB: "
          f"{kill['ratio']:.3f}x of {image_bytes / 1e6:.0f} MB, goal {kill['goal_text']}: "
          f"{'met' if kill['met'] else 'missed'}")
    print(f"{label}: the killed run landed {kill['blobs_landed_by_killed_run']} blobs "
          f"({kill['bytes_landed_by_killed_run'] / 1e6:.0f} MB); the rerun sent "
          f"{kill['blobs_sent_by_rerun']} ({kill['bytes_resumed_by_rerun'] / 1e6:.0f} MB of "
          f"them resumed, not sent again); lost to the kill "
          f"{kill['bytes_lost'] / 1e6:.0f} MB; upload journal entries after the kill: "
          f"{kill['journal_entries_after_kill']}")
    for note in kill["rerun_notes"]:
        print(f"  rerun: {note}")
    print(f"{label}: disk {disk}")
    print(f"load average {load_before[0]:.1f} -> {load_after[0]:.1f}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=None,
                        help="paired rounds (default 3; 2 with --only large)")
    parser.add_argument("--layer-mb", type=int, default=50)
    parser.add_argument("--scale", type=float,
                        default=float(os.environ.get("IMAGEKIT_RECORD_BENCH_SCALE", "1.0")))
    parser.add_argument("--port-base", type=int,
                        default=int(os.environ.get("IMAGEKIT_BENCH_RELEASE_PORT_BASE", "5140")),
                        help="consecutive loopback ports: source, destination (and the large "
                             "row's counting relay)")
    parser.add_argument("--only", choices=("pair", "record", "large"), default=None,
                        help="one row only; `large` runs only when named here")
    parser.add_argument("--large-gb", type=float,
                        default=float(os.environ.get("IMAGEKIT_BENCH_LARGE_GB", "8")),
                        help="the large image's content in GB (default 8)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    CACHE.mkdir(parents=True, exist_ok=True)
    tool = crane()
    ik, env = cli_process(CACHE)     # bytecode cached as an installed imagekit has it
    if args.only == "large":
        return large(args, tool, ik, env)
    args.rounds = args.rounds or 3
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
