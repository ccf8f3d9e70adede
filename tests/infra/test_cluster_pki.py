"""The cluster PKI made with `cryptography` (imagekit.infra.pki.write_cluster_pki) carries what
the former openssl-CLI recipe made: the recipe is kept here, verbatim, as the reference, and
openssl itself is the independent checker of the chain; a mutual-TLS handshake with Python's
ssl proves the certificates do their job (apiserver serving, kubelet-client authenticating)."""

from __future__ import annotations

import datetime as dt
import shutil
import socket
import ssl
import subprocess
import threading
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from imagekit.infra.pki import write_cluster_pki

OPENSSL = shutil.which("openssl")
pytestmark = pytest.mark.skipif(OPENSSL is None, reason="openssl CLI missing")  # it is in PACKAGES
CERTS = ("ca", "apiserver", "kubelet-client")


def _openssl_reference(k: Path) -> None:
    """imagekit/infra/cluster.py::_ensure_pki as it was (openssl 3)."""
    k.mkdir(parents=True)

    def ossl(*args: str) -> None:
        subprocess.run([OPENSSL or "openssl", *args], check=True, capture_output=True)

    ossl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650", "-subj",
         "/CN=imagekit-k8s-ca", "-keyout", f"{k}/ca.key", "-out", f"{k}/ca.crt")
    ossl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=kube-apiserver",
         "-keyout", f"{k}/apiserver.key", "-out", f"{k}/apiserver.csr")
    (k / "san.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,"
        "DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:10.96.0.1\n")
    ossl("x509", "-req", "-in", f"{k}/apiserver.csr", "-CA", f"{k}/ca.crt", "-CAkey",
         f"{k}/ca.key", "-CAcreateserial", "-days", "3650", "-extfile", f"{k}/san.ext",
         "-out", f"{k}/apiserver.crt")
    ossl("req", "-newkey", "rsa:2048", "-nodes", "-subj",
         "/O=system:masters/CN=kube-apiserver-kubelet-client",
         "-keyout", f"{k}/kubelet-client.key", "-out", f"{k}/kubelet-client.csr")
    ossl("x509", "-req", "-in", f"{k}/kubelet-client.csr", "-CA", f"{k}/ca.crt", "-CAkey",
         f"{k}/ca.key", "-CAcreateserial", "-days", "3650", "-out", f"{k}/kubelet-client.crt")
    ossl("genrsa", "-out", f"{k}/sa.key", "2048")
    ossl("rsa", "-in", f"{k}/sa.key", "-pubout", "-out", f"{k}/sa.pub")


def _profile(cert: x509.Certificate, ca: x509.Certificate) -> dict[str, object]:
    """Everything that decides how a TLS peer treats the certificate (not serials, key bytes)."""
    exts: dict[str, object] = {}
    for ext in cert.extensions:
        value = ext.value
        if isinstance(value, x509.SubjectKeyIdentifier):
            shown: object = value.digest == x509.SubjectKeyIdentifier.from_public_key(
                cert.public_key()).digest              # the RFC 5280 method-1 hash of the key
        elif isinstance(value, x509.AuthorityKeyIdentifier):
            shown = (value.key_identifier == x509.SubjectKeyIdentifier.from_public_key(
                ca.public_key()).digest, value.authority_cert_issuer)
        elif isinstance(value, x509.SubjectAlternativeName):
            shown = [str(n.value) for n in value]
        else:
            shown = value
        exts[ext.oid.dotted_string] = (ext.critical, shown)
    key = cert.public_key()
    assert isinstance(key, rsa.RSAPublicKey)
    return {
        "subject": cert.subject.rfc4514_string(), "issuer": cert.issuer.rfc4514_string(),
        "extensions": exts,
        "days": (cert.not_valid_after_utc - cert.not_valid_before_utc).days,
        "key": (key.key_size, key.public_numbers().e),
        "signature": cert.signature_algorithm_oid.dotted_string,
    }


def _load(directory: Path, name: str) -> x509.Certificate:
    return x509.load_pem_x509_certificate((directory / f"{name}.crt").read_bytes())


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("pki")
    _openssl_reference(root / "openssl")
    write_cluster_pki(root / "new")
    return root / "openssl", root / "new"


def test_every_certificate_carries_what_openssl_gave_it(both: tuple[Path, Path]) -> None:
    old_dir, new_dir = both
    old_ca, new_ca = _load(old_dir, "ca"), _load(new_dir, "ca")
    for name in CERTS:
        old, new = _load(old_dir, name), _load(new_dir, name)
        assert _profile(new, new_ca) == _profile(old, old_ca), name
        # issued now, for 3650 days (the two were made seconds apart)
        assert abs(new.not_valid_before_utc - old.not_valid_before_utc) < dt.timedelta(minutes=5)
    api = _profile(_load(new_dir, "apiserver"), new_ca)["extensions"]
    assert isinstance(api, dict)
    assert api["2.5.29.17"] == (False, ["127.0.0.1", "localhost", "kubernetes",
                                        "kubernetes.default", "kubernetes.default.svc",
                                        "kubernetes.default.svc.cluster.local", "10.96.0.1"])
    assert _profile(new_ca, new_ca)["extensions"]["2.5.29.19"] == (    # type: ignore[index]
        True, x509.BasicConstraints(ca=True, path_length=None))
    # the one difference: openssl's extension-less client cert was X.509 v1, ours is v3 with
    # (still) no extensions, so no key-usage constraint appears that the kubelet would check
    assert _load(old_dir, "kubelet-client").version is x509.Version.v1
    assert _load(new_dir, "kubelet-client").version is x509.Version.v3
    assert list(_load(new_dir, "kubelet-client").extensions) == []


