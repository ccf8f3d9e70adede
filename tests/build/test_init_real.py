"""A new user's first minutes, in an empty folder, against the local registries: `imagekit init`
writes the spec, `imagekit pin --spec images.toml` writes its lock beside it, and
`imagekit images verify --spec images.toml --image vllm` builds, pushes and probes from that
folder. Every line that carries a reference is whole on a pipe at 80 columns (a CI log)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.docker, pytest.mark.registry]
REPO = Path(__file__).resolve().parents[2]


def _run(*args: str, cwd: Path, infra, timeout: float = 300) -> subprocess.CompletedProcess:
    """The CLI as the user types it in `cwd`: stdout a pipe, 80 columns."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "80",
           "DOCKER_CONFIG": str(infra.docker_config_dir)}
    env.pop("IMAGEKIT_IMAGES_SPEC", None)
    return subprocess.run([sys.executable, "-m", "imagekit", *args], capture_output=True,
                          text=True, timeout=timeout, check=False, cwd=cwd, env=env)


@pytest.fixture
def started(tmp_path: Path, standins, infra) -> Path:
    """An empty folder after `imagekit init` and `imagekit pin --spec images.toml`."""
    folder = tmp_path / "ci"
    folder.mkdir()
    assert _run("init", cwd=folder, infra=infra).returncode == 0
    pinned = _run("pin", "--spec", "images.toml", cwd=folder, infra=infra)
    assert pinned.returncode == 0, pinned.stdout + pinned.stderr
    folder.joinpath("pin.out").write_text(pinned.stdout)
    return folder


def test_pin_writes_the_lock_beside_the_spec_init_wrote(started: Path, standins) -> None:
    lines = started.joinpath("pin.out").read_text().splitlines()
    vllm = standins["vllm"]
    assert f"PASS     vllm.base: pinned {vllm.reference}@{vllm.digest}" in lines, lines
    assert lines[-1] == f"lock: {started / 'images.local.lock'}"
    assert f'digest = "{vllm.digest}"' in (started / "images.local.lock").read_text()
