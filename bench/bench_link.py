"""Benchmark: promote over a shaped link (20 MB/s per connection, +30 ms per request), against
skopeo and crane measured in the same run.

On loopback every request is free and every connection as fast as the CPU, so a copy tool
that makes many round trips or moves its largest blob over one slow stream looks as good as
one that does not. Between regions neither holds. Here every registry is reached through
bench/linkrelay.py, a relay of ours that paces each TCP connection to 20 MB/s in each
direction and holds each HTTP request 30 ms (a tool that opens parallel connections goes
faster, as it does on a real WAN). The kernel's `tbf` qdisc in a network namespace would shape
an interface's aggregate, not each connection, and `netem` (delay) is not in every kernel: the
relay is the one place both hold, all traffic stays on 127.0.0.1, and no namespace is made.

The link is measured first and recorded (`calibration`): an empty request, one 50 MB blob GET
over one connection, four such GETs at once (per-connection pacing: about the time of one),
and one 50 MB monolithic upload. The relay logs every request, so each tool run's requests,
connections and bytes through the link are counted (`requests`), with where its wall time
went (`first_request_s`: process start to its first request; `bulk_s`: time with a blob body
moving; `rtt_only_s`: time with only small requests in flight; `idle_s`: nothing in flight).

Rows, each round into freshly started EMPTY destination registries, the tools interleaved
(ours, crane, skopeo, ours, ...) and each measured as a process (record.run_measured: wall
clock, and CPU and peak RSS by GNU time; the CLI with its bytecode cached, as installed):

1. `image`: a 4-layer ~148 MB image (gzip'ed, half-random layers of ~80/40/20/8 MB), one hop
   src -> link -> dst: `imagekit promote SRC --to DST` <= 0.95x the faster peer (`crane copy`,
   `skopeo copy`, by median), and <= 1.1x the link's floor: the largest blob's single-stream
   time at the calibrated rate plus FLOOR_RTTS calibrated round trips (manifest GET, blob HEAD,
   upload POST, the PATCH streaming while the GET streams, the commit PUT, the manifest PUT);
2. `record`: the 63-layer record image (tests/registry/record.py, official copy, ~1.1 GB, three
   150 MB layers), one hop: the same two goals;
3. `release`: two images of one base (bench_release.pair_images) through two hops,
   `imagekit promote A B --via REG2/release --to REG3/release` <= 0.8x the faster peer's
   script of four copies in turn (A and B to REG2, then A and B from REG2 to REG3).

`--link-at dst` puts only the destinations behind the link (a tool running next to its
source); the default `both` puts every registry behind it (a tool between two remote
registries, as a CI runner is).

    python bench/bench_link.py --out bench/results [--rounds 3] [--link-at both|dst]
                               [--record-scale 1.0] [--pair-layer-mb 20]

Setup and teardown: one relay process and up to four docker-registry processes under
$IMAGEKIT_BENCH_CACHE/link (a lock there keeps a second run out); at start any relay or
registry of an earlier run still running from that folder (found in /proc by its command
line, so what really runs decides, not a pid file) is ended and listed in the JSON
(`stale_removed`). Everything is torn down on exit, on Ctrl-C and on SIGTERM; the relay also
dies with this process (PR_SET_PDEATHSIG). Ports: every port is a free one the kernel hands
out (bind to 0), never a fixed base.

Writes DIR/link.json (rows nested as bench/summary.py reads them) and the request log of each
row's last round per tool under DIR/link-requests/ (<row>-<tool>.jsonl, times from the
process start).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import http.client
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_promote import cli_process, peer_tools, versions_of  # noqa: E402
from bench_release import pair_images  # noqa: E402

from imagekit.oci.digest import Digest  # noqa: E402
from imagekit.registry import RegistryClient  # noqa: E402
from tests.registry import record  # noqa: E402
from tests.registry.images import layer_tar, push_image  # noqa: E402
from tests.registry.scratch import ScratchRegistry  # noqa: E402

RATE = 20e6            # bytes/s, each direction of each connection
DELAY_MS = 30.0        # added to every request
GOAL_PEER = 0.95       # rows 1, 2: imagekit / the faster peer
GOAL_FLOOR = 1.1       # rows 1, 2: imagekit / the link's floor
GOAL_RELEASE = 0.8     # row 3: imagekit / the faster peer's script of four copies
FLOOR_RTTS = 6         # round trips a one-hop copy cannot avoid (see the module docstring)
#: tar sizes of the 4-layer image: half random, so gzip'ed about 80 + 40 + 20 + 8 MB
IMAGE_TAR_MB = (152, 76, 38, 15)
CALIBRATION_BYTES = 50_000_000
BULK = 1_000_000       # a request moving more than this is a blob body (bulk), not a round trip
CACHE = Path(os.environ.get("IMAGEKIT_BENCH_CACHE", "/tmp/imagekit-bench"))
ROOT = CACHE / "link"
RELAY = Path(__file__).resolve().with_name("linkrelay.py")
REGISTRY_BIN = os.environ.get("IMAGEKIT_BENCH_REGISTRY_BIN") or shutil.which(
    "docker-registry") or "/usr/bin/docker-registry"
TOOLS = ("ours", "crane", "skopeo")


# -- processes of earlier runs ------------------------------------------------------------------
def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def ours_running(root: Path) -> list[tuple[int, str]]:
    """(pid, what) of every relay and registry process started from `root`, as /proc shows
    them now: a relay is linkrelay.py with `--tag root`, a registry is docker-registry serving
    a config under `root`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        argv = _cmdline(int(entry.name))
        if any(a.endswith("linkrelay.py") for a in argv) and "--tag" in argv and \
                argv[argv.index("--tag") + 1:argv.index("--tag") + 2] == [str(root)]:
            found.append((int(entry.name), "relay"))
        elif argv and argv[0].endswith("docker-registry") and len(argv) > 2 and \
                argv[1] == "serve" and argv[2].startswith(f"{root}/"):
            found.append((int(entry.name), f"registry {argv[2]}"))
    return found


