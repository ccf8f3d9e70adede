"""`imagekit cluster precheck`: what would stop a GPU Pod, found before it is submitted.

Every finding is a CheckResult with its reason. Nothing is created, patched or evicted; no
PriorityClass is ever made. From the record:

- section 6: a Pod scheduled to a node without the CFS Turbo kernel module failed with
  `MountVolume.MountDevice failed … node has not turbo kernel mod` — that is the node lacking a
  storage capability, never "model missing"; requesting a GPU is not enough to land on a node
  that has it, so nodeSelector + tolerations must be explicit and are checked here;
- section 7: `preemptionPolicy: Never` without a matching PriorityClass is refused by the
  Priority admission plugin (403), because admission computes the policy from the class (or
  the global default, or PreemptLowerPriority) and refuses a Pod that states another one. The
  fix is an existing class with `preemptionPolicy: Never`, or default priority 0 after checking
  the node's workloads and free GPUs — which this check reports.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from imagekit.cluster.fit import image_fit
from imagekit.cluster.kube import Kube
from imagekit.errors import InvalidInput
from imagekit.results import CheckResult, Status

GPU = "nvidia.com/gpu"
#: Pod annotations that carry the image's CUDA facts (set by imagekit when it renders a Pod;
#: `--image-cuda` / `--image-arch` give them on the command line)
ANNOTATION_CUDA = "imagekit.dev/image-cuda"
ANNOTATION_ARCH = "imagekit.dev/image-arch-list"
PREEMPT_LOWER = "PreemptLowerPriority"
NEVER = "Never"
#: The preemptionPolicy values a Pod spec may state (core/v1 PreemptionPolicy).
PREEMPTION_POLICIES = (NEVER, PREEMPT_LOWER)


def preemption_policy(value: str | None) -> str | None:
    """A preemptionPolicy a command states in its Pod spec (None: the PriorityClass's), checked
    before any Pod is rendered."""
    if value is not None and value not in PREEMPTION_POLICIES:
        raise InvalidInput("preemption policy must be Never or PreemptLowerPriority",
                           where=value)
    return value


def non_preempting_of(wanted: bool, policy: str | None) -> bool:
    """Strict non-preempting semantics: asked for, or stated by `preemptionPolicy: Never`."""
    return wanted or policy == NEVER


class StorageNeed(BaseModel):
    """What a node must offer for the Pod's volume: a label (e.g. the pool label for nodes
    with the CFS Turbo kernel module) and/or a CSI driver registered on the node."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    label: str | None = None          # "key=value" or "key" (exists)
    csi_driver: str | None = None
    description: str = "the volume's storage"


class PodIntent(BaseModel):
    """The scheduling-relevant part of a GPU Pod spec."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    namespace: str = "default"
    node_name: str | None = None
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[dict] = Field(default_factory=list)
    gpus: int = 0
    priority_class_name: str | None = None
    priority: int | None = None
    preemption_policy: str | None = None
    non_preempting: bool = False      # the user wants strict non-preempting semantics
    storage: StorageNeed | None = None
    #: the image's CUDA version and arch list (torch.version.cuda, torch.cuda.get_arch_list()),
    #: judged against each node's GPU feature discovery labels when given
    image_cuda: str | None = None
    image_arch: list[str] | None = None
    #: PersistentVolumeClaims the Pod mounts: their volumes' nodeAffinity is judged per node
    #: (a model volume only storage-capable nodes can mount, section 6)
    claims: list[str] = Field(default_factory=list)

    @classmethod
    def from_pod(cls, pod: dict, storage: StorageNeed | None = None,
                 non_preempting: bool = False) -> "PodIntent":
        spec = pod.get("spec", {})
        gpus = 0
        for container in spec.get("containers", []):
            resources = container.get("resources", {})
            value = resources.get("limits", {}).get(GPU) or resources.get("requests", {}).get(GPU)
            gpus += int(value or 0)
        notes = pod.get("metadata", {}).get("annotations") or {}
        arch = notes.get(ANNOTATION_ARCH)
        claims = [v["persistentVolumeClaim"]["claimName"] for v in spec.get("volumes") or []
                  if (v.get("persistentVolumeClaim") or {}).get("claimName")]
        return cls(claims=claims, image_cuda=notes.get(ANNOTATION_CUDA),
                   image_arch=[a.strip() for a in arch.split(",") if a.strip()]
                   if arch is not None else None,namespace=pod.get("metadata", {}).get("namespace", "default"),
                   node_name=spec.get("nodeName"), node_selector=spec.get("nodeSelector") or {},
                   tolerations=spec.get("tolerations") or [], gpus=gpus,
                   priority_class_name=spec.get("priorityClassName"),
                   priority=spec.get("priority"), preemption_policy=spec.get("preemptionPolicy"),
                   non_preempting=non_preempting_of(non_preempting,
                                                   spec.get("preemptionPolicy")),
                   storage=storage)


def tolerates(tolerations: list[dict], taint: dict) -> bool:
    """Kubernetes' toleration matching (v1 helper ToleratesTaint)."""
    for tol in tolerations:
        if tol.get("effect") and tol["effect"] != taint.get("effect"):
            continue
        operator = tol.get("operator", "Equal")
        if not tol.get("key"):
            if operator == "Exists":
                return True
            continue
        if tol["key"] != taint.get("key"):
            continue
        if operator == "Exists" or tol.get("value", "") == taint.get("value", ""):
            return True
    return False


