"""The record's cluster failures, reproduced on the real local Kubernetes and caught by imagekit:
admission 403 for preemptionPolicy Never, probe Pod by digest with imageID check, wrong digest,
ConfigMap switch under a waiting controller, recreate race, node without storage capability."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from imagekit.cluster import manifests
from imagekit.cluster.kube import AdmissionRefused, Conflict
from imagekit.cluster.pods import delete_and_wait, recreate_pod, wait_for_pod
from imagekit.cluster.precheck import PodIntent, StorageNeed, precheck
from imagekit.errors import InvalidInput
from imagekit.oci import Digest
from imagekit.results import Status

from .helpers import NODE, POD_GONE_S, busybox_pod, wait_running

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300),
              pytest.mark.usefixtures("as_operator")]


def cli(*args: str, env_extra: dict[str, str] | None = None, timeout: int = 240
        ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "imagekit", *args], capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env_extra or {})})


def by_name(checks: list) -> dict:
    return {(c["name"] if isinstance(c, dict) else c.name): c for c in checks}


# ------------------------------------------------------------------------------ admission

def test_preemption_never_without_class_is_403_and_precheck_predicts_it(kube, test_ns) -> None:
    classes_before = {c["metadata"]["name"] for c in
                      kube.list("/apis/scheduling.k8s.io/v1/priorityclasses")}
    intent = PodIntent(namespace=test_ns, node_name=NODE,
                       node_selector={"nvidia.com/gpu.present": "true"},
                       tolerations=[manifests.GPU_TOLERATION], preemption_policy="Never")
    predicted = by_name(precheck(kube, intent))["priority_admission"]
    assert predicted.status is Status.FAIL
    assert "403" in predicted.detail and "PreemptLowerPriority" in predicted.detail

    with pytest.raises(AdmissionRefused) as refused:
        kube.create(busybox_pod("never-no-class", test_ns, preemptionPolicy="Never"))
    message = refused.value.message
    assert "forbidden" in message and "PreemptionPolicy (Never) must not be provided" in message
    assert "PreemptLowerPriority" in message          # the rule precheck explained
    assert kube.get_pod(test_ns, "never-no-class") is None
    classes_after = {c["metadata"]["name"] for c in
                     kube.list("/apis/scheduling.k8s.io/v1/priorityclasses")}
    assert classes_after == classes_before            # nothing was created


def test_existing_nonpreempting_class_is_used(kube, test_ns) -> None:
    """With a class the administrators made (the test plays administrator), precheck passes
    and the same spec is admitted with priority from the class and policy Never."""
    pc_name = f"{test_ns}-nonpreempting"
    pc = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
          "metadata": {"name": pc_name}, "value": 1000,
          "preemptionPolicy": "Never", "description": "test: administrator-provided"}
    kube.apply(pc)
    try:
        intent = PodIntent(namespace=test_ns, node_name=NODE,
                           node_selector={"nvidia.com/gpu.present": "true"},
                           tolerations=[manifests.GPU_TOLERATION], preemption_policy="Never")
        hint = by_name(precheck(kube, intent))["priority_admission"]
        assert hint.status is Status.FAIL
        assert "priorityClassName: " in hint.detail and pc_name in hint.detail
        fixed = intent.model_copy(update={"priority_class_name": pc_name})
        assert by_name(precheck(kube, fixed))["priority_admission"].status is Status.PASS
        created = kube.create(busybox_pod("with-class", test_ns, preemptionPolicy="Never",
                                          priorityClassName=pc_name))
        assert (created["spec"]["priority"], created["spec"]["preemptionPolicy"]) == \
            (1000, "Never")
        delete_and_wait(kube, test_ns, "with-class", timeout=POD_GONE_S)
    finally:
        kube.delete(f"/apis/scheduling.k8s.io/v1/priorityclasses/{pc_name}")


# ------------------------------------------------------------------------------ storage, GPUs

def test_node_without_storage_capability_is_reported_as_such(kube, cluster_state,
                                                            test_ns) -> None:
    label = "imagekit.dev/cfs-turbo"
    result = cli("cluster", "precheck", "--namespace", test_ns, "--node", NODE, "--selector",
                 "nvidia.com/gpu.present=true", "--toleration", "nvidia.com/gpu:NoSchedule",
                 "--storage-label", f"{label}=true", "--json")
    assert result.returncode == 1, result.stderr
    checks = by_name(json.loads(result.stdout)["checks"])
    storage = checks["storage_capability"]
    assert storage["status"] == "FAIL"
    assert f"node {NODE} lacks storage capability" in storage["detail"]
    assert "model missing" not in storage["detail"]
    assert checks["node_labels"]["status"] == "PASS" and checks["node_taints"]["status"] == "PASS"
    # the same node once it has the capability (label set as the administrators would)
    kube.patch(f"/api/v1/nodes/{NODE}", {"metadata": {"labels": {label: "true"}}})
    try:
        ok = by_name(precheck(kube, PodIntent(node_name=NODE, storage=StorageNeed(
            label=f"{label}=true"))))["storage_capability"]
        assert ok.status is Status.PASS
    finally:
        kube.patch(f"/api/v1/nodes/{NODE}", {"metadata": {"labels": {label: None}}})


def test_labelling_a_node_that_does_not_exist_names_the_nodes(kube, cluster_state,
                                                              tmp_path) -> None:
    """`model-volume --label-node "$(hostname)"`: the local node is 127.0.0.1, not the host
    name. One line naming the nodes there are, exit 2, before any volume is made (was: the
    API's `nodes "…" not found` and its path, which says nothing of the right name)."""
    from imagekit.cluster.modelvolume import label_node

    missing = f"no-such-node-{os.getpid()}"
    done = cli("cluster", "model-volume", "--label-node", missing, "--path", str(tmp_path),
               "--volume", f"never-{os.getpid()}", "--kubeconfig", str(cluster_state.kubeconfig))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        f'imagekit: error: node "{missing}" not found; nodes: {NODE} (--label-node)']
    assert kube.resource("PersistentVolume").maybe_get(f"never-{os.getpid()}") is None
    with pytest.raises(InvalidInput, match=f'node "{missing}" not found; nodes: {NODE}'):
        label_node(kube, missing)


