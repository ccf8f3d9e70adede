"""`imagekit infra up | down | status` against the real parts, through the real CLI."""

from __future__ import annotations

import base64
import json
import os
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from imagekit.infra import processes
from imagekit.infra.credentials import load_credentials
from imagekit.infra.state import InfraState, StatePaths

pytestmark = [pytest.mark.docker, pytest.mark.registry]

OUR_NAMES = {"dockerd", "token-service", "registry-staging", "registry-production",
             "registry-target"}
CONTRACT = {"docker", "staging", "production", "target", "token-service"}


def ik(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "imagekit", *args], capture_output=True,
                          text=True, timeout=timeout, check=False)


def status_json() -> dict:
    result = ik("infra", "status", "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def our_pids(paths: StatePaths) -> dict[str, int]:
    return {name: record.pid for name in processes.tracked_names(paths)
            if name in OUR_NAMES and (record := processes.running(name, paths)) is not None}


def test_status_json_shape(infra: InfraState) -> None:
    doc = status_json()
    assert set(doc) == {"components"}
    by_name = {c["name"]: c for c in doc["components"]}
    assert CONTRACT <= set(by_name)
    for name in CONTRACT:
        component = by_name[name]
        assert component["running"] is True, component
        assert component["address"], component
        assert component["fix"] is None, component
    assert by_name["staging"]["address"] == "127.0.0.1:5001"
    assert by_name["production"]["address"] == "127.0.0.1:5002"
    assert by_name["target"]["address"] == "127.0.0.1:5003"
    assert by_name["docker"]["address"] == "unix:///var/run/docker.sock"


def test_up_twice_is_idempotent_and_fast(infra: InfraState) -> None:
    paths = StatePaths(infra.state_dir)
    before = our_pids(paths)
    assert {"token-service", "registry-staging", "registry-production",
            "registry-target"} <= set(before)
    for _ in range(2):
        started = time.monotonic()
        result = ik("infra", "up", "--json")
        elapsed = time.monotonic() - started
        assert result.returncode == 0, result.stderr
        assert elapsed < 15, f"infra up with everything running took {elapsed:.1f}s"
    assert our_pids(paths) == before
    assert json.loads(result.stdout)["state"]["registries"]["target"]["auth"] == "bearer"


@pytest.mark.serial  # takes the staging registry's port away from every other test
def test_port_taken_by_foreign_process(infra: InfraState) -> None:
    """A port held by something we did not start: one-line PortTaken, exit 2, it survives."""
    paths = StatePaths(infra.state_dir)
    assert processes.stop_tracked("registry-staging", paths=paths)
    foreign = subprocess.Popen([sys.executable, "-c",
                                "import socket,time\n"
                                "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, "
                                "socket.SO_REUSEADDR, 1)\n"
                                "s.bind(('127.0.0.1', 5001)); s.listen()\n"
                                "print('ready', flush=True)\n"
                                "time.sleep(120)"], stdout=subprocess.PIPE, text=True)
    try:
        assert foreign.stdout is not None and foreign.stdout.readline().strip() == "ready"
        result = ik("infra", "up")
        assert result.returncode == 2
        # on a pipe the progress phases come first (docs/design/progress.md); the error is one line
        *phases, last = result.stderr.strip().splitlines()
        errors = [line for line in phases + [last] if line.startswith("imagekit: error:")]
        assert errors == [last], result.stderr
        assert all(line.startswith("[infra] ") for line in phases), result.stderr
        assert "Traceback" not in result.stderr
        lines = [last]
        assert lines[0].startswith("imagekit: error: port 5001 is held by pid "
                                   f"{foreign.pid}"), lines[0]
        assert "did not start" in lines[0]
        assert foreign.poll() is None, "imagekit killed a process it did not start"
        down = ik("infra", "status", "--json")
        staging = next(c for c in json.loads(down.stdout)["components"] if c["name"] == "staging")
        assert staging["ours"] is False and staging["fix"] == "imagekit infra up"
    finally:
        foreign.kill()
        foreign.wait()
        again = ik("infra", "up")
        assert again.returncode == 0, again.stderr
    assert httpx.get("http://127.0.0.1:5001/v2/", timeout=10).status_code == 200


def test_no_secret_in_argv_or_logs(infra: InfraState) -> None:
    paths = StatePaths(infra.state_dir)
    creds = load_credentials(paths)
    logins = [creds.production, creds.target, creds.target_reader]
    # make the token service issue a token, so its log has had the chance to leak one
    endpoint = infra.registries["target"]
    issued = httpx.get(endpoint.token_realm,
                       params={"service": endpoint.token_service, "scope": "repository:x:pull"},
                       auth=(creds.target.username, creds.target.password),
                       verify=ssl.create_default_context(cafile=str(infra.ca_file)), timeout=30)
    assert issued.status_code == 200
    needles = [login.password.encode() for login in logins]
    needles += [base64.b64encode(f"{login.username}:{login.password}".encode()) for login in logins]
    needles += [creds.http_secret.encode(), issued.json()["token"].encode()]
    pids = our_pids(paths)
    assert pids, "no tracked process runs"
    for name, pid in pids.items():
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        assert not any(n in cmdline for n in needles), f"secret in argv of {name}"
    for log in paths.logs.glob("*"):
        data = log.read_bytes()
        assert not any(n in data for n in needles), f"secret in {log}"
    for private in (paths.credentials, infra.docker_config_dir / "config.json",
                    paths.registry_dir("production") / "config.yml"):
        assert private.stat().st_mode & 0o077 == 0, f"{private} is readable by others"


@pytest.mark.serial
@pytest.mark.infra_last
def test_down_stops_only_ours_then_up_again(infra: InfraState) -> None:
    """Runs last: `infra down` leaves none of our processes; a foreign one survives; up restores."""
    paths = StatePaths(infra.state_dir)
    before = our_pids(paths)
    records = {name: processes.read_record(name, paths) for name in before}
    foreign = subprocess.Popen(["sleep", "120"])
    try:
        result = ik("infra", "down", "--no-cluster", "--json")
        assert result.returncode == 0, result.stderr
        assert set(json.loads(result.stdout)["stopped"]) >= set(before) - {"dockerd"}
        for name, record in records.items():
            assert record is not None and not processes.is_alive(record), f"{name} still runs"
            assert processes.read_record(name, paths) is None
        assert foreign.poll() is None
        for port in (5001, 5002, 5003, 5010):
            with socket.socket() as sock:
                assert sock.connect_ex(("127.0.0.1", port)) != 0, f"port {port} still answers"
        assert ik("infra", "down", "--no-cluster").returncode == 0  # nothing left: still fine
    finally:
        foreign.kill()
        foreign.wait()
        again = ik("infra", "up")
        assert again.returncode == 0, again.stderr
    assert {c["name"] for c in status_json()["components"] if c["running"]} >= CONTRACT
    assert os.path.exists(infra.docker_config_dir / "config.json")
