"""An in-memory stand-in for the API server's reads, behind the real transport's `Resource`
and `Discovery` (so the paths unit tests exercise are the ones discovery builds): only for
unit tests of a flow's wording; the real cluster cases are in the *_real.py files."""

from __future__ import annotations

from typing import Any

from imagekit.errors import NotFound
from imagekit.kube import Kube
from imagekit.kube.discovery import Discovery

#: APIResourceLists as a 1.20 server answers them (the parts discovery reads)
RESOURCE_LISTS: dict[str, dict] = {
    "/api/v1": {"kind": "APIResourceList", "groupVersion": "v1", "resources": [
        {"name": n, "kind": k, "namespaced": ns, "verbs": ["get", "list", "watch"]}
        for n, k, ns in [("pods", "Pod", True), ("pods/log", "Pod", True),
                         ("pods/status", "Pod", True), ("nodes", "Node", False),
                         ("namespaces", "Namespace", False), ("configmaps", "ConfigMap", True),
                         ("secrets", "Secret", True), ("services", "Service", True),
                         ("endpoints", "Endpoints", True), ("events", "Event", True),
                         ("serviceaccounts", "ServiceAccount", True),
                         ("persistentvolumes", "PersistentVolume", False),
                         ("persistentvolumeclaims", "PersistentVolumeClaim", True)]]},
    "/apis/batch/v1": {"kind": "APIResourceList", "groupVersion": "batch/v1", "resources": [
        {"name": "jobs", "kind": "Job", "namespaced": True},
        {"name": "jobs/status", "kind": "Job", "namespaced": True}]},
    "/apis/scheduling.k8s.io/v1": {"kind": "APIResourceList", "resources": [
        {"name": "priorityclasses", "kind": "PriorityClass", "namespaced": False}]},
    "/apis/storage.k8s.io/v1": {"kind": "APIResourceList", "resources": [
        {"name": "csinodes", "kind": "CSINode", "namespaced": False}]},
}
PLURALS = {r["name"] for body in RESOURCE_LISTS.values() for r in body["resources"]}


class FakeKube(Kube):
    """`objects`: path → an object (GET) or a list of objects (the collection). Any other
    collection is empty; any other object answers 404."""

    def __init__(self, objects: dict[str, Any] | None = None) -> None:  # no kubeconfig
        self.objects = dict(objects or {})
        self.calls: list[tuple[str, str]] = []
        self.discovery = Discovery(lambda path: self.call("GET", path))
        self._created = {}

    def call(self, method: str, path: str, body: Any = None, query: dict | None = None,
             where: str | None = None) -> dict:
        self.calls.append((method, path))
        if path in RESOURCE_LISTS:
            return RESOURCE_LISTS[path]
        value = self.objects.get(path)
        if isinstance(value, list):
            return {"items": value, "metadata": {"resourceVersion": "1"}}
        if value is not None:
            return value
        if path.rsplit("/", 1)[-1] in PLURALS:
            return {"items": [], "metadata": {"resourceVersion": "1"}}
        raise NotFound("not found", where=path)