@pytest.mark.serial  # the node's GPU capacity changes under every other Pod's scheduling
def test_untolerated_taint_and_free_gpus_reported(kube) -> None:
    checks = by_name(precheck(kube, PodIntent(node_name=NODE, gpus=1)))
    assert checks["node_taints"].status is Status.FAIL
    assert "nvidia.com/gpu=present:NoSchedule" in checks["node_taints"].detail
    # the node advertises 2 GPUs (extended resource, as a device plugin would)
    kube.call("PATCH", f"/api/v1/nodes/{NODE}/status",
              body={"status": {"capacity": {"nvidia.com/gpu": "2"}}})
    try:
        def gpus_visible() -> bool:
            node = kube.get(f"/api/v1/nodes/{NODE}")
            return node["status"].get("allocatable", {}).get("nvidia.com/gpu") == "2"
        deadline = time.monotonic() + 30
        while not gpus_visible() and time.monotonic() < deadline:
            time.sleep(0.5)
        intent = PodIntent(node_name=NODE, gpus=2, tolerations=[manifests.GPU_TOLERATION])
        fits = by_name(precheck(kube, intent))["gpu_capacity"]
        assert fits.status is Status.PASS and "2 of 2 nvidia.com/gpu free" in fits.detail
        assert "workload(s) on the node" in fits.detail
        too_many = by_name(precheck(kube, intent.model_copy(update={"gpus": 3})))["gpu_capacity"]
        assert too_many.status is Status.FAIL
    finally:
        kube.call("PATCH", f"/api/v1/nodes/{NODE}/status",
                  body={"status": {"capacity": {"nvidia.com/gpu": None},
                                   "allocatable": {"nvidia.com/gpu": None}}})


