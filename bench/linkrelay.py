"""A shaped link for the benchmarks: a TCP relay that makes a loopback registry look remote.

A registry in another region is reached over a link that gives each TCP connection a share of
its bandwidth and adds a round trip to every request. Neither shows on loopback, so a copy
tool that makes many round trips, or moves a large blob over one connection, looks as fast
there as one that does not. This relay puts both back:

- every connection is paced to `--rate` bytes per second in each direction (per connection,
  not for the relay as a whole: a tool that opens parallel connections goes faster, as it
  does on a real WAN; the kernel's `tbf` qdisc shapes an interface's aggregate and `netem`,
  the delaying qdisc, is not in every kernel, hence a relay of ours);
- every HTTP request is held `--delay-ms` from its first byte before it goes on (the round
  trip it pays on a real link; the answer then comes back at once);
- one JSON line per request is written to `--log`: the route, the connection, the method, the
  path, the status, the bytes each way (HTTP headers included) and when it started and
  ended; and one line when a connection opens and when it closes. A benchmark reads the
  lines a tool's run added and counts what that tool sent through the link.

Requests are read as HTTP/1.1 (Content-Length or chunked bodies) so their boundaries are
known; a connection that does not parse as HTTP is relayed byte for byte from there on, still
paced, and said so in the log (`"unparsed"`).

    python bench/linkrelay.py --route src=127.0.0.1:5301 --route dst=127.0.0.1:5302 \\
        --rate 20e6 --delay-ms 30 --log /tmp/link.log --ready /tmp/link.ready

Each route listens on a free loopback port (`--route NAME=UPSTREAM`, or
`NAME=LISTEN_PORT=UPSTREAM` for a fixed one); once all listen, `--ready` is written (JSON:
pid, routes with their ports, rate, delay) so the caller knows where to connect. The process
ends on SIGTERM or SIGINT, and when its parent dies (PR_SET_PDEATHSIG), so a benchmark killed
hard leaves no relay behind.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import itertools
import json
import os
import signal
import socket
import sys
import threading
import time
from collections import deque
from pathlib import Path

PIECE = 64 * 1024          # bytes sent at a time (a pacing step is PIECE / rate: 3.3 ms at 20 MB/s)
HEAD_MAX = 64 * 1024       # longest request or response head accepted as HTTP
NO_BODY_STATUS = {204, 304}


class Closed(Exception):
    """The side being read from ended (EOF or an error)."""


class NotHttp(Exception):
    """What arrived does not parse as HTTP/1.1: relay the rest raw."""


class Pacer:
    """One direction of one connection at `rate` bytes/s: a send waits until the bytes sent
    before it would have left the link. Idle time earns no credit beyond one piece, so a
    connection that was quiet does not burst past the rate."""

    def __init__(self, rate: float | None) -> None:
        self.rate = rate
        self.next_t = 0.0

    def send(self, sock: socket.socket, data: bytes | memoryview) -> None:
        view = memoryview(data)
        for start in range(0, len(view), PIECE):
            piece = view[start:start + PIECE]
            if self.rate:
                now = time.monotonic()
                if self.next_t < now:
                    self.next_t = now
                elif self.next_t > now:
                    time.sleep(self.next_t - now)
                self.next_t += len(piece) / self.rate
            sock.sendall(piece)


class Reader:
    """Buffered reads from one socket, with the HTTP framing helpers the parsers need."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = bytearray()
        self.eof = False

    def fill(self) -> None:
        if self.eof:
            raise Closed()
        try:
            data = self.sock.recv(256 * 1024)
        except OSError as exc:
            self.eof = True
            raise Closed() from exc
        if not data:
            self.eof = True
            raise Closed()
        self.buf += data

    def head(self) -> bytes:
        """The next message head (through the blank line); Closed when nothing more comes."""
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end >= 0:
                data = bytes(self.buf[:end + 4])
                del self.buf[:end + 4]
                return data
            if len(self.buf) > HEAD_MAX:
                raise NotHttp("head too long")
            self.fill()

    def line(self) -> bytes:
        while True:
            end = self.buf.find(b"\r\n")
            if end >= 0:
                data = bytes(self.buf[:end + 2])
                del self.buf[:end + 2]
                return data
            if len(self.buf) > HEAD_MAX:
                raise NotHttp("chunk line too long")
            self.fill()

    def some(self, most: int) -> bytes:
        """Up to `most` bytes (at least one), from the buffer or the socket."""
        if not self.buf:
            self.fill()
        data = bytes(self.buf[:most])
        del self.buf[:most]
        return data


def _request_start(reader: Reader) -> None:
    """NotHttp unless the bytes start as a request line (`METHOD `): a TLS hello (a client
    asking whether the port speaks TLS) has no head to wait for, it must go on as it is."""
    while True:
        start = bytes(reader.buf[:16])
        space = start.find(b" ")
        token = start if space < 0 else start[:space]
        if not (token.isalpha() and token.isupper()):
            raise NotHttp(f"not a request line: {start[:8]!r}")
        if space >= 0:
            return
        if len(start) >= 16:
            raise NotHttp("no method")
        reader.fill()


