"""Fixtures for the real-cluster tests: `imagekit infra up --cluster` once per session (fast
when it already runs), a Kube client, a session namespace, and a small python image pushed to
the bearer-token `target` registry. Never skips: a part that cannot start fails the tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest


@pytest.fixture(scope="session")
def cluster_state():
    from imagekit.infra.state import load_state
    from imagekit.settings import load

    if os.geteuid() != 0:
        pytest.fail("real-cluster tests need root (imagekit infra up --cluster starts daemons)")
    result = subprocess.run([sys.executable, "-m", "imagekit", "infra", "up", "--cluster"],
                            capture_output=True, text=True, timeout=1800, check=False)
    if result.returncode != 0:
        pytest.fail(f"imagekit infra up --cluster failed (exit {result.returncode}): "
                    f"{(result.stderr or result.stdout).strip()[-2000:]}")
    state = load_state(load().state_dir)  # where the CLI's `infra up` wrote it
    assert state.kubeconfig is not None and state.kubeconfig.is_file()
    return state


@pytest.fixture(scope="session")
def checkov():
    """The independent Pod Security checker (checkov, in its own venv; installed once per
    machine, from PyPI on a fresh one)."""
    from .pss import checker

    return checker()


@pytest.fixture(scope="session")
def kube(cluster_state):
    from imagekit.cluster.kube import Kube

    with Kube(cluster_state.kubeconfig) as client:
        yield client


@pytest.fixture(scope="session")
def test_ns(kube):
    """A namespace of this test run (two runs at once do not share Pod names), as an operator
    has it: labelled `pod-security.kubernetes.io/enforce: restricted`, with the ServiceAccount
    and least-privilege RBAC that `imagekit cluster rbac` prints, applied by the administrator.
    Deleted at the end (the namespace controller removes what is left in it)."""
    import secrets

    from .operator import grant

    name = f"imagekit-test-{secrets.token_hex(3)}"
    grant(kube, name)
    yield name
    kube.call("DELETE", f"/api/v1/namespaces/{name}")
    for kind in ("ClusterRoleBinding", "ClusterRole"):
        kube.resource(kind, "rbac.authorization.k8s.io/v1").delete(
            f"imagekit-read-{name}-imagekit")


@pytest.fixture(scope="session")
def operator_kubeconfig(kube, cluster_state, test_ns, tmp_path_factory):
    """A kubeconfig of `test_ns`'s ServiceAccount (a bound token, as `kubectl create token`
    makes): what the cluster commands of the tests run with."""
    from .operator import token_kubeconfig

    return token_kubeconfig(kube, cluster_state.kubeconfig, test_ns, "imagekit",
                            tmp_path_factory.mktemp("operator") / "kubeconfig", seconds=6 * 3600)


@pytest.fixture
def as_operator(monkeypatch, operator_kubeconfig):
    """The imagekit processes a test starts authenticate as the ServiceAccount
    ($KUBECONFIG), never as the administrator; the test's own `kube` stays admin for setup."""
    monkeypatch.setenv("KUBECONFIG", str(operator_kubeconfig))
    return operator_kubeconfig


@pytest.fixture(scope="session")
def python_layer() -> bytes:
    from .images import build_layer

    return build_layer()


def _client(state, name: str):
    from imagekit.registry import RegistryClient, RegistryOptions

    endpoint = state.registry(name)
    return RegistryClient(endpoint.address, RegistryOptions(
        ca_file=endpoint.ca_file or state.ca_file, docker_config=state.docker_config_dir,
        insecure=frozenset({endpoint.address}) if endpoint.scheme == "http" else frozenset()))


@pytest.fixture(scope="session")
def target_client(cluster_state):
    with _client(cluster_state, "target") as client:
        yield client


@pytest.fixture(scope="session")
def python_image(cluster_state, target_client, python_layer):
    """busybox + python3 from this machine, pushed to the target registry (by tag)."""
    from .images import push_image

    target = cluster_state.registry("target")
    return push_image(target_client, target.address, "imagekit-test/python", "probe-1",
                      python_layer)


@pytest.fixture(scope="session")
def push_to(cluster_state, python_layer):
    """push_to(registry_name, tag, indent=None) -> PushedImage of the python image there."""
    from .images import push_image

    def push(name: str, tag: str, indent: int | None = None):
        with _client(cluster_state, name) as client:
            return push_image(client, cluster_state.registry(name).address,
                              "imagekit-test/python", tag, python_layer, indent=indent)
    return push


@pytest.fixture(scope="session")
def vllm_image(cluster_state, verified_images, tmp_path_factory):
    """The fixed vLLM image built and verified like `images verify` does (stand-in base with
    the real vLLM server), pushed to staging by tag; its image-phase evidence in a copy of the
    run's one verify store (tests/conftest.py `verified_images`). test_accept_real and the
    three actors' journey share it."""
    from imagekit.build import latest_build
    from imagekit.oci import ImageReference

    store = verified_images.store_copy(tmp_path_factory.mktemp("accept-evidence") / "store")
    entry = verified_images.entry("vllm")
    assert entry.reference and entry.digest, entry
    build = latest_build("vllm", "local", store)      # pushed as <staging repo>:<key[:16]>
    tag = ImageReference.parse(f"{build.reference.name}:{build.cache_key[:16]}")
    # CI's store as `images verify` left it: test_accept_real files its cluster accepts (some
    # failing on purpose) into `store`; the journey's CI attests the image phase from this copy
    from .helpers import image_phase_snapshot

    shutil.copytree(store.root, image_phase_snapshot(store))
    return tag, build.digest, store

