"""The timing reference server (truthserver/main.go) from Python: build it, run it, read its
records, and judge a load client's figures against them.

The server answers every request on a known schedule (TTFT, inter-chunk gap, tokens per chunk,
optionally vLLM's empty role chunk first) and records when each request arrived and when each
chunk's bytes were flushed: per request, the true TTFT, ITL, TPOT and E2E as the server saw
them. It is Go (standard library only) so it costs almost no CPU beside the Python client it
measures on a small machine.

The binary is built offline (`go build`, no module proxy) into
`$XDG_CACHE_HOME/imagekit-test/truthserver/<source hash>/`, once per source version; a test
that finds no Go toolchain skips, naming it (in CI it fails).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from imagekit.acceptance.load import percentiles
from imagekit.acceptance.models import LatencyStats

SOURCE = Path(__file__).with_name("truthserver") / "main.go"
METRICS = ("ttft", "itl", "tpot", "e2e")
#: the accuracy bound: within 2 % of the truth or 1 ms, whichever is larger
RELATIVE = 0.02
ABSOLUTE_S = 0.001


class NoGoToolchain(RuntimeError):
    """No `go` on PATH: the reference server cannot be built here."""


def cache_root() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "imagekit-test" / "truthserver"


def build(root: Path | None = None) -> Path:
    """The server's binary, built once per source hash (a file lock keeps parallel builders
    from racing; the binary appears by rename, never half-written)."""
    go = shutil.which("go")
    if go is None:
        raise NoGoToolchain("no Go toolchain (`go`) on PATH: the timing reference server "
                            "(tests/timing/truthserver/main.go) cannot be built")
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    folder = (root or cache_root()) / digest
    binary = folder / "truthserver"
    if binary.exists():
        return binary
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if binary.exists():
            return binary
        partial = folder / f"truthserver.{os.getpid()}.partial"
        env = dict(os.environ, GOPROXY="off", GOFLAGS="", CGO_ENABLED="0",
                   GO111MODULE="on", GOTOOLCHAIN="local")
        env.setdefault("GOCACHE", str((root or cache_root()) / "go-build"))
        done = subprocess.run([go, "build", "-trimpath", "-o", str(partial), str(SOURCE)],
                              cwd=folder, env=env, capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise RuntimeError(f"go build of {SOURCE} failed: {done.stderr.strip()[-2000:]}")
        partial.rename(binary)
    return binary


@dataclass(frozen=True)
class TruthRecord:
    """One request as the server saw it; times in seconds on CLOCK_MONOTONIC, the clock of
    `time.perf_counter()` here, so a client's own stamps compare request by request."""

    seq: int
    request_id: str | None
    arrival_s: float
    #: "kernel": arrival is the receive time of the request's bytes; "handler": when the
    #: server's handler began (a socket that gave no receive time)
    arrival_source: str
    handler_s: float
    role_s: float | None
    chunks_s: tuple[float, ...]
    end_s: float
    tokens: int
    error: str | None
    #: how late the server sent its latest chunk against its own schedule
    max_late_s: float = 0.0

    @classmethod
    def parse(cls, raw: dict[str, Any]) -> TruthRecord:
        role = raw.get("role_ns")
        return cls(seq=raw["seq"], request_id=raw.get("request_id") or None,
                   arrival_s=raw["arrival_ns"] / 1e9,
                   arrival_source=raw.get("arrival_source", "handler"),
                   handler_s=raw.get("handler_ns", raw["arrival_ns"]) / 1e9,
                   role_s=None if role is None else role / 1e9,
                   chunks_s=tuple(t / 1e9 for t in raw["chunks_ns"]),
                   end_s=raw["end_ns"] / 1e9, tokens=raw["tokens"],
                   error=raw.get("error") or None,
                   max_late_s=raw.get("max_late_ns", 0) / 1e9)

    @property
    def ttft_s(self) -> float:
        """Arrival to the first CONTENT chunk's flush (the role chunk carries no token)."""
        return self.chunks_s[0] - self.arrival_s

    @property
    def e2e_s(self) -> float:
        """Arrival to the flush of the stream's last bytes (usage and [DONE])."""
        return self.end_s - self.arrival_s

    @property
    def gaps_s(self) -> list[float]:
        return [b - a for a, b in zip(self.chunks_s, self.chunks_s[1:], strict=False)]

    @property
    def tpot_s(self) -> float | None:
        if self.tokens < 2:
            return None
        return (self.e2e_s - self.ttft_s) / (self.tokens - 1)


def truth_stats(records: list[TruthRecord]) -> dict[str, LatencyStats]:
    """The server's TTFT, ITL, TPOT and E2E percentiles, by the client's own percentile rule."""
    ok = [r for r in records if r.error is None and r.chunks_s]
    return {"ttft": percentiles([r.ttft_s for r in ok]),
            "itl": percentiles([g for r in ok for g in r.gaps_s]),
            "tpot": percentiles([t for r in ok if (t := r.tpot_s) is not None]),
            "e2e": percentiles([r.e2e_s for r in ok])}


