"""The transport without a cluster: discovery (kind → plural and scope, cached per run) and
waits as watches (list → watch from its resourceVersion, re-list on 410 Gone, the deadline
honoured). The same code against the real API server: test_cluster_real.py and the flows."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from imagekit.errors import InvalidInput, TransportError
from imagekit.kube import Gone, UnknownResource, WaitTimeout, WatchEvent
from imagekit.kube.client import Resource
from imagekit.kube.discovery import Discovery
from imagekit.kube.watch import observe_selection, wait_for

from .fake_api import RESOURCE_LISTS, FakeKube

# ------------------------------------------------------------------------------ discovery

def test_discovery_names_plural_and_scope_from_the_servers_lists() -> None:
    fetched: list[str] = []

    def fetch(path: str) -> dict:
        fetched.append(path)
        return RESOURCE_LISTS[path]

    discovery = Discovery(fetch)
    pod = discovery.resolve("Pod")
    assert (pod.plural, pod.namespaced) == ("pods", True)   # not "pods/log", a subresource
    assert pod.path("x", "ns", "log") == "/api/v1/namespaces/ns/pods/x/log"
    assert pod.path(None, None) == "/api/v1/pods"            # every namespace
    node = discovery.resolve("Node")
    assert node.path("n1", "ignored") == "/api/v1/nodes/n1"  # cluster-scoped
    job = discovery.resolve("Job", "batch/v1")
    assert job.path(None, "ns") == "/apis/batch/v1/namespaces/ns/jobs"
    assert discovery.resolve("PriorityClass", "scheduling.k8s.io/v1").path("p") == \
        "/apis/scheduling.k8s.io/v1/priorityclasses/p"
    for _ in range(3):
        discovery.resolve("ConfigMap")
    # one resource list per group-version used, asked once each (cached for the run)
    assert fetched == ["/api/v1", "/apis/batch/v1", "/apis/scheduling.k8s.io/v1"]
    assert discovery.requests == 3


def test_an_unknown_kind_or_a_missing_namespace_is_refused() -> None:
    kube = FakeKube()
    with pytest.raises(UnknownResource, match="serves no kind 'Job' in v1"):
        kube.resource("Job")        # Jobs are batch/v1: no guessing of the group
    with pytest.raises(UnknownResource, match="serves no example.com/v9"):
        kube.resource("Widget", "example.com/v9")   # a group-version the server lacks: 404
    with pytest.raises(InvalidInput, match="needs a namespace"):
        kube.resource("Pod").get("x")
    assert kube.object_path({"apiVersion": "v1", "kind": "Secret",
                             "metadata": {"name": "s", "namespace": "n"}}) == \
        "/api/v1/namespaces/n/secrets/s"


# ------------------------------------------------------------------------------ watch

class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeResource:
    """`lists`: what each list answers, in turn ((items, resourceVersion)); `streams`: what
    each watch yields (events, or an exception to raise at its start), in turn. Each watch
    advances the clock by its own timeout when it ends without its events running out."""

    kind = "Pod"

    def __init__(self, clock: Clock, lists: list[tuple[list[dict], str]],
                 streams: list[list[WatchEvent] | Exception]) -> None:
        self.clock, self.lists, self.streams = clock, lists, streams
        self.listed = 0
        self.watched: list[tuple[str | None, int]] = []

    def list_with_version(self, namespace: str | None = None, *,
                          label_selector: str | None = None,
                          field_selector: str | None = None) -> tuple[list[dict], str]:
        self.listed += 1
        return self.lists[min(self.listed, len(self.lists)) - 1]

    def watch(self, namespace: str | None = None, *, field_selector: str | None = None,
              label_selector: str | None = None, resource_version: str | None = None,
              timeout_seconds: int = 60) -> Iterator[WatchEvent]:
        self.watched.append((resource_version, timeout_seconds))
        stream = self.streams.pop(0) if self.streams else []
        if isinstance(stream, Exception):
            raise stream
        yield from stream
        self.clock.now += timeout_seconds


def pod(name: str, version: str, phase: str) -> dict:
    return {"metadata": {"name": name, "resourceVersion": version},
            "status": {"phase": phase}}


def event(kind: str, obj: dict) -> WatchEvent:
    return WatchEvent(type=kind, object=obj)


def done(p: dict | None) -> str | None:
    phase = (p or {}).get("status", {}).get("phase")
    return phase if phase in ("Succeeded", "Failed") else None


def test_a_wait_watches_from_the_lists_resource_version() -> None:
    clock = Clock()
    resource = FakeResource(clock, [([pod("p", "5", "Pending")], "7")], [
        [event("MODIFIED", pod("p", "8", "Running"))],          # window ends: go on from 8
        [event("MODIFIED", pod("p", "9", "Succeeded"))]])
    assert wait_for(resource, "p", "ns", done, timeout=300, what="p", clock=clock) == \
        "Succeeded"
    assert resource.listed == 1                                  # no re-list needed
    assert [rv for rv, _ in resource.watched] == ["7", "8"]


def test_410_gone_lists_again_and_watches_from_the_new_version() -> None:
    clock = Clock()
    expired = event("ERROR", {"kind": "Status", "code": 410, "reason": "Expired",
                              "message": "too old resource version: 7 (12)"})
    resource = FakeResource(clock, [([pod("p", "5", "Pending")], "7"),
                                    ([pod("p", "12", "Running")], "13"),
                                    ([pod("p", "20", "Running")], "21")], [
        [expired],                                              # in the stream
        Gone("API 410: too old", where="/api/v1/namespaces/ns/pods"),  # at the start
        [event("MODIFIED", pod("p", "22", "Failed"))]])
    assert wait_for(resource, "p", "ns", done, timeout=300, what="p", clock=clock) == "Failed"
    assert resource.listed == 3
    assert [rv for rv, _ in resource.watched] == ["7", "13", "21"]


def test_the_deadline_is_honoured_with_the_same_typed_error() -> None:
    clock = Clock()
    resource = FakeResource(clock, [([pod("p", "5", "Running")], "7")], [])
    with pytest.raises(WaitTimeout) as caught:
        wait_for(resource, "p", "ns", done, timeout=90, what="pod p to end", clock=clock)
    assert isinstance(caught.value, TransportError)             # as wait_until's was
    assert caught.value.message == "timed out after 90s waiting for pod p to end"
    assert caught.value.last == pod("p", "5", "Running")
    # the server-side windows never run past the deadline: 60 s, then the 30 s left
    assert [t for _, t in resource.watched] == [60, 30] and clock.now == 90


def test_deleted_is_none_and_another_error_event_is_a_transport_error() -> None:
    clock = Clock()
    resource = FakeResource(clock, [([pod("p", "5", "Running")], "7")],
                            [[event("DELETED", pod("p", "9", "Running"))]])
    assert wait_for(resource, "p", "ns", lambda p: "gone" if p is None else None,
                    timeout=60, what="p gone", clock=clock) == "gone"
    broken = FakeResource(clock, [([], "7")], [[event("ERROR", {"code": 500,
                                                                 "message": "etcd down"})]])
    with pytest.raises(TransportError, match="watch of Pod p: etcd down"):
        wait_for(broken, "p", "ns", done, timeout=60, what="p", clock=clock)


def test_a_tick_re_judges_a_condition_that_depends_on_time() -> None:
    clock = Clock()
    resource = FakeResource(clock, [([pod("p", "5", "Pending")], "7")], [])
    seen: list[float] = []

    def after_20s(p: dict | None) -> bool | None:
        seen.append(clock.now)
        return True if clock.now >= 20 else None

    assert wait_for(resource, "p", "ns", after_20s, timeout=60, what="p", tick=5.0,
                    clock=clock) is True
    assert seen == [0, 5, 10, 15, 20] and all(t == 5 for _, t in resource.watched)


def test_a_selection_is_followed_until_empty() -> None:
    clock = Clock()
    a, b = pod("a", "1", "Running"), pod("b", "2", "Running")
    resource = FakeResource(clock, [([a, b], "3")],
                            [[event("DELETED", a), event("DELETED", b)]])
    states = [sorted(s) for s in observe_selection(resource, "ns", "run=x", deadline=60,
                                                   clock=clock)]
    assert states[:3] == [["a", "b"], ["b"], []]


def test_resource_wraps_the_real_client_paths() -> None:
    kube = FakeKube({"/api/v1/namespaces/ns/pods": [pod("p", "1", "Running")]})
    pods = kube.resource("Pod")
    assert isinstance(pods, Resource)
    items, version = pods.list_with_version("ns")
    assert [i["metadata"]["name"] for i in items] == ["p"] and version == "1"
    assert pods.maybe_get("q", "ns") is None
    assert ("GET", "/api/v1/namespaces/ns/pods/q") in kube.calls
