"""Every manifest imagekit renders fits the Kubernetes 1.37 API, field by field, and the check
can fail: a misspelled field, a wrong type, a missing required field and a field that v1.20
served but 1.37 removed are each refused with the JSON path named.

The render paths are one table (`RENDER_PATHS`: a name and a function returning the objects
that path sends); a new path is one line there. Where a flow builds its object and sends it in
the same function (the probe's Namespace and pull Secret, the Indexed Job dry run), a
`Recorder` stands where the connection would be and keeps what the flow sends: the flow's own
code builds the object, nothing is copied into this test.
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from imagekit import packaged
from imagekit.cluster import manifests
from imagekit.cluster.apimodels import KINDS, ManifestRejected, check_manifest, model_for

REPO = Path(__file__).resolve().parents[2]
DIGEST = "sha256:" + "ab" * 32
IMAGE = f"127.0.0.1:5003/imagekit/vllm:local@{DIGEST}"
PREFLIGHT = REPO / "gpu_checks" / "preflight"
GPU_NODES = {"nvidia.com/gpu.present": "true"}


class _Sent(Exception):
    """Raised where the flow would wait on the server after sending what it renders."""


class Recorder:
    """What a flow sends to the API server, kept instead of sent; every object is absent, so
    the flow creates each one."""

    def __init__(self) -> None:
        self.sent: list[dict] = []

    def create(self, obj: dict, dry_run: bool = False) -> dict:
        self.sent.append(obj)
        return obj

    def apply(self, obj: dict) -> dict:
        return self.create(obj)

    def version(self) -> dict:
        return {"gitVersion": "v1.37.0"}

    def resource(self, kind: str) -> Any:
        if kind == "ServiceAccount":  # ensure_namespace waits for the default one: sent by now
            raise _Sent
        return SimpleNamespace(exists=lambda *args, **kwargs: False)


# ----------------------------------------------------------------------------- render paths

def _probe() -> list[dict]:
    from imagekit.cluster.probe import probe_files

    files = probe_files(packaged.path("probes"), [("pip_check", []), ("find_spec", ["vllm"])])
    cm = manifests.configmap("probe-x-probes", "ns", files, labels={"imagekit.dev/role": "probe"})
    pod = manifests.render("probe-pod.yaml.j2", name="probe-x", namespace="ns", image=IMAGE,
                           node_name=None, node_selector=GPU_NODES,
                           tolerations=[manifests.GPU_TOLERATION], pull_secrets=["probe-x-pull"],
                           configmap=cm["metadata"]["name"], deadline_seconds=660,
                           memory_limit="2Gi")
    return [cm, pod]


def _probe_namespace() -> list[dict]:
    from imagekit.cluster.probe import ensure_namespace

    kube = Recorder()
    with pytest.raises(_Sent):
        ensure_namespace(kube, "imagekit-test")  # type: ignore[arg-type]
    return kube.sent


def _pull_secret(tmp_path: Path) -> list[dict]:
    from imagekit.cluster.probe import pull_secret_for

    auth = base64.b64encode(b"imagekit:not-a-real-password").decode()
    (tmp_path / "config.json").write_text(json.dumps({"auths": {"127.0.0.1:5002": {
        "auth": auth}}}))
    kube = Recorder()
    name = pull_secret_for(kube, "ns", "127.0.0.1:5002", tmp_path,  # type: ignore[arg-type]
                           name="probe-x-pull")
    assert name == "probe-x-pull"
    return kube.sent


def _controller_bundle() -> list[dict]:
    pod, cm = manifests.controller_bundle(
        "acc", "ns", IMAGE, {"suite.py": "print('x')\n"},
        {"SUBSCRIPTS": "suite.py", "READY_URL": "http://127.0.0.1:8000/health"},
        node_selector=GPU_NODES, pull_secrets=["acc-pull"])
    return [cm, pod]


def _accept_options() -> Any:
    from imagekit.clusteraccept.run import CPU_ENGINE_ARGS, CPU_ENGINE_ENV, AcceptOptions

    return AcceptOptions(namespace="ns", model_claim="imagekit-model",
                         engine_env=CPU_ENGINE_ENV, engine_args=list(CPU_ENGINE_ARGS),
                         served_model_name="imagekit-standin/llama-text-32k",
                         node_selector={"imagekit.dev/model-storage": "local"},
                         tolerations=[manifests.GPU_TOLERATION],
                         priority_class_name="batch-nonpreempting",
                         matrix_text="[x]\n", engine_config_text="[y]\n")


def _accept_engine() -> list[dict]:
    from imagekit.clusteraccept.run import render, service_for
    from imagekit.oci import ImageReference

    pod, launch = render(_accept_options(), ImageReference.parse(IMAGE), "acc-1", 960,
                         ["acc-1-pull"])
    port = int(pod["spec"]["containers"][0]["ports"][0]["containerPort"])
    return [launch, pod, service_for("acc-1", "ns", port)]


def _accept_engine_on_gpus() -> list[dict]:
    from imagekit.clusteraccept.run import render
    from imagekit.oci import ImageReference

    options = _accept_options().model_copy(update={"gpus": 8, "tp": 8, "engine_env": {}})
    pod, _ = render(options, ImageReference.parse(IMAGE), "acc-2", 2019, [])
    return [pod]


def _accept_controller() -> list[dict]:
    from imagekit.clusteraccept.run import controller_files

    options = _accept_options()
    scripts = manifests.configmap("acc-1-scripts", "ns", controller_files(options),
                                  labels={"imagekit.dev/role": "acceptance-controller"})
    env = {"READY_URL": "http://10.96.0.9:8000/health", "SUBSCRIPTS": "accept_suites.py",
           "READY_TIMEOUT": "1080", "MAX_TOKENS": "16"}
    pod = manifests.render("controller-pod.yaml.j2", name="acc-1-controller", namespace="ns",
                           image=IMAGE, node_selector=options.node_selector,
                           tolerations=options.tolerations, pull_secrets=[],
                           configmap=scripts["metadata"]["name"],
                           env=[{"name": k, "value": v} for k, v in env.items()],
                           deadline_seconds=4200)
    return [scripts, pod]


def _gpu_preflight_single() -> list[dict]:
    from imagekit.cluster.preflight import PreflightOptions, render_preflight
    from imagekit.oci import ImageReference

    options = PreflightOptions(namespace="ns", node_selector=GPU_NODES, gpus=8,
                               priority_class_name="batch-nonpreempting",
                               preemption_policy="Never", script=PREFLIGHT)
    pod, cm = render_preflight(ImageReference.parse(IMAGE), options, "gpu-preflight-x")
    return [cm, pod]


def _gpu_preflight_each_node() -> list[dict]:
    """One node's Pod of `gpu-preflight --each-node`, built as the fleet builds it."""
    from imagekit.cluster.preflight import PreflightOptions, add_files, render_preflight
    from imagekit.gpu.fleet import (
        HOSTNAME_LABEL,
        TOLERATE_OWN_TAINT,
        baseline_files,
        pod_command,
    )
    from imagekit.oci import ImageReference
    from preflight.verdicts import default_baselines

    folder = default_baselines()
    baselines = baseline_files(folder) if folder else {}
    options = PreflightOptions(namespace="ns",
                               node_selector={**GPU_NODES, HOSTNAME_LABEL: "gpu-node-1"},
                               tolerations=[manifests.GPU_TOLERATION, TOLERATE_OWN_TAINT],
                               gpus=8, script=PREFLIGHT,
                               command=pod_command(8, ["-m", "preflight"],
                                                   ["--baseline", "/imagekit"]))
    pod, cm = render_preflight(ImageReference.parse(IMAGE), options, "gpu-fleet-x-0")
    add_files(pod, cm, baselines)
    pod["spec"]["containers"][0]["env"] = [{"name": "NCCL_NVLS_ENABLE", "value": "0"}]
    pod["spec"]["imagePullSecrets"] = [{"name": "gpu-fleet-x-pull"}]
    return [cm, pod]


