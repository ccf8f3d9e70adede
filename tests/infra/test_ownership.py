"""Nothing touched that is not ours.

The state records no absolute location of itself, and a process is ours only when its PID,
start time and command line match AND it was started from the state directory that reads the
record. Every process here is a short-lived one of this test, under temporary state dirs; the
shared /var/lib/imagekit is only ever read (copied without its secrets), never brought down.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from imagekit.infra import manager, processes
from imagekit.infra.processes import record_state, running, start_tracked, stop_tracked
from imagekit.infra.state import (ComponentStatus, InfraState, RegistryEndpoint, StatePaths,
                                  load_state, save_state)

SLEEP = [sys.executable, "-c", "import time; time.sleep(120)"]


def _alive(pid: int) -> bool:
    stat = processes.proc_stat(pid)
    return stat is not None and stat[0] not in {"Z", "X"}


@pytest.fixture
def original(tmp_path: Path):
    paths = StatePaths(tmp_path / "original")
    started = []

    def start(name: str):
        record = start_tracked(name, SLEEP, paths.logs / f"{name}.log", paths=paths)
        started.append(record)
        return record

    yield paths, start
    for record in started:
        stop_tracked(record.name, timeout=5, paths=paths)
        if _alive(record.pid):
            os.kill(record.pid, 9)


def test_state_file_holds_no_absolute_location_of_itself(tmp_path: Path) -> None:
    root = tmp_path / "state"
    paths = StatePaths(root)
    state = InfraState(state_dir=root, docker_config_dir=paths.docker_config_dir,
                       ca_file=paths.ca_cert, kubeconfig=root / "k8s" / "admin.kubeconfig",
                       registries={"production": RegistryEndpoint(
                           name="production", address="127.0.0.1:5172", scheme="https",
                           auth="basic", ca_file=paths.ca_cert)})
    save_state(state)
    text = paths.state_file.read_text()
    assert str(root) not in text, text
    assert json.loads(text)["state_dir"] == "."
    assert load_state(root) == state
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    moved = load_state(copy)
    assert moved.state_dir == copy.absolute()
    assert moved.ca_file == copy.absolute() / "tls" / "ca.crt"
    assert moved.kubeconfig == copy.absolute() / "k8s" / "admin.kubeconfig"
    assert moved.registries["production"].ca_file == copy.absolute() / "tls" / "ca.crt"


def test_an_old_absolute_state_file_is_rebased_onto_where_it_is_read(tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "state.json").write_text(json.dumps({
        "state_dir": "/var/lib/imagekit", "registries": {},
        "docker_config_dir": "/var/lib/imagekit/docker-config",
        "ca_file": "/var/lib/imagekit/tls/ca.crt",
        "kubeconfig": "/var/lib/imagekit/k8s/admin.kubeconfig"}))
    state = load_state(copy)
    assert state.state_dir == copy.absolute()
    assert state.kubeconfig == copy.absolute() / "k8s" / "admin.kubeconfig"
    assert "/var/lib/imagekit" not in state.model_dump_json()


def test_records_are_relative_and_a_copy_owns_none_of_the_processes(original,
                                                                   tmp_path: Path) -> None:
    paths, start = original
    record = start("sleeper")
    raw = json.loads((paths.pids / "sleeper.json").read_text())
    assert not Path(raw["log_file"]).is_absolute()
    assert running("sleeper", paths) is not None and record_state("sleeper", paths) == "ours"

    copy = StatePaths(tmp_path / "copy")
    shutil.copytree(paths.root, copy.root)
    # PID, start time and command line all match: only the state directory tells them apart
    assert processes.is_alive(processes.read_record("sleeper", copy))
    assert record_state("sleeper", copy) == "foreign"
    assert running("sleeper", copy) is None
    assert stop_tracked("sleeper", timeout=2, paths=copy) is False
    assert _alive(record.pid)
    assert (copy.pids / "sleeper.json").exists()  # a live process's record is not dropped

    assert stop_tracked("sleeper", timeout=5, paths=paths) is True
    assert not _alive(record.pid)


def test_ownership_is_checked_by_environment_when_stdout_is_elsewhere(original,
                                                                     tmp_path: Path) -> None:
    """A process that closed its log still carries the state directory's identity."""
    paths, _ = original
    script = ("import os, time; fd = os.open('/dev/null', os.O_WRONLY); os.dup2(fd, 1); "
              "os.dup2(fd, 2); time.sleep(120)")
    record = start_tracked("quiet", [sys.executable, "-c", script], paths.logs / "quiet.log",
                           paths=paths)
    try:
        for _ in range(100):
            if os.readlink(f"/proc/{record.pid}/fd/1") == "/dev/null":
                break
            import time
            time.sleep(0.05)
        assert record_state("quiet", paths) == "ours"
        copy = StatePaths(tmp_path / "copy")
        shutil.copytree(paths.root, copy.root)
        assert record_state("quiet", copy) == "foreign"
    finally:
        stop_tracked("quiet", timeout=5, paths=paths)