# ------------------------------------------------------------------------------ probe by digest

PROBE_OK = 'import sys, json\nprint("python", sys.version.split()[0])\n' \
           'print(json.dumps({"status": "PASS", "detail": "python runs in the image"}))\n'


def test_probe_pod_runs_target_image_and_image_id_matches(kube, python_image, tmp_path,
                                                          cluster_state, test_ns) -> None:
    probes = tmp_path / "probes"
    probes.mkdir()
    (probes / "python_runs.py").write_text(PROBE_OK)
    (probes / "stdlib.py").write_text("import json, subprocess, urllib.request, pathlib\n")
    evidence = tmp_path / "evidence"
    from imagekit.attest import keys

    private, public = keys.generate(tmp_path / "operator-key")
    result = cli("cluster", "probe", str(python_image.reference), "--probes-dir", str(probes),
                 "--namespace", test_ns, "--json", "--expect-digest",
                 str(python_image.digest), "--key", str(private),
                 env_extra={"IMAGEKIT_EVIDENCE_DIR": str(evidence),
                            "DOCKER_CONFIG": str(cluster_state.docker_config_dir)})
    private.unlink()
    assert result.returncode == 0, result.stdout + result.stderr
    doc = json.loads(result.stdout)
    checks = by_name(doc["checks"])
    assert doc["digest"] == str(python_image.digest)
    _signed_probe_phase_verifies(doc, python_image, public, cluster_state)
    assert checks["image_id"]["status"] == "PASS"
    assert checks["image_id"]["data"]["image_id"].endswith("@" + str(python_image.digest))
    assert checks["probe:python_runs"]["status"] == "PASS"
    assert checks["probe:stdlib"]["status"] == "PASS"
    assert checks["cleanup"]["status"] == "PASS"
    attempt = Path(doc["evidence"])
    assert "imagekit-probe python_runs" in (attempt / "pod.log").read_text()
    status = json.loads((attempt / "pod-status.json").read_text())
    assert status["phase"] == "Succeeded"
    manifest = json.loads((attempt / "pod-manifest.json").read_text())
    assert manifest["spec"]["containers"][0]["image"] == str(python_image.pinned).replace(
        ":probe-1", "")
    # the credential went to the cluster as a Secret, never into evidence
    secret_text = subprocess.run(["grep", "-r", "auths", str(attempt)], capture_output=True,
                                 text=True).stdout
    assert secret_text == ""
    pods = kube.list(f"/api/v1/namespaces/{test_ns}/pods",
                     labelSelector="imagekit.dev/role=probe")
    assert pods == []                                   # deleted and really gone


