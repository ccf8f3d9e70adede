"""The pieces that hold `cluster rbac`'s Role to what the commands send, without a cluster:
requests named as the API server's authorizer names them, the Role read back as uses, the
comparison that fails either way (shown failing), and the one path the real-cluster recording
cannot take (marking a failed node), recorded against a fake API server.

The commands' own recordings, on the real cluster: test_rbac_use_real.py."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from imagekit.cluster import permissions
from imagekit.cluster.permissions import NOT_GRANTED, USES, Use, read_back, uses

from .fake_api import RESOURCE_LISTS
from .recording import compare, recording, request_info, role_grants


@pytest.mark.parametrize(("method", "path", "query", "verb", "resource", "namespace", "name"), [
    ("GET", "/api/v1/namespaces/ns/pods/p", "", "get", "pods", "ns", "p"),
    ("GET", "/api/v1/namespaces/ns/pods", "labelSelector=a%3Db", "list", "pods", "ns", ""),
    ("GET", "/api/v1/namespaces/ns/pods", "watch=true&resourceVersion=7", "watch", "pods",
     "ns", ""),
    ("GET", "/api/v1/namespaces/ns/pods", "fieldSelector=metadata.name%3Dp&watch=true",
     "watch", "pods", "ns", "p"),
    ("GET", "/api/v1/pods", "fieldSelector=spec.nodeName%3Dn1", "list", "pods", "", ""),
    ("POST", "/apis/batch/v1/namespaces/ns/jobs", "dryRun=All", "create", "jobs", "ns", ""),
    ("PUT", "/api/v1/namespaces/ns/configmaps/c", "", "update", "configmaps", "ns", "c"),
    ("PATCH", "/api/v1/nodes/n1", "", "patch", "nodes", "", "n1"),
    ("DELETE", "/api/v1/namespaces/ns/pods/p", "", "delete", "pods", "ns", "p"),
    ("DELETE", "/api/v1/namespaces/ns/pods", "", "deletecollection", "pods", "ns", ""),
    # a namespace is in itself: a Role in it may grant reading it
    ("GET", "/api/v1/namespaces/ns", "", "get", "namespaces", "ns", "ns"),
    ("GET", "/api/v1/namespaces/ns/status", "", "get", "namespaces", "ns", "ns"),
    ("GET", "/api/v1/watch/namespaces/ns/pods", "", "watch", "pods", "ns", ""),
])
def test_requests_are_named_as_the_api_server_names_them(
        method, path, query, verb, resource, namespace, name) -> None:
    info = request_info(method, path, query)
    assert info.resource_request
    assert (info.verb, info.resource, info.namespace, info.name) == \
        (verb, resource, namespace, name)


@pytest.mark.parametrize(("path", "group", "resource", "subresource"), [
    ("/api/v1/namespaces/ns/pods/p/log", "", "pods", "log"),
    ("/api/v1/namespaces/ns/pods/p/exec", "", "pods", "exec"),
    ("/api/v1/namespaces/ns/pods/p/eviction", "", "pods", "eviction"),
    ("/apis/batch/v1/namespaces/ns/jobs/j/status", "batch", "jobs", "status"),
    ("/apis/storage.k8s.io/v1/csinodes/n1", "storage.k8s.io", "csinodes", ""),
])
def test_subresources_and_groups(path, group, resource, subresource) -> None:
    info = request_info("GET", path)
    assert (info.group, info.resource, info.subresource, info.verb) == \
        (group, resource, subresource, "get")


@pytest.mark.parametrize("path", ["/version", "/api", "/api/v1", "/apis",
                                  "/apis/batch/v1", "/healthz"])
def test_discovery_is_not_a_resource_request(path) -> None:
    assert not request_info("GET", path).resource_request


def _granted(namespace: str = "team-a", **kwargs) -> set[Use]:
    return role_grants(permissions.rbac_objects(namespace, **kwargs))


def test_the_printed_role_grants_exactly_the_declared_uses_of_each_command() -> None:
    for command in permissions.COMMANDS:
        assert _granted(commands=(command,)) == set(permissions.granted(command)), command
    assert compare({c: set(USES[c]) for c in permissions.COMMANDS}, _granted()) == []


def test_a_use_the_role_lacks_and_a_grant_nothing_uses_are_both_reported() -> None:
    sent = {c: set(USES[c]) for c in permissions.COMMANDS}
    granted = _granted()
    # a command that starts evicting Pods: the Role lacks it
    sent["recreate"] |= uses("create", "pods/eviction")
    # a Role that grants updating ConfigMaps (what it once did): no command sends it
    granted |= uses("update", "configmaps")
    assert compare(sent, granted) == [
        "cluster recreate sends create pods/eviction, which the Role lacks",
        "the Role grants update configmaps, which no command sends"]
    # a use the Role must not grant (an administrator's) is no finding either way
    sent["gpu-preflight"] |= uses("patch", "nodes", "cluster")
    assert "patch nodes" not in " ".join(compare(sent, granted))


def test_what_is_not_granted_is_sent_by_some_command_and_never_in_a_role() -> None:
    every = set().union(*USES.values())
    assert set(NOT_GRANTED) <= every
    assert not set(NOT_GRANTED) & _granted()
    # every granted resource has its reason on the reference page, and every reason a use
    keys = {(u.resource_name, u.scope) for c in permissions.COMMANDS
            for u in permissions.granted(c)}
    assert keys == set(permissions.WHY)
    # the cluster-wide grants only read
    assert all(u.verb in ("get", "list", "watch") for u in _granted() if u.scope == "cluster")


# ------------------------------------------------------------------- marking a failed node

def _kubeconfig(tmp_path: Path) -> Path:
    config = tmp_path / "kubeconfig"
    config.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": "https://kube.invalid"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}))
    return config


def _fake_nodes(request: httpx.Request) -> httpx.Response:
    """A 1.20 API server as far as `mark_node` asks it: discovery, one node, its patch."""
    path = request.url.path
    if path in RESOURCE_LISTS:
        return httpx.Response(200, json=RESOURCE_LISTS[path])
    if path == "/api/v1/nodes/gpu-1" and request.method in ("GET", "PATCH"):
        return httpx.Response(200, json={
            "kind": "Node", "apiVersion": "v1",
            "metadata": {"name": "gpu-1", "resourceVersion": "41"}, "spec": {}})
    return httpx.Response(404, json={"kind": "Status", "code": 404, "message": "not found"})


def test_marking_a_failed_node_sends_what_its_access_review_asks(tmp_path: Path) -> None:
    """--cordon-failed/--taint-failed on the real cluster would cordon the node every other
    test runs on, so the marking is recorded against a fake API server: `mark_node` itself,
    through the real transport."""
    from imagekit.gpu.fleet import MARKING, mark_node
    from imagekit.kube import Kube

    with recording(httpx.MockTransport(_fake_nodes)) as recorder, \
            Kube(_kubeconfig(tmp_path)) as kube:
        assert mark_node(kube, "gpu-1", cordon=True, taint=True)
    sent = recorder.uses("any")
    assert sent == uses("get,patch", "nodes", "cluster")
    assert sent <= USES["gpu-preflight"] and sent <= set(NOT_GRANTED)
    # the access review a run that may mark nodes asks first names the same two
    assert {Use(verb=a.verb, resource=a.resource, scope="cluster") for a in MARKING} == sent


@pytest.mark.parametrize(("kind", "plural"), [("ConfigMap", "configmaps"), ("Secret", "secrets"),
                                              ("Service", "services"), ("Pod", "pods")])
@pytest.mark.parametrize("landed", [True, False], ids=["stored", "lost"])
def test_a_create_with_an_unknown_outcome_reads_the_object_back(tmp_path: Path, kind, plural,
                                                               landed: bool) -> None:
    """The first POST's connection closes before the answer; the create reads the object by
    name before anything else (a `get` of the kind, which `permissions.read_back` grants every
    command that creates it): stored, it is returned and never sent again; lost, it is created
    once more."""
    posts: list[dict] = []
    stored: dict[str, dict] = {}

    def dropping(request: httpx.Request) -> httpx.Response:
        import json

        path = request.url.path
        if path in RESOURCE_LISTS:
            return httpx.Response(200, json=RESOURCE_LISTS[path])
        if request.method == "POST":
            body = json.loads(request.content)
            posts.append(body)
            if len(posts) == 1:
                if landed:
                    stored[body["metadata"]["name"]] = body
                raise httpx.RemoteProtocolError("Server disconnected without sending a response")
            stored[body["metadata"]["name"]] = body
            return httpx.Response(201, json=body)
        name = path.rsplit("/", 1)[-1]
        if name in stored:
            return httpx.Response(200, json=stored[name])
        return httpx.Response(404, json={"kind": "Status", "code": 404, "reason": "NotFound",
                                         "message": "not found"})

    from imagekit.kube import Kube

    obj = {"apiVersion": "v1", "kind": kind, "metadata": {"name": "x", "namespace": "ns"}}
    with recording(httpx.MockTransport(dropping)) as recorder, \
            Kube(_kubeconfig(tmp_path)) as kube:
        assert kube.create(obj)["metadata"]["name"] == "x"
    sent = recorder.uses("ns")
    assert sent == uses("create,get", plural) == uses("create", plural) | read_back(
        uses("create", plural))
    assert len(posts) == (1 if landed else 2)
