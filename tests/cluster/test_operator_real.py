"""The cluster as an operator has it: imagekit as a ServiceAccount bound by `cluster rbac`
(never cluster-admin), in a namespace labelled `pod-security.kubernetes.io/enforce:
restricted`. The local API server authorizes with RBAC, so a missing verb is a real 403 and a
SelfSubjectAccessReview a real answer; it predates Pod Security admission (1.23), so the label
is judged by imagekit's own precheck, and the kubelet's runAsNonRoot refusal shows the
non-root rule can fail for real."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest

from imagekit.cluster import podsecurity

from .helpers import BUSYBOX, busybox_pod
from .operator import PodsSeen, grant, namespace_objects, token_kubeconfig, without_verb
from .pss import assert_both_admit

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

PROBE_OK = 'import json\nprint(json.dumps({"status": "PASS", "detail": "python runs"}))\n'


def cli(*args: str, env: dict[str, str] | None = None, timeout: int = 240
        ) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run([sys.executable, "-m", "imagekit", *args], capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


@pytest.fixture
def operator_ns(kube):
    name = f"ik-op-{secrets.token_hex(3)}"
    yield name
    kube.call("DELETE", f"/api/v1/namespaces/{name}")
    for kind in ("ClusterRoleBinding", "ClusterRole"):
        resource = kube.resource(kind, "rbac.authorization.k8s.io/v1")
        resource.delete(f"imagekit-read-{name}-imagekit")


def _probe(image, namespace: str, config: Path, tmp_path: Path, state, *extra: str):
    probes = tmp_path / "probes"
    probes.mkdir(exist_ok=True)
    (probes / "python_runs.py").write_text(PROBE_OK)
    return cli("cluster", "probe", str(image.reference), "--probes-dir", str(probes),
               "--namespace", namespace, "--kubeconfig", str(config), "--json", *extra,
               env={"IMAGEKIT_EVIDENCE_DIR": str(tmp_path / "evidence"),
                    "DOCKER_CONFIG": str(state.docker_config_dir)})


def test_probe_passes_as_the_service_account_and_its_pod_meets_restricted(
        kube, cluster_state, python_image, operator_ns, tmp_path, checkov) -> None:
    documents = grant(kube, operator_ns)
    assert {d["kind"] for d in documents} == {"Namespace", "ServiceAccount", "Role",
                                              "RoleBinding", "ClusterRole",
                                              "ClusterRoleBinding"}
    config = token_kubeconfig(kube, cluster_state.kubeconfig, operator_ns, "imagekit",
                              tmp_path / "operator.kubeconfig")
    with PodsSeen(kube, operator_ns) as seen:
        done = _probe(python_image, operator_ns, config, tmp_path, cluster_state)
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(done.stdout)
    assert {c["name"]: c["status"] for c in doc["checks"]}["probe:python_runs"] == "PASS"
    # the Pod as the API server stored it: restricted, and its container ran to the end
    [pod] = seen.pods.values()
    assert podsecurity.violations(pod, "restricted") == []
    assert_both_admit(checkov, {"probe-pod": pod}, tmp_path / "judged")   # checkov agrees
    assert pod["spec"]["securityContext"]["runAsUser"] == 65532
    assert namespace_objects(kube, operator_ns) == []
    # the ServiceAccount may not act outside its namespace, nor write nodes
    from imagekit.cluster.kube import Kube
    from imagekit.kube.access import Access, missing

    with Kube(config) as operator:
        denied = missing(operator, [Access(verb="create", resource="pods", namespace="default"),
                                    Access(verb="patch", resource="nodes"),
                                    Access(verb="create", resource="namespaces")])
    assert len(denied) == 3


def test_a_verb_the_probe_sends_taken_off_the_role_refuses_before_anything_is_created(
        kube, cluster_state, python_image, operator_ns, tmp_path) -> None:
    """The verb taken off is one `cluster probe` was recorded sending (`permissions.USES`,
    held to the probe's real requests by test_rbac_use_real.py): `delete pods`, its cleanup's.
    The run as the ServiceAccount is recorded too: it stops after its access reviews, before
    any request on a resource, and its one line names the missing verb and how to grant it."""
    from typer.testing import CliRunner

    from imagekit.cli.app import app
    from imagekit.cluster.permissions import OPEN_TO_EVERY_USER, USES, Use

    from .recording import recording

    taken = Use(verb="delete", resource="pods")
    assert taken in USES["probe"]
    grant(kube, operator_ns, edit=without_verb(taken.verb, taken.resource))
    config = token_kubeconfig(kube, cluster_state.kubeconfig, operator_ns, "imagekit",
                              tmp_path / "operator.kubeconfig")
    probes = tmp_path / "probes"
    probes.mkdir()
    (probes / "python_runs.py").write_text(PROBE_OK)
    with recording() as recorder:
        done = CliRunner().invoke(app, [
            "cluster", "probe", str(python_image.reference), "--probes-dir", str(probes),
            "--namespace", operator_ns, "--kubeconfig", str(config), "--json"],
            env={"IMAGEKIT_EVIDENCE_DIR": str(tmp_path / "evidence"),
                 "DOCKER_CONFIG": str(cluster_state.docker_config_dir)})
    assert done.exit_code == 2, done.output
    [line] = [x for x in done.output.splitlines() if x.strip()]
    assert line.startswith(f"imagekit: error: cluster probe as imagekit may not delete pods "
                           f"in namespace {operator_ns}; nothing was created."), line
    assert f"imagekit cluster rbac --namespace {operator_ns}" in line
    # only access reviews went out (and discovery): no read, no create
    assert recorder.uses(operator_ns) == set(OPEN_TO_EVERY_USER)
    assert namespace_objects(kube, operator_ns) == []
    assert not (tmp_path / "evidence").exists() or not any((tmp_path / "evidence").rglob(
        "result.json"))


def test_a_pod_the_namespace_level_refuses_is_named_and_nothing_is_submitted(
        kube, cluster_state, operator_ns, tmp_path) -> None:
    grant(kube, operator_ns)
    config = token_kubeconfig(kube, cluster_state.kubeconfig, operator_ns, "imagekit",
                              tmp_path / "operator.kubeconfig")
    pod = busybox_pod("root-busybox", operator_ns)
    del pod["spec"]["securityContext"], pod["spec"]["containers"][0]["securityContext"]
    pod_file = tmp_path / "pod.json"
    pod_file.write_text(json.dumps(pod))
    done = cli("cluster", "recreate", str(pod_file), "--kubeconfig", str(config))
    assert done.returncode == 2, done.stdout + done.stderr
    line = done.stderr.strip()
    assert len(line.splitlines()) == 1, line
    assert "enforces Pod Security level 'restricted'" in line
    assert "spec.containers[0].securityContext.allowPrivilegeEscalation must be false" in line
    assert namespace_objects(kube, operator_ns) == []
    # the same Pod under baseline is admitted by the precheck and created
    kube.resource("Namespace").patch(operator_ns, {"metadata": {"labels": {
        "pod-security.kubernetes.io/enforce": "baseline"}}})
    done = cli("cluster", "recreate", str(pod_file), "--kubeconfig", str(config))
    assert done.returncode == 0, done.stderr
    kube.resource("Pod").delete("root-busybox", operator_ns, grace_seconds=0)


def test_an_unknown_enforce_level_and_a_missing_namespace_are_one_line(
        kube, cluster_state, python_image, operator_ns, tmp_path) -> None:
    grant(kube, operator_ns, "--pod-security", "baseline")
    kube.resource("Namespace").patch(operator_ns, {"metadata": {"labels": {
        "pod-security.kubernetes.io/enforce": "strict"}}})
    config = token_kubeconfig(kube, cluster_state.kubeconfig, operator_ns, "imagekit",
                              tmp_path / "operator.kubeconfig")
    done = _probe(python_image, operator_ns, config, tmp_path, cluster_state)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "pod-security.kubernetes.io/enforce='strict' is not a Pod Security level" in \
        done.stderr
    assert namespace_objects(kube, operator_ns) == []
    # a namespace that does not exist: the ServiceAccount has no rights there
    done = _probe(python_image, f"{operator_ns}-absent", config, tmp_path, cluster_state)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert f"namespace {operator_ns}-absent" in done.stderr
    assert kube.resource("Namespace").maybe_get(f"{operator_ns}-absent") is None


def test_the_kubelet_refuses_a_root_image_under_run_as_non_root(kube, operator_ns) -> None:
    """runAsNonRoot without runAsUser, on an image whose user is root: the kubelet refuses to
    start the container. This is why every imagekit Pod sets runAsUser as well."""
    from imagekit.cluster.probe import ensure_namespace

    ensure_namespace(kube, operator_ns)
    pod = busybox_pod("non-root-root", operator_ns)
    pod["spec"]["securityContext"] = {"runAsNonRoot": True}     # no runAsUser
    assert pod["spec"]["containers"][0]["image"] == BUSYBOX
    kube.create(pod)
    deadline = time.monotonic() + 90
    waiting: dict = {}
    while time.monotonic() < deadline:
        current = kube.resource("Pod").get("non-root-root", operator_ns)
        statuses = current.get("status", {}).get("containerStatuses") or []
        waiting = (statuses[0].get("state", {}).get("waiting") or {}) if statuses else {}
        if waiting.get("reason") == "CreateContainerConfigError":
            break
        time.sleep(1)
    assert waiting.get("reason") == "CreateContainerConfigError", waiting
    assert "runAsNonRoot and image will run as root" in waiting.get("message", "")
    kube.resource("Pod").delete("non-root-root", operator_ns, grace_seconds=0)


def test_a_403_no_review_foresaw_names_the_request_and_cleanup_runs(
        kube, cluster_state, python_image, operator_ns, tmp_path) -> None:
    """A ResourceQuota of zero Pods: every permission is there (the reviews say yes), and the
    quota admission refuses the Pod (403) after the run's ConfigMap exists. The line names the
    request and the server's words; the ConfigMap and pull Secret are deleted all the same."""
    grant(kube, operator_ns)
    kube.create({"apiVersion": "v1", "kind": "ResourceQuota",
                 "metadata": {"name": "no-pods", "namespace": operator_ns},
                 "spec": {"hard": {"pods": "0"}}})
    deadline = time.monotonic() + 30      # the quota controller fills in its status first
    while time.monotonic() < deadline and not kube.resource("ResourceQuota").get(
            "no-pods", operator_ns).get("status", {}).get("hard"):
        time.sleep(0.5)
    config = token_kubeconfig(kube, cluster_state.kubeconfig, operator_ns, "imagekit",
                              tmp_path / "operator.kubeconfig")
    done = _probe(python_image, operator_ns, config, tmp_path, cluster_state)
    assert done.returncode == 1, done.stdout + done.stderr
    line = done.stderr.strip()
    assert len(line.splitlines()) == 1, line
    assert "create refused by the API server" in line and "exceeded quota" in line, line
    assert "Pod/probe-" in line, line
    assert namespace_objects(kube, operator_ns) == []
