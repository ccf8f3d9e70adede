"""The process facts imagekit reads through psutil are the kernel's: each one is checked against
/proc itself (the independent reader), including the unit the PID records keep (start time in
clock ticks since boot), so records written before psutil still match what runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from imagekit.infra import cluster, docker, processes


def _stat_field_22(pid: int) -> int:
    raw = Path(f"/proc/{pid}/stat").read_text()
    return int(raw[raw.rfind(")") + 2:].split()[19])


def test_start_time_is_the_kernels_clock_ticks() -> None:
    child = subprocess.Popen(["sleep", "30"])
    try:
        for pid in (os.getpid(), child.pid, 1):
            stat = processes.proc_stat(pid)
            assert stat is not None and stat[1] == _stat_field_22(pid), pid
        assert processes.proc_cmdline(child.pid) == ["sleep", "30"]
        assert processes.proc_exe(child.pid).endswith("/sleep")
    finally:
        child.kill()
        child.wait()
    assert processes.proc_stat(child.pid) is None and processes.proc_cmdline(child.pid) is None


def test_a_zombie_is_seen_as_one() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.monotonic() + 10
        while (stat := processes.proc_stat(child.pid)) and stat[0] != "Z":
            assert time.monotonic() < deadline, stat
            time.sleep(0.02)
        assert stat is not None and stat[0] == "Z" and stat[1] == _stat_field_22(child.pid)
        assert processes.proc_cmdline(child.pid) == []      # /proc shows it empty too
    finally:
        child.wait()


def test_a_record_is_checked_against_what_runs(tmp_path: Path) -> None:
    """A record of a live process matches; the same record with another start time (a reused
    pid) does not, and neither does a record whose output is not inside the state dir."""
    paths = processes.StatePaths(tmp_path / "state")
    record = processes.start_tracked("sleeper", ["sleep", "60"], paths.logs / "s.log", paths=paths)
    try:
        assert processes.is_ours(record, paths)
        assert not processes.is_alive(record.model_copy(update={"start_time": record.start_time
                                                                + 1}))
        assert not processes.owned_by(record.pid, processes.StatePaths(tmp_path / "other"))
        assert not processes.owned_by(os.getpid(), paths)      # this pytest is not ours
    finally:
        assert processes.stop_tracked("sleeper", paths=paths)


def test_stale_docker_pidfiles_go_and_live_ones_stay(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    child = subprocess.Popen(["sleep", "30"])
    try:
        files = {name: tmp_path / f"{name}.pid" for name in ("live", "other", "gone", "zero")}
        files["live"].write_text(f"{child.pid}\n")
        files["other"].write_text(f"{os.getpid()}\n")          # a pid that runs something else
        files["gone"].write_text("4194304\n")                 # above pid_max: nobody
        files["zero"].write_text("0\n")
        monkeypatch.setattr(docker, "_PIDFILES", {files["live"]: "sleep", files["other"]: "sleep",
                                                  files["gone"]: "sleep",
                                                  files["zero"]: "sleep"})
        docker._drop_stale_pidfiles()
        assert {n for n, f in files.items() if f.exists()} == {"live"}
    finally:
        child.kill()
        child.wait()


def test_unmount_below_lists_what_proc_mounts_lists(monkeypatch: pytest.MonkeyPatch) -> None:
    called: list[list[str]] = []
    monkeypatch.setattr(cluster.subprocess, "run", lambda argv, **kw: called.append(argv))
    expected = sorted((line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()
                       if line.split()[1].startswith("/dev/")), reverse=True)
    cluster._unmount_below(Path("/dev"))
    assert [argv[-1] for argv in called] == expected and expected
    assert all(argv[:2] == ["umount", "-l"] for argv in called)


def test_promote_live_attempt_tells_a_reused_pid(tmp_path: Path) -> None:
    from imagekit.evidence import EvidenceStore
    from imagekit.oci.digest import Digest
    from imagekit.promote import live

    assert live._process_start(os.getpid()) == float(_stat_field_22(os.getpid()))
    store = EvidenceStore(tmp_path)
    digest = Digest.parse("sha256:" + "ab" * 32)
    attempt = live.LiveAttempt.begin(store, digest, {"source": "s", "to": "t"})
    running = attempt.attempt.path / live.RUNNING
    assert live.finish_orphans(store, digest) == []          # this very process: still running
    info = json.loads(running.read_text())
    running.write_text(json.dumps({**info, "process_start": info["process_start"] + 1}))
    assert live.finish_orphans(store, digest) == [attempt.attempt.path]   # same pid, other start