def _gpujob(mode: str, **kw: Any) -> Callable[[], list[dict]]:
    def render() -> list[dict]:
        from imagekit.cluster.gpujob import GpuJobOptions
        from imagekit.cluster.gpujob import render as render_job
        from imagekit.oci import ImageReference

        options = GpuJobOptions(**{"nodes": 2, "gpus_per_node": 8, "namespace": "ns",
                                   "node_selector": GPU_NODES, "script": PREFLIGHT,
                                   "env": {"NCCL_NVLS_ENABLE": "0"},
                                   "priority_class_name": "batch-nonpreempting", **kw})
        return render_job(ImageReference.parse(IMAGE), options, "gj", mode,
                          rdzv_ip="10.96.0.7").objects()
    return render


def _gpujob_indexed_dry_run() -> list[dict]:
    """The Job `server_shape` sends as a dry run to learn whether Indexed Jobs are kept."""
    from imagekit.cluster.gpujob import server_shape

    kube = Recorder()
    server_shape(kube, "ns")  # type: ignore[arg-type]
    return kube.sent


def _model_volume() -> list[dict]:
    from imagekit.cluster.modelvolume import volume_manifests

    return list(volume_manifests("imagekit-model", "imagekit-model", "ns",
                                 "/var/lib/imagekit/models/standin"))


