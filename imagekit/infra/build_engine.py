"""The build engine: a second dockerd, newer than the machine's, that builds the fixed images.

Why a second engine: the machine's dockerd (Debian bookworm's 20.10) embeds BuildKit 0.8,
which has no `SOURCE_DATE_EPOCH`, no `rewrite-timestamp` and no provenance attestations. Debian
sid's docker.io (28.5, BuildKit 0.25) has all three. It is never installed: its .deb and
trixie's containerd 1.7 are unpacked under the state dir (`dpkg-deb -x`), so /usr/sbin/dockerd,
the cluster's containerd and `apt-get upgrade` never see them. runc is the machine's own (the
trixie build needs a newer glibc than bookworm has).

Each instance has its own data root, exec root, socket, managed containerd and bridge (no
address, no iptables rules: builds use the host network), and the containerd image store (the OCI
exporter and attestations need it). `main` keeps its cache between builds; a fresh instance
(`fresh_instance`) starts from an empty data root and is removed after use: the second,
independent builder of `images verify --rebuild`.

Records are imagekit.infra.processes records, checked against /proc, never trusted alone."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pydantic import BaseModel

from imagekit.errors import InfraError
from imagekit.infra import apt
from imagekit.infra.docker import ask_engine
from imagekit.infra.processes import running, start_tracked, stop_tracked
from imagekit.infra.state import ComponentStatus, StatePaths

#: (package, suite): the engine and the containerd it manages
PACKAGES = (("docker.io", "sid"), ("containerd", "trixie"))
MAIN = "main"
FIX = "imagekit infra up"
#: a data root for a fresh instance needs room for the base image (pulled again) and the build
FRESH_FREE_BYTES = 8 * 1024 ** 3
START_TIMEOUT_S = 60.0


class BuildEngineInstance(BaseModel):
    """One running instance: where to reach it and what it is."""

    name: str
    host: str  # unix:///run/imagekit-build-<name>.sock
    data_root: Path
    version: str
    packages: dict[str, str]  # .deb file -> sha256 (what an auditor's rebuild must match)

    def describe(self) -> str:
        return describe(self.version, self.packages)


def describe(version: str, packages: dict[str, str]) -> str:
    """`docker 28.5.2+dfsg4: containerd_….deb sha256:…, docker.io_….deb sha256:…`: the engine
    as the evidence names it."""
    return f"docker {version}: " + ", ".join(f"{deb} sha256:{digest}"
                                             for deb, digest in sorted(packages.items()))


def _process_name(name: str) -> str:
    return f"build-engine-{name}"


def _socket(name: str) -> Path:
    return Path(f"/run/imagekit-build-{name}.sock")


def _root(paths: StatePaths) -> Path:
    return paths.root / "build-engine"


def package_files(paths: StatePaths, mirror: str | None = None) -> list[Path]:
    """The engine's .debs, fetched once into the state dir (apt.download_suite_package)."""
    log = paths.logs / "apt.log"
    return [apt.download_suite_package(package, suite, paths, log, mirror)
            for package, suite in PACKAGES]


