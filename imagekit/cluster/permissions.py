"""What each cluster command sends to the API server, verb by verb, and the RBAC objects that
grant exactly that (`imagekit cluster rbac`).

`USES` is declared per command and is what the command was recorded sending, not what it was
thought to need: tests/cluster/test_rbac_use_real.py runs every cluster command on the local
cluster under a transport that names each request as the API server's authorizer does, and
fails when a command sends something its entry lacks or its entry holds something it never
sent. Everything else is derived from it: the Role and ClusterRole `cluster rbac` prints, the
access reviews each command asks before its first create (`imagekit.kube.access`), doctor's
RBAC check, and the table of docs/reference/rbac.md (`PERMISSIONS`, with `WHY` per resource).

Namespaced uses go into a Role in the run's namespace; reads of what is cluster-scoped (nodes,
PriorityClasses, PersistentVolumes, CSINodes) and of the Pods of every namespace (free GPUs)
into a read-only ClusterRole. What `NOT_GRANTED` names is sent only by an administrator's
credential or tolerated when refused, and is never granted.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from imagekit.errors import InvalidInput
from imagekit.inputs import dns_label
from imagekit.kube.access import Access

#: the cluster commands that run with the operator's credentials (`imagekit cluster <name>`)
COMMANDS = ("probe", "gpu-preflight", "accept", "precheck", "recreate")
#: the administrator's own (`cluster model-volume`): recorded too, granted by no Role
ADMIN_COMMANDS = ("model-volume",)
SERVICE_ACCOUNT = "imagekit"
#: the labels Pod Security admission reads on a namespace (1.23+)
ENFORCE_LABEL = "pod-security.kubernetes.io/enforce"
LEVELS = ("privileged", "baseline", "restricted")


class Use(BaseModel):
    """One verb on one resource in one scope, as the API server's authorizer names a request
    (`verb`, API group, resource, subresource, and the namespace it is in)."""

    model_config = ConfigDict(frozen=True)

    verb: str
    resource: str
    group: str = ""
    subresource: str = ""
    #: "namespace": the run's own namespace (the Role); "cluster": a cluster-scoped object or
    #: every namespace at once (the read-only ClusterRole); else one other namespace, by name
    scope: str = "namespace"

    @property
    def resource_name(self) -> str:
        """`pods/log`, `jobs.batch`: how kubectl and RBAC rules spell it."""
        plural = f"{self.resource}.{self.group}" if self.group else self.resource
        return f"{plural}/{self.subresource}" if self.subresource else plural

    @property
    def rule_resource(self) -> str:
        """`pods/log`: how an RBAC rule's `resources` names it (the group apart)."""
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource

    def __str__(self) -> str:
        where = {"namespace": "", "cluster": " (cluster-wide)"}.get(
            self.scope, f" in namespace {self.scope}")
        return f"{self.verb} {self.resource_name}{where}"


def uses(verbs: str, resource: str, scope: str = "namespace") -> frozenset[Use]:
    """`uses("create,delete", "jobs.batch")`: one `Use` per verb, `resource` spelt as kubectl
    spells it (`plural[.group][/subresource]`)."""
    name, _, subresource = resource.partition("/")
    plural, _, group = name.partition(".")
    return frozenset(Use(verb=verb, resource=plural, group=group, subresource=subresource,
                         scope=scope) for verb in verbs.split(","))


_NAMESPACE = uses("get", "namespaces")
_POD_RUN = (uses("create,get,list,watch,delete", "pods") | uses("get", "pods/log")
            | uses("create,delete", "configmaps") | uses("create,delete", "secrets"))
_NODE_CHECKS = (uses("list", "nodes", "cluster") | uses("list", "pods", "cluster")
                | uses("list", "priorityclasses.scheduling.k8s.io", "cluster"))
_MODEL_CLAIM = uses("get", "persistentvolumeclaims") | uses("get", "persistentvolumes", "cluster")
_STORAGE_DRIVER = uses("get", "csinodes.storage.k8s.io", "cluster")

