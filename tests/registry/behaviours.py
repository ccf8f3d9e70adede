"""A proxy in front of a real plain-HTTP registry that behaves like registries in the wild do,
one documented behaviour per `mode` (MODES), so a promote can be run against each of them.

Unlike `proxy.FaultProxy` (random faults and lies about blob bytes), every mode here is a
behaviour a real registry or the proxy in front of it has been seen to have, cited in
`MODES`. The upstream registry really stores what the proxy forwards: what the client is told
and what is really held can differ (that is the point of several modes), and an independent
reader of the upstream registry sees the truth.

A refusal decided from the request line and headers (a 429, a PATCH refused 405, a
Content-Length over the 413 limit) answers a request sent with `Expect: 100-continue` before
its body, as nginx does (no 100 Continue, the body never read, the connection closed); without
that header the body is read (and counted) first, then refused.

Counted, thread-safely: requests by method and by kind (`KINDS`), the request-body bytes of
blob uploads (`upload_bytes`; per upload session and, once committed, per digest, refused
bodies included: the client did send them), the answers the proxy made itself (`sent`: 413,
429, every refusal), and each request's wall time (`timings`).
"""

from __future__ import annotations

import hashlib
import http.client
import json
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlencode, urlsplit

from .proxy import HOP_BY_HOP, FaultProxy, _forwarded, _read_chunked

#: mode -> (what it does, its public source). The docstring of each `_mode_*` says the same.
MODES: dict[str, str] = {
    "ecr-stuck-range": "ECR: the Range of every 202 to a PATCH (and of the upload's status) "
                       "stays at the end of the first chunk (aws/containers-roadmap#2831)",
    "range-backwards": "each PATCH answer's Range runs behind what is held: half of it after "
                       "the first chunk, the previous chunk's end after the others (the "
                       "Range's meaning left open: opencontainers/distribution-spec#213)",
    "max-body-413": "a request body over `max_body` bytes is answered 413 and not forwarded "
                    "(regclient blobChunk/blobMax; opencontainers/distribution-spec#485; "
                    "nginx client_max_body_size)",
    "no-chunked-upload": "GHCR: a PATCH to an upload is refused 405 UNSUPPORTED; a monolithic "
                         "PUT ?digest= works (mamba-org/powerloader#32, "
                         "GoogleContainerTools/jib#3683)",
    "mount-202": "ECR: a cross-repository mount POST is answered 202 with an upload Location, "
                 "not mounted (aws/containers-roadmap#2860; the spec allows it: "
                 "opencontainers/distribution-spec#206)",
    "mount-lie": "a mount POST is answered 201 though nothing was mounted "
                 "(goharbor/harbor#18541, goharbor/harbor#22863: a 2xx taken as a mount)",
    "mount-401": "Harbor: a cross-project mount POST is answered 401 with a Basic challenge "
                 "the client cannot meet (goharbor/harbor#17097)",
    "rate-429": "Docker Hub: ratelimit-limit/ratelimit-remaining headers on every answer, "
                "remaining counted down per manifest GET and 429 TOOMANYREQUESTS at 0; and a "
                "429 with Retry-After on every Nth request (docs.docker.com/docker-hub/usage/"
                "pulls)",
    "immutable-tags": "ECR/Harbor tag immutability: a manifest PUT moving an existing tag to "
                      "another digest is refused 400 TAG_INVALID (aws/containers-roadmap#862; "
                      "docs.aws.amazon.com/AmazonECR/latest/userguide/image-tag-mutability.html)",
    "strict-media-types": "a manifest PUT whose Content-Type is not the body's mediaType is "
                          "refused 400 MANIFEST_INVALID; a manifest GET/HEAD whose Accept does "
                          "not list the stored type is 404 MANIFEST_UNKNOWN (GitLab, Oracle: "
                          "sergi0g/cup#132, NotGlop/docker-drag#41)",
    "gitlab-referrers-tag": "GitLab: the referrers tag `sha256-<hex>` resolves to the subject "
                            "manifest itself and /v2/<repo>/referrers/ is 404 "
                            "(oras-project/oras-go#1396)",
    "chunked-manifests": "zot: manifests are sent Transfer-Encoding: chunked with no "
                         "Content-Length (oras-project/oras-go#374)",
    "lose-bytes": "a relay that acknowledges every PATCH byte (Range claims all) but forwards "
                  "only the first half of each body, so the registry's commit refuses the "
                  "digest: the failure case an upload must bound (the spec's Range is what "
                  "the registry holds: opencontainers/distribution-spec#213)",
    "drop-uploads": "a registry that forgets an upload session after `drop_after` PATCHes "
                    "(distribution's upload purging, or a restart of a registry without "
                    "shared upload state): every later request to that session is 404 "
                    "BLOB_UPLOAD_UNKNOWN (distribution/distribution#1940): a blob larger than "
                    "that never lands, and the failure case of the byte budget",
    "slow-patches": "a registry on slow storage answers each PATCH `delay` seconds late "
                    "(distribution/distribution#2597): the failure case of an upload's deadline",
}

