"""Receive times from the kernel: an event loop whose sockets say when their bytes arrived.

The load client times each streamed event by the moment its bytes reached this machine. One
event loop reads every stream, and on a machine whose cores also run the engine (or a test
suite), that loop reaches a socket milliseconds after its bytes came in: a stamp taken when the
loop reads is late by the loop's own lag, and at 64 or 256 streams that lag is what the tails of
TTFT and ITL showed. Linux stamps every received packet (`SO_TIMESTAMPNS`; for TCP, `recvmsg`
returns the time of the newest packet it consumed, net/ipv4/tcp.c `tcp_recv_timestamp`), so the
stamp no longer depends on when the loop ran.

`StampingEventLoop` is asyncio's selector loop whose socket transports read with `recvmsg` and
keep that time for the duration of the protocol callback; `read_stamp()` gives it, converted to
`time.perf_counter`'s timeline. The kernel's stamp is CLOCK_REALTIME: the conversion takes the
packet's age (realtime now - stamp) off perf_counter's now, so no clock offset is held across
reads. Elsewhere (no `SO_TIMESTAMPNS`, another platform, a Python without the selector
transport's read hooks) `stamping_supported()` is False and the client stamps when the loop
reads, as before.

Hand-written rather than from a library: no maintained asyncio transport exposes receive
timestamps (uvloop reads in libuv with `read(2)`, which carries no ancillary data).
"""

from __future__ import annotations

import asyncio
import socket
import struct
import sys
import time
from asyncio import selector_events, sslproto
from typing import Any

from imagekit.acceptance.models import TimingDefinitions

#: Linux's SO_TIMESTAMPNS (asm-generic/socket.h), where Python's socket module lacks the name
_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
_TIMESPEC = struct.Struct("@qq")
_ANCILLARY = socket.CMSG_SPACE(_TIMESPEC.size) if hasattr(socket, "CMSG_SPACE") else 0

#: the source named in evidence (`TimingDefinitions.stamps`); LOOP is its default, what
#: records written before kernel stamps used
KERNEL = "kernel receive time (SO_TIMESTAMPNS), on perf_counter's timeline"
LOOP: str = TimingDefinitions.model_fields["stamps"].default

#: read lags kept per round at most (about 20 s of reads at 256 streams and 10 ms gaps);
#: later reads are counted, not kept
MAX_LAGS = 500_000

_read_stamp: float | None = None
_lags: list[float] = []
_lags_dropped = 0
_unstamped = 0


def read_stamp() -> float | None:
    """The perf_counter time at which the bytes being delivered now reached this machine; None
    outside a stamping transport's read (or when the kernel gave none)."""
    return _read_stamp


def note_unstamped_read() -> None:
    """A read of an answer that came without the kernel's time (stamped by the loop)."""
    global _unstamped
    _unstamped += 1


def take_read_lags() -> tuple[list[float], int, int]:
    """The lags noted since the last call (seconds from the kernel's receipt to the loop's
    read, one per read), how many more stamped reads there were beyond MAX_LAGS, and how many
    reads of answers carried no kernel time (note_unstamped_read); starts anew.

    The lag is the client's own delay: when it grows past the gap between a stream's events,
    the next event is already in the socket as the loop reads, and both carry the newer
    packet's time (TCP merges queued packets and keeps the newest time), so the lag says how
    far a round's figures can be trusted."""
    global _lags, _lags_dropped, _unstamped
    taken, dropped, unstamped = _lags, _lags_dropped, _unstamped
    _lags, _lags_dropped, _unstamped = [], 0, 0
    return taken, dropped, unstamped


def stamp_source(stamped: int, unstamped: int) -> str:
    """What stamped a round's reads of answers (counts from take_read_lags): the kernel, the
    loop, or each for some."""
    if not unstamped:
        return KERNEL if stamped else LOOP
    if not stamped:
        return LOOP
    return f"{KERNEL} for {stamped} reads; {LOOP} for {unstamped}"


def _stamp_from(ancillary: list[tuple[int, int, bytes]]) -> float | None:
    global _lags_dropped
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS and len(data) >= _TIMESPEC.size:
            seconds, nanoseconds = _TIMESPEC.unpack_from(data)
            age = max(time.time() - (seconds + nanoseconds * 1e-9), 0.0)
            if len(_lags) < MAX_LAGS:
                _lags.append(age)
            else:
                _lags_dropped += 1
            return time.perf_counter() - age
    return None