def test_down_with_a_copy_stops_nothing_and_says_so(original, tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.fail("infra down needs root")
    paths, start = original
    records = [start(name) for name in ("dockerd", "registry-staging", "k8s-etcd",
                                        "k8s-apiserver")]
    copy = StatePaths(tmp_path / "copy")
    shutil.copytree(paths.root, copy.root)
    assert manager.down(paths=copy) == []
    assert all(_alive(r.pid) for r in records)
    # the original directory does own them, and down stops exactly those it stopped
    stopped = manager.down(cluster=False, paths=paths)
    assert set(stopped) == {"registry-staging", "dockerd"}
    assert all(_alive(r.pid) for r in records[2:]) and not any(_alive(r.pid) for r in records[:2])


def test_down_with_stale_records_reports_nothing(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.fail("infra down needs root")
    paths = StatePaths(tmp_path / "stale")
    paths.pids.mkdir(parents=True)
    dead = {"name": "k8s-apiserver", "pid": 2**22 - 3, "start_time": 1, "exe": "/bin/true",
            "cmdline": ["/bin/true"], "log_file": "logs/k8s-apiserver.log",
            "started_at": "2026-01-01T00:00:00+00:00"}
    (paths.pids / "k8s-apiserver.json").write_text(json.dumps(dead))
    (paths.pids / "dockerd.json").write_text(json.dumps({**dead, "name": "dockerd"}))
    save_state(InfraState(state_dir=paths.root, registries={},
                          docker_config_dir=paths.docker_config_dir, ca_file=paths.ca_cert))
    assert manager.down(paths=paths) == []  # was "stopped: cluster", having stopped nothing


def test_status_tells_when_the_api_answers_but_our_record_is_stale(tmp_path: Path) -> None:
    paths = StatePaths(tmp_path / "stale")
    paths.pids.mkdir(parents=True)
    (paths.pids / "k8s-apiserver.json").write_text(json.dumps({
        "name": "k8s-apiserver", "pid": 2**22 - 3, "start_time": 1, "exe": "/bin/true",
        "cmdline": ["/bin/true"], "log_file": "logs/k8s-apiserver.log",
        "started_at": "2026-01-01T00:00:00+00:00"}))
    with socket.socket() as listener:  # an API port that answers: ours, in our port range
        listener.bind(("127.0.0.1", 5166))
        listener.listen()
        module = SimpleNamespace(API_PORT=5166, DAEMONS=("k8s-apiserver",))
        said = manager._truthful_cluster(
            module, ComponentStatus(name="cluster", running=False,
                                    detail="not running: k8s-apiserver"), paths)
        assert not said.running and not said.ours
        assert "answers" in said.detail and "stale" in said.detail, said.detail
    quiet = manager._truthful_cluster(
        module, ComponentStatus(name="cluster", running=False, detail="not running"), paths)
    assert quiet.detail == "not running"  # nothing answers: nothing added


@pytest.mark.cluster
def test_status_of_a_copy_of_the_real_state_calls_nothing_ours(tmp_path: Path) -> None:
    """Read-only on the shared infrastructure: state.json and pids/ are copied (never secrets),
    status runs against the copy."""
    real = StatePaths()
    if not real.state_file.is_file():
        pytest.fail(f"no infra state in {real.root}; run `imagekit infra up --cluster`")
    copy = StatePaths(tmp_path / "copy")
    copy.root.mkdir()
    shutil.copy(real.state_file, copy.state_file)
    shutil.copytree(real.pids, copy.pids)
    assert load_state(copy.root).state_dir == copy.root.absolute()
    components = manager.status(paths=copy)
    assert not any(c.ours for c in components), [(c.name, c.ours) for c in components]
    cluster = [c for c in components if c.name == "cluster"]
    if cluster and processes.port_open("127.0.0.1", 6443):
        assert not cluster[0].running and "answers" in cluster[0].detail, cluster[0].detail
    # and the real directory still owns its processes
    assert any(record_state(n, real) == "ours" for n in processes.tracked_names(real))
