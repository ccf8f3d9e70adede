"""`imagekit doctor` against the real loopback registries (staging plain HTTP, production TLS +
basic auth, target TLS + Bearer tokens) and the real docker engine: PASS with the infra's
credentials; FAIL with a wrong password at each, with none, with a pull-only token where the
role pushes; docker FAIL when DOCKER_HOST names a closed socket. No secret is ever printed."""

from __future__ import annotations

import base64
import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from imagekit.infra.credentials import load_credentials

pytestmark = pytest.mark.registry

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "dockerfiles" / "images.toml"   # profile local: 5001, 5002, 5003
WRONG = "Wr0ng-pass-imagekit-doctor-3b9e"


def doctor(*args: str, docker_config: Path, evidence: Path,
           **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "imagekit", "doctor", "--spec", str(SPEC),
                           *args], capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "DOCKER_CONFIG": str(docker_config),
                               "IMAGEKIT_EVIDENCE_DIR": str(evidence), **env})


def lines_of(done: subprocess.CompletedProcess[str]) -> dict[str, str]:
    """check name -> `STATUS name: detail`, from the human output (the verdict line first)."""
    found = {}
    for line in done.stdout.splitlines()[1:]:
        match = re.match(r"(\w+)\s+(registry \S+?(?=: )|[\w-]+): ", line)
        assert match, line
        found[match.group(2)] = f"{match.group(1)} {line[match.start(2):]}"
    return found


def docker_config(folder: Path, auths: dict[str, tuple[str, str]]) -> Path:
    """A docker config.json holding passwords: 0600 from its creation."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump({"auths": {host: {"auth": base64.b64encode(f"{u}:{p}".encode()).decode()}
                             for host, (u, p) in auths.items()}}, handle)
    return folder


@pytest.fixture
def written(tmp_path: Path):
    """Folders of docker configs holding passwords, removed after the test."""
    folders: list[Path] = []
    yield folders
    for folder in folders:
        (folder / "config.json").unlink(missing_ok=True)


@pytest.fixture(scope="module")
def creds(infra):
    return load_credentials()


def test_release_passes_with_the_infra_credentials(infra, reg, tmp_path: Path) -> None:
    done = doctor("--role", "release", docker_config=infra.docker_config_dir,
                  evidence=tmp_path / "ev")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[0] == "doctor: PASS (4 checks)"
    found = lines_of(done)
    assert found[f"registry {reg['staging']}"].startswith(
        f"PASS registry {reg['staging']}: may pull from imagekit/sglang anonymously (staging)")
    for hop in ("production", "target"):    # the release engineer pushes there
        assert found[f"registry {reg[hop]}"].startswith(
            f"PASS registry {reg[hop]}: may push to imagekit/sglang as user "), found
    assert found["evidence"].startswith("PASS")


@pytest.mark.parametrize("hop", ["production", "target"])   # basic, Bearer
def test_a_wrong_password_fails_that_registry_and_is_never_printed(hop, reg, creds, written,
                                                                   tmp_path: Path) -> None:
    other = "target" if hop == "production" else "production"
    good = getattr(creds, other)
    folder = docker_config(tmp_path / "docker", {reg[hop]: (getattr(creds, hop).username, WRONG),
                                                 reg[other]: (good.username, good.password)})
    written.append(folder)
    done = doctor("--role", "release", "--json", docker_config=folder, evidence=tmp_path / "ev")
    assert done.returncode == 1, done.stdout + done.stderr
    checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
    failed = checks[f"registry {reg[hop]}"]
    assert failed["status"] == "FAIL"
    assert "refused the credentials" in failed["detail"] and "HTTP 401" in failed["detail"]
    assert str(folder / "config.json") in failed["detail"]   # where the credential came from
    assert checks[f"registry {reg[other]}"]["status"] == "PASS"
    for secret in (WRONG, good.password, getattr(creds, hop).password):
        assert secret not in done.stdout + done.stderr


def test_no_credentials_fail_the_registries_that_need_them(reg, tmp_path: Path) -> None:
    done = doctor("--role", "auditor", docker_config=tmp_path / "empty",
                  evidence=tmp_path / "ev")
    assert done.returncode == 1
    found = lines_of(done)
    assert done.stdout.splitlines()[0] == "doctor: FAIL (2 of 4 checks failed)"
    assert found[f"registry {reg['staging']}"].startswith("PASS")       # anonymous registry
    for hop in ("production", "target"):
        line = found[f"registry {reg[hop]}"]
        assert line.startswith(f"FAIL registry {reg[hop]}: refused anonymous access"), line
        assert "(absent)" in line


def test_a_pull_only_token_passes_a_reader_and_fails_a_pusher(reg, creds, written,
                                                              tmp_path: Path) -> None:
    """The push question is real: the target's reader may pull (auditor PASS) and may not
    open an upload (release FAIL)."""
    reader = creds.target_reader
    folder = docker_config(tmp_path / "docker", {
        reg["target"]: (reader.username, reader.password),
        reg["production"]: (creds.production.username, creds.production.password)})
    written.append(folder)
    auditor = lines_of(doctor("--role", "auditor", docker_config=folder,
                              evidence=tmp_path / "ev"))
    assert auditor[f"registry {reg['target']}"].startswith("PASS"), auditor
    release = doctor("--role", "release", docker_config=folder, evidence=tmp_path / "ev")
    assert release.returncode == 1
    line = lines_of(release)[f"registry {reg['target']}"]
    assert line.startswith(f"FAIL registry {reg['target']}: "), line
    assert "pull,push" in line and reader.password not in release.stdout


@pytest.mark.docker
def test_ci_passes_against_the_real_engine_and_staging(infra, reg, tmp_path: Path) -> None:
    done = doctor("--role", "ci", "--min-free", "1", docker_config=infra.docker_config_dir,
                  evidence=tmp_path / "ev")
    assert done.returncode == 0, done.stdout + done.stderr
    found = lines_of(done)
    assert set(found) == {"docker", "buildx", f"registry {reg['staging']}", "disk", "evidence"}
    assert found["docker"].startswith("PASS docker: engine ")
    assert found["buildx"].startswith("PASS buildx: version ")
    assert "(base, mirror, staging)" in found[f"registry {reg['staging']}"]
    assert "docker data root" in found["disk"]


@pytest.mark.docker
def test_docker_host_on_a_closed_socket_fails_docker(infra, tmp_path: Path) -> None:
    """DOCKER_HOST names a socket nothing listens on: docker FAIL in seconds, the data root's
    disk not judged; buildx, a client plugin, still answers."""
    path = tmp_path / "closed.sock"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))          # a socket file with no listener: connection refused
    done = doctor("--role", "ci", docker_config=infra.docker_config_dir,
                  evidence=tmp_path / "ev", DOCKER_HOST=f"unix://{path}")
    assert done.returncode == 1, done.stdout + done.stderr
    found = lines_of(done)
    assert found["docker"].startswith("FAIL docker: the engine does not answer: ")
    assert str(path) in found["docker"]
    assert found["disk"].startswith("DEFERRED disk:")
    assert "not judged: docker data root: the engine does not answer" in found["disk"]
    assert found["buildx"].startswith("PASS")