def vllm_definitions(records: list[TruthRecord]) -> dict[str, LatencyStats]:
    """The server's truth by vllm bench serve's definitions (0.32, openai-chat): TTFT ends at
    the first chunk with any choice (the empty role chunk when there is one), every later
    chunk with a choice adds an ITL gap (so role -> first token is one), E2E ends at the last
    chunk with a choice (the usage chunk has none and [DONE] is not timed), TPOT is
    (E2E - TTFT) / (tokens - 1)."""
    ok = [r for r in records if r.error is None and r.chunks_s]
    ttft, itl, tpot, e2e = [], [], [], []
    for r in ok:
        timed = ([r.role_s] if r.role_s is not None else []) + list(r.chunks_s)
        first, last = timed[0] - r.arrival_s, timed[-1] - r.arrival_s
        ttft.append(first)
        e2e.append(last)
        itl += [b - a for a, b in zip(timed, timed[1:], strict=False)]
        if r.tokens > 1:
            tpot.append((last - first) / (r.tokens - 1))
    return {"ttft": percentiles(ttft), "itl": percentiles(itl), "tpot": percentiles(tpot),
            "e2e": percentiles(e2e)}


def arrival_rate(records: list[TruthRecord]) -> float | None:
    """Requests per second as they arrived at the server: (n - 1) / (last - first arrival)."""
    arrivals = sorted(r.arrival_s for r in records)
    if len(arrivals) < 2 or arrivals[-1] <= arrivals[0]:
        return None
    return (len(arrivals) - 1) / (arrivals[-1] - arrivals[0])


@dataclass(frozen=True)
class Row:
    """One figure of a client beside the truth."""

    metric: str
    quantile: str
    truth_s: float
    client_s: float
    bound_s: float

    @property
    def error_s(self) -> float:
        return self.client_s - self.truth_s

    @property
    def within(self) -> bool:
        return abs(self.error_s) <= self.bound_s


def bound(truth_s: float) -> float:
    return max(RELATIVE * abs(truth_s), ABSOLUTE_S)


def compare(client: dict[str, LatencyStats], truth: dict[str, LatencyStats],
            quantiles: tuple[str, ...] = ("p50", "p90", "p99")) -> list[Row]:
    rows = []
    for metric in METRICS:
        for q in quantiles:
            want, got = getattr(truth[metric], q), getattr(client[metric], q)
            if want is None or got is None:
                raise AssertionError(f"{metric} {q}: truth {want}, client {got}")
            rows.append(Row(metric, q, want, got, bound(want)))
    return rows


def table(title: str, rows: list[Row], others: dict[str, dict[str, LatencyStats]] | None = None
          ) -> str:
    """The accuracy table (ms): truth, the client, its error and bound; other clients' figures
    (e.g. vllm bench serve) beside them, unjudged."""
    others = others or {}
    head = f"{'metric':<10}{'truth':>10}{'client':>10}{'error':>9}{'bound':>8}  ok"
    head += "".join(f"{name:>16}" for name in others)
    lines = [title, head]
    for row in rows:
        line = (f"{row.metric + ' ' + row.quantile:<10}{row.truth_s * 1e3:>10.2f}"
                f"{row.client_s * 1e3:>10.2f}{row.error_s * 1e3:>+9.2f}"
                f"{row.bound_s * 1e3:>8.2f}  {'yes' if row.within else 'NO'}")
        for stats in others.values():
            value = getattr(stats.get(row.metric) or LatencyStats(), row.quantile)
            line += f"{'-' if value is None else f'{value * 1e3:.2f}':>16}"
        lines.append(line)
    return "\n".join(lines)


class TruthServer:
    """The reference server as a process on a free loopback port:
    `with TruthServer(ttft_ms=50, itl_ms=10) as server: ... server.records()`."""

    def __init__(self, binary: Path | None = None, **config: Any) -> None:
        self.binary = binary or build()
        self.initial = config
        self.process: subprocess.Popen[str] | None = None
        self.url = ""
        self._log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (closed in __exit__)

    def __enter__(self) -> TruthServer:
        import json  # noqa: PLC0415

        self.process = subprocess.Popen(
            [str(self.binary), "-addr", "127.0.0.1:0", "-config", json.dumps(self.initial)],
            stdout=subprocess.PIPE, stderr=self._log, text=True)
        assert self.process.stdout is not None
        line = self.process.stdout.readline().strip()
        if not line.startswith("listening "):
            self.__exit__()
            self._log.seek(0)
            raise RuntimeError(f"truthserver did not start: {line!r} {self._log.read()[-500:]}")
        self.url = "http://" + line.split(" ", 1)[1]
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self._log.close()

    def configure(self, **fields: Any) -> dict[str, Any]:
        resp = httpx.post(f"{self.url}/_config", json={**self.config(), **fields}, timeout=5)
        resp.raise_for_status()
        return resp.json()

    def config(self) -> dict[str, Any]:
        return httpx.get(f"{self.url}/_config", timeout=5).json()

    def reset(self) -> None:
        httpx.post(f"{self.url}/_truth/reset", timeout=5).raise_for_status()

    def records(self) -> list[TruthRecord]:
        raw = httpx.get(f"{self.url}/_truth", timeout=30).json()["records"]
        return [TruthRecord.parse(r) for r in raw]
