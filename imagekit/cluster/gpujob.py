"""The GPU preflight as a distributed Kubernetes job: many Pods, one torchrun world.

The GPU preflight package (gpu_checks/preflight, run as `-m preflight`) runs under
`torch.distributed.run` in every Pod; the Pods meet through torchrun's c10d rendezvous (a
TCPStore hosted by the Pod of index 0) and the Job controller creates, tracks and finishes the
Pods — it is the distributed engine, imagekit only renders, submits, waits and collects.

Two shapes, chosen from what the API server really does (not from its version string alone):

- **Indexed Job** (`completionMode: Indexed`, alpha in 1.21 behind a gate, on by default from
  1.22): one Job, `completions = parallelism = pods`; each Pod's index comes from the
  `batch.kubernetes.io/job-completion-index` annotation, its hostname is `<job>-<index>`, and
  with `subdomain` = the headless Service the rendezvous endpoint is the DNS name
  `<job>-0.<service>:29400`. Used when a server-side dry run keeps `completionMode` AND the
  cluster has a DNS Service (`kube-system/kube-dns`).
- **One Job per index** (the fallback, e.g. the local v1.20 server, which silently drops the
  unknown `completionMode` field, and has no cluster DNS): Jobs `<job>-0 … <job>-(n-1)`, each
  with `completions = 1` and the index as an explicit label and `IMAGEKIT_INDEX`; a ClusterIP
  Service `<job>-rdzv` selects the Pod of index 0 and its IP (known before any Pod exists) is
  the rendezvous endpoint. The headless Service `<job>` still selects every Pod (its Endpoints
  list the world), as in the Indexed shape.

Either way the Pod of index 0 hosts the store (`--rdzv-conf is_host=true`, explicit: a Service
IP is no local address, so torch's hostname heuristic could not tell) and every Pod announces
its own Pod IP (`--local-addr`), so no Pod name ever needs resolving.

Placement: one Pod per node (required anti-affinity on the hostname) or, with
`pods_per_node > 1`, an even spread (topologySpreadConstraints, maxSkew 1), so a single node
may take several Pods, as the local cluster does.
"""

from __future__ import annotations

import json
import re
import secrets as _secrets
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path

from imagekit import packaged
from imagekit.cluster import admit, manifests, podsecurity
from imagekit.cluster.podrun import CleanupReport, PodRun
from imagekit.cluster.precheck import GPU, PodIntent, precheck
from imagekit.cluster.preflight import ship_script
from imagekit.errors import ImagekitError, InvalidInput
from imagekit.evidence import EvidenceStore
from imagekit.evidence.kinds import GpuJobResult
from imagekit.evidence.store import Attempt
from imagekit.kube import Kube, WaitTimeout
from imagekit.kube.watch import observe_selection
from imagekit.oci import ImageReference
from imagekit.results import CheckResult, Status

RDZV_PORT = 29400
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
ROLE = "gpu-job"
MODE_INDEXED = "indexed-job"
MODE_PER_INDEX = "job-per-index"
JSON_BEGIN = "@@imagekit-preflight-json-begin@@"
JSON_END = "@@imagekit-preflight-json-end@@"
_STUCK = {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError",
          "CreateContainerError", "RunContainerError"}

