"""A real HTTP proxy in front of a plain-HTTP registry, for fault and lie injection.

- `faults=0.3`: that share of requests gets a 503, a 429 (Retry-After: 0), a connection reset
  before forwarding, a reset *after* forwarding (the registry acted, the answer is lost), or a
  blob body cut in the middle.
- `lie=True`: blob GET bodies have one byte flipped (a relay that corrupts content); with
  `ranges=` or a cut, only the answers to Range requests.
- `cut_after_commits=N`: after N committed blob uploads (PUT …?digest= answered 201) every
  further request is reset — a network cut in the middle of a promote.
- `cut_after_patches=N`: the same after N acknowledged upload chunks (PATCH answered 202) — a
  cut in the middle of one blob. Set the attribute to None to heal the network.
- `hide_committed=True`: a blob whose upload it saw committed (PUT …?digest= answered 201) is
  answered 404 to every later HEAD/GET of it — a registry that acknowledges a commit and then
  does not serve the blob (the read-back must catch it).
- `lie_tags=DIGEST`: every manifest HEAD/GET by tag answers `Docker-Content-Digest: DIGEST` —
  a registry whose tag names another image than the one pushed under it (the read-back of the
  tag must catch it).
- `cut_blobs=(lo, hi)`: every blob GET body (the first and every resumed one) is reset after a
  random lo..hi bytes (a relay that cuts long downloads); `cut_first=N`: only a blob GET without
  a Range header is cut, after N bytes (each blob is resumed exactly once).
- `uploads`, `mounts`: per digest, the uploads committed and the cross-repository mounts the
  registry answered 201 (a blob moved once per repository, or mounted).
- `ranges=`: a relay that lies about ranges (RANGE_LIES): "ignore" answers a Range request with
  200 and the whole body; "shift" answers 206 with a Content-Range that names the offset asked
  for but bytes from `shift` bytes earlier; "shift-honest" the same with a Content-Range that
  says where its bytes really start; "longer" serves every blob with `extra` bytes appended
  (Content-Length saying so), "longer-unannounced" the same with no Content-Length (a
  close-delimited body); "shorter-once" answers each blob's first GET with the first half and
  a Content-Length saying so (complete, but short), then honestly; "shorter" serves every blob
  as if its last `extra` bytes did not exist (200/206 and 416 past that end).

Runs in a thread (ThreadingHTTPServer); `stats` counts what it did (`blob_bytes`: the blob body
bytes it sent, for a byte ratio measured on the relay's side).

Runs in a thread (ThreadingHTTPServer); `stats` counts what it did.
"""

from __future__ import annotations

import contextlib
import http.client
import random
import socket
import struct
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

RANGE_LIES = ("ignore", "shift", "shift-honest", "longer", "longer-unannounced", "shorter-once",
              "shorter")
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
              "proxy-authorization", "proxy-authenticate"}


class _Reset(Exception):
    pass


def _forwarded(handler: BaseHTTPRequestHandler, drop: tuple[str, ...] = ()) -> dict[str, str]:
    """The request's end-to-end headers; a header sent several times (skopeo sends one Accept
    per media type) is forwarded as one comma-joined value, not just its last copy."""
    headers: dict[str, str] = {}
    for key in dict.fromkeys(handler.headers.keys()):
        if key.lower() in HOP_BY_HOP or key.lower() in drop:
            continue
        headers[key] = ", ".join(handler.headers.get_all(key) or [])
    return headers


def _read_chunked(stream) -> bytes:
    """A chunked transfer-encoded request body, decoded."""
    parts: list[bytes] = []
    while True:
        line = stream.readline(65537)
        if not line:
            raise _Reset()
        size = int(line.split(b";", 1)[0].strip() or b"0", 16)
        if size == 0:
            while stream.readline(65537) not in (b"\r\n", b"\n", b""):
                pass  # trailers
            return b"".join(parts)
        parts.append(stream.read(size))
        stream.readline(65537)  # CRLF after the chunk


