"""An authenticating front before the local API server, for the expiring-credential tests.

The local cluster authenticates with a static token file (tokens.csv), so it cannot tell an
expired token from a good one. This front can: it listens with TLS on 127.0.0.1 (a
certificate of its own), accepts only tokens minted by `exec_plugin.py` with its key and not
yet expired, answers 401 (a Kubernetes `Status`, as the API server does) to anything else, and
forwards the rest upstream with the cluster's real admin token. Each request is authenticated;
response bodies — watch events, followed logs — are relayed as they arrive, never buffered.

Two ways to treat the client's connection:
- `close_after_stream=False` (default): one request per connection, `Connection: close` both
  ways, announced.
- `close_after_stream=True`: what a load balancer with a short idle timeout does. The client's
  connection is kept alive (an answer of known length keeps it, without `Connection: close`,
  so the client pools it); after a streamed answer (chunked: a watch, a followed log, a large
  list) the front closes it without announcing it. So that the race is met every time and not
  only when the client is fast, the front first lingers `linger` seconds: a request the client
  sends on that connection meanwhile is read and dropped unanswered (counted in `dropped`).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import secrets
import socket
import ssl
import threading
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from . import exec_plugin

_HEAD_MAX = 64 * 1024


def _self_signed(folder: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "imagekit-test-kube-front")])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = folder / "front.crt", folder / "front.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    key_path.chmod(0o600)
    return cert_path, key_path


class KubeFront:
    def __init__(self, admin_kubeconfig: Path, folder: Path, *,
                 close_after_stream: bool = False, linger: float = 0.5) -> None:
        from imagekit.kube import kubeconfig

        target = kubeconfig.load(admin_kubeconfig)
        assert target.user.token, "the local cluster's admin user has a static token"
        self._upstream_token = target.user.token
        self._upstream_ssl = kubeconfig.ssl_context(target)
        server = target.cluster.server.removeprefix("https://").rstrip("/")
        host, _, port = server.rpartition(":")
        self._upstream = (host, int(port))
        self.key = secrets.token_bytes(32)
        self.cert, key_path = _self_signed(folder)
        self._ssl = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._ssl.load_cert_chain(str(self.cert), str(key_path))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"https://127.0.0.1:{self._listener.getsockname()[1]}"
        self._lock = threading.Lock()
        self.forwarded = 0
        self.expired = 0    # 401: a token of ours that had expired
        self.invalid = 0    # 401: no token, or one we did not mint
        self.close_after_stream, self.linger = close_after_stream, linger
        self.streamed = 0   # answers relayed until the upstream closed (chunked)
        self.dropped = 0    # requests read on a connection closed without an answer
        self.reused = 0     # requests that came on a connection which had served one before
        self._stopped = False
        threading.Thread(target=self._serve, daemon=True).start()

    def stop(self) -> None:
        self._stopped = True
        self._listener.close()

    # -------------------------------------------------------------------------------------
    def _serve(self) -> None:
        while not self._stopped:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, raw: socket.socket) -> None:
        try:
            raw.settimeout(30)
            with self._ssl.wrap_socket(raw, server_side=True) as client:
                if not self.close_after_stream:
                    self._relay(client, b"")
                    return
                pending, served = b"", 0
                while True:
                    if served:
                        with self._lock:
                            self.reused += 1
                    kept = self._relay(client, pending)
                    if kept is None:
                        return
                    pending, served = kept, served + 1
        except (OSError, ssl.SSLError, ValueError):
            pass

    def _relay(self, client: ssl.SSLSocket, data: bytes) -> bytes | None:
        """One request and its answer; the bytes read past the request when the connection
        stays open for the next one (None: it is closed)."""
        while b"\r\n\r\n" not in data:
            chunk = client.recv(65536)
            if not chunk or len(data) > _HEAD_MAX:
                return None
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers: list[tuple[str, str]] = []
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers.append((name.strip(), value.strip()))
        auth = next((v for n, v in headers if n.lower() == "authorization"), "")
        verdict = exec_plugin.check(self.key, auth[7:]) if auth.startswith("Bearer ") \
            else "invalid"
        if verdict != "ok":
            with self._lock:
                if verdict == "expired":
                    self.expired += 1
                else:
                    self.invalid += 1
            body = json.dumps({"kind": "Status", "apiVersion": "v1", "metadata": {},
                               "status": "Failure", "message": "Unauthorized",
                               "reason": "Unauthorized", "code": 401}).encode()
            client.sendall(b"HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\n"
                           b"Connection: close\r\nContent-Length: " + str(len(body)).encode()
                           + b"\r\n\r\n" + body)
            return None
        length = int(next((v for n, v in headers if n.lower() == "content-length"), "0"))
        while len(rest) < length:
            chunk = client.recv(65536)
            if not chunk:
                return None
            rest += chunk
        rest, after = rest[:length], rest[length:]
        drop = {"authorization", "connection", "keep-alive", "proxy-connection"}
        kept = [f"{n}: {v}" for n, v in headers if n.lower() not in drop]
        upstream_head = "\r\n".join([lines[0], *kept,
                                     f"Authorization: Bearer {self._upstream_token}",
                                     "Connection: close", "", ""]).encode("latin-1")
        with self._lock:
            self.forwarded += 1
        with socket.create_connection(self._upstream, timeout=3700) as plain, \
                self._upstream_ssl.wrap_socket(plain, server_hostname=self._upstream[0]) \
                as upstream:
            upstream.sendall(upstream_head + rest)
            if not self.close_after_stream:
                while True:          # relayed as it arrives: watch events, followed logs
                    chunk = upstream.recv(65536)
                    if not chunk:
                        return None
                    client.sendall(chunk)
            return self._relay_kept(client, upstream, after,
                                    method=lines[0].split(" ", 1)[0])

    def _relay_kept(self, client: ssl.SSLSocket, upstream: ssl.SSLSocket, after: bytes, *,
                    method: str) -> bytes | None:
        """The answer with its `Connection` headers taken out: one of known length keeps the
        connection; a streamed one is relayed to its end, then the connection is closed
        (after the linger) without a word."""
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = upstream.recv(65536)
            if not chunk:
                client.sendall(answer)
                return None
            answer += chunk
        head, _, body = answer.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        fields = [(n.strip().lower(), v.strip()) for n, _, v in
                  (line.partition(":") for line in lines[1:])]
        kept = [line for line in lines[1:] if line.partition(":")[0].strip().lower()
                not in ("connection", "keep-alive")]
        client.sendall("\r\n".join([lines[0], *kept, "", ""]).encode("latin-1"))
        status = int(lines[0].split(" ", 2)[1])
        length = next((int(v) for n, v in fields if n == "content-length"), None)
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            length = 0
        if length is not None:
            while len(body) < length:
                chunk = upstream.recv(65536)
                if not chunk:
                    break
                body += chunk
            client.sendall(body[:length])
            return after                     # kept alive: the client pools it
        client.sendall(body)
        while True:                          # streamed: relayed until the upstream closes
            chunk = upstream.recv(65536)
            if not chunk:
                break
            client.sendall(chunk)
        with self._lock:
            self.streamed += 1
        client.settimeout(self.linger)
        try:
            if after or client.recv(65536):  # the client reused it: dropped unanswered
                with self._lock:
                    self.dropped += 1
        except (TimeoutError, OSError):
            pass
        return None


PLUGIN = Path(__file__).resolve().with_name("exec_plugin.py")


def plugin_state(folder: Path, key: bytes) -> Path:
    """A folder for one plugin: its signing key (the front's) and its run log."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "key").write_bytes(key)
    (folder / "key").chmod(0o600)
    return folder


def plugin_runs(state: Path) -> list[dict]:
    runs = state / "runs"
    if not runs.is_file():
        return []
    return [json.loads(line) if line.strip() else {} for line in runs.read_text().splitlines()]


def exec_kubeconfig(path: Path, server: str, ca_file: Path | None, state: Path, *,
                    ttl: float = 3.0, fail_after: int = 0, mode: str = "ok",
                    command: str | None = None, user: str = "exec-user",
                    api_version: str = "client.authentication.k8s.io/v1beta1") -> Path:
    """A kubeconfig whose user authenticates through exec_plugin.py (run by this Python)."""
    import sys

    args = [str(PLUGIN), str(state), "--ttl", str(ttl), "--mode", mode]
    if fail_after:
        args += ["--fail-after", str(fail_after)]
    exec_config = {"apiVersion": api_version, "command": command or sys.executable,
                   "args": args, "interactiveMode": "Never",
                   "installHint": "install the test plugin (tests/cluster/exec_plugin.py)"}
    cluster: dict = {"server": server}
    if ca_file is not None:
        cluster["certificate-authority"] = str(ca_file)
    doc = {"apiVersion": "v1", "kind": "Config", "current-context": "front",
           "clusters": [{"name": "front", "cluster": cluster}],
           "users": [{"name": user, "user": {"exec": exec_config}}],
           "contexts": [{"name": "front", "context": {"cluster": "front", "user": user}}]}
    path.write_text(json.dumps(doc, indent=2))
    return path
