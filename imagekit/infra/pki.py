"""The project's own small PKI: one CA, one server certificate for the loopback services, one
token-signing certificate for the target registry's Bearer tokens; and the local cluster's own
PKI (`write_cluster_pki`, RSA as Kubernetes' tooling makes it).

Made once with `cryptography` and kept in the state dir (keys mode 0600). A certificate is
remade only if it is missing, unreadable, not issued by the current CA, or about to expire, so
everything that already trusts the CA (docker's certs.d, containerd's hosts.toml) keeps working
across `infra up` runs.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from imagekit.infra.state import StatePaths

_RENEW_BEFORE = dt.timedelta(days=30)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(key.private_bytes(serialization.Encoding.PEM,
                                    serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()))
    os.chmod(path, 0o600)


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    os.chmod(path, 0o644)


def _load(cert_path: Path, key_path: Path
          ) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None:
    try:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except (OSError, ValueError):
        return None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        return None
    if cert.not_valid_after_utc - _RENEW_BEFORE < _now():
        return None
    return cert, key


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "imagekit"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def ensure_ca(paths: StatePaths) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """The project CA, made on first use."""
    loaded = _load(paths.ca_cert, paths.ca_key)
    if loaded:
        return loaded
    key = ec.generate_private_key(ec.SECP256R1())
    now = _now()
    cert = (x509.CertificateBuilder()
            .subject_name(_name("imagekit local CA")).issuer_name(_name("imagekit local CA"))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                           critical=False)
            .sign(key, hashes.SHA256()))
    _write_key(paths.ca_key, key)
    _write_cert(paths.ca_cert, cert)
    # A new CA invalidates everything it did not sign.
    for stale in (paths.server_cert, paths.token_cert):
        stale.unlink(missing_ok=True)
    return cert, key


def _issued_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(ca)
        return True
    except (ValueError, TypeError, Exception):  # InvalidSignature is not a ValueError
        return False


def ensure_server_cert(paths: StatePaths) -> Path:
    """TLS certificate for 127.0.0.1 / localhost, signed by the project CA."""
    ca_cert, ca_key = ensure_ca(paths)
    loaded = _load(paths.server_cert, paths.server_key)
    if loaded and _issued_by(loaded[0], ca_cert):
        return paths.server_cert
    key = ec.generate_private_key(ec.SECP256R1())
    now = _now()
    cert = (x509.CertificateBuilder()
            .subject_name(_name("127.0.0.1")).issuer_name(ca_cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=825))
            .add_extension(x509.SubjectAlternativeName([
                x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                x509.DNSName("localhost")]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    _write_key(paths.server_key, key)
    _write_cert(paths.server_cert, cert)
    return paths.server_cert


def ensure_token_signing_cert(paths: StatePaths) -> Path:
    """Self-signed ES256 certificate whose key signs target's Bearer tokens.

    It is the registry's whole `rootcertbundle`; tokens carry it in their `x5c` header, which
    distribution 2.8 verifies against that bundle (no libtrust key IDs needed).
    """
    loaded = _load(paths.token_cert, paths.token_key)
    if loaded:
        return paths.token_cert
    key = ec.generate_private_key(ec.SECP256R1())
    now = _now()
    name = _name("imagekit token signer")
    cert = (x509.CertificateBuilder()
            .subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .sign(key, hashes.SHA256()))
    _write_key(paths.token_key, key)
    _write_cert(paths.token_cert, cert)
    return paths.token_cert


# ------------------------------------------------------------------------------ the cluster's PKI
#
# The local Kubernetes cluster has a trust of its own (imagekit.infra.cluster): an RSA-2048 CA,
# the apiserver's serving certificate, the client certificate the apiserver presents to the
# kubelet, and the ServiceAccount token-signing key pair. The certificates carry the extensions
# the former `openssl req/x509` recipe gave them (OpenSSL 3.0 defaults: SKID + AKID, CA:TRUE
# critical on the CA), 3650 days from now, SHA-256 signatures; tests/infra/test_cluster_pki.py
# compares them with what openssl itself makes.

CLUSTER_CA_CN = "imagekit-k8s-ca"
CLUSTER_DAYS = 3650
APISERVER_SANS = ("IP:127.0.0.1", "DNS:localhost", "DNS:kubernetes", "DNS:kubernetes.default",
                  "DNS:kubernetes.default.svc", "DNS:kubernetes.default.svc.cluster.local",
                  "IP:10.96.0.1")


def _write_private_key(path: Path, key: rsa.RSAPrivateKey) -> None:
    """PKCS#8 PEM ("BEGIN PRIVATE KEY", as openssl 3 writes it), 0600 from the start."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(key.private_bytes(serialization.Encoding.PEM,
                                    serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()))
    os.chmod(path, 0o600)


def _san(entry: str) -> x509.GeneralName:
    kind, value = entry.split(":", 1)
    if kind == "IP":
        return x509.IPAddress(ipaddress.ip_address(value))
    return x509.DNSName(value)


def write_cluster_pki(directory: Path) -> None:
    """ca.{key,crt}, apiserver.{key,crt}, kubelet-client.{key,crt}, sa.{key,pub} in `directory`
    (keys 0600, certificates and the public key 0644)."""
    directory.mkdir(parents=True, exist_ok=True)
    now = _now().replace(microsecond=0)
    until = now + dt.timedelta(days=CLUSTER_DAYS)

    def new_key() -> rsa.RSAPrivateKey:
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def builder(subject: x509.Name, issuer: x509.Name,
                key: rsa.RSAPrivateKey) -> x509.CertificateBuilder:
        return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now).not_valid_after(until))

    ca_key = new_key()
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, CLUSTER_CA_CN)])
    ca_skid = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca_akid = x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_skid)
    ca = (builder(ca_name, ca_name, ca_key)
          .add_extension(ca_skid, critical=False)
          .add_extension(ca_akid, critical=False)
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))

    api_key = new_key()
    api = (builder(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]),
                   ca_name, api_key)
           .add_extension(x509.SubjectAlternativeName([_san(s) for s in APISERVER_SANS]),
                          critical=False)
           .add_extension(x509.SubjectKeyIdentifier.from_public_key(api_key.public_key()),
                          critical=False)
           .add_extension(ca_akid, critical=False)
           .sign(ca_key, hashes.SHA256()))

    # the client certificate the apiserver presents to the kubelet (logs, exec): no extensions,
    # as openssl's `x509 -req` without -extfile made it (that one was X.509 v1, this one is v3)
    kc_key = new_key()
    kc = (builder(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
                             x509.NameAttribute(NameOID.COMMON_NAME,
                                                "kube-apiserver-kubelet-client")]),
                  ca_name, kc_key)
          .sign(ca_key, hashes.SHA256()))

    sa_key = new_key()
    for name, key, cert in (("ca", ca_key, ca), ("apiserver", api_key, api),
                            ("kubelet-client", kc_key, kc)):
        _write_private_key(directory / f"{name}.key", key)
        _write_cert(directory / f"{name}.crt", cert)
    _write_private_key(directory / "sa.key", sa_key)
    (directory / "sa.pub").write_bytes(sa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    os.chmod(directory / "sa.pub", 0o644)