def test_keys_files_and_modes(both: tuple[Path, Path]) -> None:
    old_dir, new_dir = both
    assert sorted(p.name for p in new_dir.iterdir()) == sorted(
        p.name for p in old_dir.iterdir() if p.suffix not in (".csr", ".srl", ".ext"))
    for name in (*CERTS, "sa"):
        key_file = new_dir / f"{name}.key"
        assert key_file.stat().st_mode & 0o777 == 0o600
        assert key_file.read_bytes().splitlines()[0] == (
            old_dir / f"{name}.key").read_bytes().splitlines()[0] == b"-----BEGIN PRIVATE KEY-----"
        key = serialization.load_pem_private_key(key_file.read_bytes(), password=None)
        assert isinstance(key, rsa.RSAPrivateKey) and key.key_size == 2048
    for name in CERTS:   # each key is its certificate's
        key = serialization.load_pem_private_key((new_dir / f"{name}.key").read_bytes(), None)
        assert _load(new_dir, name).public_key() == key.public_key()
    sa = serialization.load_pem_private_key((new_dir / "sa.key").read_bytes(), None)
    assert serialization.load_pem_public_key((new_dir / "sa.pub").read_bytes()) == sa.public_key()
    assert (new_dir / "sa.pub").read_bytes().startswith(b"-----BEGIN PUBLIC KEY-----")


def _verify(ca: Path, *certs: Path, options: tuple[str, ...] = ()
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([OPENSSL or "openssl", "verify", *options, "-CAfile", str(ca),
                           *map(str, certs)], capture_output=True, text=True)


def test_openssl_verifies_the_chain(both: tuple[Path, Path], tmp_path: Path) -> None:
    old_dir, new_dir = both
    done = _verify(new_dir / "ca.crt", new_dir / "apiserver.crt", new_dir / "kubelet-client.crt")
    assert done.returncode == 0, done.stdout + done.stderr
    done = _verify(new_dir / "ca.crt", new_dir / "kubelet-client.crt",
                   options=("-purpose", "sslclient"))
    assert done.returncode == 0, done.stdout + done.stderr
    done = _verify(new_dir / "ca.crt", new_dir / "apiserver.crt",
                   options=("-purpose", "sslserver", "-verify_ip", "10.96.0.1"))
    assert done.returncode == 0, done.stdout + done.stderr
    # the case that fails: another CA did not sign them
    refused = _verify(old_dir / "ca.crt", new_dir / "apiserver.crt")
    assert refused.returncode != 0
    assert "unable to get local issuer" in refused.stdout + refused.stderr


def _handshake(server_dir: Path, client_dir: Path, hostname: str) -> str:
    """apiserver cert serves, kubelet-client cert authenticates; returns the client's subject CN
    as the server saw it (or raises ssl.SSLError)."""
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(server_dir / "apiserver.crt", server_dir / "apiserver.key")
    server_ctx.verify_mode = ssl.CERT_REQUIRED
    server_ctx.load_verify_locations(server_dir / "ca.crt")
    client_ctx = ssl.create_default_context(cafile=str(server_dir / "ca.crt"))
    client_ctx.load_cert_chain(client_dir / "kubelet-client.crt", client_dir / "kubelet-client.key")
    seen: dict[str, object] = {}
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(10)

    def serve() -> None:
        try:
            conn, _ = listener.accept()
            with server_ctx.wrap_socket(conn, server_side=True) as tls:
                seen["peer"] = tls.getpeercert()
                tls.sendall(b"ok")
        except (ssl.SSLError, OSError) as exc:
            seen["error"] = exc

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        with socket.create_connection(listener.getsockname(), timeout=10) as raw, \
                client_ctx.wrap_socket(raw, server_hostname=hostname) as tls:
            assert tls.recv(2) == b"ok"
    finally:
        thread.join(10)
        listener.close()
    if "error" in seen:
        raise ssl.SSLError(str(seen["error"]))
    peer = seen["peer"]
    assert isinstance(peer, dict)
    return dict(x[0] for x in peer["subject"])["commonName"]


@pytest.mark.parametrize("hostname", ["127.0.0.1", "kubernetes.default.svc", "10.96.0.1"])
def test_mutual_tls_handshake(both: tuple[Path, Path], hostname: str) -> None:
    _, new_dir = both
    assert _handshake(new_dir, new_dir, hostname) == "kube-apiserver-kubelet-client"


def test_mutual_tls_refuses_a_client_of_another_ca(both: tuple[Path, Path]) -> None:
    old_dir, new_dir = both
    with pytest.raises(ssl.SSLError):
        _handshake(new_dir, old_dir, "127.0.0.1")     # openssl's client cert: another CA
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(new_dir, new_dir, "kubernetes.example.com")   # not in the SANs