#: Runs in every Pod (mounted from the ConfigMap); `sh` and `python3` with torch are the only
#: things the image needs. The JSON record (written by the world's rank 0, whichever Pod that
#: is) goes to the log between markers, so no volume is needed to bring it back.
RUN_SH = f"""#!/bin/sh
# Rendered by imagekit.cluster.gpujob: one Pod of a torchrun world (c10d rendezvous).
IDX=${{IMAGEKIT_INDEX:-${{JOB_COMPLETION_INDEX:-0}}}}
IS_HOST=false; [ "$IDX" = 0 ] && IS_HOST=true
export PYTHONPATH="/imagekit${{PYTHONPATH:+:$PYTHONPATH}}"  # a package runs as -m <package>
echo "imagekit-gpujob: index $IDX of $NNODES pods, pod ip $POD_IP," \\
  "rendezvous $RDZV_ENDPOINT (store host: $IS_HOST)"
python3 -m torch.distributed.run --nnodes="$NNODES" --nproc-per-node="$NPROC_PER_NODE" \\
  --rdzv-backend=c10d --rdzv-endpoint="$RDZV_ENDPOINT" --rdzv-id="$RDZV_ID" \\
  --rdzv-conf="is_host=$IS_HOST,read_timeout=$RDZV_TIMEOUT,join_timeout=$RDZV_TIMEOUT" \\
  --local-addr="$POD_IP" --max-restarts=0 \\
  {{script}} --json /tmp/preflight.json "$@"
rc=$?
if [ -s /tmp/preflight.json ]; then
  echo "{JSON_BEGIN}"; cat /tmp/preflight.json; echo; echo "{JSON_END}"
fi
exit $rc
"""


@dataclass
class GpuJobOptions:
    nodes: int
    gpus_per_node: int
    pods_per_node: int = 1
    namespace: str = "imagekit"
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict] = field(default_factory=lambda: [manifests.GPU_TOLERATION])
    priority_class_name: str | None = None
    script: Path = field(default_factory=lambda: packaged.path("preflight"))  # the package
    script_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)   # e.g. NCCL_NVLS_ENABLE=0, every Pod
    timeout_s: float = 900.0
    rdzv_timeout_s: int = 300
    docker_config_dir: Path | None = None
    mode: str = "auto"   # auto | indexed-job | job-per-index (forcing one the server lacks fails)

    def validate(self) -> None:
        if self.nodes < 1:
            raise InvalidInput("--nodes must be at least 1", where=str(self.nodes))
        if self.pods_per_node < 1:
            raise InvalidInput("--pods-per-node must be at least 1", where=str(self.pods_per_node))
        if self.gpus_per_node < 0:
            raise InvalidInput("--gpus-per-node must be 0 (CPU, gloo) or more",
                               where=str(self.gpus_per_node))
        if self.gpus_per_node % self.pods_per_node:
            raise InvalidInput("--gpus-per-node must divide evenly over --pods-per-node",
                               where=f"{self.gpus_per_node}/{self.pods_per_node}")
        if self.mode not in ("auto", MODE_INDEXED, MODE_PER_INDEX):
            raise InvalidInput(f"mode must be auto, {MODE_INDEXED} or {MODE_PER_INDEX}",
                               where=self.mode)
        if not self.script.is_file() and not (self.script / "__main__.py").is_file():
            raise InvalidInput("preflight script not found", where=str(self.script))

    @property
    def pods(self) -> int:
        return self.nodes * self.pods_per_node

    @property
    def gpus_per_pod(self) -> int:
        return self.gpus_per_node // self.pods_per_node

    @property
    def nproc_per_pod(self) -> int:
        """One torchrun worker per GPU; one per Pod on CPUs (gloo)."""
        return max(1, self.gpus_per_pod)


@dataclass(frozen=True)
class ServerShape:
    """What the server supports, as found (facts for evidence and the output)."""

    version: str
    indexed_jobs: bool
    cluster_dns: bool
    detail: str

    @property
    def mode(self) -> str:
        return MODE_INDEXED if self.indexed_jobs and self.cluster_dns else MODE_PER_INDEX


def indexed_probe_job(namespace: str) -> dict:
    """The Indexed Job `server_shape` creates with dryRun (never stored): restricted like every
    Pod imagekit renders, so a namespace that warns on its level says nothing of it."""
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "imagekit-indexed-probe", "namespace": namespace},
            "spec": {"completionMode": "Indexed", "completions": 1, "parallelism": 1,
                     "template": {"spec": {
                         "restartPolicy": "Never",
                         "securityContext": manifests.POD_SECURITY_CONTEXT,
                         "containers": [{
                             "name": "c", "image": "registry.invalid/probe:dry-run",
                             "securityContext": manifests.CONTAINER_SECURITY_CONTEXT}]}}}}


