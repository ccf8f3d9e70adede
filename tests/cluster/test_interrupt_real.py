"""SIGINT and SIGTERM in the middle of a cluster run, as an operator's Ctrl-C or a CI job's
cancellation sends them: the command exits 130 with one line, leaves no Pod, ConfigMap,
Secret, Service or Job in the namespace, records nothing as passed, and a rerun passes. Run
as the ServiceAccount `cluster rbac` binds, in a namespace that enforces restricted."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from imagekit.cluster import podsecurity

from .helpers import NODE
from .operator import PodsSeen, grant, namespace_objects, token_kubeconfig
from .pss import assert_both_admit

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]

SLOW_PROBE = "import time\nprint('started', flush=True)\ntime.sleep(120)\n"
PROBE_OK = 'import json\nprint(json.dumps({"status": "PASS", "detail": "python runs"}))\n'


@pytest.fixture(scope="module")
def operator(kube, cluster_state, tmp_path_factory):
    """(namespace, kubeconfig) of a restricted namespace's ServiceAccount."""
    namespace = f"ik-int-{secrets.token_hex(3)}"
    grant(kube, namespace)
    config = token_kubeconfig(kube, cluster_state.kubeconfig, namespace, "imagekit",
                              tmp_path_factory.mktemp("interrupt") / "operator.kubeconfig")
    yield namespace, config
    kube.call("DELETE", f"/api/v1/namespaces/{namespace}")
    for kind in ("ClusterRoleBinding", "ClusterRole"):
        kube.resource(kind, "rbac.authorization.k8s.io/v1").delete(
            f"imagekit-read-{namespace}-imagekit")


def _start(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "imagekit", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, **env})


def _running(kube, namespace: str, role: str, timeout: float = 120) -> str:
    """The name of the run's Pod once its container runs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pod in kube.resource("Pod").list(namespace,
                                             label_selector=f"imagekit.dev/role={role}"):
            if pod.get("status", {}).get("phase") == "Running":
                return pod["metadata"]["name"]
        time.sleep(0.5)
    raise AssertionError(f"no {role} Pod Running after {timeout}s")


def _interrupt(process: subprocess.Popen[str], signum: int) -> tuple[int, str]:
    process.send_signal(signum)
    _, err = process.communicate(timeout=240)
    return process.returncode, err


def _no_pass_recorded(evidence: Path) -> None:
    for result in evidence.rglob("checks.json"):
        checks = json.loads(result.read_text())
        assert all(c["status"] != "PASS" for c in checks if c["name"].startswith("probe:")), \
            result


# one signal per command: SIGINT and SIGTERM go through one handler
# (imagekit.registry.interrupt.graceful; tests/unit/test_stop_signals.py shows both reach it)
@pytest.mark.parametrize("signum", [signal.SIGINT], ids=["SIGINT"])
def test_probe_interrupted_leaves_nothing_and_a_rerun_passes(
        kube, operator, python_image, cluster_state, tmp_path, signum) -> None:
    namespace, config = operator
    probes = tmp_path / "probes"
    probes.mkdir()
    (probes / "slow.py").write_text(SLOW_PROBE)
    evidence = tmp_path / "evidence"
    env = {"IMAGEKIT_EVIDENCE_DIR": str(evidence),
           "DOCKER_CONFIG": str(cluster_state.docker_config_dir)}
    args = ["cluster", "probe", str(python_image.reference), "--namespace", namespace,
            "--kubeconfig", str(config), "--json"]
    process = _start([*args, "--probes-dir", str(probes)], env)
    _running(kube, namespace, "probe")
    code, err = _interrupt(process, signum)
    assert code == 130, err
    assert err.strip().splitlines() == [
        f"imagekit: error: interrupted by {signum.name} (imagekit cluster probe)"]
    assert namespace_objects(kube, namespace) == []
    _no_pass_recorded(evidence)
    (probes / "slow.py").unlink()
    (probes / "python_runs.py").write_text(PROBE_OK)
    rerun = subprocess.run([sys.executable, "-m", "imagekit", *args, "--probes-dir",
                            str(probes)], capture_output=True, text=True, timeout=300,
                           env={**os.environ, **env})
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert namespace_objects(kube, namespace) == []


@pytest.fixture
def one_gpu(kube):
    """The node advertises one GPU, as a device plugin would (the preflight asks for one)."""
    kube.call("PATCH", f"/api/v1/nodes/{NODE}/status",
              body={"status": {"capacity": {"nvidia.com/gpu": "1"}}})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and kube.get(f"/api/v1/nodes/{NODE}")["status"].get(
            "allocatable", {}).get("nvidia.com/gpu") != "1":
        time.sleep(0.5)
    yield
    kube.call("PATCH", f"/api/v1/nodes/{NODE}/status",
              body={"status": {"capacity": {"nvidia.com/gpu": None},
                               "allocatable": {"nvidia.com/gpu": None}}})


@pytest.mark.parametrize("signum", [signal.SIGTERM], ids=["SIGTERM"])
def test_gpu_preflight_interrupted_leaves_nothing_and_a_rerun_passes(
        kube, operator, python_image, cluster_state, tmp_path, one_gpu, signum,
        checkov) -> None:
    namespace, config = operator
    script = tmp_path / "preflight_standin.py"
    script.write_text("import time\nprint('PREFLIGHT_STANDIN_STARTED', flush=True)\n"
                      "time.sleep(120)\n")
    evidence = tmp_path / "evidence"
    env = {"IMAGEKIT_EVIDENCE_DIR": str(evidence),
           "DOCKER_CONFIG": str(cluster_state.docker_config_dir)}
    args = ["cluster", "gpu-preflight", str(python_image.reference), "--namespace", namespace,
            "--selector", "nvidia.com/gpu.present=true", "--gpus", "1", "--script", str(script),
            "--kubeconfig", str(config), "--submit", "--json"]
    process = _start(args, env)
    _running(kube, namespace, "gpu-preflight")
    code, err = _interrupt(process, signum)
    assert code == 130, err
    assert err.strip().splitlines() == [
        f"imagekit: error: interrupted by {signum.name} (imagekit cluster gpu-preflight)"]
    assert namespace_objects(kube, namespace) == []
    script.write_text("print('PREFLIGHT_STANDIN_OK')\n")
    with PodsSeen(kube, namespace) as seen:
        rerun = subprocess.run([sys.executable, "-m", "imagekit", *args], capture_output=True,
                               text=True, timeout=300, env={**os.environ, **env})
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    [pod] = seen.pods.values()           # as the API server stored it: restricted
    assert podsecurity.violations(pod, "restricted") == []
    assert_both_admit(checkov, {"preflight-pod": pod}, tmp_path / "judged")   # checkov agrees
    checks = {c["name"]: c["status"] for c in json.loads(rerun.stdout)["checks"]}
    assert checks["preflight_pod"] == "PASS"
    assert namespace_objects(kube, namespace) == []
