"""A TCP relay that moves bytes at a set rate in both directions, on a port we own.

Unlike `proxy.FaultProxy` (which reads a whole request before forwarding), bytes pass as they
come: a client killed in the middle of a request leaves the registry holding a partial body,
as a real slow network would. Used to interrupt promotions mid-blob.

`rate=None` relays at full speed. Either way the relay counts the bytes it forwarded in each
direction (`client_bytes`: client -> upstream, what a client uploads to a registry behind
it, HTTP headers included; `upstream_bytes`: the answers)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time


class Throttle:
    def __init__(self, upstream: str, port: int, rate: float | None) -> None:
        host, upstream_port = upstream.rsplit(":", 1)
        self.upstream = (host, int(upstream_port))
        self.port = port
        self.rate = rate  # bytes per second, each direction of each connection; None: no limit
        self.listener = socket.create_server(("127.0.0.1", port), reuse_port=False)
        self.stopping = threading.Event()
        self.sockets: list[socket.socket] = []
        self.client_bytes = 0    # forwarded client -> upstream
        self.upstream_bytes = 0  # forwarded upstream -> client
        self._count = threading.Lock()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> Throttle:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() of our thread
        self.listener.close()
        for sock in list(self.sockets):
            with contextlib.suppress(OSError):
                sock.close()

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream)
            except OSError:
                client.close()
                continue
            self.sockets += [client, server]
            for src, dst, upload in ((client, server, True), (server, client, False)):
                threading.Thread(target=self._pipe, args=(src, dst, upload),
                                 daemon=True).start()

    def reset(self) -> None:
        """Start counting again from zero (between two runs through the same relay)."""
        with self._count:
            self.client_bytes = self.upstream_bytes = 0

    def _pipe(self, src: socket.socket, dst: socket.socket, upload: bool) -> None:
        piece = 16 * 1024 if self.rate else 256 * 1024
        try:
            while not self.stopping.is_set():
                data = src.recv(piece)
                if not data:
                    break
                dst.sendall(data)
                with self._count:
                    if upload:
                        self.client_bytes += len(data)
                    else:
                        self.upstream_bytes += len(data)
                if self.rate:
                    time.sleep(len(data) / self.rate)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
