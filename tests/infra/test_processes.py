"""PID tracking: a record is ours only while PID, start time and command line all match /proc."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from imagekit.infra import processes
from imagekit.infra.processes import (TrackedProcess, port_holders, proc_stat, read_record,
                                      running, start_tracked, stop_tracked)
from imagekit.infra.state import StatePaths


@pytest.fixture
def paths(tmp_path: Path) -> StatePaths:
    return StatePaths(tmp_path / "state")


def _alive(pid: int) -> bool:
    stat = proc_stat(pid)
    return stat is not None and stat[0] not in {"Z", "X"}


def test_start_records_pid_start_time_and_cmdline(paths: StatePaths) -> None:
    record = start_tracked("sleeper", ["sleep", "300"], paths.logs / "sleeper.log", paths=paths)
    try:
        stat = proc_stat(record.pid)
        assert stat is not None and stat[1] == record.start_time
        assert record.cmdline == ["sleep", "300"]
        assert record.exe.endswith("sleep")
        assert read_record("sleeper", paths) == record
        # idempotent: a second start with the same name returns the same process
        again = start_tracked("sleeper", ["sleep", "300"], paths.logs / "sleeper.log", paths=paths)
        assert again.pid == record.pid
    finally:
        assert stop_tracked("sleeper", paths=paths)
    assert not _alive(record.pid)
    assert read_record("sleeper", paths) is None
    assert stop_tracked("sleeper", paths=paths) is False


def test_changed_fingerprint_restarts(paths: StatePaths) -> None:
    first = start_tracked("fp", ["sleep", "301"], paths.logs / "fp.log", fingerprint="a",
                          paths=paths)
    second = start_tracked("fp", ["sleep", "301"], paths.logs / "fp.log", fingerprint="b",
                           paths=paths)
    try:
        assert second.pid != first.pid
        assert not _alive(first.pid)
    finally:
        stop_tracked("fp", paths=paths)


def test_reused_pid_is_not_trusted_and_never_signalled(paths: StatePaths) -> None:
    """A record whose PID now belongs to another process (other start time) is stale."""
    foreign = subprocess.Popen(["sleep", "300"])
    try:
        stat = proc_stat(foreign.pid)
        assert stat is not None
        stale = TrackedProcess(name="registry-staging", pid=foreign.pid, start_time=stat[1] - 1,
                               exe="/usr/bin/docker-registry", cmdline=["sleep", "300"],
                               log_file=paths.logs / "x.log", started_at="2020-01-01T00:00:00Z")
        processes._write_record(stale, paths)
        assert running("registry-staging", paths) is None
        assert read_record("registry-staging", paths) is None  # the stale file is dropped
        processes._write_record(stale, paths)
        assert stop_tracked("registry-staging", paths=paths) is False
        time.sleep(0.2)
        assert foreign.poll() is None, "a process we did not start was signalled"
    finally:
        foreign.kill()
        foreign.wait()


def test_same_start_time_other_cmdline_is_not_ours(paths: StatePaths) -> None:
    foreign = subprocess.Popen(["sleep", "302"])
    try:
        stat = proc_stat(foreign.pid)
        assert stat is not None
        record = TrackedProcess(name="x", pid=foreign.pid, start_time=stat[1], exe="/bin/sleep",
                                cmdline=["sleep", "999"], log_file=paths.logs / "x.log",
                                started_at="2020-01-01T00:00:00Z")
        processes._write_record(record, paths)
        assert running("x", paths) is None
        assert foreign.poll() is None
    finally:
        foreign.kill()
        foreign.wait()


def test_dead_child_is_not_running(paths: StatePaths) -> None:
    start_tracked("shortlived", [sys.executable, "-c", "import time; time.sleep(0.3)"],
                  paths.logs / "s.log", paths=paths)
    time.sleep(1.0)
    assert running("shortlived", paths) is None
    assert read_record("shortlived", paths) is None


def test_port_holders_finds_the_listener() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    try:
        port = sock.getsockname()[1]
        holders = port_holders(port)
        assert [pid for pid, _ in holders] == [os.getpid()]
    finally:
        sock.close()


def test_secrets_never_in_argv_by_design(paths: StatePaths) -> None:
    """env= reaches the child without appearing in /proc/<pid>/cmdline."""
    record = start_tracked("envcheck", [sys.executable, "-c",
                                        "import os,time; assert os.environ['IK_SECRET']; "
                                        "time.sleep(30)"],
                           paths.logs / "e.log", env={"IK_SECRET": "s3cr3t-value"}, paths=paths)
    try:
        time.sleep(0.3)
        assert running("envcheck", paths) is not None
        cmdline = Path(f"/proc/{record.pid}/cmdline").read_bytes()
        assert b"s3cr3t-value" not in cmdline
    finally:
        stop_tracked("envcheck", paths=paths)