def unpacked(paths: StatePaths, mirror: str | None = None) -> tuple[Path, dict[str, str]]:
    """The unpacked engine (a folder keyed by the .debs' hashes) and {deb name: sha256}."""
    debs = package_files(paths, mirror)
    hashes = {deb.name: hashlib.sha256(deb.read_bytes()).hexdigest() for deb in debs}
    key = hashlib.sha256("".join(sorted(hashes.values())).encode()).hexdigest()[:16]
    folder = _root(paths) / f"pkg-{key}"
    if not (folder / "usr" / "sbin" / "dockerd").is_file():
        partial = folder.with_name(folder.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        for deb in debs:
            done = subprocess.run(["dpkg-deb", "-x", str(deb), str(partial)],
                                  capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise InfraError(f"cannot unpack {deb.name}: {done.stderr.strip()[:200]}",
                                 where=str(deb))
        for runc in (partial / "usr" / "sbin" / "runc", partial / "usr" / "bin" / "runc"):
            runc.unlink(missing_ok=True)  # the machine's runc (see the module docstring)
        partial.rename(folder)
    return folder, hashes


def ping(host: str, timeout: float = 2.0) -> str | None:
    """The instance's engine version if it answers on its socket, else None."""
    response = ask_engine(Path(host.removeprefix("unix://")), "/version", timeout)
    if response is None:
        return None
    try:
        return str(response.json().get("Version", "unknown"))
    except ValueError:
        return None


def start(paths: StatePaths, name: str = MAIN, data_root: Path | None = None,
          mirror: str | None = None, timeout: float = START_TIMEOUT_S) -> BuildEngineInstance:
    """Start instance `name` (or find it running); InfraError when it does not answer."""
    folder, hashes = unpacked(paths, mirror)
    data_root = data_root or _root(paths) / name
    socket = _socket(name)
    host = f"unix://{socket}"
    exec_root = Path(f"/run/imagekit-build-{name}")
    config = _daemon_config(paths)
    binaries = f"{folder}/usr/bin:{folder}/usr/sbin"
    bridge = _own_bridge(name)
    argv = [f"{folder}/usr/sbin/dockerd", f"--host={host}", f"--data-root={data_root}",
            f"--exec-root={exec_root}", f"--pidfile=/run/imagekit-build-{name}.pid",
            "--feature=containerd-snapshotter=true", f"--bridge={bridge}", "--iptables=false",
            "--ip6tables=false", f"--config-file={config}"]
    fingerprint = hashlib.sha256((" ".join(argv) + config.read_text()).encode()).hexdigest()
    if running(_process_name(name), paths) is None:
        socket.unlink(missing_ok=True)  # left by a killed instance: checked, not trusted
    record = start_tracked(_process_name(name), argv, paths.logs / f"build-engine-{name}.log",
                           env={"PATH": f"{binaries}:/usr/sbin:/usr/bin:/sbin:/bin"},
                           fingerprint=fingerprint, paths=paths)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        version = ping(host)
        if version is not None:
            return BuildEngineInstance(name=name, host=host, data_root=data_root,
                                       version=version, packages=hashes)
        if running(_process_name(name), paths) is None:
            raise InfraError(f"the build engine {name} exited while starting; see its log",
                             where=str(record.log_file))
        time.sleep(0.2)
    raise InfraError(f"the build engine {name} did not answer within {timeout:.0f}s",
                     where=str(record.log_file))


#: BuildKit's cache (the bases it pulled, unpacked, and the layers it built) is collected past
#: this size: the engine's disk use is bounded, the newest entries kept
KEEP_STORAGE = "5GB"


def _bridge_name(name: str) -> str:
    return f"ikb-{hashlib.sha256(name.encode()).hexdigest()[:8]}"  # <= 15 characters


def _own_bridge(name: str) -> str:
    """A bridge of the instance's own, made here (no address: builds use the host network).
    Not `--bridge=none`: with it dockerd deletes the host's `docker0` at start (moby's
    removeDefaultBridgeInterface), the machine engine's bridge."""
    bridge = _bridge_name(name)
    if not Path(f"/sys/class/net/{bridge}").exists():
        done = subprocess.run(["ip", "link", "add", "name", bridge, "type", "bridge"],
                              capture_output=True, text=True, check=False, timeout=10)
        if done.returncode != 0 and not Path(f"/sys/class/net/{bridge}").exists():
            raise InfraError(f"cannot create the build engine's bridge {bridge}: "
                             f"{done.stderr.strip()[:200]}", where="ip link add")
    return bridge


def _drop_bridge(name: str) -> None:
    subprocess.run(["ip", "link", "delete", _bridge_name(name)], capture_output=True,
                   check=False, timeout=10)


def _daemon_config(paths: StatePaths) -> Path:
    """Its own daemon.json (the machine's /etc/docker/daemon.json is the other engine's): only
    the build cache's bound."""
    path = _root(paths) / "daemon.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    wanted = json.dumps({"builder": {"gc": {"enabled": True,
                                            "defaultKeepStorage": KEEP_STORAGE}}}) + "\n"
    if not path.is_file() or path.read_text() != wanted:
        path.write_text(wanted)
    return path


def stop(paths: StatePaths, name: str = MAIN) -> bool:
    stopped = stop_tracked(_process_name(name), timeout=60.0, paths=paths)
    if stopped:
        _drop_bridge(name)
    return stopped


@contextmanager
def fresh_instance(paths: StatePaths, mirror: str | None = None
                   ) -> Iterator[BuildEngineInstance]:
    """A second instance with an empty data root, stopped and removed on exit."""
    root = _root(paths)
    root.mkdir(parents=True, exist_ok=True)
    for left in root.glob("fresh-*"):  # a rebuild that was killed: checked, then removed
        if running(_process_name(_fresh_name(left)), paths) is None:
            shutil.rmtree(left, ignore_errors=True)
    free = shutil.disk_usage(root).free
    if free < FRESH_FREE_BYTES:
        raise InfraError(f"{free / 1024 ** 3:.1f} GiB free; a fresh build engine needs "
                         f"{FRESH_FREE_BYTES / 1024 ** 3:.0f} GiB", where=str(root))
    data_root = Path(tempfile.mkdtemp(prefix="fresh-", dir=root))
    name = _fresh_name(data_root)
    try:
        yield start(paths, name, data_root, mirror)
    finally:
        try:
            stop(paths, name)
        finally:
            shutil.rmtree(data_root, ignore_errors=True)
            shutil.rmtree(Path(f"/run/imagekit-build-{name}"), ignore_errors=True)


def _fresh_name(data_root: Path) -> str:
    return f"fresh{data_root.name.removeprefix('fresh-')[:8].lower()}"


def status(paths: StatePaths) -> ComponentStatus:
    record = running(_process_name(MAIN), paths)
    host = f"unix://{_socket(MAIN)}"
    version = ping(host) if record is not None else None
    if version is None:
        return ComponentStatus(name="build-engine", running=False, address=host, fix=FIX,
                               detail="not running (builds need it)")
    assert record is not None  # a version is asked only of a running record
    return ComponentStatus(name="build-engine", running=True, address=host, pid=record.pid,
                           ours=True,
                           detail=f"docker {version} (BuildKit with SOURCE_DATE_EPOCH, "
                                  "rewrite-timestamp, provenance)")