def _label_matches(labels: dict[str, str], spec: str) -> bool:
    key, sep, value = spec.partition("=")
    return key in labels and (not sep or labels[key] == value)


def _gpu_requests(pod: dict) -> int:
    total = 0
    for container in pod.get("spec", {}).get("containers", []):
        res = container.get("resources", {})
        total += int(res.get("limits", {}).get(GPU) or res.get("requests", {}).get(GPU) or 0)
    return total


def predict_priority_admission(intent: PodIntent, classes: list[dict]
                               ) -> tuple[CheckResult, int, str]:
    """What the Priority admission plugin (v1.20) will do with this spec; returns the check,
    the priority the Pod will get and its effective preemption policy."""
    by_name = {c["metadata"]["name"]: c for c in classes}
    default = next((c for c in classes if c.get("globalDefault")), None)
    if intent.priority_class_name:
        pc = by_name.get(intent.priority_class_name)
        if pc is None:
            return (CheckResult(name="priority_admission", status=Status.FAIL,
                                detail=f"admission will refuse the Pod (403): no PriorityClass "
                                       f"with name {intent.priority_class_name} was found; none "
                                       "is created by imagekit"), 0, PREEMPT_LOWER)
        source = f"PriorityClass {intent.priority_class_name}"
        value, policy = pc.get("value", 0), pc.get("preemptionPolicy") or PREEMPT_LOWER
    elif default is not None:
        source = f"the global default PriorityClass {default['metadata']['name']}"
        value, policy = default.get("value", 0), default.get("preemptionPolicy") or PREEMPT_LOWER
    else:
        source = "no PriorityClass (priority 0)"
        value, policy = 0, PREEMPT_LOWER
    data = {"computed_priority": value, "computed_preemption_policy": policy, "from": source}
    if intent.priority is not None and intent.priority != value:
        return (CheckResult(name="priority_admission", status=Status.FAIL, data=data,
                            detail=f"admission will refuse the Pod (403): spec sets priority "
                                   f"{intent.priority} but admission computes {value} from "
                                   f"{source}; priority must not be set in the Pod"),
                value, policy)
    if intent.preemption_policy and intent.preemption_policy != policy:
        never = [c["metadata"]["name"] for c in classes if c.get("preemptionPolicy") == "Never"]
        hint = (f"use an existing non-preempting class: priorityClassName: "
                f"{' or '.join(sorted(never))}" if never else "no PriorityClass with preemptionPolicy Never exists; ask the "
                "cluster administrators for one, or drop preemptionPolicy and run at default "
                "priority 0 after checking the node's workloads and free GPUs")
        return (CheckResult(name="priority_admission", status=Status.FAIL, data=data,
                            detail=f"admission will refuse the Pod (403): spec sets "
                                   f"preemptionPolicy {intent.preemption_policy} but the Priority "
                                   f"admission plugin computes {policy} from {source}, and a Pod "
                                   f"may not state a different policy than its class; {hint}"),
                value, policy)
    return (CheckResult(name="priority_admission", status=Status.PASS, data=data,
                        detail=f"admission accepts: priority {value}, preemptionPolicy {policy} "
                               f"from {source}"), value, policy)


