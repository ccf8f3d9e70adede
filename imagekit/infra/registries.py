"""The loopback registries and target's token service.

- staging    127.0.0.1:5001  plain HTTP, no auth                      (distribution 2.8)
- production 127.0.0.1:5002  TLS (project CA) + htpasswd basic auth   (distribution 2.8)
- target     127.0.0.1:5003  TLS + Bearer tokens from our token service (127.0.0.1:5010, TLS)
- referrers  127.0.0.1:5004  plain HTTP, no auth: go-containerregistry's registry WITH the OCI
                             1.1 referrers API, built from Debian's source
                             (imagekit.infra.referrers_registry)

Each runs from our own config file (mode 0600: it holds the upload HMAC secret) under
`<state>/registries/<name>/`, with deletes enabled so tests can clean up. Debian's systemd unit
is never used. A process is (re)started only if it is not running as ours with the same
config; a port held by anything else is a `PortTaken` error, and that process is left alone.
"""

from __future__ import annotations

import hashlib
import ssl
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from imagekit.errors import InfraError, PortTaken
from imagekit.infra import apt, credentials, pki, referrers_registry
from imagekit.infra.processes import (
    TrackedProcess,
    port_holders,
    port_open,
    running,
    start_tracked,
    stop_tracked,
    wait_for_port,
)
from imagekit.infra.state import (
    ALL_REGISTRIES,
    LOOPBACK,
    REGISTRY_LAYOUT,
    TOKEN_SERVICE_PORT,
    ComponentStatus,
    RegistryEndpoint,
    StatePaths,
)

REGISTRY_BIN = Path("/usr/bin/docker-registry")
TOKEN_SERVICE = "token-service"
TOKEN_SERVICE_NAME = "imagekit-target"
TOKEN_ISSUER = "imagekit-token-service"
TOKEN_REALM = f"https://{LOOPBACK}:{TOKEN_SERVICE_PORT}/token"
FIX = "imagekit infra up"


def endpoints(paths: StatePaths) -> dict[str, RegistryEndpoint]:
    """The contract's endpoints (pure: what they are, not whether they run)."""
    result = {}
    for name, (port, scheme, auth) in ALL_REGISTRIES.items():
        result[name] = RegistryEndpoint(
            name=name, address=f"{LOOPBACK}:{port}", scheme=scheme, auth=auth,
            ca_file=paths.ca_cert if scheme == "https" else None,
            token_realm=TOKEN_REALM if auth == "bearer" else None,
            token_service=TOKEN_SERVICE_NAME if auth == "bearer" else None)
    return result


def _process_name(registry: str) -> str:
    return f"registry-{registry}"


def registry_config(name: str, paths: StatePaths, creds: credentials.Credentials
                    ) -> dict[str, Any]:
    port, scheme, auth = REGISTRY_LAYOUT[name]
    http: dict[str, Any] = {"addr": f"{LOOPBACK}:{port}", "secret": creds.http_secret,
                            "headers": {"X-Content-Type-Options": ["nosniff"]}}
    if scheme == "https":
        http["tls"] = {"certificate": str(paths.server_cert), "key": str(paths.server_key)}
    config: dict[str, Any] = {
        "version": 0.1,
        "log": {"level": "info", "formatter": "text", "fields": {"registry": name}},
        "storage": {
            "filesystem": {"rootdirectory": str(paths.registry_dir(name) / "data")},
            "delete": {"enabled": True},
            "cache": {"blobdescriptor": "inmemory"},
            # Abandoned upload sessions (a client that gave up mid-blob) are removed after an
            # hour; kept, they fill the disk run after run.
            "maintenance": {"uploadpurging": {"enabled": True, "age": "1h", "interval": "1h",
                                              "dryrun": False}},
        },
        "http": http,
    }
    if auth == "basic":
        config["auth"] = {"htpasswd": {"realm": f"imagekit-{name}",
                                       "path": str(credentials.htpasswd_path(paths))}}
    elif auth == "bearer":
        config["auth"] = {"token": {"realm": TOKEN_REALM, "service": TOKEN_SERVICE_NAME,
                                    "issuer": TOKEN_ISSUER,
                                    "rootcertbundle": str(paths.token_cert)}}
    return config


