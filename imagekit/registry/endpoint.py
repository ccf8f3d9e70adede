"""Where a registry is and how to trust it: scheme, TLS trust, the loopback exception.

Docker's rule, kept: a plain-HTTP registry is reached without flags only on loopback
(127.0.0.0/8, localhost, ::1); anything else is HTTPS with a verified certificate unless the
user names it with `--insecure REGISTRY`. Trust for a private CA comes from `--ca-file` or from
docker's convention `/etc/docker/certs.d/<host:port>/*.crt`.
"""

from __future__ import annotations

import functools
import ipaddress
import socket
import ssl
import threading
from pathlib import Path
from typing import Any

CERTS_D_ENV = "IMAGEKIT_DOCKER_CERTS_D"
DEFAULT_CERTS_D = Path("/etc/docker/certs.d")


def host_of(registry: str) -> str:
    """`127.0.0.1:5000` -> `127.0.0.1`; `[::1]:5000` -> `::1`."""
    if registry.startswith("["):
        return registry[1:registry.index("]")]
    return registry.rsplit(":", 1)[0] if registry.count(":") == 1 else registry


def is_loopback(registry: str) -> bool:
    host = host_of(registry)
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_port(registry: str) -> tuple[str, int]:
    """`127.0.0.1:5000` -> ('127.0.0.1', 5000); a registry without a port: 443."""
    host = host_of(registry)
    rest = registry[registry.index("]") + 1:] if registry.startswith("[") else \
        (registry.rsplit(":", 1)[1] if registry.count(":") == 1 else "")
    port = rest.lstrip(":")
    return host, int(port) if port.isdigit() else 443


def speaks_plain_http(registry: str, timeout: float) -> bool:
    """True when the registry's port answers a TLS ClientHello with something that is not TLS
    (a plain-HTTP registry), False when the handshake completes or the port cannot be reached
    (the caller's https attempt then fails or succeeds as it always did). The handshake is
    not verified: it only asks which protocol the port speaks, nothing is sent over it, and
    every request afterwards goes over a verified connection. Only for registries that may
    be plain HTTP (loopback, `--insecure`): their https-first ping would otherwise load the
    system CA bundle (~45 ms of CPU, `LazyTrust`) to talk to a port that speaks HTTP."""
    host, port = host_port(api_host(registry))
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    probe.check_hostname = False
    probe.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock, \
                probe.wrap_socket(sock, server_hostname=host):
            return False
    except ssl.SSLError:
        return True
    except OSError:
        return False


class LazyTrust(ssl.SSLContext):
    """A verifying client context (as `ssl.create_default_context()` makes it) whose CA
    certificates are loaded at its first TLS connection, not when the client is made: a
    promote between plain-HTTP loopback registries never pays for the system bundle (~45 ms
    of CPU, a twentieth of the CLI's fixed cost). Every connection of httpx and of the lean
    path is made through `wrap_socket` (or `wrap_bio`), which loads first."""

    def setup(self, files: tuple[str, ...]) -> LazyTrust:
        self._trust_files = files
        self._trust_lock = threading.Lock()
        self._trusted = False
        return self

    def _load_trust(self) -> None:
        if self._trusted:
            return
        with self._trust_lock:
            if not self._trusted:
                self.load_default_certs()
                for path in self._trust_files:
                    self.load_verify_locations(cafile=path)
                self._trusted = True

    def wrap_socket(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        self._load_trust()
        return super().wrap_socket(*args, **kwargs)

    def wrap_bio(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        self._load_trust()
        return super().wrap_bio(*args, **kwargs)


def api_host(registry: str) -> str:
    """docker.io's API lives on registry-1.docker.io."""
    return "registry-1.docker.io" if registry == "docker.io" else registry


def trust_files(registry: str, ca_file: Path | None,
                certs_d: Path | None = None) -> list[Path]:
    """`--ca-file`, then docker's `<certs.d>/<registry>/*.crt` (`IMAGEKIT_DOCKER_CERTS_D`,
    which the CLI's settings pass as `certs_d`; default /etc/docker/certs.d)."""
    files = [Path(ca_file)] if ca_file else []
    folder = Path(certs_d or DEFAULT_CERTS_D) / registry
    if folder.is_dir():
        files += sorted(p for p in folder.glob("*.crt") if p.is_file())
    return files


def ssl_context(registry: str, ca_file: Path | None, insecure: bool,
                certs_d: Path | None = None) -> ssl.SSLContext:
    """System trust plus `--ca-file` plus certs.d; no verification only for --insecure.

    Contexts are cached by their trust files: loading the system store costs ~30 ms, which
    would otherwise dominate a re-promotion of an image that is already there."""
    files = () if insecure else tuple(trust_files(registry, ca_file, certs_d))
    stamps = tuple((str(p), p.stat().st_mtime_ns) for p in files)
    return _context(stamps, insecure)


@functools.lru_cache(maxsize=32)
def _context(stamps: tuple[tuple[str, int], ...], insecure: bool) -> ssl.SSLContext:
    if insecure:  # nothing is verified: no CA is ever needed
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    return LazyTrust(ssl.PROTOCOL_TLS_CLIENT).setup(tuple(path for path, _ in stamps))


def ssl_cause(exc: BaseException) -> ssl.SSLError | None:
    """The ssl.SSLError behind an httpx ConnectError, if the failure was TLS."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ssl.SSLError):
            return current
        current = current.__cause__ or current.__context__
    text = str(exc)
    if "SSL" in text or "TLS" in text:
        return ssl.SSLError(text)
    return None


def is_verify_failure(exc: BaseException) -> bool:
    cause = ssl_cause(exc)
    return cause is not None and (isinstance(cause, ssl.SSLCertVerificationError)
                                  or "CERTIFICATE_VERIFY_FAILED" in str(cause))