def _signed_probe_phase_verifies(doc: dict, image, public: Path, state) -> None:
    """The operator's --key: what the probe saw, signed and attached at the registry the Pod
    pulled from (target, token auth); the real cosign verifies it, imagekit verify-attestations too."""
    from imagekit.attest.statements import CLUSTER_PROBE_TYPE
    from imagekit.infra.peers import ensure_peer

    (signed,) = doc["attestations"]
    assert signed["predicate_type"] == CLUSTER_PROBE_TYPE
    assert signed["subject"] == str(image.digest)
    ref = f"{image.reference.registry}/{image.reference.repository}@{image.digest}"
    done = subprocess.run([str(ensure_peer("cosign")), "verify-attestation", "--key",
                           str(public), "--type", CLUSTER_PROBE_TYPE, "--insecure-ignore-tlog",
                           "--registry-cacert", str(state.ca_file), ref], capture_output=True,
                          text=True, timeout=120, check=False,
                          env={**os.environ, "DOCKER_CONFIG": str(state.docker_config_dir)})
    assert done.returncode == 0, done.stderr[-800:]
    import base64

    envelope = json.loads(done.stdout.splitlines()[0])
    predicate = json.loads(base64.b64decode(envelope["payload"]))["predicate"]
    assert predicate["phase"] == "cluster-probe" and predicate["digest"] == str(image.digest)
    assert predicate["node"] == NODE and predicate["image_id"].endswith(str(image.digest))
    assert predicate["cluster"].startswith("https://127.0.0.1:")
    assert predicate["verdict"] == "PASS"
    assert {c["name"] for c in predicate["checks"]} >= {"image_id", "pod_completed"}
    verified = cli("verify-attestations", ref, "--trust-key", str(public), "--require-type", "cluster-probe", "--json",
                   env_extra={"DOCKER_CONFIG": str(state.docker_config_dir)})
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_wrong_digest_is_caught(kube, python_image, test_ns, tmp_path, cluster_state) -> None:
    # 1. the tag does not name the digest the build recorded: no Pod is started
    wrong = Digest.of_bytes(b"not the image we built")
    result = cli("cluster", "probe", str(python_image.reference), "--namespace", test_ns,
                 "--json", "--expect-digest", str(wrong),
                 env_extra={"IMAGEKIT_EVIDENCE_DIR": str(tmp_path)})
    assert result.returncode == 1
    assert by_name(json.loads(result.stdout)["checks"])["expected_digest"]["status"] == "FAIL"
    # 2. a reference pinned to a digest the registry does not have: refused before any Pod
    result = cli("cluster", "probe", f"{python_image.reference.name}@{wrong}", "--namespace",
                 test_ns, env_extra={"IMAGEKIT_EVIDENCE_DIR": str(tmp_path)})
    assert result.returncode == 2 and "manifest not found" in result.stderr
    # 3. and the cluster itself refuses to run it: containerd checks the pinned digest
    from imagekit.cluster.probe import pull_secret_for
    secret = pull_secret_for(kube, test_ns, python_image.reference.registry,
                             cluster_state.docker_config_dir)
    assert secret is not None
    kube.apply(manifests.configmap("wrong-digest", test_ns, manifests.script_files(
        "probe/probe-runner.sh")))
    pod = manifests.render("probe-pod.yaml.j2", name="wrong-digest", namespace=test_ns,
                           image=python_image.reference.with_digest(wrong), node_name=None,
                           node_selector={}, tolerations=[manifests.GPU_TOLERATION],
                           pull_secrets=[secret], configmap="wrong-digest",
                           deadline_seconds=120, memory_limit="256Mi")
    recreate_pod(kube, pod)
    try:
        outcome = wait_for_pod(kube, test_ns, "wrong-digest", timeout=90, stuck_grace=3)
        assert outcome.stuck_reason in ("ErrImagePull", "ImagePullBackOff"), outcome.pod["status"]
        events = " ".join(e.get("message", "") for e in kube.events_for(test_ns, "Pod",
                                                                         "wrong-digest"))
        assert str(wrong) in events and "not found" in events, events
    finally:
        delete_and_wait(kube, test_ns, "wrong-digest", timeout=POD_GONE_S)
        kube.delete(f"/api/v1/namespaces/{test_ns}/configmaps/wrong-digest")


# ------------------------------------------------------------------------------ recreate race

