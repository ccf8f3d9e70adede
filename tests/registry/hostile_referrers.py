"""A hostile registry for referrers and polls: one server, one misbehaviour per
repository, so a whole sweep of cases shares one port.

Every repository `<mode>/app` serves the tiny image of `hostile.py` (`:v1`, by tag and by
digest, its config and layer) — except where the mode says otherwise — and answers the
referrers of that digest as the mode says:

- `ok`: no referrers (API 404, no tag-schema tag);
- `tag-str` / `tag-nums`: API 404; the tag-schema index's `manifests` is a string / numbers;
- `api-null`: the API lists `[null]`;
- `ann-list`: an entry whose `annotations` is a list;
- `ptype-object`: an entry whose predicateType annotation is an object;
- `ref-list`: a well-formed entry whose referrer manifest is a JSON list;
- `ref-layers-int`: a referrer manifest with `layers: [1]`;
- `bundle-size-str`: a Sigstore-bundle layer whose `size` is a string;
- `missing-10000`: 10,000 entries naming manifests that do not exist;
- `dup-2000`: one well-formed (not ours) referrer listed 2,000 times;
- `api-500`: the referrers API answers 500;
- `all-500`: everything in the repository answers 500;
- `silent`: everything in the repository is accepted and never answered;
- `realm-closed`: 401 with a Bearer realm on a closed port;
- `sink`: a destination: every write is counted (and answered as a registry would), reads
  find nothing. A sweep asserts it saw no write.

`stats` counts requests per (mode, kind) so a test can show the dedupe (one GET, not 2,000).
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .hostile import OCI_MANIFEST, tiny_image

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
BUNDLE = "application/vnd.dev.sigstore.bundle.v0.3+json"
MODES = ("ok", "tag-str", "tag-nums", "api-null", "ann-list", "ptype-object", "ref-list",
         "ref-layers-int", "bundle-size-str", "missing-10000", "dup-2000", "api-500", "all-500",
         "silent", "realm-closed", "sink")
WRITES = ("PUT", "POST", "PATCH", "DELETE")


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ReferrersRegistry:
    def __init__(self, port: int = 0) -> None:
        self.manifest, self.blobs = tiny_image()
        self.digest = _sha(self.manifest)
        self.stats: Counter[str] = Counter()
        self.stopping = threading.Event()
        self.closed = closed_port()
        self._documents: dict[str, bytes] = {}  # extra manifests by digest (referrers)
        self._referrers: dict[str, bytes] = {}  # the API answer per mode
        self._tag_index: dict[str, bytes] = {}  # the tag-schema index per mode
        self._build()
        registry = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                registry._handle(self, head=False)

            def do_HEAD(self) -> None:  # noqa: N802
                registry._handle(self, head=True)

            def do_POST(self) -> None:  # noqa: N802
                registry._handle(self, head=False)

            do_PUT = do_PATCH = do_DELETE = do_POST

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    # -- the documents ----------------------------------------------------------------------
    def _doc(self, body: object) -> tuple[str, bytes]:
        data = json.dumps(body).encode()
        self._documents[_sha(data)] = data
        return _sha(data), data

    def _build(self) -> None:
        subject = {"mediaType": OCI_MANIFEST, "digest": self.digest, "size": len(self.manifest)}
        empty = b"{}"
        self.blobs[_sha(empty)] = empty
        config = {"mediaType": "application/vnd.oci.empty.v1+json", "digest": _sha(empty),
                  "size": 2}

        def entry(digest: str, size: int, **extra: object) -> dict:
            return {"mediaType": OCI_MANIFEST, "digest": digest, "size": size, **extra}

        def index(entries: object) -> bytes:
            return json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX,
                               "manifests": entries}).encode()

        listed = lambda **extra: entry(_sha(b"x"), 10, **extra)  # noqa: E731
        self._tag_index["tag-str"] = index("not a list")
        self._tag_index["tag-nums"] = index([1, 2, 3])
        self._referrers["api-null"] = index([None])
        self._referrers["ann-list"] = index([listed(annotations=["a", "b"])])
        self._referrers["ptype-object"] = index([listed(
            artifactType=BUNDLE, annotations={"dev.sigstore.bundle.predicateType": {"x": 1}})])
        digest, data = self._doc([1, 2])
        self._referrers["ref-list"] = index([entry(digest, len(data))])
        digest, data = self._doc({"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                                  "artifactType": BUNDLE, "config": config, "layers": [1],
                                  "subject": subject})
        self._referrers["ref-layers-int"] = index([entry(digest, len(data),
                                                         artifactType=BUNDLE)])
        bundle = b'{"mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json"}'
        self.blobs[_sha(bundle)] = bundle
        digest, data = self._doc({"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                                  "artifactType": BUNDLE, "config": config,
                                  "layers": [{"mediaType": BUNDLE, "digest": _sha(bundle),
                                              "size": str(len(bundle))}],
                                  "subject": subject})
        self._referrers["bundle-size-str"] = index([entry(digest, len(data),
                                                          artifactType=BUNDLE)])
        self._referrers["missing-10000"] = index([
            entry("sha256:" + hashlib.sha256(str(i).encode()).hexdigest(), 100)
            for i in range(10_000)])
        digest, data = self._doc({"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                                  "artifactType": "application/vnd.example.note",
                                  "config": config, "layers": [], "subject": subject})
        self.dup_referrer = digest
        self._referrers["dup-2000"] = index([entry(digest, len(data),
                                                   artifactType="application/vnd.example.note")]
                                            * 2000)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def ref(self, mode: str, tag: str = "v1") -> str:
        assert mode in MODES, mode
        return f"{self.address}/{mode}/app:{tag}"

    def writes(self, mode: str = "sink") -> int:
        return sum(self.stats[f"{mode} {m}"] for m in WRITES)

    def __enter__(self) -> "ReferrersRegistry":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()

    # -- answers ----------------------------------------------------------------------------
    def _send(self, h: BaseHTTPRequestHandler, status: int, body: bytes = b"",
              headers: dict[str, str] | None = None, head: bool = False) -> None:
        h.send_response(status)
        for key, value in (headers or {}).items():
            h.send_header(key, value)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if not head:
            h.wfile.write(body)

    def _handle(self, h: BaseHTTPRequestHandler, head: bool) -> None:
        path = h.path.split("?", 1)[0]
        length = int(h.headers.get("Content-Length") or 0)
        if length:
            h.rfile.read(length)
        if path in ("/v2/", "/v2"):
            self._send(h, 200, b"{}", {"Content-Type": "application/json"}, head)
            return
        match = re.fullmatch(r"/v2/([a-z0-9-]+)/app/(manifests|blobs|referrers|tags)/?(.*)",
                             path)
        if not match or match.group(1) not in MODES:
            self._send(h, 404, b'{"errors":[{"code":"NAME_UNKNOWN"}]}', head=head)
            return
        mode, kind, rest = match.groups()
        self.stats[f"{mode} {h.command}"] += 1
        self.stats[f"{mode} {kind} {rest}"] += 1
        if mode == "silent":
            self.stopping.wait(600)
            h.close_connection = True
            return
        if mode == "all-500":
            self._send(h, 500, b'{"errors":[{"code":"UNKNOWN"}]}', head=head)
            return
        if mode == "realm-closed":
            realm = f'Bearer realm="http://127.0.0.1:{self.closed}/token",service="x"'
            self._send(h, 401, b"{}", {"WWW-Authenticate": realm}, head)
            return
        if mode == "sink":
            self._sink(h, kind, head)
            return
        if kind == "referrers":
            if mode == "api-500":
                self._send(h, 500, b'{"errors":[{"code":"UNKNOWN"}]}', head=head)
            elif mode in self._referrers and rest == self.digest:
                self._send(h, 200, self._referrers[mode], {"Content-Type": OCI_INDEX}, head)
            else:
                self._send(h, 404, b"404 page not found", head=head)
            return
        if kind == "tags":
            body = json.dumps({"name": f"{mode}/app", "tags": ["v1"]}).encode()
            self._send(h, 200, body, {"Content-Type": "application/json"}, head)
            return
        if kind == "manifests":
            tag_schema = "sha256-" + self.digest.split(":", 1)[1]
            if rest in ("v1", self.digest):
                body, media = self.manifest, OCI_MANIFEST
            elif rest == tag_schema and mode in self._tag_index:
                body, media = self._tag_index[mode], OCI_INDEX
            elif rest in self._documents:
                body, media = self._documents[rest], OCI_MANIFEST
            else:
                self._send(h, 404, b'{"errors":[{"code":"MANIFEST_UNKNOWN"}]}', head=head)
                return
            self._send(h, 200, body, {"Content-Type": media,
                                      "Docker-Content-Digest": _sha(body)}, head)
            return
        if kind == "blobs" and rest in self.blobs:
            self._send(h, 200, self.blobs[rest], {"Content-Type": "application/octet-stream",
                                                  "Docker-Content-Digest": rest}, head)
            return
        self._send(h, 404, b'{"errors":[{"code":"BLOB_UNKNOWN"}]}', head=head)

    def _sink(self, h: BaseHTTPRequestHandler, kind: str, head: bool) -> None:
        """A destination that takes every write (counted) and holds nothing."""
        if h.command == "POST":
            self._send(h, 202, b"", {"Location": f"/v2/sink/app/blobs/uploads/x",
                                     "Docker-Upload-UUID": "x"})
        elif h.command in ("PUT", "PATCH"):
            self._send(h, 201, b"", {"Location": h.path})
        elif kind == "tags":
            self._send(h, 200, b'{"name":"sink/app","tags":[]}', head=head)
        else:
            self._send(h, 404, b'{"errors":[{"code":"MANIFEST_UNKNOWN"}]}', head=head)