#: What every authenticated user may send (the built-in system:basic-user ClusterRole), so no
#: Role grants it: the access reviews a command asks before anything else. The discovery GETs
#: (/api/v1, /apis/<group>/<version>, /version) are non-resource requests, open to every user
#: through system:discovery.
OPEN_TO_EVERY_USER: frozenset[Use] = uses(
    "create", "selfsubjectaccessreviews.authorization.k8s.io", "cluster")


def read_back(used: frozenset[Use]) -> frozenset[Use]:
    """The `get` of each kind `used` creates: a create sent again over a connection closed
    under it, answered 409 (the first one landed), reads the object back (`Kube.create`)."""
    return frozenset(u.model_copy(update={"verb": "get"}) for u in used
                     if u.verb == "create" and u not in OPEN_TO_EVERY_USER)


#: What each command was recorded sending (tests/cluster/test_rbac_use_real.py says with which
#: options), with the read-back of what it creates; the discovery GETs and the access reviews
#: every credential may send are apart (`OPEN_TO_EVERY_USER`).
_SENT: dict[str, frozenset[Use]] = {
    "probe": _NAMESPACE | _POD_RUN | uses("list", "events"),
    "precheck": _NAMESPACE | _NODE_CHECKS | _MODEL_CLAIM | _STORAGE_DRIVER,
    "gpu-preflight": (
        _NAMESPACE | _POD_RUN | _NODE_CHECKS | _STORAGE_DRIVER
        | uses("create,delete", "services") | uses("get", "endpoints")
        | uses("create,get,delete", "jobs.batch")
        | uses("get", "services", "kube-system")
        | uses("get,patch", "nodes", "cluster")),
    "accept": (_NAMESPACE | _POD_RUN | uses("list", "events") | _NODE_CHECKS | _MODEL_CLAIM
               | uses("create,delete", "services")),
    "recreate": _NAMESPACE | uses("create,get,list,watch,delete", "pods"),
    "model-volume": (
        _NAMESPACE | uses("list", "serviceaccounts") | uses("patch", "nodes", "cluster")
        | uses("create,get,list,watch,delete", "persistentvolumeclaims")
        | uses("create,get,list,watch,delete", "persistentvolumes", "cluster")),
}

USES: dict[str, frozenset[Use]] = {c: u | read_back(u) for c, u in _SENT.items()}

#: Sent, and never granted: why each is left to an administrator or may be refused.
NOT_GRANTED: dict[Use, str] = {
    **dict.fromkeys(uses("get,patch", "nodes", "cluster"),
                    "gpu-preflight --cordon-failed/--taint-failed marks a node whose preflight "
                    "failed, and model-volume --label-node labels one: an administrator's, "
                    "asked by access review only when the option is given"),
    **dict.fromkeys(uses("get", "services", "kube-system"),
                    "gpu-preflight --nodes looks for the cluster DNS Service; refused, the "
                    "rendezvous goes by the Service's ClusterIP, which needs no DNS"),
    **dict.fromkeys(uses("list", "serviceaccounts"),
                    "model-volume waits for the namespace's default ServiceAccount (it may "
                    "have just created the namespace): an administrator's command"),
    **dict.fromkeys(uses("create,list,watch,delete", "persistentvolumeclaims")
                    | uses("create,list,watch,delete", "persistentvolumes", "cluster"),
                    "the model volume (`cluster model-volume`) is made and removed once by an "
                    "administrator"),
}