def test_recreate_after_immutable_change_waits_until_gone(kube, test_ns) -> None:
    name = "recreate-me"
    delete_and_wait(kube, test_ns, name, timeout=POD_GONE_S)
    first = kube.create(busybox_pod(name, test_ns))
    wait_running(kube, test_ns, name)
    changed = busybox_pod(name, test_ns)
    changed["spec"]["nodeSelector"] = {"kubernetes.io/hostname": NODE}
    # nodeSelector is immutable: an in-place update is refused
    live = kube.get_pod(test_ns, name)
    with pytest.raises(InvalidInput, match="(?i)forbidden|immutable|may not change"):
        kube.replace({**live, "spec": {**live["spec"],
                                       "nodeSelector": changed["spec"]["nodeSelector"]}})
    # the record's race: delete returns, the old Pod is still Terminating, create answers 409
    kube.delete(kube.pod_path(test_ns, name))
    terminating = kube.get_pod(test_ns, name)
    assert terminating is not None and terminating["metadata"].get("deletionTimestamp")
    with pytest.raises(Conflict):
        kube.create(changed)
    # the safe way: watch until that uid is gone, then create
    outcome = recreate_pod(kube, changed, timeout=POD_GONE_S)
    assert outcome.pod["metadata"]["uid"] != first["metadata"]["uid"]
    assert outcome.replaced_uid == first["metadata"]["uid"]
    assert outcome.pod["spec"]["nodeSelector"] == {"kubernetes.io/hostname": NODE}
    assert outcome.waited_seconds > 1          # it really waited for the graceful stop
    wait_running(kube, test_ns, name)
    delete_and_wait(kube, test_ns, name, timeout=POD_GONE_S)
    assert kube.get_pod(test_ns, name) is None


def test_a_409_returns_the_same_pod_and_refuses_another(kube, test_ns) -> None:
    """The real API server adds its defaults (dnsPolicy, default tolerations, a token volume
    …) to what was sent: a second create of the same manifest is answered 409, and the Pod
    read back still holds what was sent, so it is returned (same uid); a manifest that
    differs (another command) is a Conflict, and the Pod is left as it was."""
    name = "create-twice"
    delete_and_wait(kube, test_ns, name, timeout=POD_GONE_S)
    try:
        first = kube.create(busybox_pod(name, test_ns))
        again = kube.create(busybox_pod(name, test_ns))
        assert again["metadata"]["uid"] == first["metadata"]["uid"]
        other = busybox_pod(name, test_ns)
        other["spec"]["containers"][0]["command"] = ["sh", "-c", "exit 3"]
        with pytest.raises(Conflict, match="differs from what was sent"):
            kube.create(other)
        assert kube.get_pod(test_ns, name)["metadata"]["uid"] == first["metadata"]["uid"]
    finally:
        delete_and_wait(kube, test_ns, name, timeout=POD_GONE_S)


# ------------------------------------------------------------------------------ ConfigMap switch

def _controller_run(kube, ns: str, image, mode: str, secret: str) -> tuple[str, dict]:
    """Start the controller (scripts from a ConfigMap) waiting for a change; update the
    ConfigMap while it waits; return (phase, log)."""
    name = f"controller-{mode}"
    files = manifests.script_files("controller/controller.py", "controller/smoke.py")
    files["generation"] = "1\n"
    cm = manifests.configmap(name, ns, files)
    kube.apply(cm)
    pod = manifests.render(
        "controller-pod.yaml.j2", name=name, namespace=ns, image=image.pinned,
        node_selector={}, tolerations=[manifests.GPU_TOLERATION], configmap=name,
        deadline_seconds=240, pull_secrets=[secret],
        env=[{"name": "WAIT_FOR_CHANGE", "value": "/opt/controller/generation"},
             {"name": "READY_TIMEOUT", "value": "150"},
             {"name": "SCRIPT_DIR_MODE", "value": mode}])
    recreate_pod(kube, pod)
    return name, cm


def test_configmap_switch_while_controller_waits(kube, python_image, cluster_state,
                                                test_ns) -> None:
    from imagekit.cluster.probe import pull_secret_for

    ns = test_ns
    secret = pull_secret_for(kube, ns, python_image.reference.registry,
                             cluster_state.docker_config_dir)
    started = {mode: _controller_run(kube, ns, python_image, mode, secret)
               for mode in ("absolute", "resolve")}
    try:
        for name, _ in started.values():
            wait_running(kube, ns, name, timeout=120)
        time.sleep(2)  # both controllers are inside wait_ready() now
        for _name, cm in started.values():
            updated = dict(cm)
            updated["data"] = {**cm["data"], "generation": "2\n"}
            kube.apply(updated)                      # the kubelet swaps ..data, drops old dir
        results = {}
        for mode, (name, _) in started.items():
            outcome = wait_for_pod(kube, ns, name, timeout=150)
            results[mode] = (outcome.phase, kube.pod_logs(ns, name))
        phase, log = results["absolute"]
        assert phase == "Succeeded", log
        assert "SMOKE_OK generation=2" in log and '"status": "PASS"' in log
        phase, log = results["resolve"]              # the record's bug, reproduced
        assert phase == "Failed", log
        assert "No such file or directory" in log and '"phase": "controller"' in log
    finally:
        for name, _ in started.values():
            delete_and_wait(kube, ns, name, timeout=POD_GONE_S)
            kube.delete(f"/api/v1/namespaces/{ns}/configmaps/{name}")


