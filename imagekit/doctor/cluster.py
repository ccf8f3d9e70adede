"""The cluster and its RBAC, asked the way the cluster commands ask before they create anything.

The cluster check connects as those commands do (the same kubeconfig or in-cluster
ServiceAccount), reads the server's version and asks one access review: the version alone may
be answered to anyone, the review only to a credential the server accepts. The RBAC check asks
a SelfSubjectAccessReview for every row of `imagekit.cluster.permissions` — the one table
`cluster rbac` prints and each command's pre-flight asks — so "doctor passes" and "the commands'
own pre-flight passes" cannot disagree.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from imagekit.doctor.models import Part
from imagekit.errors import ImagekitError
from imagekit.results import CheckResult, Status

if TYPE_CHECKING:
    from imagekit.kube import Kube
    from imagekit.kube.access import Access, Answer
    from imagekit.kube.incluster import InCluster


def wanted(namespace: str) -> list[Access]:
    """Every permission of every cluster command in `namespace`, each once, in table order."""
    from imagekit.cluster import permissions

    seen: dict[Access, None] = {}
    for command in permissions.COMMANDS:
        for access in permissions.needed(command, namespace):
            seen.setdefault(access)
    return list(seen)


def _where(source: Path | InCluster) -> str:
    if isinstance(source, Path):
        return f"kubeconfig {source}"
    return f"in-cluster ServiceAccount ({source.folder})"


def _missing_line(absent: list[Access], namespace: str) -> str:
    """`create pods, get pods/log in namespace X; list nodes cluster-wide`."""
    local = [f"{a.verb} {a.resource_name}" for a in absent if a.namespace]
    cluster = [f"{a.verb} {a.resource_name}" for a in absent if not a.namespace]
    parts = []
    if local:
        parts.append(f"{', '.join(local)} in namespace {namespace}")
    if cluster:
        parts.append(f"{', '.join(cluster)} cluster-wide")
    return "; ".join(parts)


def rbac_result(answers: list[Answer], namespace: str, user: str) -> CheckResult:
    """PASS when every permission is allowed; else FAIL naming each missing one, the commands
    that would refuse to start, and the command that grants them."""
    from imagekit.cluster import permissions

    name = Part.RBAC.value
    absent = [a.access for a in answers if not a.allowed]
    who = f" as {user}" if user else ""
    if not absent:
        return CheckResult(name=name, status=Status.PASS,
                           data={"namespace": namespace, "asked": len(answers)},
                           detail=f"all {len(answers)} permissions of the cluster commands "
                                  f"allowed{who} in namespace {namespace}")
    refused = [command for command in permissions.COMMANDS
               if set(permissions.needed(command, namespace)) & set(absent)]
    account = user.split(":")[3] if user.startswith("system:serviceaccount:") and \
        user.count(":") == 3 else permissions.SERVICE_ACCOUNT
    return CheckResult(
        name=name, status=Status.FAIL,
        data={"namespace": namespace, "asked": len(answers),
              "missing": [str(a) for a in absent], "commands_refused": refused},
        detail=f"{len(absent)} of {len(answers)} permissions missing{who}: "
               f"{_missing_line(absent, namespace)} (refused: cluster "
               f"{', '.join(refused)}); grant them with: "
               f"{permissions.grant_command(namespace, account)}")


def identity(kube: Kube) -> str:
    """Who the server will judge: a bearer token's own subject where it is a JWT (a
    ServiceAccount token says system:serviceaccount:NS:NAME, whatever the kubeconfig calls
    its user entry), else the kubeconfig's user name."""
    from imagekit.kube.incluster import token_subject

    header = kube.credentials.current().header or ""
    subject = token_subject(header.removeprefix("Bearer ")) if header.startswith("Bearer ") \
        else None
    return subject or getattr(kube, "user", "") or ""


def check_cluster(source: Path | InCluster | None, missing: str, namespace: str,
                  record: Callable[[CheckResult], None], *, rbac: bool,
                  required: bool = True) -> None:
    """Record the cluster check, then (with `rbac`) the RBAC check. Where the cluster cannot
    be used, the RBAC check is DEFERRED: it cannot be judged, and is never a pass. No
    credentials at all FAIL a role that needs the cluster (`required`); without a role they
    leave the cluster not judged (this machine may be a CI runner)."""
    from imagekit.kube import AdmissionRefused, Kube
    from imagekit.kube.access import review

    def rbac_deferred(why: str) -> None:
        if rbac:
            record(CheckResult(name=Part.RBAC.value, status=Status.DEFERRED,
                               detail=f"not judged: {why}"))

    name = Part.CLUSTER.value
    if source is None:
        if required:
            record(CheckResult(name=name, status=Status.FAIL, detail=missing))
        else:
            record(CheckResult(name=name, status=Status.DEFERRED,
                               detail=f"not judged: {missing} (--role operator requires them)"))
        rbac_deferred("no cluster credentials")
        return
    where = _where(source)
    asked = wanted(namespace)
    try:
        with Kube(source) as kube:
            version = kube.version().get("gitVersion", "version unknown")
            user = identity(kube)
            try:   # a review is answered only to a credential the server accepts (401 else)
                answers: list[Answer] | None = review(kube, asked[:1])
                refusal = ""
            except AdmissionRefused as exc:   # accepted, but may not ask: a finding of RBAC
                answers, refusal = None, exc.message
            record(CheckResult(name=name, status=Status.PASS,
                               data={"server": kube.host, "version": version, "user": user},
                               detail=f"{kube.host} (Kubernetes {version})"
                                      f"{' as ' + user if user else ''}, from {where}"))
            if not rbac:
                return
            if answers is None:
                record(CheckResult(name=Part.RBAC.value, status=Status.FAIL,
                                   detail=f"the server refuses access reviews ({refusal}); "
                                          "every cluster command asks them before it starts"))
                return
            record(rbac_result(answers + review(kube, asked[1:]), namespace, user))
    except ImagekitError as exc:
        record(CheckResult(name=name, status=Status.FAIL, detail=f"{exc.message} ({where})"))
        rbac_deferred("the cluster did not answer or refused the credentials")