#: (name, what that render path sends): every path that builds an object imagekit creates.
def _rbac() -> list[dict]:
    from imagekit.cluster.permissions import rbac_objects

    return rbac_objects("team-a")


RENDER_PATHS: list[tuple[str, Callable[..., list[dict]]]] = [
    ("cluster probe: Pod and probes ConfigMap", _probe),
    ("cluster probe: Namespace", _probe_namespace),
    ("cluster probe: the run's pull Secret", _pull_secret),
    ("controller bundle: Pod and ConfigMap", _controller_bundle),
    ("cluster accept: engine Pod, launch ConfigMap, Service", _accept_engine),
    ("cluster accept: engine Pod on GPUs", _accept_engine_on_gpus),
    ("cluster accept: controller Pod and scripts", _accept_controller),
    ("gpu-preflight: single Pod and ConfigMap", _gpu_preflight_single),
    ("gpu-preflight --each-node: one node's Pod", _gpu_preflight_each_node),
    ("gpu-preflight --nodes: Indexed Job", _gpujob("indexed-job")),
    ("gpu-preflight --nodes: Indexed Job, 2 Pods a node", _gpujob("indexed-job",
                                                                  pods_per_node=2)),
    ("gpu-preflight --nodes: a Job per index", _gpujob("job-per-index")),
    ("gpu-preflight --nodes: a Job per index on CPUs", _gpujob("job-per-index",
                                                               gpus_per_node=0)),
    ("gpu-preflight --nodes: the Indexed Job dry run", _gpujob_indexed_dry_run),
    ("cluster model-volume: PersistentVolume and claim", _model_volume),
    ("cluster rbac: Namespace, ServiceAccount, Role, ClusterRole, bindings", _rbac),
]


def _objects(factory: Callable[..., list[dict]], tmp_path: Path) -> list[dict]:
    return factory(tmp_path) if factory.__code__.co_argcount else factory()


@pytest.mark.parametrize("factory", [f for _, f in RENDER_PATHS],
                         ids=[n for n, _ in RENDER_PATHS])
def test_every_rendered_manifest_fits_the_1_37_api(factory, tmp_path: Path) -> None:
    objects = _objects(factory, tmp_path)
    assert objects, "the render path sent nothing"
    for obj in objects:
        assert check_manifest(obj) == [], f"{obj['kind']} {obj['metadata'].get('name')}"


