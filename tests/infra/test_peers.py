"""The peer tools install from Debian (sid for crane/oras/cosign) and really run."""

from __future__ import annotations

import subprocess

import pytest

from imagekit.errors import InvalidInput
from imagekit.infra import peers


def test_unknown_peer_is_bad_input() -> None:
    with pytest.raises(InvalidInput):
        peers.ensure_peer("regctl")


@pytest.mark.docker
@pytest.mark.parametrize("tool,argv,expect,version", [
    ("crane", ["--help"], "crane", "0.20"),
    ("oras", ["version"], "Version:", "1.3"),
    ("cosign", ["version"], "GitVersion", "3.1"),
    ("skopeo", ["--version"], "skopeo version 1.", "1."),
])
def test_peer_installs_and_runs(tool: str, argv: list[str], expect: str, version: str) -> None:
    path = peers.ensure_peer(tool)
    result = subprocess.run([str(path), *argv], capture_output=True, text=True, timeout=60,
                            check=False)
    assert result.returncode == 0, result.stderr
    assert expect in result.stdout + result.stderr
    assert peers.peer_version(tool).startswith(version)
