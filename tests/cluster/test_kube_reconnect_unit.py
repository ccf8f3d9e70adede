"""Connections the server closes while they sit idle in the pool: GET and DELETE are sent once
more on a new connection, a PATCH never; a create is never sent twice blindly: the object is
read back by name first (stored: judged against what was sent; absent: created once more, on a
new connection), and a 409 is judged the same way (the object of that name holds what was
sent: returned; else Conflict); a watch has a connection of its own; a watch stream that
breaks off is watched again from its last resourceVersion, once.

The server here is a small HTTP/1.1 one of our own, because the real API server cannot be made
to close a kept-alive connection just before the client reuses it (the real-cluster case, a
front that does, is in test_kubeauth_real.py). Each connection it accepts answers one request,
without `Connection: close`, so the client pools it; a second request on that connection is
read and dropped unanswered, which is what a request on a connection closed while idle meets.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from imagekit.errors import TransportError
from imagekit.kube import Kube
from imagekit.kube.errors import Conflict, WatchBroken
from imagekit.kube.watch import wait_for

from .fake_api import PLURALS, RESOURCE_LISTS

pytestmark = pytest.mark.timeout(60)


@dataclass
class Seen:
    connection: int
    method: str
    path: str
    query: dict[str, list[str]]
    answered: bool


@dataclass
class DroppingServer:
    """Answers one request per connection and drops the next one on it, unannounced.
    `watches`: what each watch answers in turn: a list of events, then "end" (the stream ends
    as the server's timeout ends it) or "break" (the connection closes mid-stream)."""

    watches: list[tuple[list[dict], str]] = field(default_factory=list)
    seen: list[Seen] = field(default_factory=list)
    #: objects by path, as the server stores them (a POST stores the object it creates, with a
    #: uid and a defaulted field of the server's own; a POST of a stored name is a 409)
    objects: dict[str, dict] = field(default_factory=dict)
    #: a POST dropped on a pooled connection was stored before the connection closed (the
    #: server acted; its answer is lost)
    store_dropped: bool = False
    #: False: every request is answered (a kept-alive connection serves the next one too)
    drop: bool = True

    def __post_init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._lock = threading.Lock()
        self._connections = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def stop(self) -> None:
        self._listener.close()

    def requests(self, method: str, path: str) -> list[Seen]:
        return [s for s in self.seen if s.method == method and s.path == path]

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                self._connections += 1
                number = self._connections
            threading.Thread(target=self._handle, args=(conn, number), daemon=True).start()

    @staticmethod
    def _read(conn: socket.socket, data: bytes) -> tuple[str, str, dict, bytes] | None:
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return None
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, target, _ = lines[0].split(" ", 2)
        length = next((int(v) for n, _, v in (line.partition(":") for line in lines[1:])
                       if n.strip().lower() == "content-length"), 0)
        while len(rest) < length:
            rest += conn.recv(65536)
        url = urlsplit(target)
        return method, url.path, parse_qs(url.query), rest[length:], rest[:length]

    def _store(self, collection: str, body: bytes) -> tuple[int, dict]:
        """A create as the server does it: 409 for a stored name, else stored with what the
        server adds (uid, resourceVersion, a defaulted field)."""
        sent = json.loads(body)
        path = f"{collection}/{sent['metadata']['name']}"
        with self._lock:
            if path in self.objects:
                return 409, {"kind": "Status", "status": "Failure", "reason": "AlreadyExists",
                             "code": 409, "message": f"{sent['kind']} "
                             f"\"{sent['metadata']['name']}\" already exists"}
            stored = {**sent, "metadata": {**sent["metadata"], "uid": f"uid-{len(self.objects)}",
                                           "resourceVersion": "7"}, "immutable": False}
            self.objects[path] = stored
            return 201, stored

    def _handle(self, conn: socket.socket, number: int) -> None:
        with conn, contextlib.suppress(OSError):
            conn.settimeout(10)
            request = self._read(conn, b"")
            if request is None:
                return
            while request is not None:
                method, path, query, after, body = request
                self.seen.append(Seen(number, method, path, query, True))
                self._answer(conn, method, path, query, body)
                request = self._read(conn, after)
                if self.drop and request is not None:   # the client pooled it: dropped
                    self.seen.append(Seen(number, request[0], request[1], request[2], False))
                    if self.store_dropped and request[0] == "POST":
                        self._store(request[1], request[4])
                    return

    def _answer(self, conn: socket.socket, method: str, path: str, query: dict,
                body_sent: bytes = b"") -> None:
        if "watch" in query:
            events, ending = self.watches.pop(0) if self.watches else ([], "end")
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         b"Transfer-Encoding: chunked\r\n\r\n")
            for event in events:
                line = json.dumps(event).encode() + b"\n"
                conn.sendall(f"{len(line):x}\r\n".encode() + line + b"\r\n")
            if ending == "break":
                conn.shutdown(socket.SHUT_RDWR)
                return
            conn.sendall(b"0\r\n\r\n")
            return
        code = 200
        if path in RESOURCE_LISTS:
            body: dict = RESOURCE_LISTS[path]
        elif path == "/version":
            body = {"gitVersion": "v1.20.2"}
        elif method == "GET" and path in self.objects:
            body = self.objects[path]
        elif method == "GET" and path.rsplit("/", 1)[-1] in PLURALS:   # a collection
            body = {"kind": "PodList", "items": [], "metadata": {"resourceVersion": "1"}}
        elif method == "GET":
            code, body = 404, {"kind": "Status", "status": "Failure", "reason": "NotFound",
                               "code": 404, "message": f"{path} not found"}
        elif method == "POST":
            code, body = self._store(path, body_sent)
        else:
            body = {"kind": "Status", "status": "Success"}
        data = json.dumps(body).encode()
        status = {200: b"200 OK", 201: b"201 Created", 404: b"404 Not Found",
                  409: b"409 Conflict"}[code]
        conn.sendall(b"HTTP/1.1 " + status + b"\r\nContent-Type: application/json\r\n"
                     b"Content-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)


@pytest.fixture
def server():
    running = DroppingServer()
    yield running
    running.stop()


@pytest.fixture
def kube(server, tmp_path: Path):
    config = tmp_path / "kubeconfig"
    config.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": server.url}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    with Kube(config) as client:
        client.resource("Pod")    # discovery answered: the pool now holds a connection
        yield client              # that the server drops under the next request


def test_a_get_on_a_closed_pooled_connection_is_sent_again_on_a_new_one(server, kube) -> None:
    assert kube.version() == {"gitVersion": "v1.20.2"}
    sent = server.requests("GET", "/version")
    assert [s.answered for s in sent] == [False, True]
    pooled = server.requests("GET", "/api/v1")[0].connection
    assert sent[0].connection == pooled != sent[1].connection


def _pool_one(server: DroppingServer, kube: Kube) -> None:
    """Leave one answered connection in the pool, so the next request on it is dropped: a
    GET that met a dropped pooled connection was answered on a client of its own (the pool
    then holds none), so one more GET pools one."""
    before = len(server.seen)
    kube.version()
    if any(not s.answered for s in server.seen[before:]):
        kube.version()


COLLECTION = "/api/v1/namespaces/ns/configmaps"
CONFIGMAP = {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": "c", "namespace": "ns", "labels": {"run": "r1"}},
             "data": {"launch.sh": "exec serve"}}


def test_a_delete_is_sent_again_a_create_read_back_first_and_a_patch_never(server, kube
                                                                            ) -> None:
    path = "/api/v1/namespaces/ns/pods/p"
    assert kube.delete(path) == {"kind": "Status", "status": "Success"}
    assert [s.answered for s in server.requests("DELETE", path)] == [False, True]

    _pool_one(server, kube)       # to be dropped under the POST
    created = kube.create(CONFIGMAP)
    # the dropped POST left nothing (this server did not act on it): read back by name
    # first, absent, so created once more on a new connection
    assert [s.answered for s in server.requests("POST", COLLECTION)] == [False, True]
    assert [s.answered for s in server.requests("GET", f"{COLLECTION}/c")][-1] is True
    posts = [s for s in server.seen if s.method == "POST"]
    read_back = server.requests("GET", f"{COLLECTION}/c")[-1]
    assert server.seen.index(posts[0]) < server.seen.index(read_back) < \
        server.seen.index(posts[1])
    assert created["metadata"]["uid"] == "uid-0"

    _pool_one(server, kube)       # to be dropped under the PATCH
    with pytest.raises(TransportError, match="cannot reach the API server: Server "
                                             "disconnected without sending a response"):
        kube.patch(f"{COLLECTION}/c", {"data": {"k": "v"}})
    assert [s.answered for s in server.requests("PATCH", f"{COLLECTION}/c")] == [False]


def test_a_dry_run_create_on_a_closed_pooled_connection_is_sent_again(server, kube) -> None:
    """A dry run stores nothing, so a dropped one is sent again on a new connection, with
    nothing read back."""
    _pool_one(server, kube)       # to be dropped under the POST
    answered = kube.create(CONFIGMAP, dry_run=True)
    assert [s.answered for s in server.requests("POST", COLLECTION)] == [False, True]
    assert server.requests("GET", f"{COLLECTION}/c") == []
    assert answered["metadata"]["name"] == "c"


def test_a_create_the_server_stored_before_its_connection_closed_is_not_sent_twice(
        server, kube) -> None:
    """The server acted on the POST and the connection closed before its answer: the object
    read back by name holds what was sent, so it is this create's; no second POST."""
    server.store_dropped = True
    _pool_one(server, kube)       # to be dropped under the POST (after storing it)
    created = kube.create(CONFIGMAP)
    assert [s.answered for s in server.requests("POST", COLLECTION)] == [False]
    assert created == server.objects[f"{COLLECTION}/c"] and created["immutable"] is False


def test_an_unanswered_create_whose_name_holds_another_object_is_a_conflict(server, kube
                                                                             ) -> None:
    """Closed before its answer, and the object of that name holds other data: someone
    else's (or an earlier run's), never taken for this create's, and not sent again."""
    server.objects[f"{COLLECTION}/c"] = {**CONFIGMAP, "data": {"launch.sh": "exec other"}}
    _pool_one(server, kube)
    with pytest.raises(Conflict, match="ConfigMap/c exists and differs from what was sent"):
        kube.create(CONFIGMAP)
    assert [s.answered for s in server.requests("POST", COLLECTION)] == [False]


@pytest.mark.parametrize("stored, outcome", [
    ({**CONFIGMAP, "metadata": {**CONFIGMAP["metadata"], "uid": "u1"}, "immutable": False},
     "returned"),
    ({**CONFIGMAP, "data": {"launch.sh": "exec other"}}, "differs from what was sent"),
    ({**CONFIGMAP, "metadata": {**CONFIGMAP["metadata"], "labels": {"run": "r2"}}},
     "differs from what was sent"),
    ({**CONFIGMAP, "metadata": {**CONFIGMAP["metadata"],
                                "deletionTimestamp": "2026-12-06T09:00:00Z"}},
     "is being deleted")])
def test_a_409_returns_the_stored_object_only_when_it_holds_what_was_sent(
        server, kube, stored: dict, outcome: str) -> None:
    """Every request answered (no connection closes here): the POST's 409 reads the object
    of that name. An identical one (the server's own additions aside) is returned; another
    one's data or labels, or one being deleted, is a Conflict."""
    server.drop = False
    server.objects[f"{COLLECTION}/c"] = stored
    if outcome == "returned":
        assert kube.create(CONFIGMAP) == stored
    else:
        with pytest.raises(Conflict, match=outcome):
            kube.create(CONFIGMAP)
    assert [s.answered for s in server.requests("POST", COLLECTION)] == [True]


def test_holds_leaves_the_servers_additions_aside_and_nothing_else() -> None:
    from imagekit.kube.client import holds

    sent = {"spec": {"containers": [{"name": "c", "image": "i@sha256:1"}],
                     "tolerations": [{"key": "gpu", "operator": "Exists"}], "volumes": []}}
    stored = {"spec": {"containers": [{"name": "c", "image": "i@sha256:1",
                                       "terminationMessagePath": "/dev/termination-log"}],
                       "tolerations": [{"key": "gpu", "operator": "Exists"},
                                       {"key": "node.kubernetes.io/not-ready",
                                        "effect": "NoExecute", "tolerationSeconds": 300}],
                       "dnsPolicy": "ClusterFirst"}}
    assert holds(stored, sent)
    other = json.loads(json.dumps(stored))
    other["spec"]["containers"][0]["image"] = "i@sha256:2"
    assert not holds(other, sent)
    assert not holds({"spec": {**stored["spec"], "tolerations": []}}, sent)


def _pod(version: str, phase: str) -> dict:
    return {"kind": "Pod", "metadata": {"name": "p", "namespace": "ns",
                                        "resourceVersion": version},
            "status": {"phase": phase}}


def _phase(pod: dict | None) -> str | None:
    return (pod or {}).get("status", {}).get("phase") if pod else None


def test_a_watch_has_a_connection_of_its_own(
        server, kube) -> None:
    """The pool's connection is closed by the server (the fixture drops a kept-alive
    connection's second request): a watch never goes out on a pooled connection, so it is
    answered at once (the accept behind the closing front is the end-to-end case: its creates
    follow watches)."""
    server.watches = [([{"type": "ADDED", "object": _pod("2", "Running")}], "end")]
    events = list(kube.resource("Pod").watch("ns", resource_version="1"))
    assert [e.type for e in events] == ["ADDED"]
    watches = [s for s in server.requests("GET", "/api/v1/namespaces/ns/pods")
               if "watch" in s.query]
    assert [s.answered for s in watches] == [True]


def test_a_broken_watch_is_watched_again_from_its_last_version(server, kube) -> None:
    server.watches = [([{"type": "MODIFIED", "object": _pod("5", "Pending")}], "break"),
                      ([{"type": "MODIFIED", "object": _pod("6", "Succeeded")}], "end")]
    phase = wait_for(kube.resource("Pod"), "p", "ns",
                     lambda pod: "done" if _phase(pod) == "Succeeded" else None,
                     timeout=20, what="the pod")
    assert phase == "done"
    watches = [s for s in server.requests("GET", "/api/v1/namespaces/ns/pods")
               if "watch" in s.query and s.answered]
    assert [w.query["resourceVersion"] for w in watches] == [["1"], ["5"]]
    lists = [s for s in server.requests("GET", "/api/v1/namespaces/ns/pods")
             if "watch" not in s.query and s.answered]
    assert len(lists) == 1            # not listed again: resumed where it broke


def test_a_watch_that_breaks_twice_in_a_row_fails_the_wait(server, kube) -> None:
    server.watches = [([], "break"), ([], "break"), ([], "end")]
    with pytest.raises(WatchBroken, match="watch broke off"):
        wait_for(kube.resource("Pod"), "p", "ns", lambda pod: None, timeout=20,
                 what="the pod")


class _BreakingLog:
    """A followed log whose first stream breaks off after two lines (a fake of `Kube`'s
    two log methods: the break is what a closed connection gives the real one)."""

    def __init__(self) -> None:
        self.follows = 0

    def another(self) -> _BreakingLog:
        return self

    def __enter__(self) -> _BreakingLog:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def follow_logs(self, namespace: str, pod: str, container: str | None):
        self.follows += 1
        yield from ("one", "two")
        if self.follows == 1:
            raise TransportError("log stream ended: peer closed connection")
        yield "three"


def test_a_log_followed_again_after_a_break_hands_each_line_on_once() -> None:
    from imagekit.cluster.podrun import LogFollower

    lines: list[str] = []
    log = _BreakingLog()
    follower = LogFollower(log, "ns", "p", None, lines.append)  # type: ignore[arg-type]
    follower.start()
    follower.join(10)
    assert follower.ended.is_set() and log.follows == 2
    assert lines == ["one", "two", "three"]