def test_the_render_paths_cover_every_kind_imagekit_creates(tmp_path: Path) -> None:
    kinds = {o["kind"] for _, f in RENDER_PATHS for o in _objects(f, tmp_path)}
    assert kinds == {"Pod", "ConfigMap", "Secret", "Namespace", "Service", "Job",
                     "PersistentVolume", "PersistentVolumeClaim", "ServiceAccount", "Role",
                     "RoleBinding", "ClusterRole", "ClusterRoleBinding"}


def test_the_indexed_job_is_checked_with_the_field_a_v1_20_server_drops() -> None:
    jobs = [o for o in _gpujob("indexed-job")() if o["kind"] == "Job"]
    assert [j["spec"]["completionMode"] for j in jobs] == ["Indexed"]
    assert check_manifest(jobs[0]) == []


# ------------------------------------------------------------------------- the check fails

def _probe_pod() -> dict:
    return next(o for o in _probe() if o["kind"] == "Pod")


def _set(obj: dict, path: str, value: Any) -> dict:
    out = copy.deepcopy(obj)
    *parents, last = path.split(".")
    node: Any = out
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
    node[last] = value
    return out


@pytest.mark.parametrize(("path", "value", "says"), [
    ("spec.containers.0.securityContext", {"runAsNonRot": True},
     "spec.containers[0].securityContext.runAsNonRot: unknown field (did you mean runAsNonRoot?)"),
    ("spec.restartPolcy", "Never",
     "spec.restartPolcy: unknown field (did you mean restartPolicy?)"),
    ("spec.containers.0.imagePullPolicy", None, None),      # null is "not set": fits
])
def test_a_misspelled_field_fails_with_its_path(path: str, value: Any, says: str | None) -> None:
    problems = check_manifest(_set(_probe_pod(), path, value))
    assert problems == ([says] if says else [])


@pytest.mark.parametrize(("path", "value", "says"), [
    ("spec.containers.0.securityContext", {"runAsUser": "1000"},
     "spec.containers[0].securityContext.runAsUser: expected an integer, got string ('1000')"),
    ("spec.containers.0.securityContext", {"runAsNonRoot": "true"},
     "spec.containers[0].securityContext.runAsNonRoot: expected true or false, got string"),
    ("spec.containers.0.ports", {"containerPort": 8000},
     "spec.containers[0].ports: expected a list, got object"),
    ("spec.containers.0.env", [{"name": "EXECUTE", "value": 1}],
     "spec.containers[0].env[0].value: expected a string, got int (1)"),
    ("spec.containers.0.resources", {"limits": {"memory": "8GB"}},
     "spec.containers[0].resources.limits[memory]: '8GB' is not a quantity"),
    ("spec.containers.0.resources", {"limits": {"cpu": True}},
     "spec.containers[0].resources.limits[cpu]: expected a quantity (string or number), got bool"),
    ("spec.activeDeadlineSeconds", 1.5,
     "spec.activeDeadlineSeconds: expected an integer, got float (1.5)"),
    ("spec.nodeSelector", ["a=b"], "spec.nodeSelector: expected an object (a map), got list"),
    ("spec.containers.0.readinessProbe", {"tcpSocket": {"port": 1.5}},
     "spec.containers[0].readinessProbe.tcpSocket.port: expected an integer or a string"),
    ("metadata.creationTimestamp", "yesterday",
     "metadata.creationTimestamp: expected an RFC 3339 time"),
])
def test_a_wrong_type_fails_with_its_path(path: str, value: Any, says: str) -> None:
    problems = check_manifest(_set(_probe_pod(), path, value))
    assert len(problems) == 1 and problems[0].startswith(says), problems