#: What `by_kind` counts, besides "base", "tags", "referrers" and "other".
KINDS = ("manifest-get", "manifest-head", "manifest-put", "manifest-delete", "blob-head",
         "blob-get", "upload-post", "upload-patch", "upload-put", "upload-status",
         "upload-delete", "mount")

MANIFEST_TYPES = ("application/vnd.oci.image.manifest.v1+json",
                  "application/vnd.oci.image.index.v1+json",
                  "application/vnd.docker.distribution.manifest.v2+json",
                  "application/vnd.docker.distribution.manifest.list.v2+json")

_MANIFEST = re.compile(r"^/v2/(?P<repo>.+)/manifests/(?P<ref>[^/]+)$")
_UPLOAD = re.compile(r"^/v2/(?P<repo>.+)/blobs/uploads/(?P<session>[^/]*)$")
_BLOB = re.compile(r"^/v2/(?P<repo>.+)/blobs/(?P<digest>[^/]+)$")
_REFERRERS = re.compile(r"^/v2/(?P<repo>.+)/referrers/(?P<digest>[^/]+)$")
_TAG_SCHEMA = re.compile(r"^sha256-(?P<hex>[0-9a-f]{64})$")
_DIGEST_REF = re.compile(r"^[a-z0-9]+(?:[+._-][a-z0-9]+)*:[a-zA-Z0-9=_-]+$")


#: requests that may carry a blob's bytes (upload_bytes, refused bodies)
_BODY_KINDS = ("upload-post", "upload-patch", "upload-put", "mount")


@dataclass(frozen=True)
class Request:
    """One request as the proxy saw it: what it was and how it was answered."""

    method: str
    kind: str
    path: str
    repo: str
    ref: str          # the manifest reference, blob digest or upload session ("" when none)
    query: dict[str, str]


@dataclass(frozen=True)
class Timing:
    method: str
    kind: str
    path: str
    status: int
    seconds: float


@dataclass(frozen=True)
class Refusal:
    """An answer a mode makes itself instead of forwarding."""

    code: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "application/json"


_TOO_LARGE = Refusal(413, b"<html><head><title>413 Request Entity Too Large</title></head>"
                          b"<body><center><h1>413 Request Entity Too Large</h1></center>"
                          b"<hr><center>nginx</center></body></html>", {}, "text/html")


def classify(method: str, target: str) -> Request:
    parts = urlsplit(target)
    path, query = parts.path, dict(parse_qsl(parts.query, keep_blank_values=True))
    kind, repo, ref = "other", "", ""
    if path in ("/v2/", "/v2"):
        kind = "base"
    elif (m := _MANIFEST.match(path)) is not None:
        kind, repo, ref = f"manifest-{method.lower()}", m["repo"], m["ref"]
    elif (m := _UPLOAD.match(path)) is not None:
        repo, ref = m["repo"], m["session"]
        if method == "POST":
            kind = "mount" if "mount" in query else "upload-post"
        else:
            kind = {"PATCH": "upload-patch", "PUT": "upload-put", "GET": "upload-status",
                    "DELETE": "upload-delete"}.get(method, "other")
    elif (m := _BLOB.match(path)) is not None:
        kind, repo, ref = f"blob-{method.lower()}", m["repo"], m["digest"]
    elif (m := _REFERRERS.match(path)) is not None:
        kind, repo, ref = "referrers", m["repo"], m["digest"]
    elif path.endswith("/tags/list"):
        kind = "tags"
    return Request(method, kind, path, repo, ref, query)