#: Why each granted resource is needed: the reference page's words, one row each.
WHY: dict[tuple[str, str], str] = {
    ("namespaces", "namespace"):
        "read the run's namespace (its own only, by name): that it exists, and its Pod "
        "Security level (the pod-security.kubernetes.io/enforce label) before a Pod is rendered",
    ("pods", "namespace"):
        "the probe, preflight, engine and controller Pods: created pinned by digest, watched "
        "until they end (list+watch from a resourceVersion), deleted by uid at cleanup",
    ("pods/log", "namespace"):
        "the probes' framed output, the preflight's record and the engine's start phases are "
        "read from the containers' logs",
    ("events", "namespace"):
        "a probe or engine Pod that does not start is explained by its events (FailedMount, "
        "ErrImagePull, FailedScheduling) in the evidence",
    ("configmaps", "namespace"):
        "the probes, the preflight package and the controller's scripts travel in a ConfigMap "
        "of the run's own, deleted with it (read back only when a create sent again over a "
        "dropped connection answers 409)",
    ("secrets", "namespace"):
        "the run's own image pull Secret for a registry that needs credentials, deleted with "
        "the run (read back as a ConfigMap is)",
    ("services", "namespace"):
        "the engine's Service (accept) and the multi-node preflight's headless and rendezvous "
        "Services, deleted with the run (read back as a ConfigMap is)",
    ("endpoints", "namespace"):
        "a multi-node preflight reports which of its Pods the headless Service resolved when a "
        "rank does not join",
    ("jobs.batch", "namespace"):
        "a multi-node preflight is one Indexed Job (or one Job per index where the server "
        "lacks Indexed Jobs, found by a dry-run create); its Pods are watched, not the Job",
    ("persistentvolumeclaims", "namespace"):
        "the model volume's claim: which volume it is bound to, so the node check can say "
        "whether the node may mount it",
    ("nodes", "cluster"):
        "labels, taints, readiness and allocatable GPUs of the nodes a GPU Pod may land on, "
        "judged before submission",
    ("pods", "cluster"):
        "the GPUs already requested on a node by Pods of every namespace: free GPUs cannot be "
        "counted from one namespace",
    ("priorityclasses.scheduling.k8s.io", "cluster"):
        "what the Priority admission plugin will compute for the Pod (its 403 on "
        "preemptionPolicy Never), predicted before submission",
    ("persistentvolumes", "cluster"):
        "the model volume's node affinity: whether the chosen node can mount it",
    ("csinodes.storage.k8s.io", "cluster"):
        "whether a storage driver a volume needs (--storage-driver) is registered on the node",
}


def granted(command: str) -> frozenset[Use]:
    """What the Role and ClusterRole grant for `command`: its uses but `NOT_GRANTED`."""
    return frozenset(u for u in USES[command] if u not in NOT_GRANTED)


class Permission(BaseModel):
    """One row of the reference table: the verbs on one resource the commands are granted,
    the commands that use it, and why."""

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


#: the RBAC verbs in the order rules and the table list them
VERB_ORDER = ("create", "get", "list", "watch", "update", "patch", "delete", "deletecollection")


def _rows(commands: tuple[str, ...]) -> list[Permission]:
    rows = []
    for (name, scope), why in WHY.items():
        found = {(c, u) for c in commands for u in granted(c)
                 if u.resource_name == name and u.scope == scope}
        if not found:
            continue
        verbs = {u.verb for _, u in found}
        use = next(iter(found))[1]
        rows.append(Permission(
            verbs=tuple(v for v in VERB_ORDER if v in verbs), resource=use.resource,
            group=use.group, subresource=use.subresource, cluster=scope == "cluster",
            commands=tuple(c for c in commands if any(c == d for d, _ in found)), why=why))
    return rows


#: the reference table's rows: every granted use of the operator's commands, by resource
PERMISSIONS: tuple[Permission, ...] = tuple(_rows(COMMANDS))


def needed(command: str, namespace: str) -> list[Access]:
    """Every granted `verb resource` `command` uses in `namespace`, as access reviews."""
    if command not in COMMANDS:
        raise InvalidInput(f"unknown cluster command {command!r}; one of {', '.join(COMMANDS)}")
    return [Access(verb=use.verb, resource=use.resource, group=use.group,
                   subresource=use.subresource,
                   namespace=None if use.scope == "cluster" else namespace,
                   name=namespace if use.resource == "namespaces" else "")
            for row in PERMISSIONS for use in sorted(
                granted(command), key=lambda u: VERB_ORDER.index(u.verb))
            if (use.resource, use.group, use.subresource, use.scope == "cluster")
            == (row.resource, row.group, row.subresource, row.cluster)]


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
    read cluster-scoped objects: exactly the granted `USES` of those commands."""
    dns_label(namespace, "--namespace")
    dns_label(service_account, "--service-account")
    if pod_security is not None and pod_security not in LEVELS:
        raise InvalidInput(f"--pod-security must be one of {', '.join(LEVELS)}",
                           where=pod_security)
    for command in commands:
        if command not in COMMANDS:
            raise InvalidInput(f"--command must be one of {', '.join(COMMANDS)}", where=command)
    rows = _rows(tuple(commands))
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