@pytest.mark.parametrize(("path", "value"), [
    ("spec.containers.0.resources", {"limits": {"cpu": 2, "memory": "8Gi",
                                                "nvidia.com/gpu": 8},
                                     "requests": {"cpu": 0.5, "memory": "512Mi",
                                                  "ephemeral-storage": "1e9"}}),
    ("spec.containers.0.readinessProbe", {"tcpSocket": {"port": "http"}}),
    ("spec.containers.0.readinessProbe", {"httpGet": {"port": 8000, "path": "/health"}}),
    ("spec.volumes", [{"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}}]),
    ("metadata.creationTimestamp", "2026-12-04T10:00:00Z"),
])
def test_quantities_int_or_string_and_times_fit_as_the_api_decodes_them(path: str,
                                                                        value: Any) -> None:
    assert check_manifest(_set(_probe_pod(), path, value)) == []


def test_a_required_field_missing_fails() -> None:
    pod = _probe_pod()
    del pod["spec"]["containers"][0]["name"]
    assert check_manifest(pod) == ["spec.containers[0].name: required field missing"]
    job = next(o for o in _gpujob("indexed-job")() if o["kind"] == "Job")
    job["spec"]["template"] = None
    assert check_manifest(job) == ["spec.template: required field missing"]
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "imagekit", "namespace": "ns"},
               "subjects": [{"kind": "ServiceAccount", "name": "imagekit"}]}
    assert check_manifest(binding) == ["roleRef: required field missing"]


@pytest.mark.parametrize(("obj", "says"), [
    # ObjectMeta.clusterName: served by v1.20, removed in 1.25
    ({"apiVersion": "v1", "kind": "ConfigMap",
      "metadata": {"name": "x", "namespace": "ns", "clusterName": "east"}, "data": {}},
     "metadata.clusterName: unknown field"),
    # ServiceSpec.topologyKeys: served by v1.20 (alpha), removed in 1.22
    ({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x", "namespace": "ns"},
      "spec": {"selector": {"a": "b"}, "ports": [{"port": 80}],
               "topologyKeys": ["kubernetes.io/hostname", "*"]}},
     "spec.topologyKeys: unknown field"),
])
def test_a_field_v1_20_served_and_1_37_removed_fails(obj: dict, says: str) -> None:
    assert check_manifest(obj) == [says]


def test_secret_data_must_be_base64_and_an_unknown_kind_is_a_problem() -> None:
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "n"},
              "type": "kubernetes.io/dockerconfigjson",
              "data": {".dockerconfigjson": "{not base64}"}}
    assert check_manifest(secret) == ["data[.dockerconfigjson]: not valid base64"]
    assert check_manifest({"apiVersion": "batch/v1", "kind": "Pod"}) == [
        "apiVersion, kind: no 1.37 model known here for batch/v1 Pod"]
    assert check_manifest({"kind": "Pod"}) == ["apiVersion, kind: both required, as strings"]
    assert check_manifest(["not", "an", "object"]) == [
        "(manifest): expected an object, got list"]


def test_every_kind_in_the_table_has_its_model() -> None:
    from imagekit.cluster.apimodels import _model

    for (api_version, kind), name in KINDS.items():
        assert model_for(api_version, kind) == name
        model = _model(name)
        assert model is not None, name
        assert {"apiVersion", "kind", "metadata"} <= set(model.attribute_map.values()), name


