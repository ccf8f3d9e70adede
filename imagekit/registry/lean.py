"""Blob bodies over a lean HTTP/1.1 path (stdlib `http.client`), beside httpx.

Why not httpx for these bytes, against the house rule "prefer httpx": measured on the bench
image (317 MB), httpx/httpcore/h11 spend ~0.12 s of CPU per 80 MB downloaded above the sha256
(64 KiB socket reads, each copied through h11's receive buffer and httpx's re-chunker), and a
streamed upload pays the same again in h11's chunk framing; `http.client` reading 1 MiB at a time
costs about nothing above the hash (0.05 s per 80 MB *with* the hash). That is ~0.6 s of CPU a
promote, a third of what imagekit itself spends — on a 2-core machine, wall time.

So the lean path carries a blob's exchanges — the blob GET and the upload PATCH, and the
bodiless blob HEAD, upload POST and commit PUT (`Transport.send_small`: httpx's exchange costs
~0.5 ms more CPU, four per blob) — and only the ordinary case: no proxy configured, the
registry answering directly. Everything else stays with httpx: the auth flow (the lean path
only sends the header the flow already earned for those scopes), challenges, redirects (a blob
GET redirected to storage), the ping, manifests. A lean GET answered anything but 200/206/404
is closed and the caller repeats it through httpx, which handles that answer as it always did.
Errors are raised as httpx's exception types, so the one retry policy (`retry.classify`) judges
them the same way.

`IMAGEKIT_LEAN_HTTP=0` turns it off (A/B measurement, or a registry it misjudges).
"""

from __future__ import annotations

import http.client
import logging
import select
import socket
import ssl
import threading
import urllib.request
from collections.abc import Iterable, Iterator
from urllib.parse import urlsplit

import httpx

#: Bytes per read of a blob body: large reads are what makes this path cheap. 1 MiB suits a
#: copy (each piece is one chunk of the upload body); the diffID engine asks for 128 KiB
#: (measured on the bench image: 1 MiB pieces there cost 112k page faults and 0.36 s of system
#: time against 24k and 0.22 s — its buffers stay in cache and get reused).
READ_SIZE = 1 << 20
log = logging.getLogger("imagekit.lean")  # silent unless --verbose, like httpx's
_FALLBACK = frozenset({401, 407}) | frozenset(range(300, 400))


def enabled(wanted: bool = True) -> bool:
    """`wanted` is `RegistryOptions.lean_http` (`IMAGEKIT_LEAN_HTTP=0` through the settings);
    a proxy in the environment turns the lean path off whatever was wanted."""
    if not wanted:
        return False
    proxies = urllib.request.getproxies()
    return not any(key in proxies for key in ("http", "https", "all"))


#: How long a body waits for `100 Continue` before it is sent anyway (RFC 9110: a server that
#: ignores Expect never answers it; curl waits 1 s).
CONTINUE_WAIT_S = 1.0


def _continue(conn: http.client.HTTPConnection, timeout: float) -> bool:
    """After headers with `Expect: 100-continue`: True when the body may go (the server said
    100, or said nothing within `CONTINUE_WAIT_S`), False when a final answer came instead.
    The interim `100 Continue` is read off the socket here; a final answer is left for
    `getresponse`."""
    sock = conn.sock
    if sock is None:
        return True
    ready, _, _ = select.select([sock], [], [], min(CONTINUE_WAIT_S, timeout))
    if not ready:
        return True
    head = sock.recv(1024, socket.MSG_PEEK)
    if head.split(b" ", 2)[1:2] != [b"100"]:
        return False
    seen = b""
    while not seen.endswith(b"\r\n\r\n"):  # the interim answer's head, and nothing more
        piece = sock.recv(1)
        if not piece:
            raise httpx.RemoteProtocolError("connection closed after 100 Continue")
        seen += piece
    return True


