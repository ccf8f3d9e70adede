"""Start, find and stop the long-running processes imagekit owns, and only those.

A PID file alone proves nothing: PIDs are reused. Every record keeps the PID together with the
kernel's start time of that process (/proc/<pid>/stat field 22, clock ticks since boot) and its
command line; a record counts as "ours and running" only while all of them still match what
/proc shows AND the process belongs to the state directory reading the record: its stdout or
stderr is a log file inside that directory (every tracked process is started that way), or its
environment carries that directory's identity (IMAGEKIT_STATE_ROOT=<device>:<inode>, which a
copy of the directory does not share). So a copy of the state (IMAGEKIT_STATE_DIR pointing
elsewhere) never calls the real processes its own, and `down` with it signals nobody. Anything
else holding a port we need is foreign and is never signalled.

Public API, also for other infra parts (the cluster):
    start_tracked(name, argv, log_file, env=None) -> TrackedProcess
    running(name) -> TrackedProcess | None
    stop_tracked(name) -> bool
    tracked_names() -> list[str]
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from imagekit.errors import InfraError
from imagekit.infra.state import StatePaths

#: Set in every tracked process's environment: the device:inode of the state directory.
STATE_ROOT_ENV = "IMAGEKIT_STATE_ROOT"

#: Popen handles of children started by this Python process, so they are reaped (no zombies,
#: no ResourceWarning) when stopped from the same process, e.g. inside a test session.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


class TrackedProcess(BaseModel):
    """One process imagekit started: enough to recognise it again, and nothing secret."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    pid: int
    start_time: int
    exe: str
    cmdline: list[str]
    log_file: Path
    started_at: str
    fingerprint: str | None = None


# ---------------------------------------------------------------- /proc readers


def proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in ticks) of a live pid, or None when it does not exist."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # comm (field 2) may hold spaces and parentheses: fields resume after the LAST ')'.
    rest = raw[raw.rfind(")") + 2:].split()
    # rest[0] is field 3 (state); field 22 (starttime) is rest[19].
    return rest[0], int(rest[19])