def test_rbac_objects_are_checked() -> None:
    """What `cluster rbac` prints: ServiceAccount, Role, RoleBinding, ClusterRole and its
    binding (the check takes them like any other kind)."""
    rbac = "rbac.authorization.k8s.io/v1"
    subject = [{"kind": "ServiceAccount", "name": "imagekit", "namespace": "ns"}]
    objects = [
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": "imagekit", "namespace": "ns"}},
        {"apiVersion": rbac, "kind": "Role", "metadata": {"name": "imagekit", "namespace": "ns"},
         "rules": [{"apiGroups": [""], "resources": ["pods", "pods/log"],
                    "verbs": ["get", "list", "watch", "create", "delete"]}]},
        {"apiVersion": rbac, "kind": "RoleBinding",
         "metadata": {"name": "imagekit", "namespace": "ns"}, "subjects": subject,
         "roleRef": {"apiGroup": rbac, "kind": "Role", "name": "imagekit"}},
        {"apiVersion": rbac, "kind": "ClusterRole", "metadata": {"name": "imagekit-read"},
         "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]}]},
        {"apiVersion": rbac, "kind": "ClusterRoleBinding", "metadata": {"name": "imagekit-read"},
         "subjects": subject,
         "roleRef": {"apiGroup": rbac, "kind": "ClusterRole", "name": "imagekit-read"}},
    ]
    assert [check_manifest(o) for o in objects] == [[]] * 5
    role = copy.deepcopy(objects[1])
    role["rules"][0]["verb"] = role["rules"][0].pop("verbs")
    assert check_manifest(role) == [
        "rules[0].verb: unknown field (did you mean verbs?)",
        "rules[0].verbs: required field missing"]


# ----------------------------------------------------------- the templates a user brings

def test_a_users_template_with_a_misspelled_field_is_refused_before_anything(
        tmp_path: Path) -> None:
    """`$IMAGEKIT_MANIFESTS_DIR` may hold the user's own templates: one that the API would
    take with a field silently dropped is refused by `render`, one line naming the path."""
    mine = tmp_path / "manifests"
    mine.mkdir()
    shipped = packaged.path("manifests") / "probe-pod.yaml.j2"
    text = shipped.read_text()
    assert "  restartPolicy: Never\n" in text
    (mine / "probe-pod.yaml.j2").write_text(
        text.replace("  restartPolicy: Never\n",
                     "  restartPolicy: Never\n  schedulerNmae: default-scheduler\n"))
    with pytest.raises(ManifestRejected) as caught:
        manifests.render("probe-pod.yaml.j2", template_dir=mine, name="probe-x",
                         namespace="ns", image=IMAGE, node_name=None, node_selector={},
                         tolerations=[], configmap="c", deadline_seconds=60,
                         memory_limit="1Gi")
    line = caught.value.one_line()
    assert line.startswith("Pod probe-x does not fit the Kubernetes 1.37 API: "
                           "spec.schedulerNmae: unknown field (did you mean schedulerName?)")
    assert line.endswith(f"({mine / 'probe-pod.yaml.j2'})") and caught.value.exit_code == 2


def test_a_users_pod_file_with_a_misspelled_field_is_one_line_exit_2(tmp_path: Path) -> None:
    """`cluster recreate POD.yaml` (and `precheck --pod-file`) read the user's own Pod: a field
    the server would drop is refused before any cluster contact (the kubeconfig named here
    does not exist, so a missing check would fail otherwise, never pass)."""
    import os
    import subprocess
    import sys

    pod = tmp_path / "pod.yaml"
    pod.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ns}\n"
                   "spec:\n  containers:\n  - name: c\n    image: busybox\n"
                   "    securityContext: {runAsNonRot: true, runAsUser: '1000'}\n")
    env = {**os.environ, "KUBECONFIG": str(tmp_path / "absent")}
    done = subprocess.run([sys.executable, "-m", "imagekit", "cluster", "recreate", str(pod)],
                          capture_output=True, text=True, env=env, timeout=60, check=False)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        "imagekit: error: Pod p does not fit the Kubernetes 1.37 API: "
        "spec.containers[0].securityContext.runAsNonRot: unknown field (did you mean "
        "runAsNonRoot?); spec.containers[0].securityContext.runAsUser: expected an integer, "
        f"got string ('1000') ({pod})"]
    pod.write_text(pod.read_text().replace("runAsNonRot", "runAsNonRoot").replace("'1000'",
                                                                                  "1000"))
    done = subprocess.run([sys.executable, "-m", "imagekit", "cluster", "recreate", str(pod)],
                          capture_output=True, text=True, env=env, timeout=60, check=False)
    assert "does not fit" not in done.stderr and "absent" in done.stderr   # on to the cluster