def _fingerprint(*parts: bytes | str) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode() if isinstance(part, str) else part)
        digest.update(b"\0")
    return digest.hexdigest()


def _ensure_listening(name: str, port: int, argv: list[str], log: Path, fingerprint: str,
                      paths: StatePaths, what: str) -> TrackedProcess:
    """Keep our process if it runs with this fingerprint; otherwise (re)start it on a free port."""
    current = running(name, paths)
    if current is not None and current.fingerprint == fingerprint:
        wait_for_port(LOOPBACK, port, 20, current)
        return current
    if current is not None:
        stop_tracked(name, paths=paths)
    if port_open(LOOPBACK, port) or port_holders(port):
        time.sleep(0.5)  # a listener that is just closing (ours, stopped a moment ago)
    if port_open(LOOPBACK, port) or port_holders(port):
        holders = port_holders(port)
        who = ", ".join(f"pid {pid} ({' '.join(cmd)[:80]})" for pid, cmd in holders) or \
            "an unknown process"
        raise PortTaken(f"port {port} is held by {who}, which imagekit did not start; "
                        f"stop it or free the port, then run `imagekit infra up`",
                        where=f"{what} {LOOPBACK}:{port}")
    record = start_tracked(name, argv, log, fingerprint=fingerprint, paths=paths)
    wait_for_port(LOOPBACK, port, 30, record)
    return record


def ensure_files(paths: StatePaths) -> credentials.Credentials:
    """Certificates, credentials, htpasswd, token users, docker config.json (all idempotent)."""
    pki.ensure_server_cert(paths)
    pki.ensure_token_signing_cert(paths)
    creds = credentials.ensure_credentials(paths)
    credentials.ensure_htpasswd(paths, creds)
    credentials.ensure_token_users(paths, creds)
    addresses = {name: ep.address for name, ep in endpoints(paths).items()}
    credentials.ensure_docker_config(paths, creds, addresses)
    return creds


def up(paths: StatePaths, install: bool = True, mirror: str | None = None) -> list[ComponentStatus]:
    """Start whatever of token service + the four registries is missing; return their
    statuses."""
    if install:
        apt.ensure_packages(["docker-registry"], paths.logs / "apt.log")
    if not REGISTRY_BIN.exists():
        raise InfraError("docker-registry is not installed; run `imagekit infra up` as root",
                         where=str(REGISTRY_BIN))
    creds = ensure_files(paths)
    _ensure_token_service(paths)
    for name in REGISTRY_LAYOUT:
        directory = paths.registry_dir(name)
        (directory / "data").mkdir(parents=True, exist_ok=True)
        config_file = directory / "config.yml"
        text = yaml.safe_dump(registry_config(name, paths, creds), sort_keys=False)
        credentials.write_private(config_file, text.encode())
        port = REGISTRY_LAYOUT[name][0]
        _ensure_listening(_process_name(name), port,
                          [str(REGISTRY_BIN), "serve", str(config_file)],
                          paths.logs / f"registry-{name}.log",
                          _fingerprint(str(REGISTRY_BIN), text, _file_bytes(paths.server_cert),
                                       _file_bytes(paths.token_cert)),
                          paths, f"{name} registry")
    _ensure_referrers_registry(paths, mirror)
    return status(paths)


def _ensure_referrers_registry(paths: StatePaths, mirror: str | None = None) -> TrackedProcess:
    """go-containerregistry's registry with the referrers API (built first when missing)."""
    name = referrers_registry.NAME
    binary = referrers_registry.ensure_built(paths, paths.logs / "referrers-registry-build.log",
                                             mirror)
    referrers_registry.blobs_dir(paths).mkdir(parents=True, exist_ok=True)
    argv = referrers_registry.argv(paths, binary)
    return _ensure_listening(_process_name(name), referrers_registry.port(), argv,
                             paths.logs / f"registry-{name}.log",
                             _fingerprint(*argv, referrers_registry.binary_fingerprint(binary)),
                             paths, f"{name} registry")


def _file_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""


