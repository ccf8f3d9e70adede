"""`ClientPool`: one `RegistryClient` per registry host, shared by an operation, so tokens,
the resolved scheme and connections are reused across hops and images."""

from __future__ import annotations

import threading

from imagekit.registry.client import RegistryClient, RegistryOptions


class ClientPool:
    def __init__(self, options: RegistryOptions | None = None) -> None:
        self.options = options or RegistryOptions()
        self._clients: dict[str, RegistryClient] = {}
        self._lock = threading.Lock()

    def get(self, registry: str) -> RegistryClient:
        with self._lock:
            if registry not in self._clients:
                self._clients[registry] = RegistryClient(registry, self.options)
            return self._clients[registry]

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()

    def __enter__(self) -> ClientPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