def server_shape(kube: Kube, namespace: str) -> ServerShape:
    """Server version, whether a dry-run Indexed Job keeps `completionMode` (a 1.20 server
    drops the unknown field silently, 1.21 drops it while the gate is off), and whether a
    cluster DNS Service exists (`kube-system/kube-dns`, the name CoreDNS keeps too)."""
    info = kube.version()
    version = str(info.get("gitVersion", "unknown"))
    try:
        created = kube.create(indexed_probe_job(namespace), dry_run=True)
        indexed = created.get("spec", {}).get("completionMode") == "Indexed"
    except ImagekitError as exc:
        indexed = False
        version += f" (dry run refused: {exc.one_line()})"
    try:
        dns = kube.resource("Service").exists("kube-dns", "kube-system")
        dns_text = "kube-system/kube-dns" if dns else "absent"
    except ImagekitError:
        # a namespaced credential may not read kube-system: the rendezvous then goes by the
        # Service's ClusterIP, which needs no DNS
        dns, dns_text = False, "not readable with this credential (rendezvous by ClusterIP)"
    detail = (f"server {version}: Indexed Jobs "
              + ("kept by a dry run" if indexed else "not supported (completionMode dropped)")
              + "; cluster DNS " + dns_text)
    return ServerShape(version=version, indexed_jobs=indexed, cluster_dns=dns, detail=detail)


# ---------------------------------------------------------------------------- rendering

@dataclass
class Rendered:
    mode: str
    name: str
    configmap: dict
    services: list[dict]
    jobs: list[dict]
    rdzv_endpoint: str | None   # None until the rendezvous Service has its ClusterIP

    def objects(self) -> list[dict]:
        return [self.configmap, *self.services, *self.jobs]


def _labels(name: str, index: int | None = None) -> dict[str, str]:
    labels = {"imagekit.dev/role": ROLE, "imagekit.dev/gpujob": name}
    if index is not None:
        labels["imagekit.dev/gpujob-index"] = str(index)
    return labels


def _pod_spec(image: str, options: GpuJobOptions, name: str, *, index: int | None,
              rdzv_endpoint: str, configmap: str,
              items: list[dict[str, str]] | None = None) -> dict:
    env = [{"name": "NNODES", "value": str(options.pods)},
           {"name": "NPROC_PER_NODE", "value": str(options.nproc_per_pod)},
           {"name": "RDZV_ENDPOINT", "value": rdzv_endpoint},
           {"name": "RDZV_ID", "value": name},
           {"name": "RDZV_TIMEOUT", "value": str(options.rdzv_timeout_s)},
           {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
           {"name": "PYTHONUNBUFFERED", "value": "1"}]
    if index is None:
        env.append({"name": "IMAGEKIT_INDEX", "valueFrom": {"fieldRef": {
            "fieldPath": f"metadata.annotations['{INDEX_ANNOTATION}']"}}})
    else:
        env.append({"name": "IMAGEKIT_INDEX", "value": str(index)})
    env += [{"name": k, "value": v} for k, v in sorted(options.env.items())]
    if options.gpus_per_pod == 0:
        # a CPU world: keep CUDA images off the GPUs, one thread per rank
        env += [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"},
                {"name": "OMP_NUM_THREADS", "value": "1"}]
    container: dict = {"name": "preflight", "image": image, "imagePullPolicy": "IfNotPresent",
                       "command": ["sh", "/imagekit/run-gpujob.sh"],
                       "args": list(options.script_args),
                       "env": [*manifests.SCRATCH_ENV, *env],
                       "securityContext": manifests.CONTAINER_SECURITY_CONTEXT,
                       "ports": [{"name": "rdzv", "containerPort": RDZV_PORT}],
                       "volumeMounts": [{"name": "scripts", "mountPath": "/imagekit",
                                         "readOnly": True}, manifests.SCRATCH_MOUNT]}
    if options.gpus_per_pod:
        container["resources"] = {"limits": {GPU: str(options.gpus_per_pod)}}
    match = {"matchLabels": {"imagekit.dev/gpujob": name}}
    if options.pods_per_node == 1:
        placement: dict = {"affinity": {"podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": match, "topologyKey": "kubernetes.io/hostname"}]}}}
    else:
        placement = {"topologySpreadConstraints": [
            {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
             "whenUnsatisfiable": "DoNotSchedule", "labelSelector": match}]}
    spec: dict = {"restartPolicy": "Never", "terminationGracePeriodSeconds": 5,
                  "automountServiceAccountToken": False, "subdomain": name,
                  "securityContext": manifests.POD_SECURITY_CONTEXT,
                  "nodeSelector": dict(options.node_selector),
                  "tolerations": list(options.tolerations), "containers": [container],
                  "volumes": [{"name": "scripts", "configMap": {
                      "name": configmap, "defaultMode": 0o555,
                      **({"items": items} if items else {})}},
                      manifests.SCRATCH_VOLUME], **placement}
    if index is not None:
        spec["hostname"] = f"{name}-{index}"
    if options.priority_class_name:
        spec["priorityClassName"] = options.priority_class_name
    return spec