class FaultProxy:
    def __init__(self, upstream: str, *, faults: float = 0.0, lie: bool = False,
                 cut_after_commits: int | None = None, cut_after_patches: int | None = None,
                 seed: int = 7, cut_blobs: tuple[int, int] | None = None,
                 cut_first: int | None = None, ranges: str | None = None, shift: int = 4096,
                 extra: int = 1 << 20, bind: str = "127.0.0.1",
                 hide_committed: bool = False, lie_tags: str | None = None) -> None:
        if ranges is not None and ranges not in RANGE_LIES:
            raise ValueError(f"ranges={ranges!r}: one of {RANGE_LIES}")
        self.cut_blobs, self.cut_first, self.ranges = cut_blobs, cut_first, ranges
        self.shift, self.extra = shift, extra
        self.seen: set[str] = set()
        self.upstream_host, port = upstream.rsplit(":", 1)
        self.upstream_port = int(port)
        self.faults = faults
        self.lie = lie
        self.cut_after_commits = cut_after_commits
        self.random = random.Random(seed)
        self.lock = threading.Lock()
        self.stats: Counter[str] = Counter()
        #: blob GETs by digest (every request, a resumed Range request too)
        self.blob_gets: Counter[str] = Counter()
        self.commits = 0
        self.cut_after_patches = cut_after_patches
        self.patches = 0
        self.hide_committed = hide_committed
        self.lie_tags = lie_tags
        self.hidden: set[str] = set()   # digests committed through here, hidden after
        #: committed uploads and cross-repository mounts (answered 201), by digest
        self.uploads: Counter[str] = Counter()
        self.mounts: Counter[str] = Counter()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _any(self) -> None:
                try:
                    proxy._handle(self)
                except _Reset:
                    proxy._reset(self)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True

            do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = _any

        self.server = ThreadingHTTPServer((bind, 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> FaultProxy:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- faults ------------------------------------------------------------------------------
    def _count(self, name: str) -> None:
        with self.lock:
            self.stats[name] += 1

    def _pick(self) -> str | None:
        with self.lock:
            if self.faults <= 0 or self.random.random() >= self.faults:
                return None
            return self.random.choice(["503", "429", "reset", "reset-after", "cut-body"])

    @staticmethod
    def _reset(handler: BaseHTTPRequestHandler) -> None:
        """Close with RST (SO_LINGER 0): the client sees a connection reset."""
        handler.close_connection = True
        with contextlib.suppress(OSError):
            handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                          struct.pack("ii", 1, 0))
        with contextlib.suppress(OSError):
            handler.connection.close()

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        if "chunked" in (handler.headers.get("transfer-encoding") or "").lower():
            body = _read_chunked(handler.rfile)  # streamed PATCHes (no Content-Length)
        else:
            length = int(handler.headers.get("content-length") or 0)
            body = handler.rfile.read(length) if length else b""
        with self.lock:
            cut = (self.cut_after_commits is not None and
                   self.commits >= self.cut_after_commits) or \
                (self.cut_after_patches is not None and self.patches >= self.cut_after_patches)
        if cut:
            self._count("cut")
            raise _Reset()
        self._count("requests")
        fault = self._pick()
        if fault == "cut-body" and not (handler.command == "GET" and "/blobs/sha256:" in
                                        handler.path):
            fault = "reset"  # only blob bodies are long enough to cut in the middle
        if fault in ("503", "429"):
            self._count(fault)
            payload = b'{"errors":[{"code":"UNAVAILABLE","message":"injected"}]}'
            handler.send_response(int(fault))
            if fault == "429":
                handler.send_header("Retry-After", "0")
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(payload)))
            handler.end_headers()
            if handler.command != "HEAD":
                handler.wfile.write(payload)
            return
        if fault == "reset":
            self._count("reset")
            raise _Reset()
        is_blob_get = handler.command == "GET" and "/blobs/sha256:" in handler.path
        if handler.command in ("GET", "HEAD") and "/blobs/sha256:" in handler.path and \
                handler.path.rsplit("/", 1)[-1].split("?")[0] in self.hidden:
            self._count("hidden")
            handler.send_response(404)
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            return
        if is_blob_get:  # per digest: how often each blob was fetched (pulled once?)
            with self.lock:
                self.blob_gets[handler.path.rsplit("/", 1)[-1].split("?")[0]] += 1
        if is_blob_get and (self.ranges or self.cut_blobs or self.cut_first is not None):
            self._blob(handler)
            return
        upstream = http.client.HTTPConnection(self.upstream_host, self.upstream_port,
                                              timeout=120)
        headers = _forwarded(handler)
        headers["Host"] = f"{self.upstream_host}:{self.upstream_port}"
        upstream.request(handler.command, handler.path, body=body or None, headers=headers)
        response = upstream.getresponse()
        try:
            if fault == "reset-after":
                response.read()
                self._count("reset-after")
                raise _Reset()
            is_blob_get = handler.command == "GET" and "/blobs/sha256:" in handler.path
            if handler.command == "PUT" and "/blobs/uploads/" in handler.path and \
                    "digest=" in handler.path and response.status == 201:
                with self.lock:
                    self.commits += 1
                    self.uploads[handler.path.split("digest=", 1)[1].split("&")[0]
                                 .replace("%3A", ":")] += 1
                    if self.hide_committed:
                        self.hidden.add(handler.path.split("digest=", 1)[1].split("&")[0]
                                        .replace("%3A", ":"))
            if handler.command == "POST" and "mount=" in handler.path and \
                    response.status == 201:
                with self.lock:
                    self.mounts[handler.path.split("mount=", 1)[1].split("&")[0]
                                .replace("%3A", ":")] += 1
            if handler.command == "PATCH" and response.status == 202:
                with self.lock:
                    self.patches += 1
            handler.send_response(response.status)
            by_tag = "/manifests/" in handler.path and \
                not handler.path.rsplit("/", 1)[-1].startswith("sha256:")
            for key, value in response.getheaders():
                if key.lower() in HOP_BY_HOP:
                    continue
                if self.lie_tags and by_tag and key.lower() == "docker-content-digest" and \
                        handler.command in ("GET", "HEAD") and response.status == 200:
                    value = self.lie_tags
                    self._count("tag-lies")
                if key.lower() == "location" and value.startswith("http"):
                    value = value.replace(f"{self.upstream_host}:{self.upstream_port}",
                                          f"127.0.0.1:{self.port}")
                handler.send_header(key, value)
            handler.end_headers()
            if handler.command == "HEAD":
                return
            sent = 0
            flipped = False
            total = int(response.getheader("content-length") or 0)
            while True:
                data = response.read(256 * 1024)
                if not data:
                    break
                if self.lie and is_blob_get and not flipped and response.status in (200, 206):
                    data = bytes([data[0] ^ 0xFF]) + data[1:]
                    flipped = True
                    self._count("lies")
                if fault == "cut-body" and is_blob_get and total and sent + len(data) > total // 2:
                    handler.wfile.write(data[: max(0, total // 2 - sent)])
                    handler.wfile.flush()
                    self._count("cut-body")
                    raise _Reset()
                if is_blob_get:
                    self._count_bytes(len(data))
                handler.wfile.write(data)
                sent += len(data)
        finally:
            response.close()
            upstream.close()

    # -- blob GETs: cuts and range lies ------------------------------------------------------
    def _count_bytes(self, n: int) -> None:
        with self.lock:
            self.stats["blob_bytes"] += n

    def _upstream_blob(self, handler: BaseHTTPRequestHandler, first: int | None):
        """GET the blob upstream (from byte `first` when not None): (connection, response)."""
        upstream = http.client.HTTPConnection(self.upstream_host, self.upstream_port,
                                              timeout=120)
        headers = _forwarded(handler, drop=("range",))
        headers["Host"] = f"{self.upstream_host}:{self.upstream_port}"
        if first:
            headers["Range"] = f"bytes={first}-"
        upstream.request("GET", handler.path, headers=headers)
        return upstream, upstream.getresponse()

    def _blob(self, handler: BaseHTTPRequestHandler) -> None:
        asked = handler.headers.get("range")
        start = int(asked.split("=", 1)[1].split("-", 1)[0]) if asked else 0
        lie = self.ranges
        with self.lock:
            first_time = handler.path not in self.seen
            self.seen.add(handler.path)
        # what to fetch upstream
        fetch_from: int | None = start
        if lie == "ignore" and asked:
            fetch_from = None
            self._count("range-ignored")
        elif lie in ("shift", "shift-honest") and asked:
            fetch_from = max(0, start - self.shift)
            self._count("range-shifted")
        upstream, response = self._upstream_blob(handler, fetch_from)
        try:
            if response.status not in (200, 206):
                payload = response.read()
                handler.send_response(response.status)
                handler.send_header("Content-Length", str(len(payload)))
                handler.end_headers()
                handler.wfile.write(payload)
                return
            total = int(response.getheader("content-length") or 0) + (fetch_from or 0)
            status, length, content_range = response.status, total - (fetch_from or 0), None
            body_start = fetch_from or 0
            limit = length               # upstream bytes to pass on
            append = 0
            if lie == "shift" and asked:
                status, length = 206, total - start
                content_range, limit = f"bytes {start}-{total - 1}/{total}", total - start
            elif lie == "shift-honest" and asked:
                content_range = f"bytes {body_start}-{total - 1}/{total}"
            elif lie == "shorter":
                short_total = max(0, total - self.extra)
                if body_start >= short_total and asked:
                    self._count("416")  # counted before the client can see it (no race)
                    handler.send_response(416)
                    handler.send_header("Content-Range", f"bytes */{short_total}")
                    handler.send_header("Content-Length", "0")
                    handler.end_headers()
                    return
                limit = length = short_total - body_start
                if status == 206:
                    content_range = f"bytes {body_start}-{short_total - 1}/{short_total}"
                self._count("shortened")
            elif lie == "shorter-once" and first_time and not asked:
                limit = length = total // 2
                self._count("shortened")
            elif lie in ("longer", "longer-unannounced") and not asked:
                append = self.extra
                length = total + append
                self._count("lengthened")
            elif status == 206:
                content_range = response.getheader("content-range")
            handler.send_response(status)
            for key, value in response.getheaders():
                if key.lower() in HOP_BY_HOP or key.lower() in ("content-length",
                                                                "content-range"):
                    continue
                handler.send_header(key, value)
            if content_range:
                handler.send_header("Content-Range", content_range)
            if lie == "longer-unannounced" and not asked:
                handler.send_header("Connection", "close")
                handler.close_connection = True
            else:
                handler.send_header("Content-Length", str(length))
            handler.end_headers()
            cut_at = None
            if self.cut_blobs is not None:
                with self.lock:
                    cut_at = self.random.randint(*self.cut_blobs)
            elif self.cut_first is not None and not asked:
                cut_at = self.cut_first
            sent = 0
            while sent < limit:
                data = response.read(min(256 * 1024, limit - sent))
                if not data:
                    break
                if self.lie and asked and sent == 0:  # a resume answered with other bytes
                    data = bytes([data[0] ^ 0xFF]) + data[1:]
                    self._count("lies")
                if cut_at is not None and sent + len(data) > cut_at:
                    self._count_bytes(max(0, cut_at - sent))
                    self._count("cut-blob")
                    handler.wfile.write(data[: max(0, cut_at - sent)])
                    handler.wfile.flush()
                    # a clean close (FIN, not RST): what was sent arrives, the body is short
                    handler.close_connection = True
                    with contextlib.suppress(OSError):
                        handler.connection.shutdown(socket.SHUT_WR)
                    return
                self._count_bytes(len(data))  # before the client can have it: no race
                handler.wfile.write(data)
                sent += len(data)
            if append:
                junk = bytes(256 * 1024)
                while append > 0:
                    piece = junk[:append]
                    handler.wfile.write(piece)
                    append -= len(piece)
                handler.wfile.flush()
        finally:
            response.close()
            upstream.close()