@pytest.mark.parametrize("registry", ["staging", "production"])
def test_probe_pulls_from_every_loopback_registry(registry, push_to, tmp_path, test_ns,
                                                  kube) -> None:
    """plain HTTP (staging) and TLS + basic auth (production), besides target's bearer; the
    run's pull Secret (production has credentials) leaves with the run."""
    image = push_to(registry, "probe-1")
    probes = tmp_path / "probes"
    probes.mkdir()
    (probes / "python_runs.py").write_text(PROBE_OK)
    result = cli("cluster", "probe", str(image.reference), "--probes-dir", str(probes),
                 "--namespace", test_ns, "--json",
                 env_extra={"IMAGEKIT_EVIDENCE_DIR": str(tmp_path / "evidence")})
    assert result.returncode == 0, result.stdout + result.stderr
    checks = by_name(json.loads(result.stdout)["checks"])
    assert checks["image_id"]["status"] == "PASS"
    assert checks["image_id"]["data"]["image_id"].endswith("@" + str(image.digest))
    left = [s["metadata"]["name"] for s in kube.list(f"/api/v1/namespaces/{test_ns}/secrets")
            if s["metadata"]["name"].startswith("probe-")]
    assert left == []
    if registry == "production":
        assert checks["cleanup-pull-secret"]["status"] == "PASS"


def test_reserialised_manifest_is_the_same_image(push_to, python_image, tmp_path,
                                                test_ns) -> None:
    """Same config and layers under another manifest digest: whatever imageID containerd
    reports, the check passes only because the config digests agree (README constraint 4)."""
    twin = push_to("target", "probe-twin", indent=2)
    assert twin.digest != python_image.digest and twin.config_digest == python_image.config_digest
    probes = tmp_path / "probes"
    probes.mkdir()
    (probes / "python_runs.py").write_text(PROBE_OK)
    result = cli("cluster", "probe", str(twin.reference), "--probes-dir", str(probes),
                 "--namespace", test_ns, "--json",
                 env_extra={"IMAGEKIT_EVIDENCE_DIR": str(tmp_path / "evidence")})
    assert result.returncode == 0, result.stdout + result.stderr
    check = by_name(json.loads(result.stdout)["checks"])["image_id"]
    assert check["status"] == "PASS"
    if not check["data"]["image_id"].endswith("@" + str(twin.digest)):
        assert "deduplicated" in check["detail"]
        assert check["data"]["pinned_config"] == str(twin.config_digest)


