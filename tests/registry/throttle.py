"""A TCP relay that moves bytes at a set rate in both directions, on a port we own.

Unlike `proxy.FaultProxy` (which reads a whole request before forwarding), bytes pass as they
come: a client killed in the middle of a request leaves the registry holding a partial body,
as a real slow network would. Used to interrupt promotions mid-blob."""

from __future__ import annotations

import socket
import threading
import time


class Throttle:
    def __init__(self, upstream: str, port: int, rate: float) -> None:
        host, upstream_port = upstream.rsplit(":", 1)
        self.upstream = (host, int(upstream_port))
        self.port = port
        self.rate = rate  # bytes per second, each direction of each connection
        self.listener = socket.create_server(("127.0.0.1", port), reuse_port=False)
        self.stopping = threading.Event()
        self.sockets: list[socket.socket] = []

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> "Throttle":
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        try:
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() of our thread
        except OSError:
            pass
        self.listener.close()
        for sock in list(self.sockets):
            try:
                sock.close()
            except OSError:
                pass

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
            for src, dst in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(src, dst), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        piece = 16 * 1024
        try:
            while not self.stopping.is_set():
                data = src.recv(piece)
                if not data:
                    break
                dst.sendall(data)
                time.sleep(len(data) / self.rate)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
