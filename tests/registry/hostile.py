"""A hostile registry: what real registries cannot be made to do, on ports we own.

One tiny image (`app:v1`: a config and one layer, OCI manifest) served by a ThreadingHTTPServer
on 127.0.0.1, misbehaving as `mode` says:

- `redirect-loop`: every repository URL answers 302 to itself;
- `slow-realm`: `/v2/` challenges with a Bearer realm on the same server that accepts the
  connection and never answers;
- `truncated`: manifests and blobs are 200 with a Content-Length, half the body, then a close;
- `retry-after`: manifests and blobs are 429 with `Retry-After: 3600`;
- `wrong-digest`: the manifest served for the tag is not what `Docker-Content-Digest` claims,
  bytes asked for by digest do not hash to it, blobs have a byte flipped;
- `ratelimit`: a well-behaved registry that sends `RateLimit-Limit`/`RateLimit-Remaining`,
  counts GETs and HEADs, and (with `flaky=N`) answers the first N manifest GETs with 503 (for
  the etiquette tests);
- `tls=True`: the same over TLS with a self-signed certificate nobody trusts.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import json
import re
import socket
import ssl
import tarfile
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

MODES = ("redirect-loop", "slow-realm", "truncated", "retry-after", "wrong-digest", "ratelimit")
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def tiny_image() -> tuple[bytes, dict[str, bytes]]:
    """(manifest bytes, blobs by digest) of a one-layer linux/amd64 image."""
    tar_buffer = io.BytesIO()
    with tarfile.open(fileobj=tar_buffer, mode="w") as tar:
        payload = b"hostile registry layer\n" * 100
        info = tarfile.TarInfo("hello.txt")
        info.size = len(payload)
        tar.addfile(info, io.BytesIO(payload))
    layer = tar_buffer.getvalue()
    config = json.dumps({"architecture": "amd64", "os": "linux", "config": {},
                         "rootfs": {"type": "layers", "diff_ids": [_sha(layer)]}}).encode()
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": OCI_MANIFEST,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": _sha(config), "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": _sha(layer), "size": len(layer)}]}).encode()
    return manifest, {_sha(config): config, _sha(layer): layer}


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A throw-away certificate for 127.0.0.1 that no trust store holds."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    import ipaddress

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "hostile.invalid")])
    now = dt.datetime.now(dt.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = folder / "hostile.crt", folder / "hostile.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    key_file.chmod(0o600)
    return cert_file, key_file


class HostileRegistry:
    def __init__(self, mode: str, port: int, *, tls_dir: Path | None = None,
                 flaky: int = 0) -> None:
        assert mode in MODES, mode
        self.mode = mode
        self.flaky = flaky  # ratelimit mode: the first `flaky` manifest GETs answer 503
        self.manifest, self.blobs = tiny_image()
        self.digest = _sha(self.manifest)
        self.stats: Counter[str] = Counter()
        self.stopping = threading.Event()
        registry = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def handle(self) -> None:
                """A TLS ClientHello on the plain port is answered 400 at once, as real
                servers do (http.server alone would wait for a request line forever)."""
                if tls_dir is None:
                    try:
                        first = self.connection.recv(1, socket.MSG_PEEK)
                    except OSError:
                        return
                    if first == b"\x16":
                        self.connection.sendall(b"HTTP/1.1 400 Bad Request\r\n"
                                                b"Content-Length: 0\r\nConnection: close"
                                                b"\r\n\r\n")
                        return
                super().handle()

            def do_GET(self) -> None:  # noqa: N802
                registry._handle(self, head=False)

            def do_HEAD(self) -> None:  # noqa: N802
                registry._handle(self, head=True)

            def do_POST(self) -> None:  # noqa: N802
                registry._handle(self, head=False)

            do_PUT = do_PATCH = do_DELETE = do_POST

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        if tls_dir is not None:
            cert, key = self_signed(tls_dir)
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(cert, key)
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = port
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> "HostileRegistry":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()

    # -- answers ----------------------------------------------------------------------------
    def _send(self, h: BaseHTTPRequestHandler, status: int, body: bytes = b"",
              headers: dict[str, str] | None = None, head: bool = False,
              cut: bool = False) -> None:
        h.send_response(status)
        for key, value in (headers or {}).items():
            h.send_header(key, value)
        if self.mode == "ratelimit":
            h.send_header("RateLimit-Limit", "100;w=21600")
            h.send_header("RateLimit-Remaining", str(max(0, 100 - self.stats["GET"])) +
                          ";w=21600")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if head:
            return
        if cut:
            h.wfile.write(body[:len(body) // 2])
            h.wfile.flush()
            h.close_connection = True
            try:
                h.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        h.wfile.write(body)

    def _handle(self, h: BaseHTTPRequestHandler, head: bool) -> None:
        self.stats[h.command] += 1
        path = h.path.split("?", 1)[0]
        if path == "/token":  # the slow realm: accept, then say nothing until we stop
            self.stopping.wait(600)
            h.close_connection = True
            return
        if path in ("/v2/", "/v2"):
            if self.mode == "slow-realm":
                realm = f'Bearer realm="http://{self.address}/token",service="hostile"'
                self._send(h, 401, b"{}", {"WWW-Authenticate": realm}, head)
            else:
                self._send(h, 200, b"{}", {"Content-Type": "application/json"}, head)
            return
        if self.mode == "slow-realm":
            realm = (f'Bearer realm="http://{self.address}/token",service="hostile",'
                     'scope="repository:app:pull"')
            self._send(h, 401, b"{}", {"WWW-Authenticate": realm}, head)
            return
        if self.mode == "redirect-loop":
            self._send(h, 302, b"", {"Location": h.path}, head)
            return
        if self.mode == "retry-after":
            self._send(h, 429, b'{"errors":[{"code":"TOOMANYREQUESTS"}]}',
                       {"Retry-After": "3600"}, head)
            return
        manifest = re.fullmatch(r"/v2/(.+)/manifests/([^/]+)", path)
        blob = re.fullmatch(r"/v2/(.+)/blobs/(sha256:[0-9a-f]{64})", path)
        cut = self.mode == "truncated"
        if manifest and self.mode == "ratelimit" and h.command == "GET":
            self.stats["manifest-GET"] += 1
            if self.stats["manifest-GET"] <= self.flaky:  # a hiccup that heals
                self._send(h, 503, b'{"errors":[{"code":"UNAVAILABLE"}]}', head=head)
                return
        if manifest:
            reference = manifest.group(2)
            if reference not in ("v1", self.digest):
                self._send(h, 404, b'{"errors":[{"code":"MANIFEST_UNKNOWN"}]}', head=head)
                return
            body, claimed = self.manifest, self.digest
            if self.mode == "wrong-digest":
                body = self.manifest.replace(b'"schemaVersion": 2', b'"schemaVersion":  2')
            self._send(h, 200, body, {"Content-Type": OCI_MANIFEST,
                                      "Docker-Content-Digest": claimed}, head, cut)
            return
        if blob and blob.group(2) in self.blobs:
            body = self.blobs[blob.group(2)]
            if self.mode == "wrong-digest":
                body = bytes([body[0] ^ 1]) + body[1:]
            self._send(h, 200, body, {"Content-Type": "application/octet-stream",
                                      "Docker-Content-Digest": blob.group(2)}, head, cut)
            return
        self._send(h, 404, b'{"errors":[{"code":"NAME_UNKNOWN"}]}', head=head)