def test_gpu_preflight_is_refused_before_submission_then_runs(kube, python_image, tmp_path,
                                                              test_ns) -> None:
    ref = str(python_image.reference)
    script = tmp_path / "preflight_standin.py"
    script.write_text("print('PREFLIGHT_STANDIN_OK')\n")
    common = ["cluster", "gpu-preflight", ref, "--namespace", test_ns, "--selector",
              "nvidia.com/gpu.present=true", "--gpus", "1", "--script", str(script), "--json"]
    env = {"IMAGEKIT_EVIDENCE_DIR": str(tmp_path / "evidence")}
    # preemptionPolicy Never without a class, on a node without free GPUs: refused, nothing made
    result = cli(*common, "--preemption-policy", "Never", "--submit", env_extra=env)
    assert result.returncode == 1, result.stderr
    checks = by_name(json.loads(result.stdout)["checks"])
    assert checks["priority_admission"]["status"] == "FAIL"
    assert checks["gpu_capacity"]["status"] == "FAIL"
    assert checks["submission"]["status"] == "FAIL"
    assert kube.list(f"/api/v1/namespaces/{test_ns}/pods",
                     labelSelector="imagekit.dev/role=gpu-preflight") == []
    # the node advertises one GPU (as a device plugin would): clean precheck, the Pod runs
    kube.call("PATCH", f"/api/v1/nodes/{NODE}/status",
              body={"status": {"capacity": {"nvidia.com/gpu": "1"}}})
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and kube.get(f"/api/v1/nodes/{NODE}")["status"].get(
                "allocatable", {}).get("nvidia.com/gpu") != "1":
            time.sleep(0.5)
        result = cli(*common, "--submit", env_extra=env)
        assert result.returncode == 0, result.stdout + result.stderr
        doc = json.loads(result.stdout)
        checks = by_name(doc["checks"])
        assert checks["preflight_pod"]["status"] == "PASS"
        assert checks["cleanup"]["status"] == "PASS"
        assert "PREFLIGHT_STANDIN_OK" in (Path(doc["evidence"]) / "pod.log").read_text()
        left = [s["metadata"]["name"] for s in kube.list(f"/api/v1/namespaces/{test_ns}/secrets")
                if s["metadata"]["name"].startswith("gpu-preflight-")]
        assert left == [], left  # the run's pull Secret left with the run
    finally:
        kube.call("PATCH", f"/api/v1/nodes/{NODE}/status",
                  body={"status": {"capacity": {"nvidia.com/gpu": None},
                                   "allocatable": {"nvidia.com/gpu": None}}})


def test_project_probes_run_in_the_pod_with_their_arguments(python_image, tmp_path,
                                                            test_ns) -> None:
    """The project's probes/ (with their _common.py helper) mounted by ConfigMap: find_spec
    finds json and reports the missing nixl — the record's "entry point gone" check, in a Pod."""
    repo_probes = Path(__file__).resolve().parents[2] / "probes"
    result = cli("cluster", "probe", str(python_image.reference), "--probes-dir",
                 str(repo_probes), "--probe", "find_spec=json,nixl", "--probe", "versions",
                 "--namespace", test_ns, "--json",
                 env_extra={"IMAGEKIT_EVIDENCE_DIR": str(tmp_path)})
    assert result.returncode == 1, result.stdout + result.stderr
    checks = by_name(json.loads(result.stdout)["checks"])
    assert checks["image_id"]["status"] == "PASS"
    assert checks["probe:find_spec"]["status"] == "FAIL"
    assert "nixl" in checks["probe:find_spec"]["detail"]
    assert checks["probe:find_spec"]["data"]["result"]["data"]["missing"] == ["nixl"]
    assert checks["probe:versions"]["status"] == "PASS"
    assert set(checks) >= {"resolve", "pod_completed", "cleanup"}


def test_recreate_cli(kube, test_ns, tmp_path) -> None:
    name = "recreate-cli"
    pod = busybox_pod(name, test_ns)
    path = tmp_path / "pod.json"
    path.write_text(json.dumps(pod))
    first = cli("cluster", "recreate", str(path), "--json")
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["replaced_uid"] is None
    wait_running(kube, test_ns, name)
    pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": NODE}
    path.write_text(json.dumps(pod))
    second = cli("cluster", "recreate", str(path), "--json")
    assert second.returncode == 0, second.stderr
    doc = json.loads(second.stdout)
    assert doc["replaced_uid"] == json.loads(first.stdout)["uid"] and doc["waited_seconds"] > 1
    assert kube.get_pod(test_ns, name)["spec"]["nodeSelector"] == pod["spec"]["nodeSelector"]
    delete_and_wait(kube, test_ns, name, timeout=POD_GONE_S)