def _job(name: str, namespace: str, labels: dict, pod_spec: dict, completions: int,
         deadline: int, indexed: bool) -> dict:
    spec: dict = {"completions": completions, "parallelism": completions, "backoffLimit": 0,
                  "activeDeadlineSeconds": deadline,
                  "template": {"metadata": {"labels": labels}, "spec": pod_spec}}
    if indexed:
        spec["completionMode"] = "Indexed"
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": namespace, "labels": labels}, "spec": spec}


def render(pinned: ImageReference, options: GpuJobOptions, name: str, mode: str,
           rdzv_ip: str | None = None) -> Rendered:
    """All objects of one run. In the per-index shape the Jobs need the rendezvous Service's
    ClusterIP: without `rdzv_ip` they are rendered with a placeholder endpoint (dry run)."""
    image = manifests.pinned(pinned)
    ns = options.namespace
    shipped = ship_script(options.script)
    files = {**shipped.files, "run-gpujob.sh": RUN_SH.replace("{script}", shlex.join(shipped.run))}
    items = shipped.items(list(files))
    configmap = manifests.configmap(f"{name}-scripts", ns, files, labels=_labels(name))
    headless = {"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": name, "namespace": ns, "labels": _labels(name)},
                "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                         "selector": {"imagekit.dev/gpujob": name},
                         "ports": [{"name": "rdzv", "port": RDZV_PORT,
                                    "targetPort": RDZV_PORT}]}}
    deadline = int(options.timeout_s) + 60
    if mode == MODE_INDEXED:
        endpoint = f"{name}-0.{name}.{ns}.svc:{RDZV_PORT}"
        spec = _pod_spec(image, options, name, index=None, rdzv_endpoint=endpoint,
                         configmap=configmap["metadata"]["name"], items=items)
        job = _job(name, ns, _labels(name), spec, options.pods, deadline, indexed=True)
        return Rendered(mode, name, configmap, [headless], [job], endpoint)
    rdzv = {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": f"{name}-rdzv", "namespace": ns, "labels": _labels(name)},
            "spec": {"type": "ClusterIP", "selector": _labels(name, 0),
                     "ports": [{"name": "rdzv", "port": RDZV_PORT, "targetPort": RDZV_PORT}]}}
    endpoint = f"{rdzv_ip}:{RDZV_PORT}" if rdzv_ip else f"$({name}-rdzv ClusterIP):{RDZV_PORT}"
    jobs = []
    for index in range(options.pods):
        labels = _labels(name, index)
        spec = _pod_spec(image, options, name, index=index, rdzv_endpoint=endpoint,
                         configmap=configmap["metadata"]["name"], items=items)
        jobs.append(_job(f"{name}-{index}", ns, labels, spec, 1, deadline, indexed=False))
    return Rendered(mode, name, configmap, [headless, rdzv], jobs,
                    endpoint if rdzv_ip else None)