def _errors(code: str, message: str, detail: object = None) -> bytes:
    entry: dict[str, object] = {"code": code, "message": message}
    if detail is not None:
        entry["detail"] = detail
    return json.dumps({"errors": [entry]}).encode()


def _range_of(held: int) -> str:
    """The `Range` header value for `held` bytes (distribution writes `0-0` for none)."""
    return f"0-{max(0, held - 1)}"


class BehaviourProxy(FaultProxy):
    """`BehaviourProxy(upstream, mode)`: a running proxy (`with ... as proxy:` or
    `start()`/`stop()`) at `address`. `mode=None` relays unchanged (a counting relay).

    Knobs: `max_body` (max-body-413), `every` and `retry_after` (rate-429: the Nth request is
    answered 429 with `Retry-After: retry_after`; 0 turns that off), `remaining` and `limit`
    (rate-429: Docker Hub's pull budget, counted down per manifest GET).
    """

    def __init__(self, upstream: str, mode: str | None = None, *, max_body: int = 10_000_000,
                 every: int = 5, retry_after: str | int | float = 1, remaining: int = 100,
                 limit: int = 100, window: int = 21600, drop_after: int = 2,
                 delay: float = 1.0, bind: str = "127.0.0.1") -> None:
        if mode is not None and mode not in MODES:
            raise ValueError(f"mode={mode!r}: one of {tuple(MODES)}")
        super().__init__(upstream, bind=bind)
        self.mode = mode
        # this proxy's own handler class (FaultProxy makes one per proxy): 100 Continue is
        # sent by `_read_body`, once the request is known not to be refused before its body
        self.server.RequestHandlerClass.handle_expect_100 = lambda handler: True
        self.server.handle_error = self._handle_error  # type: ignore[method-assign]
        self.max_body, self.every, self.retry_after = max_body, every, str(retry_after)
        self.remaining, self.limit, self.window = remaining, limit, window
        self.drop_after, self.delay = drop_after, delay
        self.patches_of: Counter[str] = Counter()   # drop-uploads: PATCHes per session
        self.dropped: set[str] = set()
        self.by_method: Counter[str] = Counter()
        self.by_kind: Counter[str] = Counter()
        #: what the proxy did instead of relaying: its own answers ("413", "429", "refused" for
        #: any refusal, "<status>:<kind>" for each answer it made) and its lies ("range-lies",
        #: "lost-bytes", "lies", "tag-as-digest")
        self.sent: Counter[str] = Counter()
        self.requests_seen = 0
        #: request-body bytes of blob uploads received, refused ones too (a body refused before
        #: it was sent, under `Expect: 100-continue`, was never received)
        self.upload_bytes = 0
        self.body_bytes = 0           # every request body (manifests too)
        self.session_bytes: Counter[str] = Counter()
        #: rate-429: upload bodies read and then refused (session, bytes): the bytes a client
        #: sends twice; sessions that were answered 429; bodies a session sent without
        #: `Expect: 100-continue` after it had been answered 429 (a client that learned
        #: nothing from the quota)
        self.refused_bodies: list[tuple[str, int]] = []
        self.throttled_sessions: set[str] = set()
        self.unguarded: list[tuple[str, str]] = []
        self.digest_bytes: Counter[str] = Counter()   # per blob digest, at its commit
        self.timings: list[Timing] = []
        self.committed: Counter[str] = Counter()      # blob commits answered 201, by digest
        # per upload session: bytes really forwarded; ECR's first Range; what was claimed
        self._held: Counter[str] = Counter()
        self._first_range: dict[str, str] = {}
        self._claimed: Counter[str] = Counter()

    def _handle_error(self, request: object, client_address: object) -> None:
        """A client that closed its idle keep-alive connection is not an error worth a
        traceback on stderr; anything else is reported as socketserver does."""
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        ThreadingHTTPServer.handle_error(self.server, request, client_address)

    # -- numbers -----------------------------------------------------------------------------
    def seconds(self, kind: str | None = None) -> float:
        """Wall time spent answering requests (of one kind), summed."""
        with self.lock:
            return sum(t.seconds for t in self.timings if kind is None or t.kind == kind)

    def refusals(self, kind: str | None = None) -> int:
        with self.lock:
            if kind is None:
                return self.sent["refused"]
            return sum(n for key, n in self.sent.items()
                       if key.split(":", 1)[-1] == kind and ":" in key)

    def summary(self) -> dict[str, object]:
        """What a failing assertion should print."""
        with self.lock:
            return {"mode": self.mode, "by_kind": dict(self.by_kind),
                    "by_method": dict(self.by_method), "sent": dict(self.sent),
                    "upload_bytes": self.upload_bytes,
                    "refused_bodies": list(self.refused_bodies),
                    "unguarded": list(self.unguarded),
                    "digest_bytes": dict(self.digest_bytes),
                    "slowest": max((t.seconds for t in self.timings), default=0.0)}

    # -- the request loop --------------------------------------------------------------------
    def _handle(self, handler: BaseHTTPRequestHandler) -> None:  # type: ignore[override]
        started = time.perf_counter()
        request = classify(handler.command, handler.path)
        status = [0]
        try:
            self._serve(handler, request, status)
        finally:
            with self.lock:
                self.timings.append(Timing(request.method, request.kind, request.path,
                                           status[0], time.perf_counter() - started))

    def _read_body(self, handler: BaseHTTPRequestHandler, request: Request) -> bytes:
        if "100-continue" in (handler.headers.get("expect") or "").lower():
            handler.send_response_only(100)  # deferred until the request is not refused
            handler.end_headers()
        if "chunked" in (handler.headers.get("transfer-encoding") or "").lower():
            body = _read_chunked(handler.rfile)
        else:
            length = int(handler.headers.get("content-length") or 0)
            body = handler.rfile.read(length) if length else b""
        with self.lock:
            self.body_bytes += len(body)
            if request.kind in _BODY_KINDS:
                self.upload_bytes += len(body)
                # a single POST ?digest= carries its blob without a session: its own key
                self.session_bytes[request.ref or request.path] += len(body)
        return body

    def _refusal(self, handler: BaseHTTPRequestHandler, request: Request, number: int
                 ) -> Refusal | None:
        """An answer this mode gives the request without forwarding it, decided from the
        request line and headers (before its body)."""
        mode = self.mode
        if mode == "rate-429":
            if self.every and number % self.every == 0:
                return Refusal(429, _errors("TOOMANYREQUESTS", "too many requests"),
                               {"Retry-After": self.retry_after})
            with self.lock:
                exhausted = self.remaining <= 0
            if request.kind == "manifest-get" and exhausted:  # counted down in _after
                return Refusal(429, _errors(
                    "TOOMANYREQUESTS", "You have reached your pull rate limit. You may "
                    "increase the limit by authenticating and upgrading: "
                    "https://www.docker.com/increase-rate-limit"))
        if mode == "max-body-413" and int(handler.headers.get("content-length") or 0) > \
                self.max_body:
            return _TOO_LARGE
        if mode == "no-chunked-upload" and request.kind == "upload-patch":
            return Refusal(405, _errors("UNSUPPORTED", "The operation is unsupported."))
        return None

    def _serve(self, handler: BaseHTTPRequestHandler, request: Request, status: list[int]
               ) -> None:
        with self.lock:
            self.requests_seen += 1
            number = self.requests_seen
            self.by_method[request.method] += 1
            self.by_kind[request.kind] += 1
        refusal = self._refusal(handler, request, number)
        expects = "100-continue" in (handler.headers.get("expect") or "").lower()
        with self.lock:   # taught before this request: a 429 to an earlier one of its session
            taught = request.ref in self.throttled_sessions
            if refusal is not None and refusal.code == 429 and request.ref:
                self.throttled_sessions.add(request.ref)
        if refusal is not None and expects:
            # refused before the body, as nginx's limit_req or client_max_body_size do: no
            # 100 Continue, the body is never read, the connection is closed after the answer
            self._refuse(handler, request, status, refusal.code, refusal.body,
                         headers={**refusal.headers, "Connection": "close"},
                         content_type=refusal.content_type)
            return
        body = self._read_body(handler, request)
        if body and request.kind in _BODY_KINDS and taught and not expects:
            with self.lock:
                self.unguarded.append((request.kind, request.ref))
        if refusal is None and self.mode == "max-body-413" and len(body) > self.max_body:
            refusal = _TOO_LARGE  # a chunked body: its size is known once it is read
        if refusal is not None:
            if body and request.kind in _BODY_KINDS:
                with self.lock:
                    self.refused_bodies.append((request.ref or request.path, len(body)))
            self._refuse(handler, request, status, refusal.code, refusal.body,
                         headers=refusal.headers, content_type=refusal.content_type)
            return
        mode = self.mode
        if request.kind == "mount" and mode in ("mount-202", "mount-lie", "mount-401"):
            getattr(self, "_mode_" + mode.replace("-", "_"))(handler, request, body, status)
            return
        if mode == "immutable-tags" and request.kind == "manifest-put" and \
                not _DIGEST_REF.match(request.ref):
            self._mode_immutable_tags(handler, request, body, status)
            return
        if mode == "strict-media-types" and request.kind.startswith("manifest-") and \
                request.kind != "manifest-delete":
            self._mode_strict_media_types(handler, request, body, status)
            return
        if mode == "gitlab-referrers-tag" and (
                request.kind == "referrers" or (request.kind in ("manifest-get",
                                                                 "manifest-head")
                                                and _TAG_SCHEMA.match(request.ref))):
            self._mode_gitlab_referrers_tag(handler, request, body, status)
            return
        if mode == "chunked-manifests" and request.kind == "manifest-get":
            self._mode_chunked_manifests(handler, request, body, status)
            return
        if mode == "drop-uploads" and request.kind in ("upload-patch", "upload-status",
                                                       "upload-put"):
            with self.lock:  # the PATCH past `drop_after` finds the session gone, and so
                if request.kind == "upload-patch":  # does everything after it
                    self.patches_of[request.ref] += 1
                    if self.patches_of[request.ref] > self.drop_after:
                        self.dropped.add(request.ref)
                forgotten = request.ref in self.dropped
            if forgotten:
                self._refuse(handler, request, status, 404, _errors(
                    "BLOB_UPLOAD_UNKNOWN", "blob upload unknown to registry"))
                return
        if mode == "slow-patches" and request.kind == "upload-patch":
            time.sleep(self.delay)
        if request.kind in ("upload-patch", "upload-status") and mode in (
                "ecr-stuck-range", "range-backwards", "lose-bytes"):
            getattr(self, "_mode_" + mode.replace("-", "_"))(handler, request, body, status)
            return
        self._relay(handler, request, self._forward(handler, request, body), status)

    # -- upstream ----------------------------------------------------------------------------
    def _upstream(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self.upstream_host, self.upstream_port, timeout=120)

    def _forward(self, handler: BaseHTTPRequestHandler, request: Request, body: bytes, *,
                 method: str | None = None, target: str | None = None,
                 headers: dict[str, str] | None = None, drop: tuple[str, ...] = ()
                 ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """Send the request upstream (optionally changed): (connection, response)."""
        sent = _forwarded(handler, drop=("expect", *(d.lower() for d in drop)))
        sent.update(headers or {})
        sent["Host"] = f"{self.upstream_host}:{self.upstream_port}"
        connection = self._upstream()
        connection.request(method or handler.command, target or handler.path,
                           body=body if body or (method or handler.command) in
                           ("PUT", "PATCH", "POST") else None, headers=sent)
        return connection, connection.getresponse()

    def _rewrite_location(self, value: str) -> str:
        if value.startswith("http"):
            return value.replace(f"{self.upstream_host}:{self.upstream_port}", self.address)
        return value

    def _extra_headers(self) -> list[tuple[str, str]]:
        """Headers every answer carries in this mode (Docker Hub's rate limit)."""
        if self.mode != "rate-429":
            return []
        with self.lock:
            remaining = max(0, self.remaining)
        return [("ratelimit-limit", f"{self.limit};w={self.window}"),
                ("ratelimit-remaining", f"{remaining};w={self.window}")]

    def _relay(self, handler: BaseHTTPRequestHandler, request: Request,
               upstream: tuple[http.client.HTTPConnection, http.client.HTTPResponse],
               status: list[int], *, replace: dict[str, str] | None = None,
               chunked: bool = False) -> None:
        """The upstream answer to the client, `replace` headers changed (None drops one)."""
        connection, response = upstream
        replace = {k.lower(): v for k, v in (replace or {}).items()}
        if response.getheader("content-length") is None and request.method != "HEAD" and \
                response.status not in (204, 304):
            chunked = True  # the registry chunked it (http.client decoded): chunk it again
        try:
            self._after(request, response)
            status[0] = response.status
            handler.send_response(response.status)
            for key, value in response.getheaders():
                low = key.lower()
                if low in HOP_BY_HOP or low in replace or (chunked and low == "content-length"):
                    continue
                if low == "location":
                    value = self._rewrite_location(value)
                handler.send_header(key, value)
            for key, value in replace.items():
                if value is not None:
                    handler.send_header(key, value)
            for key, value in self._extra_headers():
                handler.send_header(key, value)
            if chunked and request.method != "HEAD":
                handler.send_header("Transfer-Encoding", "chunked")
            handler.end_headers()
            if request.method == "HEAD":
                return
            while True:
                data = response.read(256 * 1024)
                if not data:
                    break
                if chunked:  # small pieces, so a manifest really comes in several chunks
                    for at in range(0, len(data), 512):
                        piece = data[at:at + 512]
                        handler.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                else:
                    handler.wfile.write(data)
            if chunked:
                handler.wfile.write(b"0\r\n\r\n")
        finally:
            response.close()
            connection.close()

    def _after(self, request: Request, response: http.client.HTTPResponse) -> None:
        """Bookkeeping on an upstream answer: a commit attributes its session's bytes (every
        PATCH and PUT body of that session, refused ones included) to the digest."""
        if self.mode == "rate-429" and request.kind == "manifest-get" and \
                response.status == 200:
            with self.lock:  # a pull: Docker Hub counts manifest GETs that are served
                self.remaining -= 1
        digest = request.query.get("digest")
        if digest and response.status in (201, 204) and request.kind in ("upload-put",
                                                                         "upload-post"):
            with self.lock:
                self.committed[digest] += 1
                self.digest_bytes[digest] += self.session_bytes.get(
                    request.ref or request.path, 0)

    def _reply(self, handler: BaseHTTPRequestHandler, request: Request, status: list[int],
               code: int, body: bytes = b"", *, headers: dict[str, str] | None = None,
               content_type: str = "application/json") -> None:
        """An answer the proxy makes itself (nothing forwarded)."""
        status[0] = code
        handler.send_response(code)
        for key, value in (headers or {}).items():
            handler.send_header(key, value)
        if body:
            handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", str(len(body)))
        handler.send_header("Docker-Distribution-API-Version", "registry/2.0")
        for key, value in self._extra_headers():
            handler.send_header(key, value)
        handler.end_headers()
        if body and request.method != "HEAD":
            handler.wfile.write(body)

    def _refuse(self, handler: BaseHTTPRequestHandler, request: Request, status: list[int],
                code: int, body: bytes, *, headers: dict[str, str] | None = None,
                content_type: str = "application/json") -> None:
        with self.lock:
            self.sent[str(code)] += 1
            self.sent["refused"] += 1
            self.sent[f"{code}:{request.kind}"] += 1
        self._reply(handler, request, status, code, body, headers=headers,
                    content_type=content_type)

    # -- modes -------------------------------------------------------------------------------
    def _mode_mount_202(self, handler: BaseHTTPRequestHandler, request: Request, body: bytes,
                        status: list[int]) -> None:
        """ECR (aws/containers-roadmap#2860): the mount is not done, an upload session is
        opened instead (202 + Location), as the spec allows (distribution-spec#206)."""
        with self.lock:
            self.sent["202:mount"] += 1
        query = {k: v for k, v in request.query.items() if k not in ("mount", "from")}
        target = request.path + (f"?{urlencode(query)}" if query else "")
        self._relay(handler, request, self._forward(handler, request, body, target=target),
                    status)

    def _mode_mount_lie(self, handler: BaseHTTPRequestHandler, request: Request, body: bytes,
                        status: list[int]) -> None:
        """A 201 to a mount that was not done (goharbor/harbor#18541): the blob is NOT in the
        destination repository afterwards."""
        digest = request.query.get("mount", "")
        with self.lock:
            self.sent["201:mount"] += 1
            self.sent["lies"] += 1
        self._reply(handler, request, status, 201, headers={
            "Location": f"/v2/{request.repo}/blobs/{digest}", "Docker-Content-Digest": digest})

    def _mode_mount_401(self, handler: BaseHTTPRequestHandler, request: Request, body: bytes,
                        status: list[int]) -> None:
        """Harbor (goharbor/harbor#17097): a cross-project mount is refused 401 with a Basic
        challenge no credential of the client meets."""
        source = request.query.get("from", "")
        project = source.split("/", 1)[0]
        self._refuse(handler, request, status, 401, _errors(
            "UNAUTHORIZED", f"project {project} not found: project {project} not found"),
            headers={"WWW-Authenticate": 'Basic realm="harbor"'})

    def _mode_immutable_tags(self, handler: BaseHTTPRequestHandler, request: Request,
                             body: bytes, status: list[int]) -> None:
        """ECR/Harbor tag immutability (aws/containers-roadmap#862): a tag that names another
        digest is not moved (400 TAG_INVALID); the same digest again is accepted."""
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        connection = self._upstream()
        try:
            connection.request("HEAD", request.path, headers={
                "Host": f"{self.upstream_host}:{self.upstream_port}",
                "Accept": ", ".join(MANIFEST_TYPES)})
            response = connection.getresponse()
            response.read()
            current = response.getheader("docker-content-digest") \
                if response.status == 200 else None
        finally:
            connection.close()
        if current is not None and current != digest:
            self._refuse(handler, request, status, 400, _errors(
                "TAG_INVALID", f"The image tag '{request.ref}' already exists in the "
                f"'{request.repo}' repository and cannot be overwritten because the tag is "
                "immutable.", {"tag": request.ref, "current": current, "pushed": digest}))
            return
        self._relay(handler, request, self._forward(handler, request, body), status)

    def _mode_strict_media_types(self, handler: BaseHTTPRequestHandler, request: Request,
                                 body: bytes, status: list[int]) -> None:
        """GitLab, Oracle (sergi0g/cup#132, NotGlop/docker-drag#41): the stored type must be
        in the Accept of a GET/HEAD (else 404); a PUT's Content-Type must be the body's
        mediaType (else 400 MANIFEST_INVALID)."""
        if request.kind == "manifest-put":
            given = (handler.headers.get("content-type") or "").split(";", 1)[0].strip()
            try:
                declared = json.loads(body).get("mediaType")
            except (ValueError, AttributeError):
                declared = None
            if (declared is not None and given != declared) or given not in MANIFEST_TYPES:
                self._refuse(handler, request, status, 400, _errors(
                    "MANIFEST_INVALID", "manifest invalid",
                    f"Content-Type {given!r} is not the manifest's mediaType {declared!r}"))
                return
            self._relay(handler, request, self._forward(handler, request, body), status)
            return
        accepted = {part.split(";", 1)[0].strip()
                    for value in handler.headers.get_all("accept") or []
                    for part in value.split(",")}
        upstream = self._forward(handler, request, body, drop=("accept",),
                                 headers={"Accept": ", ".join(MANIFEST_TYPES)})
        stored = (upstream[1].getheader("content-type") or "").split(";", 1)[0].strip()
        if upstream[1].status == 200 and stored not in accepted:
            upstream[1].read()
            upstream[1].close()
            upstream[0].close()
            index = "index" in stored or "list" in stored
            what, plural = ("index", "indexes") if index else ("manifest", "manifests")
            self._refuse(handler, request, status, 404, _errors(
                "MANIFEST_UNKNOWN", f"OCI {what} found, but accept header does not support "
                f"OCI {plural}", {"stored": stored, "accept": sorted(accepted)}))
            return
        self._relay(handler, request, upstream, status)

    def _mode_gitlab_referrers_tag(self, handler: BaseHTTPRequestHandler, request: Request,
                                   body: bytes, status: list[int]) -> None:
        """GitLab (oras-project/oras-go#1396): no referrers API (404) and the tag
        `sha256-<hex>` resolves to the manifest `sha256:<hex>`, the subject itself."""
        if request.kind == "referrers":
            with self.lock:
                self.sent["404:referrers"] += 1
            self._reply(handler, request, status, 404, b"404 page not found\n",
                        content_type="text/plain; charset=utf-8")
            return
        match = _TAG_SCHEMA.match(request.ref)
        assert match is not None
        with self.lock:
            self.sent["tag-as-digest"] += 1
        target = f"/v2/{request.repo}/manifests/sha256:{match['hex']}"
        self._relay(handler, request, self._forward(handler, request, body, target=target),
                    status)

    def _mode_chunked_manifests(self, handler: BaseHTTPRequestHandler, request: Request,
                                body: bytes, status: list[int]) -> None:
        """zot (oras-project/oras-go#374): manifest bodies chunked, no Content-Length."""
        self._relay(handler, request, self._forward(handler, request, body), status,
                    chunked=True)

    def _patch_forwarded(self, handler: BaseHTTPRequestHandler, request: Request, body: bytes,
                         status: list[int], report) -> None:
        """Forward a PATCH; on 202 the Range header is `report(held_before, held_after)`'s
        (None: the registry's own)."""
        session = request.ref
        with self.lock:
            before = self._held[session]
        connection, response = self._forward(handler, request, body)
        replace: dict[str, str] = {}
        if response.status == 202:
            with self.lock:
                self._held[session] = before + len(body)
                after = self._held[session]
                if session not in self._first_range:
                    self._first_range[session] = response.getheader("range") or \
                        _range_of(after)
            value = report(before, after)
            if value is not None:
                replace["Range"] = value
                with self.lock:
                    self.sent["range-lies"] += 1
        self._relay(handler, request, (connection, response), status, replace=replace)

    def _mode_ecr_stuck_range(self, handler: BaseHTTPRequestHandler, request: Request,
                              body: bytes, status: list[int]) -> None:
        """ECR (aws/containers-roadmap#2831): every PATCH is stored, but the Range of each
        answer (and of the upload's status) stays at the end of the upload's first chunk."""
        session = request.ref
        if request.kind == "upload-status":
            connection, response = self._forward(handler, request, body)
            with self.lock:
                first = self._first_range.get(session)
            replace = {"Range": first} if first is not None and response.status == 204 else {}
            self._relay(handler, request, (connection, response), status, replace=replace)
            return

        def report(before: int, after: int) -> str | None:
            with self.lock:
                return self._first_range.get(session)

        self._patch_forwarded(handler, request, body, status, report)

    def _mode_range_backwards(self, handler: BaseHTTPRequestHandler, request: Request,
                              body: bytes, status: list[int]) -> None:
        """The Range of each PATCH answer runs behind what is held (distribution-spec#213
        leaves its reading open): half of it after the first chunk, then the previous
        chunk's end. The upload's status (GET) is answered truthfully by the registry."""
        if request.kind == "upload-status":
            self._relay(handler, request, self._forward(handler, request, body), status)
            return

        def report(before: int, after: int) -> str:
            return _range_of(after // 2 if before == 0 else before)

        self._patch_forwarded(handler, request, body, status, report)

    def _mode_lose_bytes(self, handler: BaseHTTPRequestHandler, request: Request, body: bytes,
                         status: list[int]) -> None:
        """A relay that loses bytes and says it has them all (the spec's Range is what the
        registry holds, distribution-spec#213): half of each PATCH body is forwarded, the
        answer's Range counts every byte sent, the status GET too; the commit's digest check
        at the registry refuses the upload."""
        session = request.ref
        if request.kind == "upload-status":
            connection, response = self._forward(handler, request, body)
            with self.lock:
                claimed = self._claimed.get(session)
            replace = {"Range": _range_of(claimed)} if claimed and response.status == 204 \
                else {}
            self._relay(handler, request, (connection, response), status, replace=replace)
            return
        half = body[:len(body) // 2]
        with self.lock:
            held = self._held[session]
        headers = {"Content-Range": f"{held}-{held + len(half) - 1}"} if half else {}
        connection, response = self._forward(handler, request, half, headers=headers,
                                             drop=("content-range", "content-length"))
        replace: dict[str, str] = {}
        if response.status == 202:
            with self.lock:
                self._held[session] = held + len(half)
                self._claimed[session] += len(body)
                replace["Range"] = _range_of(self._claimed[session])
                self.sent["lost-bytes"] += len(body) - len(half)
        self._relay(handler, request, (connection, response), status, replace=replace)


__all__ = ["KINDS", "MODES", "BehaviourProxy", "Request", "Timing", "classify"]