def end_process(pid: int) -> None:
    """SIGTERM, then SIGKILL after 5 s; gone when /proc says so (or it is a zombie)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return
        if state == "Z":
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def descendants(root: int) -> list[int]:
    """Every live process below `root` (its children first, then theirs), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, queue = [], [root]
    while queue:
        for child in children.get(queue.pop(0), []):
            found.append(child)
            queue.append(child)
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _proc_cpu(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- the link -----------------------------------------------------------------------------------
class Link:
    """The registries and the relay in front of them, set up under ROOT and torn down by
    `close()` (also after a failure half-way through `open()`)."""

    NAMES = ("src", "dst", "reg2", "reg3")

    def __init__(self, root: Path) -> None:
        self.root = root
        self.lock_file = None
        self.relay: subprocess.Popen | None = None
        self.registries: dict[str, ScratchRegistry] = {}
        self.ports = {name: free_port() for name in self.NAMES}
        self.link_ports: dict[str, int] = {}
        self.log = root / "relay.log"
        self.stale: list[str] = []

    def open(self) -> Link:
        self.root.mkdir(parents=True, exist_ok=True)
        self.lock_file = (self.root / ".lock").open("a+")
        try:
            fcntl.flock(self.lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self.lock_file.seek(0)
            holder = self.lock_file.read().strip()
            self.lock_file.close()
            self.lock_file = None
            raise SystemExit(f"another bench_link run (pid {holder or '?'}) holds "
                             f"{self.root}/.lock") from None
        self.lock_file.truncate(0)
        self.lock_file.write(str(os.getpid()))
        self.lock_file.flush()
        for pid, what in ours_running(self.root):  # the lock is ours: these are left over
            end_process(pid)
            self.stale.append(f"pid {pid}: {what}")
        self.log.unlink(missing_ok=True)
        ready = self.root / "relay.ready"
        ready.unlink(missing_ok=True)
        argv = [sys.executable, str(RELAY), "--rate", str(RATE), "--delay-ms", str(DELAY_MS),
                "--log", str(self.log), "--ready", str(ready), "--parent", str(os.getpid()),
                "--tag", str(self.root)]
        for name in self.NAMES:
            argv += ["--route", f"{name}=127.0.0.1:{self.ports[name]}"]
        self.relay = subprocess.Popen(argv, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while not ready.exists():
            if self.relay.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the link relay did not start (exit {self.relay.poll()})")
            time.sleep(0.05)
        routes = json.loads(ready.read_text())["routes"]
        self.link_ports = {name: routes[name]["port"] for name in self.NAMES}
        self.registries["src"] = ScratchRegistry(self.root / "src", self.ports["src"],
                                                 binary=REGISTRY_BIN).start()
        return self

    def fresh(self, *names: str) -> None:
        """`names` restarted as new EMPTY registries on their ports."""
        for name in names:
            old = self.registries.pop(name, None)
            if old is not None:
                old.stop()
            shutil.rmtree(self.root / name, ignore_errors=True)
            self.registries[name] = ScratchRegistry(self.root / name, self.ports[name],
                                                    binary=REGISTRY_BIN).start()

    def direct(self, name: str) -> str:
        return f"127.0.0.1:{self.ports[name]}"

    def through(self, name: str) -> str:
        """The registry's address across the link."""
        return f"127.0.0.1:{self.link_ports[name]}"

    def relay_cpu(self) -> float:
        return _proc_cpu(self.relay.pid) if self.relay else 0.0

    def log_size(self) -> int:
        return self.log.stat().st_size if self.log.exists() else 0

    def events_since(self, offset: int, settle_s: float = 5.0) -> list[dict]:
        """The relay's log lines from `offset`, once every connection opened there closed
        (the tool exited; the relay logs a close as soon as it sees the socket end)."""
        deadline = time.monotonic() + settle_s
        while True:
            with self.log.open("rb") as f:
                f.seek(offset)
                data = f.read()
            data = data[:data.rfind(b"\n") + 1]
            events = [json.loads(line) for line in data.splitlines() if line.strip()]
            opened = sum(e["ev"] == "open" for e in events)
            closed = sum(e["ev"] == "close" for e in events)
            if opened == closed or time.monotonic() > deadline:
                return events
            time.sleep(0.05)

    def close(self) -> None:
        for registry in list(self.registries.values()):
            with contextlib.suppress(Exception):
                registry.stop()
        self.registries.clear()
        if self.relay is not None:
            self.relay.terminate()
            try:
                self.relay.wait(5)
            except subprocess.TimeoutExpired:
                self.relay.kill()
                self.relay.wait()
            self.relay = None
        if self.lock_file is not None:  # the folder is ours (never another run's)
            for pid, _ in ours_running(self.root):  # anything that escaped stop()
                end_process(pid)
            for name in self.NAMES[1:]:  # the destinations (up to an image each); the
                shutil.rmtree(self.root / name, ignore_errors=True)  # source stays cached
            self.lock_file.close()
            self.lock_file = None
        for pid in reversed(descendants(os.getpid())):  # a tool run cut short by Ctrl-C
            end_process(pid)


# -- what went through the link -----------------------------------------------------------------
def kind_of(method: str, target: str) -> str:
    """What a request is, by its method and path: `GET blob`, `PATCH upload`, `POST mount`."""
    parts = urlsplit(target)
    path, query = parts.path, parts.query
    if path.rstrip("/") == "/v2":
        what = "ping"
    elif "/manifests/" in path:
        what = "manifest"
    elif "/blobs/uploads" in path:
        what = "mount" if method == "POST" and "mount=" in query else \
            "upload-start" if method == "POST" else "upload"
    elif "/blobs/" in path:
        what = "blob"
    elif path.endswith("/tags/list"):
        what = "tags"
    elif "/referrers/" in path:
        what = "referrers"
    else:
        what = "other"
    return f"{method} {what}"


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _length(intervals: list[tuple[float, float]]) -> float:
    return sum(end - start for start, end in intervals)


def _most_at_once(intervals: list[tuple[float, float]]) -> int:
    edges = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def largest_blob(requests: list[dict], started: float, ended: float) -> dict | None:
    """The critical path of a one-hop copy: the largest blob's requests (those naming its
    digest, and the PATCHes of the upload session its commit closed), when they began and
    ended from the process start, and what came after until the process exited."""
    gets = [e for e in requests if kind_of(e["method"], e["path"]) == "GET blob"
            and e["status"] == 200]
    if not gets:
        return None
    big = max(gets, key=lambda e: e["resp"])
    hexpart = urlsplit(big["path"]).path.rsplit(":", 1)[-1]
    commits = [e for e in requests if e["method"] == "PUT" and "/uploads/" in e["path"]
               and hexpart in e["path"]]
    sessions = {urlsplit(e["path"]).path.split("/uploads/", 1)[1] for e in commits}
    patches = [e for e in requests if e["method"] == "PATCH" and
               urlsplit(e["path"]).path.split("/uploads/", 1)[-1] in sessions]
    naming = [e for e in requests if hexpart in e["path"]] + patches
    done = max(e["t1"] for e in naming)
    return {"get_response_bytes": big["resp"], "requests": len(naming), "patches": len(patches),
            "first_request_s": round(min(e["t0"] for e in naming) - started, 3),
            "get_s": [round(big["t0"] - started, 3), round(big["t1"] - started, 3)],
            "upload_s": [round(min((e["t0"] for e in patches), default=done) - started, 3),
                         round(max((e["t1"] for e in commits), default=done) - started, 3)],
            "last_request_s": round(done - started, 3),
            "after_s": round(ended - done, 3),
            "by_kind": dict(sorted(Counter(kind_of(e["method"], e["path"])
                                           for e in naming).items()))}


def link_stats(events: list[dict], started: float, ended: float) -> dict:
    """Requests, connections and bytes of one tool run, and where its wall time went."""
    requests = [e for e in events if e["ev"] == "req"]
    spans = [(max(e["t0"], started), min(e["t1"], ended)) for e in requests]
    bulk = _union([s for s, e in zip(spans, requests, strict=True)
                   if max(e["req"], e["resp"]) > BULK])
    any_request = _union(spans)
    wall = ended - started
    blob_gets = [e for e in requests if kind_of(e["method"], e["path"]) == "GET blob"]
    return {
        "requests": len(requests),
        "by_kind": dict(sorted(Counter(kind_of(e["method"], e["path"])
                                       for e in requests).items())),
        "by_route": dict(sorted(Counter(e["route"] for e in requests).items())),
        "connections": sum(e["ev"] == "open" for e in events),
        "connections_by_route": dict(sorted(Counter(e["route"] for e in events
                                                    if e["ev"] == "open").items())),
        "bytes_up": sum(e["req"] for e in requests),
        "bytes_down": sum(e["resp"] for e in requests),
        "range_gets": sum(1 for e in blob_gets if e.get("range")),
        "not_2xx": dict(sorted(Counter(f"{kind_of(e['method'], e['path'])} {e['status']}"
                                       for e in requests
                                       if not 200 <= e["status"] < 300).items())),
        # connections that did not speak HTTP (a TLS hello asking whether the port is plain
        # HTTP), relayed raw: each one round trip
        "non_http_connections": sum(e["ev"] == "unparsed" and e.get("side") == "request"
                                    for e in events),
        "bulk_streams_at_once": _most_at_once([s for s, e in zip(spans, requests, strict=True)
                                               if max(e["req"], e["resp"]) > BULK]),
        "first_request_s": round(min((s for s, _ in spans), default=ended) - started, 3),
        "last_answer_to_exit_s": round(ended - max((e for _, e in spans), default=started), 3),
        "bulk_s": round(_length(bulk), 3),
        "rtt_only_s": round(_length(any_request) - _length(bulk), 3),
        "idle_s": round(wall - _length(any_request), 3),
        "largest_blob": largest_blob(requests, started, ended),
    }


def request_log(events: list[dict], started: float) -> list[dict]:
    """The requests of a run, oldest first, times from the process start (for the jsonl)."""
    rows = []
    for e in sorted((e for e in events if e["ev"] == "req"), key=lambda e: e["t0"]):
        rows.append({"t0": round(e["t0"] - started, 4), "t1": round(e["t1"] - started, 4),
                     "route": e["route"], "conn": e["conn"], "method": e["method"],
                     "path": e["path"], "status": e["status"], "req": e["req"],
                     "resp": e["resp"], **({"range": e["range"]} if e.get("range") else {})})
    return rows


# -- calibration --------------------------------------------------------------------------------
def _get(port: int, path: str, conn: http.client.HTTPConnection | None = None,
         method: str = "GET", body: bytes | None = None, headers: dict | None = None
         ) -> tuple[float, http.client.HTTPResponse, bytes]:
    """One request, timed from sending to the last body byte: plain http.client, so the
    calibration measures the link and not a client's own machinery."""
    own = conn is None
    conn = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    started = time.perf_counter()
    conn.request(method, path, body=body, headers=headers or {})
    response = conn.getresponse()
    data = response.read()
    took = time.perf_counter() - started
    if own:
        conn.close()
    return took, response, data


def calibration_blob(link: Link) -> tuple[str, Digest]:
    """A 50 MB random blob in the source registry (pushed once, kept): the calibration's
    transfer, large enough that the request's round trip is 1 % of it."""
    data = random.Random(50).randbytes(CALIBRATION_BYTES)
    digest = Digest.of_bytes(data)
    with RegistryClient(link.direct("src")) as client:
        if not client.blob_exists("bench/calibration", digest):
            client.upload_blob("bench/calibration", digest, lambda: iter([data]),
                               size=len(data))
    return "bench/calibration", digest


def calibrate(link: Link) -> dict:
    """The link as measured: what a request costs, what one connection moves per second, that
    four connections each get that rate, and an upload the same."""
    repo, digest = calibration_blob(link)
    src, dst = link.link_ports["src"], link.link_ports["dst"]
    conn = http.client.HTTPConnection("127.0.0.1", src, timeout=60)
    _get(src, "/v2/", conn)  # the connection is open from here
    kept = [_get(src, "/v2/", conn)[0] for _ in range(10)]
    conn.close()
    fresh = [_get(src, "/v2/")[0] for _ in range(5)]
    path = f"/v2/{repo}/blobs/{digest}"
    one, response, data = _get(src, path)
    if response.status != 200 or len(data) != CALIBRATION_BYTES:
        raise RuntimeError(f"calibration GET answered {response.status}, {len(data)} bytes")
    times: list[float] = []

    def parallel_get() -> None:
        times.append(_get(src, path)[0])

    threads = [threading.Thread(target=parallel_get) for _ in range(4)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    four = time.perf_counter() - started
    link.fresh("dst")
    body = random.Random(50).randbytes(CALIBRATION_BYTES)
    conn = http.client.HTTPConnection("127.0.0.1", dst, timeout=60)
    _, response, _ = _get(dst, f"/v2/{repo}/blobs/uploads/", conn, "POST",
                          headers={"Content-Length": "0"})
    location = urlsplit(response.getheader("Location") or "")
    target = f"{location.path}?{location.query}&digest={digest}" if location.query else \
        f"{location.path}?digest={digest}"
    up, response, _ = _get(dst, target, conn, "PUT", body=body,
                           headers={"Content-Type": "application/octet-stream"})
    conn.close()
    if response.status != 201:
        raise RuntimeError(f"calibration upload answered {response.status}")
    rtt = statistics.median(kept)
    rate = CALIBRATION_BYTES / (one - rtt)
    return {
        "configured": {"rate_bytes_s": RATE, "delay_ms": DELAY_MS,
                       "per": "each direction of each TCP connection; the delay on every "
                              "HTTP request from its first byte"},
        "empty_request_ms": round(rtt * 1000, 1),
        "empty_request_ms_all": [round(t * 1000, 1) for t in kept],
        "empty_request_new_connection_ms": round(statistics.median(fresh) * 1000, 1),
        "get_50mb_s": round(one, 3),
        "get_50mb_expected_s": round(CALIBRATION_BYTES / RATE + DELAY_MS / 1000, 3),
        "rate_one_connection_mb_s": round(rate / 1e6, 2),
        "get_4x50mb_parallel_s": round(four, 3),
        "get_4x50mb_each_s": sorted(round(t, 3) for t in times),
        "rate_4_connections_mb_s": round(4 * CALIBRATION_BYTES / four / 1e6, 1),
        "put_50mb_s": round(up, 3),
        "rate_upload_mb_s": round(CALIBRATION_BYTES / (up - rtt) / 1e6, 2),
        "rtt_s": round(rtt, 4), "rate_bytes_s": round(rate),
        "method": "http.client through the relay's src route (GET /v2/ on one kept-alive "
                  "connection x10, on new connections x5; the 50 MB blob once, then 4 at once) "
                  "and its dst route (POST, then one monolithic PUT of 50 MB)",
    }


def floor_s(largest: int, calibration: dict) -> float:
    """The least time a one-hop copy over this link takes: the largest blob over one stream
    at the measured rate, plus FLOOR_RTTS measured round trips."""
    return largest / calibration["rate_bytes_s"] + FLOOR_RTTS * calibration["rtt_s"]


# -- images -------------------------------------------------------------------------------------
def four_layer_image(link: Link) -> tuple[str, str, Digest]:
    """(repository, tag, digest) of the 4-layer image, pushed once."""
    repo, tag = "bench/link", "w" + "-".join(map(str, IMAGE_TAR_MB))
    with RegistryClient(link.direct("src")) as client:
        if client.manifest_exists(repo, tag) is None:
            tars = [layer_tar(3000 + i, mb << 20) for i, mb in enumerate(IMAGE_TAR_MB)]
            push_image(client, repo, tag, tars, compression="gzip", level=1)
        return repo, tag, client.get_manifest(repo, tag).digest


def image_bytes(link: Link, repo: str, tag: str) -> tuple[int, int]:
    """(compressed bytes, layers) of an image, from its manifest at the source: the figure
    the rows are labelled with and the floor is computed from."""
    with RegistryClient(link.direct("src")) as client:
        body = json.loads(client.get_manifest(repo, tag).data)
    sizes = [d["size"] for d in [body["config"], *body["layers"]]]
    return sum(sizes), len(body["layers"])


def served(address: str, repo: str, tag: str) -> Digest | None:
    """The digest `repo:tag` names at `address`, read past the link (not timed): a tool that
    exited 0 without copying the image would otherwise count as fast."""
    with RegistryClient(address) as client:
        return client.manifest_exists(repo, tag)


# -- rows ---------------------------------------------------------------------------------------
class Runner:
    """Runs one tool as a measured process and reads what it sent through the link."""

    def __init__(self, link: Link) -> None:
        self.link = link
        self.logs: dict[str, list[dict]] = {}

    def run(self, row: str, tool: str, argv: list[str], env: dict | None = None
            ) -> tuple[record.Measured, dict]:
        offset, relay_cpu = self.link.log_size(), self.link.relay_cpu()
        started = time.time()
        measured = record.run_measured(argv, timeout=900, env=env)
        ended = time.time()
        if measured.code != 0:
            raise SystemExit(f"{row} {tool}: exited {measured.code}: "
                             f"{measured.stderr[-1500:]}{measured.stdout[-500:]}")
        events = self.link.events_since(offset)
        stats = link_stats(events, started, ended)
        stats["relay_cpu_s"] = round(self.link.relay_cpu() - relay_cpu, 2)
        self.logs[f"{row}-{tool}"] = request_log(events, started)
        return measured, stats


def summarize_tool(runs: list[tuple[record.Measured, dict]]) -> dict:
    """One tool's rounds of a row: seconds, CPU, and the link figures (medians; the request
    mix of the last round, it is the same every round)."""
    stats = [s for _, s in runs]
    med = lambda key: round(statistics.median(s[key] for s in stats), 3)  # noqa: E731
    return {
        "rounds_s": [round(m.seconds, 3) for m, _ in runs],
        "median_s": round(statistics.median(m.seconds for m, _ in runs), 3),
        "cpu_s": round(statistics.median(m.cpu_s for m, _ in runs), 3),
        "peak_rss_mb": round(max(m.peak_rss_mb for m, _ in runs), 1),
        "requests": [s["requests"] for s in stats],
        "connections": [s["connections"] for s in stats],
        "bytes_up": med("bytes_up"), "bytes_down": med("bytes_down"),
        "by_kind": stats[-1]["by_kind"], "by_route": stats[-1]["by_route"],
        "connections_by_route": stats[-1]["connections_by_route"],
        "range_gets": stats[-1]["range_gets"], "not_2xx": stats[-1]["not_2xx"],
        "non_http_connections": stats[-1]["non_http_connections"],
        "bulk_streams_at_once": stats[-1]["bulk_streams_at_once"],
        "first_request_s": med("first_request_s"),
        "last_answer_to_exit_s": med("last_answer_to_exit_s"),
        "bulk_s": med("bulk_s"), "rtt_only_s": med("rtt_only_s"), "idle_s": med("idle_s"),
        "relay_cpu_s": med("relay_cpu_s"),
        "largest_blob_last_round": stats[-1]["largest_blob"],
    }


def goal_row(name: str, ours: list[float], peer: list[float], goal: float, peer_text: str,
             **extra) -> dict:
    """A goal judged like every bench row: paired rounds, bench/summary.py's verdict."""
    ratios = [a / b for a, b in zip(ours, peer, strict=True)]
    result = {"name": name, "ours_s": round(statistics.median(ours), 3),
              "peer_s": round(statistics.median(peer), 3),
              "ratio": round(statistics.median(ours) / statistics.median(peer), 3),
              "goal": goal, "peer": peer_text,
              "ours_rounds_s": [round(s, 3) for s in ours],
              "peer_rounds_s": [round(s, 3) for s in peer],
              "round_ratios": [round(r, 3) for r in ratios], **extra}
    from summary import goal_verdict  # bench/summary.py (this folder is on sys.path)
    result["noise"] = goal_verdict(result)
    result["met"] = result["noise"]["verdict"] == "met"
    return result


def context_row(name: str, ours: list[float], peer: list[float], peer_text: str) -> dict:
    """Ours against the slower peer: shown, not a goal (no `met`)."""
    return {"name": name, "ours_s": round(statistics.median(ours), 3),
            "peer_s": round(statistics.median(peer), 3),
            "ratio": round(statistics.median(ours) / statistics.median(peer), 3),
            "peer": peer_text, "ours_rounds_s": [round(s, 3) for s in ours],
            "peer_rounds_s": [round(s, 3) for s in peer]}


PEER_TEXT = {"crane": "crane copy --insecure SRC DST",
             "skopeo": "skopeo copy --src-tls-verify=false --dest-tls-verify=false "
                       "docker://SRC docker://DST"}


def one_hop_rows(key: str, label: str, times: dict[str, list[float]], floor: float,
                 largest: int) -> dict[str, dict]:
    faster = min(("crane", "skopeo"), key=lambda t: statistics.median(times[t]))
    slower = "skopeo" if faster == "crane" else "crane"
    return {
        key: goal_row(f"{label} vs {faster}", times["ours"], times[faster], GOAL_PEER,
                      PEER_TEXT[faster], faster_peer=faster,
                      goal_text=f"`imagekit promote SRC --to DST` as a process <= {GOAL_PEER}x "
                                "the faster of crane and skopeo (by median), over the link, "
                                "fresh empty destination each round, median"),
        f"{key}_floor": goal_row(
            f"{label} vs floor", times["ours"], [floor] * len(times["ours"]), GOAL_FLOOR,
            f"the link's floor: largest blob {largest} bytes at the calibrated rate + "
            f"{FLOOR_RTTS} round trips", floor_s=round(floor, 3),
            goal_text=f"`imagekit promote SRC --to DST` <= {GOAL_FLOOR}x the link's floor "
                      f"({floor:.2f} s: the largest blob over one connection at the calibrated "
                      f"rate + {FLOOR_RTTS} calibrated round trips)"),
        f"{key}_{slower}": context_row(f"{label} vs {slower}", times["ours"],
                                       times[slower], PEER_TEXT[slower]),
    }


def _interrupted(signum: int, frame: object) -> None:
    """SIGTERM or SIGHUP as Ctrl-C: the `finally` that tears the link down runs either way."""
    raise KeyboardInterrupt(f"signal {signum}")



def print_round(label: str, n: int, runs: dict) -> None:
    """One line per round: each tool's seconds and requests."""
    print(f"{label} round {n + 1}: " + ", ".join(
        f"{t} {runs[t][-1][0].seconds:.2f}s/{runs[t][-1][1]['requests']} req" for t in TOOLS),
        flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--link-at", choices=("both", "dst"), default="both",
                        help="which registries are behind the link (default: every one)")
    parser.add_argument("--record-scale", type=float,
                        default=float(os.environ.get("IMAGEKIT_RECORD_BENCH_SCALE", "1.0")))
    parser.add_argument("--pair-layer-mb", type=int, default=20,
                        help="layer tar size of the release row's two images")
    parser.add_argument("--only", choices=("image", "record", "release"), action="append",
                        help="run only these rows (repeatable; default all)")
    args = parser.parse_args()
    only = set(args.only or ("image", "record", "release"))
    args.out.mkdir(parents=True, exist_ok=True)
    CACHE.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even if started with it ignored
    signal.signal(signal.SIGTERM, _interrupted)
    signal.signal(signal.SIGHUP, _interrupted)
    tools = peer_tools(["crane", "skopeo"])
    versions = versions_of(tools)
    ik, env = cli_process(CACHE)
    record_image = record.generate(args.record_scale, log=lambda line: print(line, flush=True)) \
        if "record" in only else None
    tree = subprocess.run(["git", "-C", str(Path(__file__).resolve().parents[1]), "describe",
                           "--always", "--dirty"], capture_output=True, text=True,
                          check=False).stdout.strip() or "unknown"  # imagekit as measured
    load_before = os.getloadavg()
    link = Link(ROOT)
    rows: dict[str, dict] = {}
    requests: dict[str, dict] = {}
    cpu: dict[str, dict] = {}
    try:
        link.open()
        if link.stale:
            print(f"removed from an earlier run: {'; '.join(link.stale)}", flush=True)
        calibration = calibrate(link)
        print(f"link: empty request {calibration['empty_request_ms']} ms, 50 MB GET "
              f"{calibration['get_50mb_s']} s ({calibration['rate_one_connection_mb_s']} MB/s), "
              f"4 at once {calibration['get_4x50mb_parallel_s']} s, 50 MB PUT "
              f"{calibration['put_50mb_s']} s", flush=True)
        runner = Runner(link)
        src = link.through("src") if args.link_at == "both" else link.direct("src")

        def one_hop(key: str, label: str, repo: str, tag: str, digest: Digest) -> None:
            total, layers = image_bytes(link, repo, tag)
            with RegistryClient(link.direct("src")) as client:
                body = json.loads(client.get_manifest(repo, tag).data)
            largest = max(d["size"] for d in [body["config"], *body["layers"]])
            src_ref, dst_ref = f"{src}/{repo}:{tag}", f"{link.through('dst')}/{repo}:{tag}"
            argv = {
                "crane": [tools["crane"], "copy", "--insecure", src_ref, dst_ref],
                "skopeo": [tools["skopeo"], "copy", "--insecure-policy",
                           "--src-tls-verify=false", "--dest-tls-verify=false", "--quiet",
                           f"docker://{src_ref}", f"docker://{dst_ref}"]}
            runs: dict[str, list] = {tool: [] for tool in TOOLS}
            for n in range(args.rounds):  # interleaved, each into a fresh empty registry
                for tool in TOOLS:
                    link.fresh("dst")
                    if tool == "ours":
                        with tempfile.TemporaryDirectory(prefix="bench-evidence-") as evidence:
                            runs[tool].append(runner.run(key, tool, [
                                *ik, "promote", src_ref, "--to", dst_ref, "--json",
                                "--evidence-dir", evidence, "--force", "--reason", "bench"],
                                env))
                    else:
                        runs[tool].append(runner.run(key, tool, argv[tool]))
                    if served(link.direct("dst"), repo, tag) != digest:
                        raise SystemExit(f"{key} {tool}: the destination does not serve "
                                         f"{digest}")
                print_round(label, n, runs)
            times = {t: [m.seconds for m, _ in runs[t]] for t in TOOLS}
            floor = floor_s(largest, calibration)
            found = one_hop_rows(key, label, times, floor, largest)
            found[key].update({"image_bytes": total, "layers": layers,
                               "largest_blob_bytes": largest, "floor_s": round(floor, 3)})
            rows.update(found)
            requests[key] = {t: summarize_tool(runs[t]) for t in TOOLS}

        if "image" in only:
            repo, tag, digest = four_layer_image(link)
            total, _ = image_bytes(link, repo, tag)
            one_hop("image", f"link {total / 1e6:.0f}MB 4L", repo, tag, digest)
        if "record" in only:
            assert record_image is not None
            with RegistryClient(link.direct("src")) as client:
                official = record.push_record(client, record_image, "official")
            repo, tag = official.split("/", 1)[1].rsplit(":", 1)
            total = record_image.total_bytes("official")
            one_hop("record", f"link record {total / 1e6:.0f}MB", repo, tag,
                    record_image.manifest("official").digest)
        if "release" in only:
            refs = pair_images(link.registries["src"], args.pair_layer_mb)
            names = [r.split("/", 1)[1] for r in refs]          # bench/vllm:b20, ...
            lands = ["release/" + n.split("/")[-1] for n in names]  # release/vllm:b20, ...
            digests = [served(link.direct("src"), *n.rsplit(":", 1)) for n in names]
            totals = [image_bytes(link, *n.rsplit(":", 1))[0] for n in names]
            reg2, reg3 = link.through("reg2"), link.through("reg3")
            copies = [(f"{src}/{n}", f"{reg2}/{d}") for n, d in zip(names, lands, strict=True)]
            copies += [(f"{reg2}/{d}", f"{reg3}/{d}") for d in lands]
            scripts = {}
            for tool in ("crane", "skopeo"):
                lines = ["#!/bin/sh", "set -e"]
                for a, b in copies:
                    lines.append(f"{tools['crane']} copy --insecure {a} {b}" if tool == "crane"
                                 else f"{tools['skopeo']} copy --insecure-policy "
                                      "--src-tls-verify=false --dest-tls-verify=false --quiet "
                                      f"docker://{a} docker://{b}")
                scripts[tool] = link.root / f"release-{tool}.sh"
                scripts[tool].write_text("\n".join(lines) + "\n")
            runs = {tool: [] for tool in TOOLS}
            label = "link release 2hop"
            for n in range(args.rounds):
                for tool in TOOLS:
                    link.fresh("reg2", "reg3")
                    if tool == "ours":
                        with tempfile.TemporaryDirectory(prefix="bench-evidence-") as evidence:
                            runs[tool].append(runner.run("release", tool, [
                                *ik, "promote", *(f"{src}/{name}" for name in names), "--via",
                                f"{reg2}/release", "--to", f"{reg3}/release", "--json",
                                "--evidence-dir", evidence, "--force", "--reason", "bench"],
                                env))
                    else:
                        runs[tool].append(runner.run("release", tool,
                                                     ["/bin/sh", str(scripts[tool])]))
                    for hop in ("reg2", "reg3"):
                        for land, digest in zip(lands, digests, strict=True):
                            if served(link.direct(hop), *land.rsplit(":", 1)) != digest:
                                raise SystemExit(f"release {tool}: {hop} does not serve "
                                                 f"{land}@{digest}")
                print_round(label, n, runs)
            times = {t: [m.seconds for m, _ in runs[t]] for t in TOOLS}
            faster = min(("crane", "skopeo"), key=lambda t: statistics.median(times[t]))
            slower = "skopeo" if faster == "crane" else "crane"
            rows["release"] = goal_row(
                f"{label} vs {faster} x4", times["ours"], times[faster], GOAL_RELEASE,
                f"a shell script of 4 `{faster} copy` in turn", faster_peer=faster,
                images_bytes=totals, layer_tar_mb=args.pair_layer_mb,
                goal_text=f"`imagekit promote A B --via REG2/release --to REG3/release` (2 images "
                          f"of {sum(totals) / 1e6:.0f} MB, one base) <= {GOAL_RELEASE}x the "
                          "faster peer's script of 4 copies in turn, every registry behind the "
                          "link, fresh empty REG2 and REG3 each round, median")
            rows[f"release_{slower}"] = context_row(
                f"{label} vs {slower} x4", times["ours"], times[slower],
                f"a shell script of 4 `{slower} copy` in turn")
            requests["release"] = {t: summarize_tool(runs[t]) for t in TOOLS}
        for row, by_tool in requests.items():
            cpu[row] = {t: s["cpu_s"] for t, s in by_tool.items()}
        logs_dir = args.out / "link-requests"
        shutil.rmtree(logs_dir, ignore_errors=True)
        logs_dir.mkdir()
        for name, lines in runner.logs.items():
            (logs_dir / f"{name}.jsonl").write_text(
                "".join(json.dumps(line) + "\n" for line in lines))
    finally:
        link.close()
    load_after = os.getloadavg()
    first = next(iter(rows.values()))
    result = {**first, **{k: v for k, v in rows.items() if v is not first},
              "link_at": args.link_at, "calibration": calibration,
              "requests": requests, "peer_versions": versions,
              "cpu_s": {f"{row} {tool}": v for row, by_tool in cpu.items()
                        for tool, v in by_tool.items()},
              "rounds": args.rounds, "cpus": os.cpu_count(),
              "imagekit_tree": tree, "stale_removed": link.stale,
              "ports": {"registries": link.ports, "link": link.link_ports},
              "loadavg_before": [round(x, 2) for x in load_before],
              "loadavg_after": [round(x, 2) for x in load_after],
              "measured": "wall clock per process (record.run_measured, GNU time for CPU and "
                          "peak RSS); the peer's four processes of the release row are one "
                          "shell script; requests, connections and bytes as the link relay "
                          "logged them for that process's run"}
    result["met_all"] = all(r["met"] for r in rows.values() if "met" in r)
    (args.out / "link.json").write_text(json.dumps(result, indent=2) + "\n")
    for figure in rows.values():
        verdict = figure["noise"]["verdict"] if "noise" in figure else "context"
        print(f"{figure['name']}: imagekit {figure['ours_s']:.2f}s vs {figure['peer_s']:.2f}s: "
              f"{figure['ratio']:.3f}x (rounds {figure.get('round_ratios', '-')}), goal "
              f"{figure.get('goal', '-')}: {verdict}")
    for row, by_tool in requests.items():
        for tool, s in by_tool.items():
            print(f"  {row} {tool}: {s['median_s']}s, requests {s['requests']}, connections "
                  f"{s['connections']}, up {s['bytes_up'] / 1e6:.1f} MB, down "
                  f"{s['bytes_down'] / 1e6:.1f} MB, bulk streams at once "
                  f"{s['bulk_streams_at_once']}, first request {s['first_request_s']}s, bulk "
                  f"{s['bulk_s']}s, round trips only {s['rtt_only_s']}s, idle {s['idle_s']}s; "
                  f"{s['by_kind']}")
    print(f"load average {load_before[0]:.1f} -> {load_after[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
