"""Start, find and stop the long-running processes imagekit owns, and only those.

A PID file alone proves nothing: PIDs are reused. Every record keeps the PID together with the
kernel's start time of that process (/proc/<pid>/stat field 22, clock ticks since boot, read
through psutil like every other process fact here) and its
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

import contextlib
import datetime as dt
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import psutil
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


# ---------------------------------------------------------------- process readers (psutil)

#: psutil's status names, back to the letter of /proc/<pid>/stat field 3 that records and callers
#: compare ("Z" zombie, "X" dead: not running any more).
_STATUS_LETTER = {
    psutil.STATUS_RUNNING: "R", psutil.STATUS_SLEEPING: "S", psutil.STATUS_DISK_SLEEP: "D",
    psutil.STATUS_STOPPED: "T", psutil.STATUS_TRACING_STOP: "t", psutil.STATUS_ZOMBIE: "Z",
    psutil.STATUS_DEAD: "X", psutil.STATUS_WAKING: "W", psutil.STATUS_IDLE: "I",
    psutil.STATUS_PARKED: "P",
}
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def start_ticks(process: psutil.Process) -> int:
    """The kernel's start time of `process` in clock ticks since boot (/proc/<pid>/stat field
    22), the unit every record keeps. psutil gives it as boot time + ticks / SC_CLK_TCK."""
    return round((process.create_time() - psutil.boot_time()) * _CLOCK_TICKS)


def proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in ticks) of a live pid, or None when it does not exist."""
    try:
        process = psutil.Process(pid)
        start = start_ticks(process)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None
    try:
        letter = _STATUS_LETTER.get(process.status(), "?")
    except psutil.ZombieProcess:
        letter = "Z"
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None
    return letter, start


def proc_cmdline(pid: int) -> list[str] | None:
    try:
        return [part for part in psutil.Process(pid).cmdline() if part]
    except psutil.ZombieProcess:
        return []
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def proc_exe(pid: int) -> str:
    try:
        return psutil.Process(pid).exe()
    except psutil.Error:
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
    root = os.path.realpath(paths.root).rstrip("/") + "/"
    try:
        process = psutil.Process(pid)
        # regular files only: a deleted log ("… (deleted)") is not one any more
        if any(f.fd in (1, 2) and os.path.realpath(f.path).startswith(root)
               for f in process.open_files()):
            return True
    except psutil.Error:
        return False
    identity = _state_identity(paths.root)
    if identity is None:
        return False
    try:
        return process.environ().get(STATE_ROOT_ENV) == identity
    except psutil.Error:
        return False


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
    start_time = 0
    for _ in range(200):
        stat = proc_stat(child.pid)
        if stat is None or child.poll() is not None:
            code = child.wait()
            raise InfraError(f"{name} exited at once with code {code}; see its log",
                             where=str(log_file))
        start_time = stat[1]
        cmdline = proc_cmdline(child.pid)
        if cmdline:
            break
        time.sleep(0.01)
    if not cmdline:
        cmdline = argv
    record = TrackedProcess(name=name, pid=child.pid, start_time=start_time,
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
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


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
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


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
    holders: list[tuple[int, list[str]]] = []
    try:
        connections = psutil.net_connections(kind="tcp")
    except psutil.AccessDenied:      # not root: nobody's sockets can be named
        return holders
    pids = sorted({c.pid for c in connections
                   if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port
                   and c.pid is not None})
    for pid in pids:
        holders.append((pid, proc_cmdline(pid) or []))
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
