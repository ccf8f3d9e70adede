"""Connections the server closes while they sit idle in the pool: GET, DELETE, a create (by
name) and a replace (with its resourceVersion) are sent once more on a new connection (a
repeat of one that landed is a 409, read back), a PATCH never; a watch has a connection of its own; a watch stream that
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
from imagekit.kube.errors import WatchBroken
from imagekit.kube.watch import wait_for

from .fake_api import RESOURCE_LISTS

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
        return method, url.path, parse_qs(url.query), rest[length:]

    def _handle(self, conn: socket.socket, number: int) -> None:
        with conn, contextlib.suppress(OSError):
            conn.settimeout(10)
            request = self._read(conn, b"")
            if request is None:
                return
            method, path, query, after = request
            self.seen.append(Seen(number, method, path, query, True))
            self._answer(conn, method, path, query)
            again = self._read(conn, after)   # the client pooled it: the next one is dropped
            if again is not None:
                self.seen.append(Seen(number, again[0], again[1], again[2], False))

    def _answer(self, conn: socket.socket, method: str, path: str, query: dict) -> None:
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
        if path in RESOURCE_LISTS:
            body: dict = RESOURCE_LISTS[path]
        elif path == "/version":
            body = {"gitVersion": "v1.20.2"}
        elif method == "GET":   # a collection
            body = {"kind": "PodList", "items": [], "metadata": {"resourceVersion": "1"}}
        else:
            body = {"kind": "Status", "status": "Success"}
        data = json.dumps(body).encode()
        status = b"201 Created" if method == "POST" else b"200 OK"
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


def test_a_delete_and_a_create_are_sent_again_and_a_patch_never(server, kube) -> None:
    path = "/api/v1/namespaces/ns/pods/p"
    assert kube.delete(path) == {"kind": "Status", "status": "Success"}
    assert [s.answered for s in server.requests("DELETE", path)] == [False, True]

    kube.version()                # pooled again, to be dropped under the POST
    collection = "/api/v1/namespaces/ns/configmaps"
    kube.create({"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": "c", "namespace": "ns"}})
    # a create is by name: repeated, it cannot make a second object (a 409 is read back)
    assert [s.answered for s in server.requests("POST", collection)] == [False, True]

    kube.version()                # pooled again, to be dropped under the PATCH
    with pytest.raises(TransportError, match="cannot reach the API server: Server "
                                             "disconnected without sending a response"):
        kube.patch(f"{collection}/c", {"data": {"k": "v"}})
    assert [s.answered for s in server.requests("PATCH", f"{collection}/c")] == [False]


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