class LeanResponse:
    """The parts of an `httpx.Response` the blob code uses: status, headers, body, close."""

    def __init__(self, pool: LeanPool, conn: http.client.HTTPConnection,
                 response: http.client.HTTPResponse) -> None:
        self._pool, self._response = pool, response
        self._conn: http.client.HTTPConnection | None = conn
        self.status_code = response.status
        self.headers = response.headers  # case-insensitive .get(), like httpx's
        self._done = False

        self._body: bytes | None = None

    @property
    def text(self) -> str:
        if self._body is None:
            try:
                self._body = self._response.read(4096)
            except (OSError, http.client.HTTPException):
                self._body = b""
        return self._body.decode(errors="replace")

    def finish(self) -> LeanResponse:
        """Read a small answer whole (an upload's 202) and give the connection back."""
        try:
            self._body = self._response.read(1 << 16)
            self._done = self._response.isclosed()
        except (OSError, http.client.HTTPException):
            self._body = b""
        self.close()
        return self

    def iter_raw(self, size: int = READ_SIZE, limit: int | None = None) -> Iterator[bytes]:
        """The body in pieces of up to `size` bytes, at most `limit` bytes in all (a body
        longer than its descriptor is not read past the first byte too many); a body cut short
        is `httpx.RemoteProtocolError`, a stall `httpx.ReadTimeout` (as httpx raises them)."""
        response = self._response
        expected = response.length
        got = 0
        while True:
            want = size if limit is None else min(size, limit - got)
            if want <= 0:
                return  # the caller stops here; the connection is not reused (not `_done`)
            try:
                data = response.read(want)
            except http.client.IncompleteRead as exc:
                raise httpx.RemoteProtocolError(
                    "peer closed connection without sending complete message body "
                    f"(received {got + len(exc.partial)} bytes, expected {expected})") from None
            except TimeoutError:
                raise httpx.ReadTimeout("timed out reading a blob body") from None
            except (OSError, http.client.HTTPException) as exc:
                raise httpx.ReadError(f"{type(exc).__name__}: {exc}") from None
            if not data:
                break
            got += len(data)
            yield data
        if expected is not None and got < expected:
            raise httpx.RemoteProtocolError(
                "peer closed connection without sending complete message body "
                f"(received {got} bytes, expected {expected})")
        self._done = True

    def close(self) -> None:
        """Back to the pool when the body was read whole and the server keeps the connection."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if self._done and not self._response.will_close:
            self._pool.release(conn)
        else:
            self._response.close()
            conn.close()


class LeanPool:
    """Idle keep-alive connections to one registry host (thread-safe)."""

    def __init__(self, context: ssl.SSLContext | None) -> None:
        self.context = context
        self._idle: dict[tuple[str, str, int], list[http.client.HTTPConnection]] = {}
        self._lock = threading.Lock()
        self.off = False  # set when the registry answered the lean path in a way it cannot use

    def _connection(self, scheme: str, host: str, port: int, timeout: float
                    ) -> http.client.HTTPConnection:
        with self._lock:
            idle = self._idle.get((scheme, host, port))
            conn = idle.pop() if idle else None
        if conn is None:
            if scheme == "https":
                conn = http.client.HTTPSConnection(host, port, timeout=timeout,
                                                   context=self.context)
            else:
                conn = http.client.HTTPConnection(host, port, timeout=timeout)
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        conn._lean_key = (scheme, host, port)  # type: ignore[attr-defined]
        return conn

    def release(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            self._idle.setdefault(conn._lean_key, []).append(conn)  # type: ignore[attr-defined]

    def close(self) -> None:
        with self._lock:
            conns = [c for idle in self._idle.values() for c in idle]
            self._idle.clear()
        for conn in conns:
            conn.close()

    def exchange(self, method: str, url: str, headers: dict[str, str], timeout: float,
                 body: Iterable[bytes] | None = None, expect: bool = False
                 ) -> LeanResponse | None:
        """One request; a streamed `body` goes chunked (no Content-Length: the caller may end
        it early and the registry acknowledges what it got). `expect`: the body waits for the
        server's `100 Continue` (RFC 9110 10.1.1), so a registry that refuses it (a 429 quota,
        a 413) refuses before the body is sent; used where a refusal is likely. None: answered
        in a way only the
        httpx path handles (a challenge, a redirect) and nothing else was sent — for a GET."""
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        for attempt in (0, 1):  # a kept-alive connection the server closed meanwhile: once more
            conn = self._connection(parts.scheme, parts.hostname or "", port, timeout)
            reused = conn.sock is not None
            try:
                conn.putrequest(method, target, skip_accept_encoding=True)
                for name, value in headers.items():
                    conn.putheader(name, value)
                if body is not None:
                    conn.putheader("Transfer-Encoding", "chunked")
                    if expect:
                        conn.putheader("Expect", "100-continue")
                conn.endheaders()
                if body is not None and expect and not _continue(conn, timeout):
                    response = conn.getresponse()  # refused before the body: none is sent
                    response.will_close = True
                    log.info('HTTP Request: %s %s "HTTP/1.1 %d %s" (refused before the body)',
                             method, url, response.status, response.reason)
                    return LeanResponse(self, conn, response)
                if body is not None:
                    for data in body:
                        if data:
                            conn.send(b"%X\r\n" % len(data))
                            conn.send(data)
                            conn.send(b"\r\n")
                    conn.send(b"0\r\n\r\n")
                response = conn.getresponse()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as exc:
                conn.close()
                # once more only where repeating is harmless: a POST or a commit PUT the
                # server may have done (its answer lost) is left to the caller, which asks
                if reused and attempt == 0 and body is None and method in ("GET", "HEAD"):
                    continue
                raise httpx.RemoteProtocolError(f"{type(exc).__name__}: {exc}") from None
            except ConnectionRefusedError as exc:
                conn.close()
                raise httpx.ConnectError(f"{type(exc).__name__}: {exc}") from None
            except ssl.SSLError as exc:
                conn.close()
                raise httpx.ConnectError(str(exc)) from exc
            except TimeoutError:
                conn.close()
                raise httpx.ReadTimeout("timed out") from None
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                raise httpx.ReadError(f"{type(exc).__name__}: {exc}") from None
            except BaseException:  # the body's source failed (or a stop): this request is void
                conn.close()
                raise
            log.info('HTTP Request: %s %s "HTTP/1.1 %d %s" (lean path)', method, url,
                     response.status, response.reason)
            lean = LeanResponse(self, conn, response)
            if response.status in _FALLBACK:
                response.close()
                conn.close()
                if body is None:
                    return None
                self.off = True
                raise httpx.RemoteProtocolError(
                    f"HTTP {response.status} on the lean path; repeating through httpx")
            return lean
        raise AssertionError("unreachable")
