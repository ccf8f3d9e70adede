"""A throwaway Debian docker-registry on a loopback port (plain HTTP, no auth), for tests and
benchmarks that need a registry of their own: a fresh empty destination, a relay, a
pull-through cache (`proxy`). One implementation for every such use; the shared infra
registries (staging, production, target) are `imagekit infra`'s, never these."""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from pathlib import Path

REGISTRY_BIN = Path("/usr/bin/docker-registry")


class ScratchRegistry:
    """`start()` writes the config under `root`, starts the process and waits until its port
    answers (RuntimeError with the log's tail otherwise); `stop()` ends it."""

    def __init__(self, root: Path, port: int, proxy: str | None = None,
                 binary: Path | str = REGISTRY_BIN) -> None:
        self.root, self.port, self.proxy, self.binary = root, port, proxy, str(binary)
        self.process: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 30.0) -> "ScratchRegistry":
        self.root.mkdir(parents=True, exist_ok=True)
        config = (f"version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\n"
                  f"storage:\n  filesystem:\n    rootdirectory: {self.root / 'data'}\n"
                  f"  delete:\n    enabled: true\n"
                  f"http:\n  addr: {self.address}\n  secret: scratch-{self.port}\n")
        if self.proxy:
            config += f"proxy:\n  remoteurl: {self.proxy}\n"
        (self.root / "config.yml").write_text(config)
        self.log = open(self.root / "registry.log", "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen([self.binary, "serve", str(self.root / "config.yml")],
                                        stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return self
            except OSError:
                if self.process.poll() is not None:
                    break
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"docker-registry on {self.address} did not start: "
                           f"{(self.root / 'registry.log').read_text()[-500:]}")

    def stop(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process = None
            self.log.close()
