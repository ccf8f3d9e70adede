"""The Docker engine: Debian's docker.io (dockerd 20.10) + trixie's docker-buildx plugin.

Builds go through python-on-whales' `buildx.build` (BuildKit, with secrets), which needs a docker
CLI that has the buildx plugin and speaks the 20.10 daemon's API: Debian's `/usr/bin/docker`.
(A newer `/usr/local/bin/docker` may sit first on PATH; InfraState.docker_client names the one
to use.) dockerd is started only if no daemon answers on the socket; one we did not start is used
as it is and never stopped.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import httpx
import psutil

from imagekit.errors import InfraError
from imagekit.infra import apt
from imagekit.infra.processes import running, start_tracked, stop_tracked
from imagekit.infra.state import ComponentStatus, StatePaths

DOCKER_SOCKET = Path("/var/run/docker.sock")
DOCKER_HOST = f"unix://{DOCKER_SOCKET}"
DOCKER_CLIENT = Path("/usr/bin/docker")
DOCKERD = Path("/usr/sbin/dockerd")
BUILDX_PLUGIN = Path("/usr/libexec/docker/cli-plugins/docker-buildx")
NAME = "dockerd"
FIX = "imagekit infra up"


def ask_engine(socket: Path, path: str, timeout: float = 2.0) -> httpx.Response | None:
    """GET `path` of the engine API on a unix socket: its 200 answer, else None (no socket,
    no answer within `timeout`, another status). The machine's engine and the build engine's
    instances are asked the same way."""
    if not socket.exists():
        return None
    try:
        transport = httpx.HTTPTransport(uds=str(socket), verify=False)  # no TLS on a socket
        with httpx.Client(transport=transport, timeout=timeout, verify=False) as client:
            response = client.get(f"http://docker{path}")
            response.read()
    except httpx.HTTPError:
        return None
    return response if response.status_code == 200 else None


def ping(timeout: float = 2.0) -> str | None:
    """The daemon's API version if it answers on the socket, else None."""
    response = ask_engine(DOCKER_SOCKET, "/_ping", timeout)
    return None if response is None else response.headers.get("API-Version", "unknown")


def ensure_installed(paths: StatePaths, mirror: str | None = None) -> None:
    """docker.io (daemon, 20.10 CLI, containerd, runc) and the buildx plugin (from `mirror`,
    default the Debian archive this machine's apt uses)."""
    log = paths.logs / "apt.log"
    paths.logs.mkdir(parents=True, exist_ok=True)
    apt.ensure_packages(["docker.io"], log)
    if not BUILDX_PLUGIN.exists():
        apt.ensure_trixie_package("docker-buildx", paths, log, mirror)
    if not BUILDX_PLUGIN.exists():
        raise InfraError("docker-buildx is installed but its plugin is missing",
                         where=str(BUILDX_PLUGIN))


def up(paths: StatePaths, install: bool = True, timeout: float = 60.0,
       mirror: str | None = None) -> ComponentStatus:
    """Make sure a daemon answers; start our own dockerd only if none does."""
    if install:
        ensure_installed(paths, mirror)
    version = ping()
    if version is not None:
        return status(paths, version)
    record = running(NAME, paths)
    if record is None:
        if not DOCKERD.exists() or not shutil.which("containerd"):
            raise InfraError("dockerd/containerd not installed; run `imagekit infra up` as root",
                             where=str(DOCKERD))
        _drop_stale_pidfiles()
        record = start_tracked(NAME, [str(DOCKERD), f"--host={DOCKER_HOST}"],
                               paths.logs / "dockerd.log", paths=paths)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        version = ping()
        if version is not None:
            return status(paths, version)
        if running(NAME, paths) is None:
            raise InfraError("dockerd exited while starting; see its log",
                             where=str(record.log_file))
        time.sleep(0.2)
    raise InfraError(f"dockerd did not answer within {timeout:.0f}s", where=str(record.log_file))


#: pid files dockerd and its managed containerd leave behind when killed. If the PID in one now
#: belongs to another process, dockerd refuses to start (or waits on a containerd that is not).
_PIDFILES = {Path("/var/run/docker.pid"): "dockerd",
             Path("/var/run/docker/containerd/containerd.pid"): "containerd"}


def _drop_stale_pidfiles() -> None:
    for pidfile, comm in _PIDFILES.items():
        try:
            pid = int(pidfile.read_text().strip())
        except (FileNotFoundError, ValueError):
            continue
        try:
            alive_comm = psutil.Process(pid).name()
        except (psutil.Error, ValueError):     # gone, not ours to see, or a pid <= 0
            alive_comm = ""
        if alive_comm != comm:
            pidfile.unlink(missing_ok=True)


def status(paths: StatePaths, version: str | None = None) -> ComponentStatus:
    version = version or ping()
    record = running(NAME, paths)
    if version is None:
        return ComponentStatus(name="docker", running=False, address=DOCKER_HOST, fix=FIX,
                               detail="no daemon answers on the socket")
    buildx = "buildx plugin present" if BUILDX_PLUGIN.exists() else "buildx plugin MISSING"
    owner = f"started by imagekit (pid {record.pid})" if record else "not started by imagekit"
    return ComponentStatus(name="docker", running=True, address=DOCKER_HOST,
                           pid=record.pid if record else None, ours=record is not None,
                           detail=f"API {version}, {owner}, {buildx}",
                           fix=None if BUILDX_PLUGIN.exists() else FIX)


def down(paths: StatePaths) -> bool:
    """Stop dockerd only if we started it (it stops its own containerd)."""
    return stop_tracked(NAME, timeout=60.0, paths=paths)


def install_ca(ca_file: Path, addresses: list[str], certs_d: Path = Path("/etc/docker/certs.d")
               ) -> None:
    """Trust the project CA for our TLS registries the way docker expects (certs.d/<host:port>)."""
    data = ca_file.read_bytes()
    for address in addresses:
        target = certs_d / address / "ca.crt"
        try:
            if target.read_bytes() == data:
                continue
        except FileNotFoundError:
            pass
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        target.chmod(0o644)