# ---------------------------------------------------------------------------- running

@dataclass
class GpuJobRun:
    """What one run left behind, for the operation that judges it."""

    name: str
    mode: str
    shape: ServerShape
    checks: list[CheckResult]
    evidence: str
    record_json: bytes | None = None
    logs: dict[str, str] = field(default_factory=dict)
    pod_ips: dict[str, str] = field(default_factory=dict)
    endpoints: list[str] = field(default_factory=list)
    submitted: bool = False
    rendezvous: str | None = None


def extract_record(log: str) -> bytes | None:
    """The JSON record between the markers of run-gpujob.sh, or None."""
    match = re.search(re.escape(JSON_BEGIN) + r"\s*\n(.*?)\n\s*" + re.escape(JSON_END), log,
                      re.S)
    return match.group(1).strip().encode() if match else None


def run_gpu_job(kube: Kube, pinned: ImageReference, options: GpuJobOptions,
                store: EvidenceStore, submit: bool) -> GpuJobRun:
    """Precheck the Pod template, then (with `submit`) create ConfigMap, Services and Jobs,
    wait, collect every Pod's log, delete everything and wait until the Pods are gone."""
    assert pinned.digest is not None
    options.validate()
    name = f"gpujob-{pinned.digest.hex[:10]}-{_secrets.token_hex(2)}"
    # permissions and the namespace first; the Pod template is judged once rendered
    enforce = admit.prepare(kube, "gpu-preflight", options.namespace)
    shape = server_shape(kube, options.namespace)
    mode = shape.mode if options.mode == "auto" else options.mode
    if mode == MODE_INDEXED and not (shape.indexed_jobs and shape.cluster_dns):
        raise InvalidInput(f"{MODE_INDEXED} needs Indexed Jobs and cluster DNS; {shape.detail}",
                           where="--mode")
    rendered = render(pinned, options, name, mode)
    podsecurity.require(rendered.jobs, enforce, options.namespace)
    with store.attempt(pinned.digest, "gpu-job", reference=str(pinned),
                       namespace=options.namespace, job=name, mode=mode,
                       server=shape.version, pods=options.pods, nodes=options.nodes,
                       gpus_per_node=options.gpus_per_node,
                       pods_per_node=options.pods_per_node, submit=submit) as attempt:
        # the job's shape is a description, kept in the record (GpuJobResult), not a check:
        # nothing is judged by choosing it
        run = GpuJobRun(name=name, mode=mode, shape=shape, checks=[], evidence=str(attempt.path))
        template = rendered.jobs[0]["spec"]["template"]
        intent = PodIntent.from_pod({"metadata": {"namespace": options.namespace},
                                     "spec": template["spec"]})
        checks = precheck(kube, intent)
        checks.append(node_count(kube, options))
        blocked = [c for c in checks if not c.status.is_pass]
        run.checks.extend(checks)
        if blocked or not submit:
            attempt.write_json("manifests.json", rendered.objects())
            run.checks.append(CheckResult(
                name="submission", status=Status.FAIL if blocked else Status.DEFERRED,
                detail=(f"not submitted: {len(blocked)} precheck finding(s); nothing was "
                        "created") if blocked else
                "precheck clean; dry run (no --submit), nothing created"))
        else:
            run.submitted = True
            _submit(kube, pinned, options, rendered, run, attempt)
        for check in run.checks:
            attempt.add_check(check)
        attempt.write_result(GpuJobResult(
            reference=str(pinned), namespace=options.namespace, job=name, mode=mode,
            server=shape.version, indexed_jobs=shape.indexed_jobs,
            cluster_dns=shape.cluster_dns, nodes=options.nodes,
            pods_per_node=options.pods_per_node, gpus_per_node=options.gpus_per_node,
            pods=options.pods, world_size=options.pods * options.nproc_per_pod,
            ranks_per_pod=options.nproc_per_pod, shape=shape.detail,
            submitted=run.submitted, rendezvous=run.rendezvous, pod_ips=run.pod_ips,
            endpoints=run.endpoints, record_found=run.record_json is not None))
    return run


