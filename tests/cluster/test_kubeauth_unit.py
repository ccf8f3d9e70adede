"""Kubernetes credentials that expire, without a cluster: the real exec plugin script
(tests/cluster/exec_plugin.py, run as a subprocess like any plugin) against an API stand-in
that checks its tokens. The real-cluster path, through an authenticating front, is in
test_kubeauth_real.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from imagekit.errors import TransportError
from imagekit.kube import Kube, kubeconfig
from imagekit.kube.kubeauth import KubeAuth, KubeCredentialError, source_for

from . import exec_plugin
from .fake_api import RESOURCE_LISTS
from .kube_front import exec_kubeconfig, plugin_runs, plugin_state

REPO = Path(__file__).resolve().parents[2]
KEY = b"k" * 32
SERVER = "https://api.imagekit.invalid"


class Clock:
    """Wall-clock time plus an offset the test moves forward (no sleeping)."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


class Api:
    """The API server's part that matters here: 401 unless the token is ours and current."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.seen: list[tuple[str, str]] = []   # (token run number or '-', verdict)
        self.revoked: set[str] = set()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        auth = request.headers.get("authorization", "")
        token = auth.removeprefix("Bearer ")
        verdict = exec_plugin.check(KEY, token, int(self.clock() * 1000)) \
            if auth.startswith("Bearer ") else "invalid"
        run = token.split(".")[2] if verdict != "invalid" else "-"
        if run in self.revoked:
            verdict = "revoked"
        self.seen.append((run, verdict))
        if verdict != "ok":
            return httpx.Response(401, json={"kind": "Status", "message": "Unauthorized"})
        if request.url.path in RESOURCE_LISTS:      # discovery, through the same credential
            return httpx.Response(200, json=RESOURCE_LISTS[request.url.path])
        return httpx.Response(200, json={"run": run})


def _setup(tmp_path: Path, **plugin: object):
    state = plugin_state(tmp_path / "plugin", KEY)
    path = exec_kubeconfig(tmp_path / "kubeconfig", SERVER, None, state, **plugin)
    target = kubeconfig.load(path)
    clock = Clock()
    source = source_for(target, kubeconfig.ssl_context(target), clock=clock)
    api = Api(clock)
    client = httpx.Client(base_url=SERVER, auth=KubeAuth(source),
                          transport=httpx.MockTransport(api))
    return state, clock, api, client


def test_token_is_renewed_before_it_expires(tmp_path: Path) -> None:
    state, clock, api, client = _setup(tmp_path, ttl=30)
    first = client.get("/api/v1/pods").json()["run"]
    assert client.get("/api/v1/pods").json()["run"] == first   # cached, no new run
    assert len(plugin_runs(state)) == 1
    clock.offset = 29.0                   # inside the renewal margin, not yet expired
    assert client.get("/api/v1/pods").json()["run"] != first
    assert len(plugin_runs(state)) == 2
    assert all(verdict == "ok" for _, verdict in api.seen)   # renewed before, never a 401
    info = plugin_runs(state)[0]          # what client-go gives a plugin
    assert info == {"apiVersion": "client.authentication.k8s.io/v1beta1",
                    "kind": "ExecCredential", "spec": {"interactive": False}}


def test_a_401_reruns_the_plugin_and_resends_the_request_once(tmp_path: Path) -> None:
    state, clock, api, client = _setup(tmp_path, ttl=600)
    assert client.get("/x").json()["run"] == "1"
    api.revoked.add("1")                  # the server stops accepting a token it issued
    response = client.post("/api/v1/namespaces/n/configmaps", content=b'{"a": 1}')
    assert response.status_code == 200 and response.json()["run"] == "2"
    assert api.seen[-2:] == [("1", "revoked"), ("2", "ok")]
    assert len(plugin_runs(state)) == 2


def test_a_streamed_body_is_not_sent_twice(tmp_path: Path) -> None:
    state, clock, api, client = _setup(tmp_path, ttl=600)
    client.get("/x")
    api.revoked.add("1")
    response = client.post("/y", content=iter([b"chunk"]))
    assert response.status_code == 401                  # the caller decides to resend
    assert client.get("/x").json()["run"] == "2"        # with the renewed credential
    assert [v for _, v in api.seen] == ["ok", "revoked", "ok"]


def test_a_failed_renewal_stops_the_run_and_cleanup_gets_the_last_good_token(
        tmp_path: Path) -> None:
    state, clock, api, client = _setup(tmp_path, ttl=30, fail_after=1)
    client.get("/x")
    clock.offset = 28.0      # due for renewal; the plugin now fails; the token still works
    with pytest.raises(KubeCredentialError) as stopped:
        client.get("/x")     # the operation stops here (it could not go on past expiry)
    assert "the exec plugin could not renew the credential, which expires at" in \
        stopped.value.message
    assert "exited 1: error: the login session expired" in stopped.value.message
    runs = len(plugin_runs(state))
    assert client.delete("/pod").json()["run"] == "1"   # cleanup: the last good token
    assert len(plugin_runs(state)) == runs               # without asking the plugin again
    clock.offset = 31.0      # expired: the server refuses, the plugin still cannot renew
    with pytest.raises(KubeCredentialError) as caught:
        client.delete("/pod")
    message = caught.value.one_line()
    assert message.startswith("kubeconfig user 'exec-user': the API server refused the "
                              "credential (401) and the exec plugin could not renew it: ")
    assert "exited 1: error: the login session expired" in message
    assert "\n" not in message
    assert [v for _, v in api.seen] == ["ok", "ok", "expired"]


@pytest.mark.parametrize(("plugin", "expected"), [
    ({"command": "/nonexistent/kubectl-login"},
     "exec plugin '/nonexistent/kubectl-login' not found; install the test plugin"),
    ({"mode": "exit1"}, "exited 1: error: the login session expired"),
    ({"mode": "nonjson"}, "printed no ExecCredential JSON"),
    ({"mode": "wrong-version"}, "answered apiVersion 'client.authentication.k8s.io/v0'"),
])
def test_a_plugin_that_cannot_give_a_credential_is_one_line_naming_the_user(
        tmp_path: Path, plugin: dict, expected: str) -> None:
    state = plugin_state(tmp_path / "plugin", KEY)
    path = exec_kubeconfig(tmp_path / "kubeconfig", SERVER, None, state, user="eks-admin",
                           **plugin)
    with pytest.raises(KubeCredentialError) as caught:
        Kube(path)                         # before any request: nothing was changed yet
    assert caught.value.exit_code == 2
    assert caught.value.message.startswith("kubeconfig user 'eks-admin': ")
    assert expected in caught.value.message
    assert caught.value.where == str(path)
    if "mode" not in plugin:
        return
    # the same through the CLI: one line, exit 2, no traceback
    probes = tmp_path / "probes"
    probes.mkdir()
    (probes / "p.py").write_text("print(1)\n")
    result = subprocess.run(
        [sys.executable, "-m", "imagekit", "cluster", "probe",
         "127.0.0.1:1/x@sha256:" + "a" * 64, "--kubeconfig", str(path), "--probes-dir",
         str(probes), "--evidence-dir", str(tmp_path / "ev")],
        capture_output=True, text=True, cwd=REPO, timeout=60,
        env={**os.environ, "IMAGEKIT_PROGRESS": "plain"})
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("imagekit: error: kubeconfig user "
                                                   "'eks-admin': "), result.stderr
    assert expected in lines[0]


def test_v1_without_interactive_mode_is_refused(tmp_path: Path) -> None:
    state = plugin_state(tmp_path / "plugin", KEY)
    path = exec_kubeconfig(tmp_path / "kubeconfig", SERVER, None, state,
                           api_version="client.authentication.k8s.io/v1")
    doc = json.loads(path.read_text())
    del doc["users"][0]["user"]["exec"]["interactiveMode"]
    path.write_text(json.dumps(doc))
    with pytest.raises(Exception) as caught:
        Kube(path)
    assert "interactiveMode must be set" in str(caught.value)
    assert plugin_runs(state) == []


def test_v1_plugin_works(tmp_path: Path) -> None:
    state, clock, api, client = _setup(tmp_path, api_version="client.authentication.k8s.io/v1")
    assert client.get("/x").status_code == 200
    assert plugin_runs(state)[0]["apiVersion"] == "client.authentication.k8s.io/v1"


def test_token_file_is_reread_when_it_changes_and_after_a_401(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("first\n")
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps({
        "current-context": "c", "clusters": [{"name": "c", "cluster": {"server": SERVER}}],
        "users": [{"name": "sa", "user": {"tokenFile": "token"}}],   # relative to the file
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "sa"}}]}))
    target = kubeconfig.load(path)
    accepted = {"Bearer first"}
    seen: list[str] = []

    def api(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["authorization"])
        ok = request.headers["authorization"] in accepted
        return httpx.Response(200 if ok else 401, json={})

    client = httpx.Client(base_url=SERVER, transport=httpx.MockTransport(api),
                          auth=KubeAuth(source_for(target, kubeconfig.ssl_context(target))))
    assert client.get("/x").status_code == 200
    token_file.write_text("second-token\n")             # the kubelet rotated it
    accepted = {"Bearer second-token"}
    assert client.get("/x").status_code == 200
    assert seen == ["Bearer first", "Bearer second-token"]
    # rotated within the same mtime tick and size: the 401 makes it re-read
    os.utime(token_file, ns=(0, 0))
    client.get("/x")
    token_file.write_text("third-token!\n")
    os.utime(token_file, ns=(0, 0))
    accepted = {"Bearer third-token!"}
    assert client.get("/x").status_code == 200
    assert seen[-2:] == ["Bearer second-token", "Bearer third-token!"]
    accepted = set()
    with pytest.raises(KubeCredentialError, match="refused the token in tokenFile"):
        client.get("/x")


def test_credential_error_says_what_the_run_left_behind(tmp_path: Path) -> None:
    state = plugin_state(tmp_path / "plugin", KEY)
    path = exec_kubeconfig(tmp_path / "kubeconfig", SERVER, None, state, ttl=600,
                           fail_after=1)
    clock = Clock()
    api = Api(clock)
    with pytest.raises(KubeCredentialError) as caught, Kube(path) as kube:
        kube._http = httpx.Client(base_url=SERVER, auth=KubeAuth(kube.credentials),
                                  transport=httpx.MockTransport(api))
        kube.create({"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": "gone", "namespace": "ns"}})
        kube.create({"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": "stays", "namespace": "ns"}})
        kube.delete("/api/v1/namespaces/ns/configmaps/gone")
        api.revoked.add("1")
        kube.get_pod("ns", "stays")
    message = caught.value.one_line()
    assert message.endswith("left behind (created by this run, not deleted): Pod ns/stays "
                            f"({path})")
    assert "ConfigMap" not in message


# ------------------------------------------------------------------------------ client certs

def _pki(folder: Path):
    """A CA, a server certificate for 127.0.0.1 and a client certificate (CN=ik-client)."""
    import datetime as dt
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())

    def issue(cn: str, key, ca: bool = False, san: bool = False) -> x509.Certificate:
        builder = (x509.CertificateBuilder().subject_name(name(cn)).issuer_name(name("ik-ca"))
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - dt.timedelta(minutes=5))
                   .not_valid_after(now + dt.timedelta(hours=1))
                   .add_extension(x509.BasicConstraints(ca=ca, path_length=None),
                                  critical=True))
        if san:
            builder = builder.add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                 x509.DNSName("kube.internal")]), critical=False)
        return builder.sign(ca_key, hashes.SHA256())

    def pem(obj) -> bytes:
        if isinstance(obj, x509.Certificate):
            return obj.public_bytes(serialization.Encoding.PEM)
        return obj.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())

    server_key, client_key = ec.generate_private_key(ec.SECP256R1()), \
        ec.generate_private_key(ec.SECP256R1())
    ca = issue("ik-ca", ca_key, ca=True)
    (folder / "ca.crt").write_bytes(pem(ca))
    (folder / "server.pem").write_bytes(pem(issue("server", server_key, san=True))
                                        + pem(server_key))
    return pem(ca), pem(issue("ik-client", client_key)), pem(client_key)


def _mtls_server(folder: Path):
    """HTTPS on 127.0.0.1 that requires a client certificate and answers with its CN."""
    import ssl
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            subject = dict(x[0] for x in self.connection.getpeercert()["subject"])
            body = json.dumps({"cn": subject["commonName"],
                               "authorization": self.headers.get("Authorization")}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(folder / "server.pem"))
    context.load_verify_locations(str(folder / "ca.crt"))
    context.verify_mode = ssl.CERT_REQUIRED
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_client_certificates_keep_working(tmp_path: Path) -> None:
    """client-certificate-data / client-key-data (and the files) are presented, the CA of
    certificate-authority-data verifies the server."""
    import base64

    ca, cert, key = _pki(tmp_path)
    server = _mtls_server(tmp_path)
    (tmp_path / "client.crt").write_bytes(cert)
    (tmp_path / "client.key").write_bytes(key)
    b64 = lambda data: base64.b64encode(data).decode()  # noqa: E731
    try:
        for user in ({"client-certificate-data": b64(cert), "client-key-data": b64(key)},
                     {"client-certificate": "client.crt", "client-key": "client.key"}):
            path = tmp_path / "kubeconfig"
            path.write_text(json.dumps({
                "current-context": "c",
                "clusters": [{"name": "c", "cluster": {
                    "server": f"https://127.0.0.1:{server.server_address[1]}",
                    "certificate-authority-data": b64(ca)}}],
                "users": [{"name": "admin", "user": user}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "admin"}}]}))
            with Kube(path) as kube:
                assert kube.get("/version") == {"cn": "ik-client", "authorization": None}
        # tls-server-name: the certificate is checked for that name, not for the address
        doc = json.loads(path.read_text())
        for server_name, works in (("kube.internal", True), ("other.internal", False)):
            doc["clusters"][0]["cluster"]["tls-server-name"] = server_name
            path.write_text(json.dumps(doc))
            with Kube(path) as kube:
                if works:
                    assert kube.get("/version")["cn"] == "ik-client"
                else:
                    with pytest.raises(TransportError, match="cannot reach the API server"):
                        kube.get("/version")
    finally:
        server.shutdown()


def test_an_exec_plugin_may_give_a_client_certificate(tmp_path: Path) -> None:
    ca, cert, key = _pki(tmp_path)
    server = _mtls_server(tmp_path)
    state = plugin_state(tmp_path / "plugin", KEY)
    (state / "client.crt").write_bytes(cert)
    (state / "client.key").write_bytes(key)
    path = exec_kubeconfig(tmp_path / "kubeconfig", f"https://127.0.0.1:"
                           f"{server.server_address[1]}", tmp_path / "ca.crt", state,
                           mode="cert", ttl=600)
    try:
        with Kube(path) as kube:
            assert kube.get("/version") == {"cn": "ik-client", "authorization": None}
    finally:
        server.shutdown()
    assert len(plugin_runs(state)) == 1
