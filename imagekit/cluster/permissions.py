"""What each cluster command needs of the API, verb by verb, and the RBAC objects that grant
exactly that (`imagekit cluster rbac`).

One table serves both: the objects `cluster rbac` prints are built from it, and every cluster
command asks the API server for its own rows (SelfSubjectAccessReview, `imagekit.kube.access`)
before its first create. A row says why the command needs it; docs/reference/rbac.md is
written from the same rows (tests/unit/test_permissions.py keeps it so).

Namespaced rows go into a Role in the run's namespace. Only reads of what is truly
cluster-scoped (nodes, PriorityClasses, PersistentVolumes, CSINodes) and the list of Pods on a
node across namespaces (free GPUs) go into a read-only ClusterRole. What an administrator does
once (a model volume, labelling or cordoning nodes, creating the namespace) is not granted.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from imagekit.errors import InvalidInput
from imagekit.inputs import dns_label
from imagekit.kube.access import Access

#: the cluster commands that run with the operator's credentials (`imagekit cluster <name>`)
COMMANDS = ("probe", "gpu-preflight", "accept", "precheck", "recreate")
SERVICE_ACCOUNT = "imagekit"
#: the labels Pod Security admission reads on a namespace (1.23+)
ENFORCE_LABEL = "pod-security.kubernetes.io/enforce"
LEVELS = ("privileged", "baseline", "restricted")


class Permission(BaseModel):
    """One verb on one resource, the commands that use it, and why."""

    model_config = ConfigDict(frozen=True)

    verbs: tuple[str, ...]
    resource: str
    group: str = ""
    subresource: str = ""
    cluster: bool = False        # a cluster-scoped read (ClusterRole)
    commands: tuple[str, ...]
    why: str

    @property
    def rule_resource(self) -> str:
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


_RUNS = ("probe", "gpu-preflight", "accept")
_GPU = ("gpu-preflight", "accept", "precheck")

PERMISSIONS: tuple[Permission, ...] = (
    Permission(verbs=("get",), resource="namespaces", commands=COMMANDS,
               why="read the run's namespace: that it exists, and its Pod Security level "
                   "(the pod-security.kubernetes.io/enforce label) before a Pod is rendered"),
    Permission(verbs=("create", "get", "list", "watch", "delete"), resource="pods",
               commands=(*_RUNS, "recreate"),
               why="the probe, preflight, engine and controller Pods: created pinned by digest, "
                   "watched until they end (list+watch from a resourceVersion), deleted by uid "
                   "at cleanup"),
    Permission(verbs=("get",), resource="pods", subresource="log", commands=_RUNS,
               why="the probes' framed output, the preflight's record and the engine's start "
                   "phases are read from the containers' logs"),
    Permission(verbs=("list",), resource="events", commands=(*_RUNS, "recreate"),
               why="a Pod that does not start is explained by its events (FailedMount, "
                   "ErrImagePull, FailedScheduling) in the evidence"),
    Permission(verbs=("create", "get", "update", "delete"), resource="configmaps",
               commands=_RUNS,
               why="the probes, the preflight package and the controller's scripts travel in a "
                   "ConfigMap (created, or replaced when a kept one exists), deleted with the run"),
    Permission(verbs=("create", "get", "update", "delete"), resource="secrets",
               commands=_RUNS,
               why="the run's own image pull Secret for a registry that needs credentials, "
                   "deleted with the run"),
    Permission(verbs=("create", "get", "delete"), resource="services",
               commands=("gpu-preflight", "accept"),
               why="the engine's Service (accept) and the multi-node preflight's headless and "
                   "rendezvous Services, deleted with the run"),
    Permission(verbs=("get",), resource="endpoints", commands=("gpu-preflight",),
               why="a multi-node preflight reports which of its Pods the headless Service "
                   "resolved when a rank does not join"),
    Permission(verbs=("create", "get", "list", "watch", "delete"), resource="jobs",
               group="batch", commands=("gpu-preflight",),
               why="a multi-node preflight is one Indexed Job (or one Job per index where the "
                   "server lacks Indexed Jobs, found by a dry-run create)"),
    Permission(verbs=("get",), resource="persistentvolumeclaims", commands=_GPU,
               why="the model volume's claim: which volume it is bound to, so the node check "
                   "can say whether the node may mount it"),
    Permission(verbs=("get", "list"), resource="nodes", cluster=True, commands=_GPU,
               why="labels, taints, readiness and allocatable GPUs of the nodes a GPU Pod may "
                   "land on, judged before submission"),
    Permission(verbs=("list",), resource="pods", cluster=True, commands=_GPU,
               why="the GPUs already requested on a node by Pods of every namespace: free GPUs "
                   "cannot be counted from one namespace"),
    Permission(verbs=("list",), resource="priorityclasses", group="scheduling.k8s.io",
               cluster=True, commands=_GPU,
               why="what the Priority admission plugin will compute for the Pod (its "
                   "403 on preemptionPolicy Never), predicted before submission"),
    Permission(verbs=("get",), resource="persistentvolumes", cluster=True, commands=_GPU,
               why="the model volume's node affinity: whether the chosen node can mount it"),
    Permission(verbs=("get",), resource="csinodes", group="storage.k8s.io", cluster=True,
               commands=_GPU,
               why="whether a storage driver a volume needs is registered on the node"),
)


def needed(command: str, namespace: str) -> list[Access]:
    """Every `verb resource` `command` will use in `namespace`, as access reviews."""
    if command not in COMMANDS:
        raise InvalidInput(f"unknown cluster command {command!r}; one of {', '.join(COMMANDS)}")
    out = []
    for row in PERMISSIONS:
        if command not in row.commands:
            continue
        for verb in row.verbs:
            out.append(Access(verb=verb, resource=row.resource, group=row.group,
                              subresource=row.subresource,
                              namespace=None if row.cluster else namespace,
                              name=namespace if row.resource == "namespaces" else ""))
    return out


def grant_command(namespace: str, service_account: str = SERVICE_ACCOUNT) -> str:
    account = f" --service-account {service_account}" \
        if service_account != SERVICE_ACCOUNT else ""
    return f"imagekit cluster rbac --namespace {namespace}{account} | kubectl apply -f -"


def _rules(rows: list[Permission], namespace: str = "") -> list[dict]:
    rules: list[dict] = []
    for row in rows:
        rule: dict = {"apiGroups": [row.group], "resources": [row.rule_resource],
                      "verbs": list(row.verbs)}
        if row.resource == "namespaces":   # its own namespace only, read by name
            rules.append({**rule, "resourceNames": [namespace]})
            continue
        same = next((r for r in rules if r["apiGroups"] == rule["apiGroups"]
                     and r["verbs"] == rule["verbs"] and "resourceNames" not in r), None)
        if same is not None:
            same["resources"].append(row.rule_resource)
        else:
            rules.append(rule)
    return rules


def rbac_objects(namespace: str, *, service_account: str = SERVICE_ACCOUNT,
                 commands: tuple[str, ...] = COMMANDS, pod_security: str | None = "restricted",
                 with_namespace: bool = True) -> list[dict]:
    """The Namespace (labelled with `pod_security`, unless None), ServiceAccount, Role and
    RoleBinding in `namespace`, and the read-only ClusterRole and its binding where `commands`
    read cluster-scoped objects: exactly `PERMISSIONS` for those commands."""
    dns_label(namespace, "--namespace")
    dns_label(service_account, "--service-account")
    if pod_security is not None and pod_security not in LEVELS:
        raise InvalidInput(f"--pod-security must be one of {', '.join(LEVELS)}",
                           where=pod_security)
    for command in commands:
        if command not in COMMANDS:
            raise InvalidInput(f"--command must be one of {', '.join(COMMANDS)}", where=command)
    rows = [r for r in PERMISSIONS if set(r.commands) & set(commands)]
    name = f"imagekit-{service_account}" if service_account != SERVICE_ACCOUNT else "imagekit"
    labels = {"app.kubernetes.io/managed-by": "imagekit"}
    subject = [{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}]
    objects: list[dict] = []
    if with_namespace:
        ns_labels = dict(labels)
        if pod_security is not None:
            ns_labels[ENFORCE_LABEL] = pod_security
        objects.append({"apiVersion": "v1", "kind": "Namespace",
                        "metadata": {"name": namespace, "labels": ns_labels}})
    objects += [
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": service_account, "namespace": namespace, "labels": labels}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": name, "namespace": namespace, "labels": labels},
         "rules": _rules([r for r in rows if not r.cluster], namespace)},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": name, "namespace": namespace, "labels": labels},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
         "subjects": subject},
    ]
    cluster_rows = [r for r in rows if r.cluster]
    if cluster_rows:
        # one ClusterRole per namespace's account: deleting one binding never takes another
        # namespace's reads away
        cluster_name = f"imagekit-read-{namespace}-{service_account}"
        objects += [
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
             "metadata": {"name": cluster_name, "labels": labels},
             "rules": _rules(cluster_rows)},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
             "metadata": {"name": cluster_name, "labels": labels},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                         "name": cluster_name},
             "subjects": subject},
        ]
    return objects


def rbac_yaml(objects: list[dict]) -> str:
    """The objects as one multi-document YAML stream for `kubectl apply -f -`."""
    import yaml

    return "".join("---\n" + yaml.safe_dump(obj, sort_keys=False) for obj in objects)


def reference_table() -> str:
    """The markdown table of docs/reference/rbac.md: verb, resource, scope, commands, why."""
    lines = ["| verbs | resource | scope | commands | why |", "|---|---|---|---|---|"]
    for row in PERMISSIONS:
        resource = f"{row.rule_resource}" + (f" ({row.group})" if row.group else "")
        scope = "cluster (read-only ClusterRole)" if row.cluster else "namespace (Role)"
        lines.append(f"| {', '.join(row.verbs)} | {resource} | {scope} | "
                     f"{', '.join(row.commands)} | {row.why} |")
    return "\n".join(lines) + "\n"