def node_count(kube: Kube, options: GpuJobOptions) -> CheckResult:
    """Enough nodes for the placement: N nodes carrying the nodeSelector's labels (one Pod per
    node is a hard anti-affinity, so a missing node would leave a Pod Pending until the
    rendezvous times out)."""
    nodes = [n["metadata"]["name"] for n in kube.resource("Node").list()
             if all(n["metadata"].get("labels", {}).get(k) == v
                    for k, v in options.node_selector.items())]
    status = Status.PASS if len(nodes) >= options.nodes else Status.FAIL
    return CheckResult(name="node_count", status=status,
                       detail=f"asked for {options.nodes} node(s) x {options.pods_per_node} "
                              f"Pod(s); {len(nodes)} node(s) match the selector"
                              + ("" if status is Status.PASS else
                                 " (use --pods-per-node to put several Pods on one node)"),
                       data={"nodes": nodes})


def _submit(kube: Kube, pinned: ImageReference, options: GpuJobOptions, rendered: Rendered,
            run: GpuJobRun, attempt: Attempt) -> None:
    ns, name = options.namespace, rendered.name
    pods_run = PodRun(kube, ns, name, pod_selector=f"imagekit.dev/gpujob={name}")
    secret = pods_run.pull_secret(pinned.registry, options.docker_config_dir)  # the run's own
    started = time.monotonic()
    try:
        pods_run.create(rendered.configmap)
        created_services = [pods_run.create(svc) for svc in rendered.services]
        if rendered.mode == MODE_PER_INDEX:
            ip = created_services[1]["spec"]["clusterIP"]
            rendered = render(pinned, options, name, rendered.mode, rdzv_ip=ip)
        attempt.write_json("manifests.json", rendered.objects())
        for job in rendered.jobs:
            if secret:
                job["spec"]["template"]["spec"]["imagePullSecrets"] = [{"name": secret}]
            pods_run.create(job)
        outcome = _wait(kube, options, rendered)
        pods = kube.resource("Pod").list(ns, label_selector=f"imagekit.dev/gpujob={name}")
        endpoints = kube.resource("Endpoints").maybe_get(name, ns) or {}
        run.endpoints = sorted(a.get("ip", "") for s in endpoints.get("subsets") or []
                               for a in (s.get("addresses") or [])
                               + (s.get("notReadyAddresses") or []))
        attempt.write_json("endpoints.json", endpoints)
        attempt.write_json("jobs.json", outcome["jobs"])
        attempt.write_json("pods.json", [{"name": p["metadata"]["name"],
                                          "labels": p["metadata"].get("labels", {}),
                                          "node": p["spec"].get("nodeName"),
                                          "status": p.get("status", {})} for p in pods])
        for pod in pods:
            pod_name = pod["metadata"]["name"]
            log = kube.pod_logs(ns, pod_name)
            run.logs[pod_name] = log
            run.pod_ips[pod_name] = pod.get("status", {}).get("podIP", "")
            attempt.write_text(f"logs/{pod_name}.log", log)
            record = extract_record(log)
            if record is not None and run.record_json is None:
                run.record_json = record
        if run.record_json is not None:
            attempt.write_bytes("preflight.json", run.record_json)
        run.rendezvous = rendered.rdzv_endpoint
        elapsed = time.monotonic() - started
        status, detail = outcome["status"], outcome["detail"] + f" after {elapsed:.1f}s"
        run.checks.append(CheckResult(
            name="job_pods", status=status, detail=detail,
            data={"pods": {p["metadata"]["name"]: {"phase": p.get("status", {}).get("phase"),
                                                   "ip": p.get("status", {}).get("podIP"),
                                                   "node": p["spec"].get("nodeName")}
                           for p in pods},
                  "rendezvous": rendered.rdzv_endpoint, "endpoints": run.endpoints}))
    finally:
        report = pods_run.cleanup(timeout=120)
        run.checks.append(_cleanup_check(report, rendered))
        if secret:
            run.checks.append(report.secret_check(secret))


