"""Fixtures for the real-cluster tests: `imagekit infra up --cluster` once per session (fast
when it already runs), a Kube client, a session namespace, and a small python image pushed to
the bearer-token `target` registry. Never skips: a part that cannot start fails the tests."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

@pytest.fixture(scope="session")
def cluster_state():
    from imagekit.infra.state import load_state

    if os.geteuid() != 0:
        pytest.fail("real-cluster tests need root (imagekit infra up --cluster starts daemons)")
    result = subprocess.run([sys.executable, "-m", "imagekit", "infra", "up", "--cluster"],
                            capture_output=True, text=True, timeout=1800, check=False)
    if result.returncode != 0:
        pytest.fail(f"imagekit infra up --cluster failed (exit {result.returncode}): "
                    f"{(result.stderr or result.stdout).strip()[-2000:]}")
    state = load_state()
    assert state.kubeconfig is not None and state.kubeconfig.is_file()
    return state


@pytest.fixture(scope="session")
def kube(cluster_state):
    from imagekit.cluster.kube import Kube

    with Kube(cluster_state.kubeconfig) as client:
        yield client


@pytest.fixture(scope="session")
def test_ns(kube) -> str:
    from imagekit.cluster.probe import ensure_namespace

    name = "imagekit-test"
    ensure_namespace(kube, name)
    return name


@pytest.fixture(scope="session")
def target_client(cluster_state):
    from imagekit.registry import RegistryClient, RegistryOptions

    target = cluster_state.registry("target")
    with RegistryClient(target.address, RegistryOptions(
            ca_file=target.ca_file or cluster_state.ca_file,
            docker_config=cluster_state.docker_config_dir)) as client:
        yield client


@pytest.fixture(scope="session")
def python_image(cluster_state, target_client):
    """busybox + python3 from this machine, pushed to the target registry (by tag)."""
    from .images import build_layer, push_image

    target = cluster_state.registry("target")
    return push_image(target_client, target.address, "imagekit-test/python", "probe-1",
                      build_layer())