def _headers(head: bytes) -> tuple[str, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    fields: dict[str, str] = {}
    for line in lines[1:]:
        if ":" in line:
            key, _, value = line.partition(":")
            fields[key.strip().lower()] = value.strip()
    return lines[0], fields


def _body(reader: Reader, fields: dict[str, str], forward, until_close: bool) -> int:
    """Forward one message body as it arrives; returns its bytes on the wire."""
    moved = 0
    if "chunked" in fields.get("transfer-encoding", "").lower():
        while True:
            line = reader.line()
            forward(line)
            moved += len(line)
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError as exc:
                raise NotHttp("bad chunk size") from exc
            if size == 0:
                while True:  # trailers, then the blank line
                    trailer = reader.line()
                    forward(trailer)
                    moved += len(trailer)
                    if trailer == b"\r\n":
                        return moved
            left = size + 2  # the chunk and its CRLF
            while left:
                data = reader.some(left)
                forward(data)
                moved += len(data)
                left -= len(data)
    if "content-length" in fields:
        try:
            left = int(fields["content-length"])
        except ValueError as exc:
            raise NotHttp("bad Content-Length") from exc
        while left:
            data = reader.some(min(left, 256 * 1024))
            forward(data)
            moved += len(data)
            left -= len(data)
        return moved
    if until_close:
        with contextlib.suppress(Closed):
            while True:
                data = reader.some(256 * 1024)
                forward(data)
                moved += len(data)
    return moved


class Log:
    """One JSON line per event, flushed at once (a benchmark reads it while we run)."""

    def __init__(self, path: Path | None) -> None:
        self.file = path.open("a", buffering=1) if path else None
        self.lock = threading.Lock()

    def write(self, **event) -> None:
        if self.file is None:
            return
        line = json.dumps(event, separators=(",", ":"))
        with self.lock:
            self.file.write(line + "\n")


class Connection:
    """One client connection through the link: two threads, each direction parsed and paced."""

    ids = itertools.count(1)

    def __init__(self, route: str, client: socket.socket, server: socket.socket, rate: float | None,
                 delay: float, log: Log) -> None:
        self.route, self.client, self.server = route, client, server
        self.delay, self.log = delay, log
        self.id = next(self.ids)
        self.up, self.down = Pacer(rate), Pacer(rate)
        self.pending: deque[dict] = deque()   # requests sent upstream, not yet answered
        self.lock = threading.Lock()
        self.answered = threading.Condition(self.lock)
        self.bytes_up = self.bytes_down = 0
        self.requests = 0
        self.done = 0
        self.opened = time.time()
        log.write(ev="open", route=route, conn=self.id, t=self.opened)

    def start(self) -> None:
        threading.Thread(target=self._requests, daemon=True).start()
        threading.Thread(target=self._responses, daemon=True).start()

    # -- client -> server ------------------------------------------------------------------
    def _send_up(self, data: bytes) -> None:
        self.up.send(self.server, data)
        self.bytes_up += len(data)

    def _requests(self) -> None:
        reader = Reader(self.client)
        first = time.time()
        try:
            while True:
                if not reader.buf:
                    reader.fill()  # the first byte of the next request
                first = time.time()
                _request_start(reader)
                head = reader.head()
                line, fields = _headers(head)
                parts = line.split(" ")
                if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
                    raise NotHttp(line[:80])
                wait = first + self.delay - time.time()
                if wait > 0:
                    time.sleep(wait)  # the request's round trip
                request = {"method": parts[0], "path": parts[1], "t0": first, "req": len(head),
                           "range": fields.get("range")}
                with self.lock:
                    self.pending.append(request)
                    self.requests += 1
                self._send_up(head)

                def forward(data: bytes, request: dict = request) -> None:
                    self._send_up(data)
                    request["req"] += len(data)  # counted as it goes: the answer may be
                    # logged (an error before the body ended) while the body still moves

                _body(reader, fields, forward, until_close=False)
        except NotHttp as exc:
            self.log.write(ev="unparsed", route=self.route, conn=self.id, side="request",
                           why=str(exc), t=time.time())
            wait = first + self.delay - time.time()
            if wait > 0:
                time.sleep(wait)  # its round trip, as a request's
            with contextlib.suppress(OSError, Closed):
                self._send_up(bytes(reader.buf))
                while True:
                    reader.buf.clear()
                    self._send_up(reader.some(256 * 1024))
        except (Closed, OSError):
            pass
        finally:
            with contextlib.suppress(OSError):
                self.server.shutdown(socket.SHUT_WR)
            self._finish()

    # -- server -> client ------------------------------------------------------------------
    def _send_down(self, data: bytes) -> None:
        self.down.send(self.client, data)
        self.bytes_down += len(data)

    def _responses(self) -> None:
        reader = Reader(self.server)
        try:
            while True:
                head = reader.head()
                line, fields = _headers(head)
                parts = line.split(" ", 2)
                if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or \
                        not parts[1].isdigit():
                    raise NotHttp(line[:80])
                status = int(parts[1])
                with self.lock:
                    request = self.pending[0] if self.pending else None
                if request is None:
                    raise NotHttp("a response with no request")
                self._send_down(head)
                moved = len(head)
                if 100 <= status < 200 and status != 101:
                    continue  # an interim answer: the final one follows
                if request["method"] != "HEAD" and status not in NO_BODY_STATUS:
                    moved += _body(reader, fields, self._send_down,
                                   until_close="content-length" not in fields)
                with self.lock:
                    self.pending.popleft()
                self.log.write(ev="req", route=self.route, conn=self.id,
                               method=request["method"], path=request["path"], status=status,
                               req=request["req"], resp=moved, t0=request["t0"],
                               t1=time.time(), **({"range": request["range"]}
                                                  if request["range"] else {}))
        except NotHttp as exc:
            self.log.write(ev="unparsed", route=self.route, conn=self.id, side="response",
                           why=str(exc), t=time.time())
            with contextlib.suppress(OSError, Closed):
                self._send_down(bytes(reader.buf))
                while True:
                    reader.buf.clear()
                    self._send_down(reader.some(256 * 1024))
        except (Closed, OSError):
            pass
        finally:
            with contextlib.suppress(OSError):
                self.client.shutdown(socket.SHUT_WR)
            self._finish()

    def _finish(self) -> None:
        with self.lock:
            self.done += 1
            last = self.done == 2
        if not last:
            return
        for sock in (self.client, self.server):
            with contextlib.suppress(OSError):
                sock.close()
        self.log.write(ev="close", route=self.route, conn=self.id, t=time.time(),
                       up=self.bytes_up, down=self.bytes_down, requests=self.requests,
                       unanswered=len(self.pending))


class Route:
    """One listening port relaying to one upstream."""

    def __init__(self, name: str, upstream: str, port: int, rate: float | None, delay: float,
                 log: Log) -> None:
        host, _, upstream_port = upstream.rpartition(":")
        self.name, self.upstream = name, (host or "127.0.0.1", int(upstream_port))
        self.rate, self.delay, self.log = rate, delay, log
        self.listener = socket.create_server(("127.0.0.1", port), backlog=128)
        self.port = self.listener.getsockname()[1]

    def serve(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._connect, args=(client,), daemon=True).start()

    def _connect(self, client: socket.socket) -> None:
        try:
            server = socket.create_connection(self.upstream, timeout=10)
            server.settimeout(None)
        except OSError as exc:
            self.log.write(ev="refused", route=self.name, why=str(exc), t=time.time())
            client.close()
            return
        for sock in (client, server):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        Connection(self.name, client, server, self.rate, self.delay, self.log).start()


def die_with_parent() -> None:
    """SIGTERM when the process that started us dies (Linux prctl PR_SET_PDEATHSIG)."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG


def parse_route(text: str) -> tuple[str, int, str]:
    """NAME=UPSTREAM or NAME=LISTEN_PORT=UPSTREAM."""
    parts = text.split("=")
    if len(parts) == 2:
        return parts[0], 0, parts[1]
    if len(parts) == 3:
        return parts[0], int(parts[1]), parts[2]
    raise argparse.ArgumentTypeError(f"--route {text!r}: NAME=UPSTREAM or NAME=PORT=UPSTREAM")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--route", type=parse_route, action="append", required=True)
    parser.add_argument("--rate", type=float, default=20e6,
                        help="bytes per second, each direction of each connection (0: none)")
    parser.add_argument("--delay-ms", type=float, default=30.0,
                        help="added to every HTTP request, from its first byte")
    parser.add_argument("--log", type=Path, default=None)
    parser.add_argument("--ready", type=Path, default=None)
    parser.add_argument("--parent", type=int, default=None,
                        help="the pid of the process that wants this relay: exit with it")
    parser.add_argument("--tag", default="", help="a label for finding this relay in ps")
    args = parser.parse_args()
    die_with_parent()
    if args.parent is not None and os.getppid() != args.parent:
        return 1  # the parent died before the line above: nobody wants this relay
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    log = Log(args.log)
    routes = [Route(name, upstream, port, args.rate or None, args.delay_ms / 1000, log)
              for name, port, upstream in args.route]
    for route in routes:
        threading.Thread(target=route.serve, daemon=True).start()
    if args.ready:
        ready = {"pid": os.getpid(), "rate": args.rate, "delay_ms": args.delay_ms,
                 "routes": {r.name: {"port": r.port, "upstream": f"{r.upstream[0]}:"
                                                             f"{r.upstream[1]}"}
                            for r in routes}}
        partial = args.ready.with_suffix(".partial")
        partial.write_text(json.dumps(ready))
        partial.rename(args.ready)
    while not stop.wait(1.0):
        pass
    for route in routes:
        with contextlib.suppress(OSError):
            route.listener.close()
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