def proc_cmdline(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def proc_exe(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return ""


def _state_identity(root: Path) -> str | None:
    try:
        info = os.stat(root)
    except OSError:
        return None
    return f"{info.st_dev}:{info.st_ino}"


def owned_by(pid: int, paths: StatePaths) -> bool:
    """Was `pid` started from this state directory (not from a copy of it, not by someone else)?

    True when its stdout/stderr is a file inside the directory, or its environment names the
    directory's device:inode."""
    root = os.path.realpath(paths.root)
    for fd in (1, 2):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("/") and not target.endswith(" (deleted)") and \
                os.path.realpath(target).startswith(root.rstrip("/") + "/"):
            return True
    identity = _state_identity(paths.root)
    if identity is None:
        return False
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False
    return f"{STATE_ROOT_ENV}={identity}".encode() in environ


def is_ours(record: TrackedProcess, paths: StatePaths | None = None) -> bool:
    """The record's process runs (PID, start time, command line) and belongs to this state."""
    return is_alive(record) and owned_by(record.pid, paths or StatePaths())


def is_alive(record: TrackedProcess) -> bool:
    """True only if the PID still runs the very process we started (not a reuse, not a zombie)."""
    stat = proc_stat(record.pid)
    if stat is None:
        return False
    state, start = stat
    if state in {"Z", "X", "x"} or start != record.start_time:
        return False
    return proc_cmdline(record.pid) == record.cmdline


# ---------------------------------------------------------------- records


def _record_path(name: str, paths: StatePaths | None = None) -> Path:
    if not name or "/" in name or name.startswith("."):
        raise InfraError(f"bad tracked process name {name!r}")
    return (paths or StatePaths()).pids / f"{name}.json"


def read_record(name: str, paths: StatePaths | None = None) -> TrackedProcess | None:
    """The stored record, whether or not it is still true (see `running`). A log file recorded
    relative to the state directory is returned inside the directory that read it."""
    paths = paths or StatePaths()
    path = _record_path(name, paths)
    try:
        record = TrackedProcess.model_validate_json(path.read_text())
    except FileNotFoundError:
        return None
    except (ValueError, UnicodeDecodeError):
        return None
    if not record.log_file.is_absolute():
        record = record.model_copy(update={"log_file": paths.root.absolute() / record.log_file})
    return record


def running(name: str, paths: StatePaths | None = None) -> TrackedProcess | None:
    """Our process `name` if it really runs from this state directory; a stale record (dead or
    reused PID) is removed. A record whose process runs but belongs to another state directory
    (this one is a copy) is left alone and is not ours."""
    paths = paths or StatePaths()
    record = read_record(name, paths)
    if record is None:
        return None
    if is_alive(record):
        return record if owned_by(record.pid, paths) else None
    _reap(record.pid)
    _record_path(name, paths).unlink(missing_ok=True)
    return None


def record_state(name: str, paths: StatePaths | None = None) -> str:
    """'none' (no record), 'ours' (runs, from this directory), 'foreign' (its process runs but
    was started from another state directory) or 'stale' (dead or reused PID)."""
    paths = paths or StatePaths()
    record = read_record(name, paths)
    if record is None:
        return "none"
    if not is_alive(record):
        return "stale"
    return "ours" if owned_by(record.pid, paths) else "foreign"


def tracked_names(paths: StatePaths | None = None) -> list[str]:
    directory = (paths or StatePaths()).pids
    if not directory.is_dir():
        return []
    return sorted(p.stem for p in directory.glob("*.json"))


def _write_record(record: TrackedProcess, paths: StatePaths | None) -> None:
    paths = paths or StatePaths()
    path = _record_path(record.name, paths)
    path.parent.mkdir(parents=True, exist_ok=True)
    root = paths.root.absolute()
    if record.log_file.is_absolute() and root in record.log_file.parents:
        # the state records no absolute location of itself
        record = record.model_copy(update={"log_file": record.log_file.relative_to(root)})
    tmp = path.with_suffix(".tmp")
    tmp.write_text(record.model_dump_json(indent=2) + "\n")
    os.replace(tmp, path)


# ---------------------------------------------------------------- start / stop


def start_tracked(name: str, argv: list[str], log_file: Path, env: dict[str, str] | None = None,
                  *, fingerprint: str | None = None, cwd: Path | None = None,
                  paths: StatePaths | None = None) -> TrackedProcess:
    """Start `argv` detached (own session, stdin closed, output into `log_file`); record it.

    Idempotent: if `name` already runs (verified) with the same fingerprint, that record is
    returned and nothing starts; with a different fingerprint (its config changed) it is stopped
    and started again. `env` is added to this process's environment; pass secrets only that way
    or by file, never in `argv` (argv is world-readable in /proc).
    """
    current = running(name, paths)
    if current is not None:
        if fingerprint is None or current.fingerprint == fingerprint:
            return current
        stop_tracked(name, paths=paths)
    log_file.parent.mkdir(parents=True, exist_ok=True)
    from imagekit.progress import child_env

    full_env = child_env(env)  # TMPDIR of `imagekit --tmpdir` included
    (paths or StatePaths()).root.mkdir(parents=True, exist_ok=True)
    identity = _state_identity((paths or StatePaths()).root)
    if identity is not None:
        full_env[STATE_ROOT_ENV] = identity
    with open(log_file, "ab") as log:
        log.write(f"--- imagekit: starting {name} at {_now()}\n".encode())
        log.flush()
        try:
            child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                     stderr=subprocess.STDOUT, env=full_env, cwd=cwd,
                                     start_new_session=True, close_fds=True)
        except OSError as exc:
            raise InfraError(f"cannot start {name}: {exc.strerror or exc}", where=argv[0]) from None
    _CHILDREN[child.pid] = child
    # Popen returns while the kernel may still be finishing exec: /proc/<pid>/cmdline can be
    # empty for a moment. Record only what /proc will keep showing.
    cmdline: list[str] | None = None
    for _ in range(200):
        stat = proc_stat(child.pid)
        if stat is None or child.poll() is not None:
            code = child.wait()
            raise InfraError(f"{name} exited at once with code {code}; see its log",
                             where=str(log_file))
        cmdline = proc_cmdline(child.pid)
        if cmdline:
            break
        time.sleep(0.01)
    if not cmdline:
        cmdline = argv
    record = TrackedProcess(name=name, pid=child.pid, start_time=stat[1],
                            exe=proc_exe(child.pid), cmdline=cmdline,
                            log_file=log_file.absolute(), started_at=_now(),
                            fingerprint=fingerprint)
    _write_record(record, paths)
    return record


def stop_tracked(name: str, timeout: float = 30.0, paths: StatePaths | None = None) -> bool:
    """Stop our process `name` (SIGTERM, then SIGKILL after `timeout`). False if it did not run.

    Only a verified record is signalled; a stale record is dropped without signalling anybody.
    """
    record = running(name, paths)
    if record is None:
        return False
    _kill(record.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _reap(record.pid)
        if not _exists(record):
            break
        time.sleep(0.05)
    else:
        if _exists(record):
            _kill(record.pid, signal.SIGKILL)
        for _ in range(100):
            _reap(record.pid)
            if not _exists(record):
                break
            time.sleep(0.05)
    if _exists(record):
        raise InfraError(f"{name} (pid {record.pid}) did not stop", where=str(record.log_file))
    _record_path(name, paths).unlink(missing_ok=True)
    return True


def _kill(pid: int, sig: signal.Signals) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _exists(record: TrackedProcess) -> bool:
    """Still the same process and not yet gone (while exiting, its cmdline is already empty but
    its sockets may still be open: wait for this, not for is_alive, before reusing a port)."""
    stat = proc_stat(record.pid)
    return stat is not None and stat[1] == record.start_time and stat[0] not in {"Z", "X", "x"}


def _reap(pid: int) -> None:
    child = _CHILDREN.get(pid)
    if child is not None and child.poll() is not None:
        _CHILDREN.pop(pid, None)


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


# ---------------------------------------------------------------- ports


def port_open(host: str, port: int, timeout: float = 0.3) -> bool:
    """Something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def port_holders(port: int) -> list[tuple[int, list[str]]]:
    """(pid, cmdline) of processes with a listening TCP socket on `port` (any address)."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != "0A":  # 0A = LISTEN
                continue
            if int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    if not inodes:
        return []
    targets = {f"socket:[{inode}]" for inode in inodes}
    holders: list[tuple[int, list[str]]] = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            fds = list((proc / "fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(fd) in targets:
                    holders.append((int(proc.name), proc_cmdline(int(proc.name)) or []))
                    break
            except OSError:
                continue
    return holders


def wait_for_port(host: str, port: int, timeout: float, record: TrackedProcess | None = None
                  ) -> None:
    """Wait until host:port accepts connections; fail early if our process died meanwhile."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if port_open(host, port):
            return
        if record is not None:
            _reap(record.pid)
            if not is_alive(record):
                raise InfraError(f"{record.name} exited before listening on {host}:{port}; "
                                 "see its log", where=str(record.log_file))
        time.sleep(0.1)
    raise InfraError(f"nothing listens on {host}:{port} after {timeout:.0f}s",
                     where=str(record.log_file) if record else None)
