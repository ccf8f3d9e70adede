"""Before a cluster command creates anything: may it, and would its Pods be admitted?

Three questions, asked in this order, each answered by the API server or by the namespace
itself, never guessed:

1. every `verb resource` the command will use (`permissions.needed`), asked through
   SelfSubjectAccessReview — a missing one is one line naming each, and the `cluster rbac`
   command that grants them, before the first create;
2. the namespace exists (an administrator's credential may create it; a ServiceAccount's is
   told who does);
3. its `pod-security.kubernetes.io/enforce` level admits every Pod the command will submit
   (`podsecurity`), judged on the rendered Pods.

A 403 that still comes later (a policy no review can see, such as an admission webhook) is
the transport's `AdmissionRefused`, naming the verb, the resource and the server's message;
the flows' cleanup runs as for any other error.
"""

from __future__ import annotations

from imagekit.cluster import permissions, podsecurity
from imagekit.errors import InvalidInput, NotFound
from imagekit.kube import Kube
from imagekit.kube.access import Access, missing
from imagekit.results import CheckResult, Status

NAMESPACE_CREATE = Access(verb="create", resource="namespaces")


class MissingPermissions(InvalidInput):
    """The credential lacks permissions the command needs (exit 2: nothing was created)."""


def _say(absent: list[Access], namespace: str) -> str:
    local = [f"{a.verb} {a.resource_name}" for a in absent if a.namespace]
    cluster = [f"{a.verb} {a.resource_name}" for a in absent if not a.namespace]
    parts = []
    if local:
        parts.append(f"{', '.join(local)} in namespace {namespace}")
    if cluster:
        parts.append(f"{', '.join(cluster)} cluster-wide")
    return " and ".join(parts)


def check_permissions(kube: Kube, command: str, namespace: str,
                      extra: list[Access] | None = None) -> None:
    """Refuse, in one line, when the server says any permission of `command` (and `extra`,
    what an option adds) is missing."""
    absent = missing(kube, permissions.needed(command, namespace) + list(extra or []))
    if absent:
        user = getattr(kube, "user", "") or ""
        who = f" as {user}" if user else ""
        # a ServiceAccount's own name goes into the command that grants it
        account = user.split(":")[3] if user.startswith("system:serviceaccount:") and \
            user.count(":") == 3 else permissions.SERVICE_ACCOUNT
        raise MissingPermissions(
            f"cluster {command}{who} may not {_say(absent, namespace)}; nothing was created. "
            f"Grant them with: {permissions.grant_command(namespace, account)}")


def namespace_level(kube: Kube, namespace: str) -> str:
    """The namespace's enforced Pod Security level ("privileged" without the label). A
    missing namespace is created where the credential may (an administrator's), else named."""
    from imagekit.cluster.probe import ensure_namespace

    found = kube.resource("Namespace").maybe_get(namespace)
    if found is None:
        if missing(kube, [NAMESPACE_CREATE]):
            raise InvalidInput(f"namespace {namespace} does not exist; an administrator "
                               f"creates it with: {permissions.grant_command(namespace)}")
        ensure_namespace(kube, namespace)
        found = kube.resource("Namespace").get(namespace)
    labels = (found.get("metadata") or {}).get("labels") or {}
    return podsecurity.level(labels.get(permissions.ENFORCE_LABEL), f"namespace {namespace}")


def prepare(kube: Kube, command: str, namespace: str, pods: list[dict] | None = None, *,
            extra: list[Access] | None = None) -> str:
    """Permissions, namespace and Pod Security, in that order, before anything is created;
    returns the namespace's level (for Pods rendered later, `podsecurity.require`)."""
    check_permissions(kube, command, namespace, extra)
    enforce = namespace_level(kube, namespace)
    podsecurity.require(pods or [], enforce, namespace)
    return enforce


def pod_security_check(kube: Kube, pod: dict, namespace: str) -> CheckResult:
    """`cluster precheck`'s finding for a Pod file: the level its namespace enforces, and the
    first field that breaks it."""
    found = kube.resource("Namespace").maybe_get(namespace)
    if found is None:
        raise NotFound(f"namespace {namespace} does not exist", where=namespace)
    labels = (found.get("metadata") or {}).get("labels") or {}
    enforce = podsecurity.level(labels.get(permissions.ENFORCE_LABEL), f"namespace {namespace}")
    broken = podsecurity.violations(pod, enforce)
    data = {"enforce": enforce, "meets": podsecurity.meets(pod),
            "broken_controls": list(dict.fromkeys(v.control for v in broken))}
    if broken:
        return CheckResult(name="pod_security", status=Status.FAIL, data=data,
                           detail=f"namespace {namespace} enforces {enforce!r}: "
                                  + "; ".join(f"{v.field} {v.rule} [{v.control}]"
                                              for v in broken))
    return CheckResult(name="pod_security", status=Status.PASS, data=data,
                       detail=f"namespace {namespace} enforces {enforce!r}; the Pod meets "
                              f"{data['meets']!r}")
