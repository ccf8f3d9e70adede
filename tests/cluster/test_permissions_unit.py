"""`cluster rbac`'s objects, the permissions table behind them and the Pod Security judgement,
without a cluster (the real API server's answers: test_operator_real.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from imagekit.cluster import manifests, permissions, podsecurity
from imagekit.errors import InvalidInput

REPO = Path(__file__).resolve().parents[2]
IMAGE = "127.0.0.1:5001/imagekit/vllm@sha256:" + "cd" * 32
READ_ONLY = {"get", "list", "watch"}


def test_the_role_holds_the_namespaced_rows_and_the_cluster_role_only_reads() -> None:
    objects = permissions.rbac_objects("team-a")
    kinds = [o["kind"] for o in objects]
    assert kinds == ["Namespace", "ServiceAccount", "Role", "RoleBinding", "ClusterRole",
                     "ClusterRoleBinding"]
    by_kind = {o["kind"]: o for o in objects}
    assert by_kind["Namespace"]["metadata"]["labels"][permissions.ENFORCE_LABEL] == "restricted"
    role_rules = by_kind["Role"]["rules"]
    granted = {(g, r, v) for rule in role_rules for g in rule["apiGroups"]
               for r in rule["resources"] for v in rule["verbs"]}
    assert ("", "pods", "delete") in granted and ("batch", "jobs", "create") in granted
    assert ("", "namespaces", "get") in granted
    namespaces_rule = next(r for r in role_rules if r["resources"] == ["namespaces"])
    assert namespaces_rule["resourceNames"] == ["team-a"]   # its own namespace only
    cluster_rules = by_kind["ClusterRole"]["rules"]
    cluster = {r for rule in cluster_rules for r in rule["resources"]}
    assert cluster == {"nodes", "pods", "priorityclasses", "persistentvolumes", "csinodes"}
    assert all(set(rule["verbs"]) <= READ_ONLY for rule in cluster_rules)
    for binding in ("RoleBinding", "ClusterRoleBinding"):
        assert by_kind[binding]["subjects"] == [{"kind": "ServiceAccount", "name": "imagekit",
                                                 "namespace": "team-a"}]
    # nothing in the table writes a cluster-scoped object
    assert all(set(p.verbs) <= READ_ONLY for p in permissions.PERMISSIONS if p.cluster)


def test_one_command_gets_only_its_rows() -> None:
    objects = permissions.rbac_objects("team-a", commands=("probe",), with_namespace=False)
    assert [o["kind"] for o in objects] == ["ServiceAccount", "Role", "RoleBinding"]
    resources = {r for rule in objects[1]["rules"] for r in rule["resources"]}
    assert resources == {"namespaces", "pods", "pods/log", "events", "configmaps", "secrets"}
    needed = {str(a) for a in permissions.needed("probe", "team-a")}
    assert "delete pods in namespace team-a" in needed and "get pods/log in namespace " \
        "team-a" in needed
    assert "list nodes (cluster-wide)" in {str(a) for a in permissions.needed("accept", "x")}


@pytest.mark.parametrize(("args", "says"), [
    (["--namespace", "Team_A"], "--namespace must be a DNS-1123 label"),
    (["--service-account", "a/b"], "--service-account must be a DNS-1123 label"),
    (["--pod-security", "strict"], "--pod-security must be one of"),
    (["--command", "promote"], "--command must be one of"),
])
def test_cluster_rbac_refuses_bad_input_in_one_line(args: list[str], says: str) -> None:
    done = subprocess.run([sys.executable, "-m", "imagekit", "cluster", "rbac", *args],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 and says in done.stderr, done.stderr


def test_the_rbac_reference_page_is_the_table() -> None:
    page = (REPO / "docs" / "reference" / "rbac.md").read_text()
    assert permissions.reference_table() in page, "regenerate docs/reference/rbac.md's table"


# ---------------------------------------------------------------------------- Pod Security

def _engine() -> dict:
    from imagekit.clusteraccept.run import CPU_ENGINE_ARGS, CPU_ENGINE_ENV, AcceptOptions, render
    from imagekit.oci import ImageReference

    options = AcceptOptions(namespace="ns", model_claim="model", engine_env=CPU_ENGINE_ENV,
                            engine_args=list(CPU_ENGINE_ARGS), served_model_name="m")
    return render(options, ImageReference.parse(IMAGE), "run1", 120, [])[0]


def _pods() -> dict[str, dict]:
    from imagekit.cluster.gpujob import MODE_INDEXED, MODE_PER_INDEX, GpuJobOptions, render
    from imagekit.oci import ImageReference

    pinned = ImageReference.parse(IMAGE)
    options = GpuJobOptions(nodes=2, gpus_per_node=8, namespace="ns",
                            node_selector={"nvidia.com/gpu.present": "true"},
                            script=REPO / "gpu_checks" / "preflight")
    pods = {
        "probe": manifests.render("probe-pod.yaml.j2", name="p", namespace="ns", image=IMAGE,
                                  node_name=None, node_selector={}, tolerations=[],
                                  configmap="c", deadline_seconds=60, memory_limit="1Gi"),
        "gpu-preflight": manifests.render(
            "gpu-preflight-pod.yaml.j2", name="pf", namespace="ns", image=IMAGE,
            node_selector={}, tolerations=[], priority_class_name=None,
            preemption_policy=None, command=["python3", "-m", "preflight"], gpus=8,
            configmap="pf", deadline_seconds=900),
        "controller": manifests.controller_bundle("ctl", "ns", IMAGE)[0],
        "engine": _engine(),
        "indexed-job": render(pinned, options, "gj", MODE_INDEXED).jobs[0],
        "job-per-index": render(pinned, options, "gj", MODE_PER_INDEX,
                                rdzv_ip="10.96.0.7").jobs[1],
    }
    return pods


@pytest.mark.parametrize("name", ["probe", "gpu-preflight", "controller", "engine",
                                  "indexed-job", "job-per-index"])
def test_every_pod_imagekit_renders_meets_restricted(name: str) -> None:
    pod = _pods()[name]
    assert podsecurity.violations(pod, "restricted") == []
    assert podsecurity.meets(pod) == "restricted"
    spec, _ = podsecurity.pod_spec(pod)
    assert spec["securityContext"]["runAsUser"] == manifests.RUN_AS_USER != 0
    env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
    assert env["HOME"] == "/tmp"
    assert {"name": "scratch", "mountPath": "/tmp"} in spec["containers"][0]["volumeMounts"]


def test_each_control_can_fail() -> None:
    bare = {"kind": "Pod", "metadata": {"name": "x"},
            "spec": {"containers": [{"name": "c", "image": "i"}]}}
    assert podsecurity.violations(bare, "baseline") == []
    fields = [f for f, _ in podsecurity.violations(bare, "restricted")]
    assert fields == ["spec.containers[0].securityContext.allowPrivilegeEscalation",
                      "spec.containers[0].securityContext.runAsNonRoot",
                      "spec.containers[0].securityContext.seccompProfile.type",
                      "spec.containers[0].securityContext.capabilities.drop"]
    assert podsecurity.meets(bare) == "baseline"
    breaking = {
        "spec.hostNetwork": {"hostNetwork": True},
        "spec.volumes[0].hostPath": {"volumes": [{"name": "h", "hostPath": {"path": "/"}}]},
        "spec.containers[0].securityContext.privileged": {
            "containers": [{"name": "c", "securityContext": {"privileged": True}}]},
        "spec.containers[0].securityContext.capabilities.add": {
            "containers": [{"name": "c", "securityContext": {"capabilities": {
                "add": ["SYS_ADMIN"]}}}]},
        "spec.containers[0].ports[0].hostPort": {
            "containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 80}]}]},
    }
    for field, spec in breaking.items():
        pod = {"kind": "Pod", "metadata": {"name": "x"},
               "spec": {"containers": [{"name": "c"}], **spec}}
        assert field in [f for f, _ in podsecurity.violations(pod, "baseline")], field
        assert podsecurity.meets(pod) == "privileged"
    root = _pods()["probe"]
    root["spec"]["securityContext"]["runAsUser"] = 0
    assert ("spec.securityContext.runAsUser", "must not be 0") in \
        podsecurity.violations(root, "restricted")


def test_require_names_the_field_and_the_level_in_one_line() -> None:
    pod = {"kind": "Pod", "metadata": {"name": "x"},
           "spec": {"hostPID": True, "containers": [{"name": "c"}]}}
    with pytest.raises(InvalidInput) as caught:
        podsecurity.require([pod], "baseline", "team-a")
    line = caught.value.one_line()
    assert "namespace team-a enforces Pod Security level 'baseline'" in line
    assert "spec.hostPID must be unset or false" in line and "\n" not in line
    podsecurity.require([pod], "privileged", "team-a")       # privileged admits anything
    with pytest.raises(InvalidInput, match="is not a Pod Security level"):
        podsecurity.level("strict", "namespace team-a")
    assert podsecurity.level(None, "namespace team-a") == "privileged"
