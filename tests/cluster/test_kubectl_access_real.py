"""`imagekit infra status` says how to reach the running local cluster with kubectl: the
kubeconfig's path, an `export KUBECONFIG=…` line to paste (so that `imagekit cluster rbac |
kubectl apply -f -` runs), and the kubectl found for it, or how to get one (the cluster's build
makes none; Debian's kubernetes-client package is its version).

The failing case (before): the table alone, at 80 columns on a pipe, with no kubeconfig in it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.cluster]


def _status(path: str) -> list[str]:
    done = subprocess.run([sys.executable, "-m", "imagekit", "infra", "status"],
                          capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "PATH": path, "COLUMNS": "80"})
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_status_names_the_kubeconfig_and_the_kubectl(cluster_state, tmp_path: Path) -> None:
    config = cluster_state.kubeconfig
    # a PATH with the tools status itself runs (ip) and a kubectl of our own
    tools = Path(shutil.which("ip") or "/usr/sbin/ip").parent
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "kubectl").write_text("#!/bin/sh\nexit 0\n")
    (fake / "kubectl").chmod(0o755)
    lines = _status(f"{fake}{os.pathsep}{tools}")
    assert lines[-3:] == [f"kubeconfig: {config}", f"export KUBECONFIG={config}",
                          f"kubectl: {fake / 'kubectl'}"]
    # none on PATH (and none built beside the cluster's binaries): how to get one
    assert not (tools / "kubectl").exists()
    assert _status(str(tools))[-1] == (
        "kubectl: not found; Debian's kubernetes-client package is the cluster's version "
        "(1.20): apt-get install kubernetes-client")


def test_a_kubectl_built_beside_the_cluster_binaries_comes_first(tmp_path: Path,
                                                                 monkeypatch) -> None:
    from imagekit.infra.cluster import kubectl_for

    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert kubectl_for(tmp_path) is None
    (tmp_path / "kubectl").write_text("#!/bin/sh\n")
    (tmp_path / "kubectl").chmod(0o755)
    assert kubectl_for(tmp_path) == tmp_path / "kubectl"
