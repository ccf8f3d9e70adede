"""`cluster gpu-preflight --each-node` on the real local cluster, on CPUs with gloo: the real
preflight script inside the sglang stand-in (it carries a CPU torch), one Pod per node.

The real node is never marked: its preflight PASSes (or FAILs by a fault hook without the
marking options). Marking is proven on a Node object made through the API for this test, which
no kubelet owns, and which is deleted afterwards."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cluster.conftest import cluster_state, kube, test_ns  # noqa: F401 - fixtures

# serial: a second Node object appears in the cluster, which every node listing would show
pytestmark = [pytest.mark.serial, pytest.mark.cluster, pytest.mark.docker, pytest.mark.registry,
              pytest.mark.timeout(1500)]

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "gpu_checks" / "preflight" / "__main__.py"  # ships the package
NODE = "127.0.0.1"
SMALL = ["--max-bytes=64K", "--check-bytes=64K", "--matmul-n=64", "--iters=5"]


@pytest.fixture
def fake_node(kube):  # noqa: F811
    """A Node object no kubelet owns, tainted so nothing else is ever scheduled on it."""
    name = f"imagekit-fake-gpu-{secrets.token_hex(3)}"
    label = {"imagekit.dev/fleet-test": name}
    kube.call("POST", "/api/v1/nodes", body={
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {**label, "kubernetes.io/hostname": name}},
        "spec": {"taints": [{"key": "imagekit.dev/fake-node", "value": "test",
                             "effect": "NoSchedule"}]}})
    try:
        yield name, label
    finally:
        kube.call("DELETE", f"/api/v1/nodes/{name}")


@pytest.fixture
def cli(cluster_state):  # noqa: F811
    """`imagekit …` against the recorded kubeconfig (named: another test run may be rewriting
    the infra state file at that moment)."""
    def run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "imagekit", *args, "--kubeconfig",
                               str(cluster_state.kubeconfig)], capture_output=True, text=True,
                              timeout=900, env={**os.environ, **env})
    return run


def test_each_node_runs_the_real_preflight_and_prints_the_table(torch_image, test_ns,  # noqa
                                                               kube, tmp_path,  # noqa: F811
                                                               cli) -> None:
    before = kube.get(f"/api/v1/nodes/{NODE}")["spec"]
    common = ["cluster", "gpu-preflight", str(torch_image.pinned), "--each-node", "--submit",
              "--namespace", test_ns, "--selector", f"kubernetes.io/hostname={NODE}", "--gpus", "0",
              "--script", str(SCRIPT), *[f"--preflight-arg={a}" for a in SMALL]]
    env = {"IMAGEKIT_EVIDENCE_DIR": str(tmp_path / "evidence")}
    done = cli(*common, "--json", "--cordon-failed", "--taint-failed", env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(done.stdout)
    [row] = report["nodes"]
    assert row["node"] == NODE and row["status"] == "PASS" and row["stage"] == "preflight"
    assert {"matmul-bf16", "allreduce-correctness"} <= set(report["check_names"])
    assert report["marked"] == {} and row["marked"] == []
    # the preflight's own record is the evidence, typed as a gpu-preflight result
    attempt = Path(report["evidence"][0])
    record = json.loads((attempt / "preflight.json").read_text())
    assert record["backend"] == "gloo" and record["world_size"] == 1
    assert json.loads((attempt / "attempt.json").read_text())["result"]["kind"] == \
        "gpu-preflight"
    # nothing else changed: the real node is as it was, our Pods are gone
    assert kube.get(f"/api/v1/nodes/{NODE}")["spec"] == before
    assert kube.list(f"/api/v1/namespaces/{test_ns}/pods",
                     labelSelector="imagekit.dev/role=gpu-preflight") == []


def test_a_failing_node_is_named_with_its_check(torch_image, test_ns, kube, tmp_path) -> None:  # noqa
    from imagekit.evidence import EvidenceStore
    from imagekit.gpu.fleet import FleetOptions, run_fleet

    options = FleetOptions(namespace=test_ns, node_selector={"kubernetes.io/hostname": NODE},
                           gpus=0, script=SCRIPT, script_args=SMALL, timeout_s=600,
                           env={"PREFLIGHT_TEST_NAN": "0"})  # no marking asked: none done
    report = run_fleet(kube, torch_image.pinned, options, EvidenceStore(tmp_path / "ev"))
    [row] = report.nodes
    assert row.status.value == "FAIL" and row.stage == "preflight"
    assert "matmul-bf16: rank 0" in row.detail
    assert report.cell(row, "matmul-bf16") == "FAIL" and report.marked == {}
    assert not kube.get(f"/api/v1/nodes/{NODE}")["spec"].get("unschedulable")


def test_marking_a_fake_node_and_never_a_node_that_was_not_judged(torch_image, test_ns,  # noqa
                                                                   kube,  # noqa: F811
                                                                   fake_node,
                                                                   tmp_path, cli) -> None:
    from imagekit.gpu.fleet import TAINT_KEY, mark_node

    name, label = fake_node
    # the fake node cannot run a Pod (not Ready): a precheck finding, never a mark
    selector = [f"--selector={k}={v}" for k, v in label.items()]
    done = cli("cluster", "gpu-preflight", str(torch_image.pinned), "--each-node", "--submit",
               "--namespace", test_ns, *selector, "--gpus", "0", "--script", str(SCRIPT),
               "--json",
                "--cordon-failed", "--taint-failed",
                env={"IMAGEKIT_EVIDENCE_DIR": str(tmp_path / "evidence")})
    assert done.returncode == 1, done.stderr[-2000:]
    [row] = json.loads(done.stdout)["nodes"]
    assert row["stage"] == "precheck" and "node_ready" in row["detail"] and row["marked"] == []
    spec = kube.get(f"/api/v1/nodes/{name}")["spec"]
    assert not spec.get("unschedulable") and len(spec["taints"]) == 1
    # a node whose preflight failed: cordoned and tainted, its own taint kept, once only
    assert mark_node(kube, name, cordon=True, taint=True) == \
        ["cordoned", f"tainted {TAINT_KEY}=failed:NoSchedule"]
    spec = kube.get(f"/api/v1/nodes/{name}")["spec"]
    assert spec["unschedulable"] is True
    assert {t["key"] for t in spec["taints"]} == {"imagekit.dev/fake-node", TAINT_KEY}
    assert mark_node(kube, name, cordon=True, taint=True) == []