def _finished(job: dict) -> str | None:
    for cond in job.get("status", {}).get("conditions") or []:
        if cond.get("type") in ("Complete", "Failed") and cond.get("status") == "True":
            return cond["type"]
    return None


def _wait(kube: Kube, options: GpuJobOptions, rendered: Rendered,
          grace_s: float = 60.0) -> dict:
    """Until every Job is Complete or Failed. After the first failure the others get
    `grace_s` to finish (rank 0 may still be writing the record), then the run stops."""
    ns = options.namespace
    deadline = time.monotonic() + options.timeout_s
    expected = options.pods
    first_failure: float | None = None
    jobs_api = kube.resource("Job", "batch/v1")
    jobs: list[dict] = []
    succeeded = 0
    # woken by every change of the run's Pods (a watch), and at least every 2 s (the grace)
    for pods in observe_selection(kube.resource("Pod"), ns,
                                  f"imagekit.dev/gpujob={rendered.name}", deadline=deadline,
                                  tick=2.0):
        jobs = [jobs_api.maybe_get(j["metadata"]["name"], ns) or {} for j in rendered.jobs]
        succeeded = sum(int(j.get("status", {}).get("succeeded") or 0) for j in jobs)
        failed = sum(int(j.get("status", {}).get("failed") or 0) for j in jobs)
        states = [_finished(j) for j in jobs]
        if failed and first_failure is None:
            first_failure = time.monotonic()
        if all(states) or (first_failure is not None
                           and time.monotonic() - first_failure > grace_s):
            if succeeded >= expected and not failed:
                return {"status": Status.PASS, "jobs": jobs,
                        "detail": f"{succeeded}/{expected} Pods Succeeded ({rendered.mode})"}
            return {"status": Status.FAIL, "jobs": jobs,
                    "detail": f"{failed} Pod(s) failed, {succeeded}/{expected} Succeeded "
                              f"({rendered.mode})"}
        for pod in pods.values():
            for cs in pod.get("status", {}).get("containerStatuses") or []:
                waiting = (cs.get("state") or {}).get("waiting") or {}
                if waiting.get("reason") in _STUCK:
                    return {"status": Status.FAIL, "jobs": jobs,
                            "detail": f"Pod {pod['metadata']['name']} stuck in "
                                      f"{waiting['reason']}: {waiting.get('message', '')}"}
    return {"status": Status.ERROR, "jobs": jobs,
            "detail": f"no outcome after {options.timeout_s:.0f}s "
                      f"({succeeded}/{expected} Succeeded)"}


def _cleanup_check(report: CleanupReport, rendered: Rendered) -> CheckResult:
    """Jobs (their Pods with them), Services, ConfigMap deleted, and no Pod left."""
    jobs = [j["metadata"]["name"] for j in rendered.jobs if f"Job {j['metadata']['name']}"
            in report.errors]
    pods = next((e for k, e in report.errors.items() if k.startswith("Pods ")), None)
    if pods is not None:
        detail = "Pods still present 120 s after deletion" if isinstance(pods, WaitTimeout) \
            else pods.one_line()
        return CheckResult(name="cleanup", status=Status.ERROR, detail=detail)
    if jobs:
        return CheckResult(name="cleanup", status=Status.ERROR,
                           detail=f"Jobs still present: {jobs}")
    others = [f"{k}: {e.one_line()}" for k, e in report.errors.items()
              if not k.startswith("Secret ")]
    if others:
        return CheckResult(name="cleanup", status=Status.ERROR, detail="; ".join(others))
    return CheckResult(name="cleanup", status=Status.PASS,
                       detail=f"Jobs, Pods, Services, ConfigMap gone after "
                              f"{report.seconds:.1f}s")


def manifests_json(rendered: Rendered) -> str:
    return json.dumps(rendered.objects(), indent=2)
