"""`imagekit doctor` against the real local infrastructure: every check PASS (docker, buildx,
the cluster as its administrator, RBAC, the three registries, disk, evidence); the operator's
ServiceAccount bound by `cluster rbac` PASSes RBAC; a ServiceAccount with no binding, and one
whose Role lacks one verb, FAIL it — naming exactly what is missing and the command that
grants it, as the cluster commands' own pre-flight would refuse them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .operator import grant, token_kubeconfig, without_verb

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "dockerfiles" / "images.toml"


def doctor(*args: str, docker_config: Path, evidence: Path,
           **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "imagekit", "doctor", "--spec", str(SPEC),
                           *args], capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "DOCKER_CONFIG": str(docker_config),
                               "IMAGEKIT_EVIDENCE_DIR": str(evidence), **env})


def checks_of(done: subprocess.CompletedProcess[str]) -> dict[str, dict]:
    return {c["name"]: c for c in json.loads(done.stdout)["checks"]}


@pytest.mark.docker
@pytest.mark.registry
def test_every_check_passes_against_the_local_infrastructure(cluster_state, tmp_path: Path
                                                             ) -> None:
    """No role: every check. (The disk minimum is 1 GiB here so that the verdict is about the
    infrastructure, not about how full this machine's disk is this hour; the default minimum
    is judged in tests/unit/test_doctor.py.)"""
    done = doctor("--min-free", "1", "--kubeconfig", str(cluster_state.kubeconfig),
                  docker_config=cluster_state.docker_config_dir, evidence=tmp_path / "ev")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "doctor: PASS (9 checks)", done.stdout
    assert all(line.startswith("PASS ") for line in lines[1:]), done.stdout
    names = [line.split()[1].rstrip(":") for line in lines[1:]]
    assert names == ["docker", "buildx", "cluster", "rbac", "registry", "registry", "registry",
                     "disk", "evidence"]
    cluster = next(line for line in lines if line.startswith("PASS     cluster:"))
    assert "https://127.0.0.1:6443 (Kubernetes v1." in cluster


def test_the_operators_serviceaccount_passes_rbac(cluster_state, test_ns, operator_kubeconfig,
                                                  tmp_path: Path) -> None:
    done = doctor("--role", "operator", "--namespace", test_ns, "--json", "--kubeconfig",
                  str(operator_kubeconfig), docker_config=cluster_state.docker_config_dir,
                  evidence=tmp_path / "ev")
    assert done.returncode == 0, done.stdout + done.stderr
    rbac = checks_of(done)["rbac"]
    assert rbac["status"] == "PASS"
    assert f"allowed as system:serviceaccount:{test_ns}:imagekit in namespace {test_ns}" in \
        rbac["detail"]


def _account(kube, namespace: str, name: str) -> None:
    kube.apply({"apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": {"name": name, "namespace": namespace}})


def test_a_serviceaccount_without_rbac_fails_naming_every_permission(
        kube, cluster_state, test_ns, tmp_path: Path) -> None:
    _account(kube, test_ns, "doctor-bare")
    config = token_kubeconfig(kube, cluster_state.kubeconfig, test_ns, "doctor-bare",
                              tmp_path / "bare.kubeconfig", seconds=600)
    done = doctor("--role", "operator", "--namespace", test_ns, "--json", "--kubeconfig",
                  str(config), docker_config=cluster_state.docker_config_dir,
                  evidence=tmp_path / "ev")
    assert done.returncode == 1, done.stdout + done.stderr
    checks = checks_of(done)
    assert checks["cluster"]["status"] == "PASS"    # it connects; it may do nothing
    rbac = checks["rbac"]
    assert rbac["status"] == "FAIL"
    asked = rbac["data"]["asked"]
    assert rbac["detail"].startswith(f"{asked} of {asked} permissions missing as "
                                     f"system:serviceaccount:{test_ns}:doctor-bare: ")
    assert "create pods" in rbac["detail"] and "list nodes" in rbac["detail"]
    assert f"grant them with: imagekit cluster rbac --namespace {test_ns} --service-account " \
           f"doctor-bare | kubectl apply -f -" in rbac["detail"]


def test_a_role_without_one_verb_fails_naming_that_verb(kube, cluster_state, test_ns,
                                                        tmp_path: Path) -> None:
    """What `cluster rbac` grants, less `create pods`: only that is missing, and only the
    commands that create Pods would refuse to start."""
    account = "doctor-partial"
    grant(kube, test_ns, "--service-account", account, edit=without_verb("create", "pods"))
    try:
        config = token_kubeconfig(kube, cluster_state.kubeconfig, test_ns, account,
                                  tmp_path / "partial.kubeconfig", seconds=600)
        done = doctor("--role", "operator", "--namespace", test_ns, "--json", "--kubeconfig",
                      str(config), docker_config=cluster_state.docker_config_dir,
                      evidence=tmp_path / "ev")
        assert done.returncode == 1, done.stdout + done.stderr
        rbac = checks_of(done)["rbac"]
        assert rbac["status"] == "FAIL"
        assert rbac["data"]["missing"] == [f"create pods in namespace {test_ns}"]
        assert set(rbac["data"]["commands_refused"]) == {"probe", "gpu-preflight", "accept",
                                                         "recreate"}
        assert f"1 of {rbac['data']['asked']} permissions missing" in rbac["detail"]
    finally:
        for kind in ("ClusterRoleBinding", "ClusterRole"):
            kube.resource(kind, "rbac.authorization.k8s.io/v1").delete(
                f"imagekit-read-{test_ns}-{account}")