def _ensure_token_service(paths: StatePaths) -> TrackedProcess:
    from imagekit.infra.token_service import TokenServiceConfig

    config = TokenServiceConfig(
        host=LOOPBACK, port=TOKEN_SERVICE_PORT, tls_cert=paths.server_cert,
        tls_key=paths.server_key, signing_key=paths.token_key, signing_cert=paths.token_cert,
        users_file=credentials.token_users_path(paths), issuer=TOKEN_ISSUER,
        service=TOKEN_SERVICE_NAME)
    config_file = paths.root / "token-service.json"
    text = config.model_dump_json(indent=2)
    credentials.write_private(config_file, text.encode())
    argv = [_python(), "-m", "imagekit.infra.token_service", "--config", str(config_file)]
    source = Path(__file__).with_name("token_service.py")
    return _ensure_listening(TOKEN_SERVICE, TOKEN_SERVICE_PORT, argv,
                             paths.logs / "token-service.log",
                             _fingerprint(*argv, text, _file_bytes(source),
                                          _file_bytes(paths.server_cert),
                                          _file_bytes(paths.token_cert)),
                             paths, "token service")


def _python() -> str:
    """This environment's interpreter under one stable name (python vs python3 would otherwise
    change the token service's fingerprint and restart it for nothing)."""
    candidate = Path(sys.prefix) / "bin" / "python"
    return str(candidate) if candidate.exists() else sys.executable


def _ssl_context(ca_file: Path | None) -> ssl.SSLContext | bool:
    if ca_file is None or not ca_file.exists():
        return False
    context = ssl.create_default_context(cafile=str(ca_file))
    return context


def _probe(url: str, verify: ssl.SSLContext | bool) -> int | None:
    """HTTP status of GET url (no credentials), or None if nothing answers."""
    try:
        return httpx.get(url, verify=verify, timeout=3.0).status_code
    except httpx.HTTPError:
        return None


def status(paths: StatePaths) -> list[ComponentStatus]:
    """Token service and registries as they really are (answers + whether the process is ours)."""
    out = []
    verify = _ssl_context(paths.ca_cert)
    record = running(TOKEN_SERVICE, paths)
    code = _probe(f"https://{LOOPBACK}:{TOKEN_SERVICE_PORT}/healthz", verify)
    out.append(_component("token-service", f"{LOOPBACK}:{TOKEN_SERVICE_PORT}", record,
                          code == 200, f"HTTP {code}" if code else "no answer"))
    for name, endpoint in endpoints(paths).items():
        record = running(_process_name(name), paths)
        code = _probe(f"{endpoint.url}/v2/", verify if endpoint.ca_file else False)
        expected = 200 if endpoint.auth == "none" else 401
        detail = (f"{endpoint.scheme}, auth {endpoint.auth}, /v2/ answers "
                  f"{code if code else 'nothing'}")
        answers = code == expected
        if name == referrers_registry.NAME and answers:
            api = _referrers_api_answers(endpoint.url)
            detail += ", referrers API on" if api else ", NO referrers API (not ours?)"
            answers = api
        out.append(_component(name, endpoint.address, record, answers, detail))
    return out


def _referrers_api_answers(url: str) -> bool:
    """The referrers route is served: an invalid target digest is a 400 UNSUPPORTED from the
    referrers handler (a registry without the API answers 404 there, like any unknown path)."""
    try:
        response = httpx.get(f"{url}/v2/imagekit-status/referrers/not-a-digest", timeout=3.0)
    except httpx.HTTPError:
        return False
    return response.status_code == 400 and "UNSUPPORTED" in response.text


def _component(name: str, address: str, record: TrackedProcess | None, answers: bool,
               detail: str) -> ComponentStatus:
    if record is None and answers:
        detail += "; not started by imagekit"
    ok = answers and record is not None
    return ComponentStatus(name=name, running=answers, address=address,
                           pid=record.pid if record else None, ours=record is not None,
                           detail=detail, fix=None if ok else FIX)


def down(paths: StatePaths) -> list[str]:
    """Stop our registries and token service; return the names stopped."""
    stopped = []
    for name in [*(_process_name(n) for n in ALL_REGISTRIES), TOKEN_SERVICE]:
        if stop_tracked(name, paths=paths):
            stopped.append(name)
    return stopped

