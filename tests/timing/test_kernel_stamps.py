"""The stamping event loop gives each read the kernel's receive time, on plain TCP and through
TLS: a read the loop reaches 60 ms late still says when its bytes came. asyncio's own loop
gives none (the client then stamps when the loop reads)."""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
import time
from pathlib import Path

import pytest

from imagekit.acceptance import kernel_stamps
from tests.cluster.kube_front import _self_signed

#: the server answers 20 ms after the client's byte; the client's loop is held 80 ms from
#: sending it, so it reads the answer about 60 ms after it came
ANSWER_AFTER_S, HELD_S, LATE_S = 0.02, 0.08, 0.04


class _Probe(asyncio.Protocol):
    def __init__(self) -> None:
        self.reads: list[tuple[float | None, float]] = []
        self.got = asyncio.get_running_loop().create_future()

    def data_received(self, data: bytes) -> None:
        self.reads.append((kernel_stamps.read_stamp(), time.perf_counter()))
        if not self.got.done():
            self.got.set_result(None)


def _serve_one(listener: socket.socket, context: ssl.SSLContext | None,
               sent: list[float]) -> None:
    """Accept one connection, wait for the client's byte, answer one byte ANSWER_AFTER_S
    later."""
    raw, _ = listener.accept()
    # no Nagle: the answer leaves when sent, not after the client's delayed ACK of the TLS
    # session tickets (40 ms later, which the stamp would rightly show)
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    conn = context.wrap_socket(raw, server_side=True) if context else raw
    with conn:
        conn.recv(1)
        time.sleep(ANSWER_AFTER_S)
        sent.append(time.perf_counter())
        conn.sendall(b"x")
        time.sleep(0.5)


async def _late_read(port: int, client_context: ssl.SSLContext | None) -> _Probe:
    loop = asyncio.get_running_loop()
    transport, probe = await loop.create_connection(
        _Probe, "127.0.0.1", port, ssl=client_context,
        server_hostname="127.0.0.1" if client_context else None)
    transport.write(b"g")
    time.sleep(HELD_S)                 # the loop is held while the answer comes in
    await asyncio.wait_for(probe.got, 5)
    transport.close()
    return probe


def _run(loop_factory, tls: bool, tmp_path: Path) -> tuple[_Probe, float]:
    listener = socket.create_server(("127.0.0.1", 0))
    server_context = client_context = None
    if tls:
        cert, key = _self_signed(tmp_path)
        server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server_context.load_cert_chain(cert, key)
        client_context = ssl.create_default_context(cafile=str(cert))
    sent: list[float] = []
    server = threading.Thread(target=_serve_one, args=(listener, server_context, sent),
                              daemon=True)
    server.start()
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        probe = runner.run(_late_read(listener.getsockname()[1], client_context))
    listener.close()
    return probe, sent[0]


@pytest.mark.parametrize("tls", [False, True], ids=["tcp", "tls"])
def test_a_late_read_carries_the_time_its_bytes_came(tls: bool, tmp_path: Path) -> None:
    assert kernel_stamps.stamping_supported()
    kernel_stamps.take_read_lags()     # what earlier tests of this process left counted
    probe, sent = _run(kernel_stamps.StampingEventLoop, tls, tmp_path)
    stamp, read_at = probe.reads[0]
    assert stamp is not None, probe.reads
    assert read_at - sent >= LATE_S                      # the loop really was late
    assert 0 <= stamp - sent < 0.01, (stamp - sent, read_at - sent)
    lags, _, unstamped = kernel_stamps.take_read_lags()
    assert unstamped == 0 and max(lags) >= LATE_S - 0.01, lags


def test_asyncio_s_own_loop_gives_no_receive_time(tmp_path: Path) -> None:
    probe, sent = _run(asyncio.SelectorEventLoop, False, tmp_path)
    assert probe.reads[0][0] is None