class _StampingTransport(selector_events._SelectorSocketTransport):  # type: ignore[name-defined,misc]
    """asyncio's socket transport, reading with recvmsg so each read brings its receive time."""

    def __init__(self, loop: Any, sock: socket.socket, *args: Any, **kwargs: Any) -> None:
        self._stamped = False
        if sock.family in (socket.AF_INET, socket.AF_INET6) and sock.type == socket.SOCK_STREAM:
            try:
                sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
                self._stamped = True
            except OSError:
                pass
        super().__init__(loop, sock, *args, **kwargs)

    def _read_ready__data_received(self) -> None:
        if not self._stamped:
            return super()._read_ready__data_received()
        if self._conn_lost:
            return None

        def receive() -> tuple[bytes, list]:
            data, ancillary, _, _ = self._sock.recvmsg(self.max_size, _ANCILLARY)
            return data, ancillary

        self._receive(receive, self._protocol.data_received)
        return None

    def _read_ready__get_buffer(self) -> None:
        if not self._stamped:
            return super()._read_ready__get_buffer()
        if self._conn_lost:
            return None
        try:
            buffer = self._protocol.get_buffer(-1)
            if not len(buffer):
                raise RuntimeError("get_buffer() returned an empty buffer")
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._fatal_error(exc, "Fatal error: protocol.get_buffer() call failed.")
            return None

        def receive() -> tuple[int, list]:
            count, ancillary, _, _ = self._sock.recvmsg_into([buffer], _ANCILLARY)
            return count, ancillary

        self._receive(receive, self._protocol.buffer_updated)
        return None

    def _receive(self, receive: Any, callback: Any) -> None:
        """One read as asyncio's transport makes it (`receive()`: the bytes or their count,
        and the ancillary data): nothing read is the end of the stream, else the protocol's
        `callback` runs with the read's stamp set."""
        try:
            got, ancillary = receive()
        except (BlockingIOError, InterruptedError):
            return
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._fatal_error(exc, "Fatal read error on socket transport")
            return
        if not got:
            self._read_ready__on_eof()
            return
        self._deliver(ancillary, callback, got)

    def _deliver(self, ancillary: list, callback: Any, argument: Any) -> None:
        global _read_stamp
        _read_stamp = _stamp_from(ancillary)
        try:
            callback(argument)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._fatal_error(exc, "Fatal error: protocol read callback failed.")
        finally:
            _read_stamp = None


class StampingEventLoop(asyncio.SelectorEventLoop):
    """asyncio's selector loop whose TCP connections, plain or TLS, carry kernel receive
    times."""

    def _make_socket_transport(self, sock: socket.socket, protocol: Any, waiter: Any = None, *,
                               extra: Any = None, server: Any = None) -> Any:
        return _StampingTransport(self, sock, protocol, waiter, extra, server)

    def _make_ssl_transport(self, rawsock: socket.socket, protocol: Any, sslcontext: Any,
                            waiter: Any = None, *, server_side: bool = False,
                            server_hostname: str | None = None, extra: Any = None,
                            server: Any = None, **timeouts: Any) -> Any:
        """As asyncio's, on the stamping transport: the TLS layer decrypts within the read's
        callback, so the answer's bytes reach the client with the read's time."""
        ssl_protocol = sslproto.SSLProtocol(self, protocol, sslcontext, waiter, server_side,
                                            server_hostname, **timeouts)
        _StampingTransport(self, rawsock, ssl_protocol, extra=extra, server=server)
        return ssl_protocol._app_transport


def stamping_supported() -> bool:
    """Linux, recvmsg, and asyncio's selector transport with the read hooks this subclasses."""
    transport = getattr(selector_events, "_SelectorSocketTransport", None)
    return (sys.platform.startswith("linux") and hasattr(socket.socket, "recvmsg")
            and _ANCILLARY > 0 and transport is not None
            and hasattr(asyncio.SelectorEventLoop, "_make_ssl_transport")
            and all(hasattr(transport, name) for name in (
                "_read_ready__data_received", "_read_ready__get_buffer",
                "_read_ready__on_eof", "_fatal_error")))