def precheck(kube: Kube, intent: PodIntent) -> list[CheckResult]:
    """All findings for `intent`, each with its reason; reads only."""
    checks: list[CheckResult] = []
    nodes = kube.list("/api/v1/nodes")
    if intent.node_name:
        candidates = [n for n in nodes if n["metadata"]["name"] == intent.node_name]
        if not candidates:
            checks.append(CheckResult(name="node_exists", status=Status.FAIL,
                                      detail=f"node {intent.node_name} does not exist; nodes: "
                                             f"{[n['metadata']['name'] for n in nodes]}"))
            return checks + [_priority_only(kube, intent)]
        checks.append(CheckResult(name="node_exists", status=Status.PASS,
                                  detail=f"node {intent.node_name} exists"))
    else:
        candidates = nodes
        if not intent.node_selector:
            checks.append(CheckResult(name="node_selection", status=Status.FAIL,
                                      detail="no nodeSelector and no node name: a GPU request "
                                             "alone does not pick a node with the right storage "
                                             "and pool; select the node explicitly"))
    node_reports = []
    for node in candidates:
        node_reports.append(_node_checks(kube, node, intent))
    fitting = [r for r in node_reports if all(c.status is Status.PASS for c in r)]
    if intent.node_name:
        checks.extend(node_reports[0])
    elif fitting:
        checks.extend(fitting[0])
    elif node_reports:
        checks.extend(node_reports[0])
    else:
        checks.append(CheckResult(name="node_exists", status=Status.FAIL,
                                  detail="the cluster has no nodes"))
    checks.append(_priority_only(kube, intent))
    return checks


def _priority_only(kube: Kube, intent: PodIntent) -> CheckResult:
    classes = kube.list("/apis/scheduling.k8s.io/v1/priorityclasses")
    check, _, policy = predict_priority_admission(intent, classes)
    if check.status is Status.PASS and intent.non_preempting and policy != "Never":
        never = [c["metadata"]["name"] for c in classes if c.get("preemptionPolicy") == "Never"]
        detail = (f"non-preempting semantics wanted but the Pod would be {policy}; existing "
                  f"non-preempting classes: {never}" if never else
                  f"non-preempting semantics wanted but the Pod would be {policy} and no "
                  "PriorityClass with preemptionPolicy Never exists (none is created here)")
        return CheckResult(name="priority_admission", status=Status.FAIL, detail=detail,
                           data=check.data)
    return check


def _node_checks(kube: Kube, node: dict, intent: PodIntent) -> list[CheckResult]:
    name = node["metadata"]["name"]
    labels = node["metadata"].get("labels", {})
    checks: list[CheckResult] = []
    missing = {k: v for k, v in intent.node_selector.items() if labels.get(k) != v}
    if missing:
        checks.append(CheckResult(name="node_labels", status=Status.FAIL,
                                  detail=f"node {name} lacks nodeSelector labels {missing}"))
    else:
        checks.append(CheckResult(name="node_labels", status=Status.PASS,
                                  detail=f"node {name} carries {intent.node_selector or '{}'}"))
    taints = [t for t in node.get("spec", {}).get("taints", []) or []
              if t.get("effect") in ("NoSchedule", "NoExecute")]
    untolerated = [t for t in taints if not tolerates(intent.tolerations, t)]
    if untolerated:
        text = ", ".join(f"{t['key']}={t.get('value', '')}:{t['effect']}" for t in untolerated)
        checks.append(CheckResult(name="node_taints", status=Status.FAIL,
                                  detail=f"node {name} has taints the Pod does not tolerate: "
                                         f"{text}"))
    else:
        checks.append(CheckResult(name="node_taints", status=Status.PASS,
                                  detail=f"all {len(taints)} NoSchedule/NoExecute taint(s) of "
                                         f"{name} tolerated"))
    if intent.storage is not None:
        checks.append(_storage_check(kube, name, labels, intent.storage))
    for claim in intent.claims:
        checks.append(_claim_check(kube, name, labels, intent.namespace, claim))
    if node.get("spec", {}).get("unschedulable"):
        checks.append(CheckResult(name="node_schedulable", status=Status.FAIL,
                                  detail=f"node {name} is cordoned (unschedulable)"))
    ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                for c in node.get("status", {}).get("conditions", []))
    checks.append(CheckResult(name="node_ready", status=Status.PASS if ready else Status.FAIL,
                              detail=f"node {name} is {'Ready' if ready else 'NOT Ready'}"))
    checks.append(_gpu_check(kube, node, intent))
    if intent.image_cuda is not None or intent.image_arch is not None:
        checks.extend(image_fit(intent.image_cuda, intent.image_arch, labels, name))
    return checks


