"""Where a registry is and how to trust it: scheme, TLS trust, the loopback exception.

Docker's rule, kept: a plain-HTTP registry is reached without flags only on loopback
(127.0.0.0/8, localhost, ::1); anything else is HTTPS with a verified certificate unless the
user names it with `--insecure REGISTRY`. Trust for a private CA comes from `--ca-file` or from
docker's convention `/etc/docker/certs.d/<host:port>/*.crt`.
"""

from __future__ import annotations

import functools
import ipaddress
import ssl
from pathlib import Path

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
    context = ssl.create_default_context()
    if insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    for path, _ in stamps:
        context.load_verify_locations(cafile=path)
    return context


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
