"""What a cluster command really asks of the API server, recorded where every request of the
transport goes out: the httpx clients `Kube._new_client` makes (the pooled one, the one a
request is sent again on, and each watch's and log stream's own) get one more request hook.

Each request is named as the API server's authorizer names it, so that it can be held against
RBAC rules. The Python kubernetes client has no function for this (the server's is Go:
k8s.io/apiserver/pkg/endpoints/request/requestinfo.go, `RequestInfoFactory.NewRequestInfo`);
`request_info` follows that function step by step.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from urllib.parse import parse_qs

import httpx

from imagekit.cluster.permissions import NOT_GRANTED, OPEN_TO_EVERY_USER, Use
from imagekit.kube import Kube

API_PREFIXES = ("api", "apis")
GROUPLESS_PREFIXES = ("api",)
#: /{verb}/... forms (deprecated, still parsed); proxy takes no subresource
SPECIAL_VERBS = ("proxy", "watch")
#: subresources of a namespace itself: /api/v1/namespaces/{name}/status
NAMESPACE_SUBRESOURCES = ("status", "finalize")
METHOD_VERBS = {"POST": "create", "GET": "get", "HEAD": "get", "PUT": "update",
                "PATCH": "patch", "DELETE": "delete"}


@dataclass(frozen=True)
class RequestInfo:
    """The attributes RBAC judges a request by (a non-resource request: `path` and verb)."""

    verb: str
    resource_request: bool
    path: str
    group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""


def request_info(method: str, path: str, query: str = "") -> RequestInfo:
    """`method path?query` as the API server's RequestInfoFactory reads it."""
    parts = [p for p in path.strip("/").split("/") if p]
    verb = METHOD_VERBS.get(method.upper(), "")
    non_resource = RequestInfo(verb=method.lower(), resource_request=False, path=path)
    if len(parts) < 3 or parts[0] not in API_PREFIXES:
        return non_resource
    prefix, parts = parts[0], parts[1:]
    group = ""
    if prefix not in GROUPLESS_PREFIXES:
        if len(parts) < 3:
            return non_resource
        group, parts = parts[0], parts[1:]
    parts = parts[1:]           # the version
    if parts[0] in SPECIAL_VERBS:
        verb, parts = parts[0], parts[1:]
    namespace = ""
    if parts[0] == "namespaces" and len(parts) > 1:
        namespace = parts[1]
        if len(parts) > 2 and parts[2] not in NAMESPACE_SUBRESOURCES:
            parts = parts[2:]
    resource, name, subresource = parts[0], "", ""
    if len(parts) >= 2:
        name = parts[1]
    if len(parts) >= 3 and verb != "proxy":
        subresource = parts[2]
    params = parse_qs(query)
    if not name and verb == "get":
        verb = "watch" if params.get("watch", [""])[0] in ("true", "1") else "list"
        # a list or watch of one object by field selector names it (resourceNames apply)
        selector = params.get("fieldSelector", [""])[0]
        if selector.startswith("metadata.name=") and "," not in selector:
            name = selector.removeprefix("metadata.name=")
    if not name and verb == "delete":
        verb = "deletecollection"
    return RequestInfo(verb=verb, resource_request=True, path=path, group=group,
                       resource=resource, subresource=subresource, namespace=namespace,
                       name=name)


def use_of(info: RequestInfo, namespace: str) -> Use:
    """The request as a `Use` of a command that runs in `namespace`: its own namespace, the
    cluster (a cluster-scoped object, or every namespace), or another named namespace."""
    scope = "namespace" if info.namespace == namespace else \
        "cluster" if not info.namespace else info.namespace
    return Use(verb=info.verb, resource=info.resource, group=info.group,
               subresource=info.subresource, scope=scope)


@dataclass
class Recorder:
    """Every request sent while recording, in order."""

    requests: list[RequestInfo] = field(default_factory=list)

    def hook(self, request: httpx.Request) -> None:
        self.requests.append(request_info(request.method, request.url.path,
                                          request.url.query.decode()))

    def uses(self, namespace: str) -> set[Use]:
        """The resource requests, as uses of a command run in `namespace`."""
        return {use_of(r, namespace) for r in self.requests if r.resource_request}

    def non_resource_paths(self) -> set[str]:
        return {r.path for r in self.requests if not r.resource_request}

    def clear(self) -> None:
        self.requests.clear()


@contextmanager
def recording(transport: httpx.BaseTransport | None = None) -> Iterator[Recorder]:
    """Record every request of every `Kube` made while inside (its other connections too).
    `transport`: a fake API server the requests go to instead of the network."""
    recorder = Recorder()
    make = Kube._new_client

    def recording_client(self: Kube) -> httpx.Client:
        client = make(self)
        client.event_hooks = {**client.event_hooks,
                              "request": [*client.event_hooks.get("request", []),
                                          recorder.hook]}
        if transport is not None:
            client._transport = transport   # httpx has no setter; the client is not sent yet
        return client

    Kube._new_client = recording_client  # type: ignore[method-assign]
    try:
        yield recorder
    finally:
        Kube._new_client = make  # type: ignore[method-assign]

def role_grants(objects: list[dict]) -> set[Use]:
    """Every verb on every resource the Role (scope "namespace") and ClusterRole ("cluster")
    among `cluster rbac`'s objects grant, one `Use` each."""
    granted: set[Use] = set()
    for obj in objects:
        if obj["kind"] not in ("Role", "ClusterRole"):
            continue
        scope = "namespace" if obj["kind"] == "Role" else "cluster"
        for rule in obj["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    plural, _, subresource = resource.partition("/")
                    granted |= {Use(verb=verb, resource=plural, group=group,
                                    subresource=subresource, scope=scope)
                                for verb in rule["verbs"]}
    return granted


def compare(sent: dict[str, set[Use]], granted: set[Use]) -> list[str]:
    """What keeps the Role from being exactly what the commands send: a use a command sends
    that the Role lacks, and a grant no command sends. `NOT_GRANTED` and `OPEN_TO_EVERY_USER`
    are not the Role's to grant."""
    findings = []
    needed: set[Use] = set()
    for command, used in sent.items():
        for use in sorted(used - set(NOT_GRANTED) - OPEN_TO_EVERY_USER, key=str):
            needed.add(use)
            if use not in granted:
                findings.append(f"cluster {command} sends {use}, which the Role lacks")
    for use in sorted(granted - needed, key=str):
        findings.append(f"the Role grants {use}, which no command sends")
    return findings