def _storage_check(kube: Kube, node_name: str, labels: dict[str, str],
                   need: StorageNeed) -> CheckResult:
    problems = []
    if need.label and not _label_matches(labels, need.label):
        problems.append(f"label {need.label} absent")
    if need.csi_driver:
        csinode = kube.maybe_get(f"/apis/storage.k8s.io/v1/csinodes/{node_name}")
        drivers = [d.get("name") for d in (csinode or {}).get("spec", {}).get("drivers") or []]
        if need.csi_driver not in drivers:
            problems.append(f"CSI driver {need.csi_driver} not registered on the node "
                            f"(registered: {drivers})")
    data = {"node": node_name, "label": need.label, "csi_driver": need.csi_driver}
    if problems:
        return CheckResult(name="storage_capability", status=Status.FAIL, data=data,
                           detail=f"node {node_name} lacks storage capability for "
                                  f"{need.description}: {'; '.join(problems)}. A Pod placed "
                                  "here fails at MountVolume (e.g. CSI 'node has not turbo "
                                  "kernel mod'); that is the node, not a missing or damaged "
                                  "model — select a node that has the capability")
    return CheckResult(name="storage_capability", status=Status.PASS, data=data,
                       detail=f"node {node_name} has the storage capability for "
                              f"{need.description}")


def _claim_check(kube: Kube, node_name: str, labels: dict[str, str], namespace: str,
                 claim: str) -> CheckResult:
    """Can `node_name` mount the volume behind `claim`? The PV's required nodeAffinity is the
    storage capability (a local/CSI volume only some nodes can mount)."""
    from imagekit.cluster.modelvolume import claim_affinity, node_matches_affinity

    pv, found = claim_affinity(kube, namespace, claim)
    data = {"node": node_name, "claim": f"{namespace}/{claim}"}
    if pv is None:
        return CheckResult(name="volume_node_affinity", status=Status.FAIL, data=data,
                           detail=f"{found}: the Pod cannot mount its volume anywhere")
    ok, lacking = node_matches_affinity(pv, labels)
    data["volume"] = pv["metadata"]["name"]
    if not ok:
        return CheckResult(name="volume_node_affinity", status=Status.FAIL, data=data,
                           detail=f"node {node_name} lacks the storage capability that "
                                  f"{found} requires ({' or '.join(lacking)}): the volume "
                                  "cannot be mounted there — the node, not a missing or "
                                  "damaged model; select a node that has it")
    return CheckResult(name="volume_node_affinity", status=Status.PASS, data=data,
                       detail=f"node {node_name} can mount {found}")


def _gpu_check(kube: Kube, node: dict, intent: PodIntent) -> CheckResult:
    name = node["metadata"]["name"]
    pods = kube.list("/api/v1/pods", fieldSelector=f"spec.nodeName={name}")
    active = [p for p in pods if p.get("status", {}).get("phase") not in ("Succeeded", "Failed")]
    allocatable = int(node.get("status", {}).get("allocatable", {}).get(GPU, 0) or 0)
    used = sum(_gpu_requests(p) for p in active)
    free = allocatable - used
    workloads = [{"pod": f"{p['metadata']['namespace']}/{p['metadata']['name']}",
                  "priority": p.get("spec", {}).get("priority", 0),
                  "gpus": _gpu_requests(p), "phase": p.get("status", {}).get("phase")}
                 for p in active]
    data = {"node": name, "gpu_allocatable": allocatable, "gpu_used": used, "gpu_free": free,
            "workloads": workloads}
    lower = [w for w in workloads if w["priority"] < (intent.priority or 0)]
    summary = (f"node {name}: {free} of {allocatable} {GPU} free; {len(workloads)} workload(s) "
               f"on the node (priorities {sorted({w['priority'] for w in workloads})})")
    if intent.gpus > free:
        return CheckResult(name="gpu_capacity", status=Status.FAIL, data=data,
                           detail=f"{summary}; the Pod asks for {intent.gpus}, which would wait "
                                  "or preempt" + (f" lower-priority pods {lower}" if lower else ""))
    return CheckResult(name="gpu_capacity", status=Status.PASS, data=data,
                       detail=f"{summary}; the Pod asks for {intent.gpus}: fits without "
                              "preempting anything")
