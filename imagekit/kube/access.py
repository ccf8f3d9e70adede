"""What the caller may do, asked of the API server before anything is created.

`kubectl auth can-i` does this with a SelfSubjectAccessReview: the server's own authorizer
(RBAC here, a webhook elsewhere) answers for the credential this connection carries, so the
answer holds for a ServiceAccount token, an exec plugin's token or a client certificate alike,
and no Role has to be read (reading Roles needs permissions of its own). One review per verb
and resource; a command asks for all of its own before its first create.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from imagekit.kube.client import Kube

REVIEW_KIND, REVIEW_API = "SelfSubjectAccessReview", "authorization.k8s.io/v1"


class Access(BaseModel):
    """One `verb resource` in one namespace (None: cluster-scoped, or every namespace)."""

    model_config = ConfigDict(frozen=True)

    verb: str
    resource: str                 # plural, as RBAC names it: "pods"
    group: str = ""               # "" is the core group
    subresource: str = ""         # "log" for pods/log
    namespace: str | None = None
    name: str = ""                # one object only (a namespace reads itself by name)

    @property
    def resource_name(self) -> str:
        """`pods/log`, `jobs.batch`: how kubectl and RBAC rules spell it."""
        plural = f"{self.resource}.{self.group}" if self.group else self.resource
        return f"{plural}/{self.subresource}" if self.subresource else plural

    def __str__(self) -> str:
        where = f" in namespace {self.namespace}" if self.namespace else " (cluster-wide)"
        return f"{self.verb} {self.resource_name}{where}"


class Answer(BaseModel):
    model_config = ConfigDict(frozen=True)

    access: Access
    allowed: bool
    reason: str = ""


def review(kube: Kube, wanted: list[Access]) -> list[Answer]:
    """The server's answer to each of `wanted`, in order (one SelfSubjectAccessReview each:
    the API has no batch form)."""
    path = kube.resource(REVIEW_KIND, REVIEW_API).path()
    answers = []
    for access in wanted:
        attributes = {"verb": access.verb, "resource": access.resource,
                      "group": access.group}
        if access.subresource:
            attributes["subresource"] = access.subresource
        if access.namespace:
            attributes["namespace"] = access.namespace
        if access.name:
            attributes["name"] = access.name
        body = {"apiVersion": REVIEW_API, "kind": REVIEW_KIND,
                "spec": {"resourceAttributes": attributes}}
        status = kube.call("POST", path, body=body, where=f"can-i {access}").get("status") \
            or {}
        answers.append(Answer(access=access, allowed=bool(status.get("allowed")),
                              reason=status.get("reason") or status.get("evaluationError")
                              or ""))
    return answers


def missing(kube: Kube, wanted: list[Access]) -> list[Access]:
    """Those of `wanted` the server says this credential may not do."""
    return [answer.access for answer in review(kube, wanted) if not answer.allowed]
