"""The kubeconfig, read as client-go reads it: current context → cluster + user, paths relative to
the file's folder, inline `*-data` fields, and the user's credential kept *live*.

A user authenticates with one of (client-go's order):

- `exec`: a credential plugin (EKS `aws eks get-token`, GKE `gke-gcloud-auth-plugin`, AKS
  `kubelogin`, OIDC helpers) that prints an `ExecCredential`; re-run before its
  `expirationTimestamp` and after a 401 (`imagekit.kube.kubeauth`);
- `tokenFile`: a bearer token re-read when the file changes (projected ServiceAccount tokens
  are rotated in place by the kubelet);
- `token`, `username`/`password`: static;
- `client-certificate` / `client-key` (or `-data`): TLS client certificates, alone or beside
  any of the above.

`auth-provider` (the removed gcp/azure/oidc providers) is refused with one line: client-go
dropped them in 1.26 in favour of exec plugins.
"""

from __future__ import annotations

import base64
import os
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from imagekit.errors import InfraError, InvalidInput

EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True, frozen=True)


class ExecEnvVar(_Model):
    name: str
    value: str


class ExecConfig(_Model):
    """`users[].user.exec` (client.authentication.k8s.io ExecConfig)."""

    command: str
    args: list[str] = Field(default_factory=list)
    env: list[ExecEnvVar] = Field(default_factory=list)
    api_version: str = Field(alias="apiVersion")
    install_hint: str | None = Field(default=None, alias="installHint")
    provide_cluster_info: bool = Field(default=False, alias="provideClusterInfo")
    interactive_mode: Literal["Never", "IfAvailable", "Always"] | None = Field(
        default=None, alias="interactiveMode")


class UserEntry(_Model):
    token: str | None = None
    token_file: str | None = Field(default=None, alias="tokenFile")
    username: str | None = None
    password: str | None = None
    client_certificate: str | None = Field(default=None, alias="client-certificate")
    client_certificate_data: str | None = Field(default=None, alias="client-certificate-data")
    client_key: str | None = Field(default=None, alias="client-key")
    client_key_data: str | None = Field(default=None, alias="client-key-data")
    exec: ExecConfig | None = None
    auth_provider: dict[str, Any] | None = Field(default=None, alias="auth-provider")


class ClusterEntry(_Model):
    server: str
    certificate_authority: str | None = Field(default=None, alias="certificate-authority")
    certificate_authority_data: str | None = Field(default=None,
                                                   alias="certificate-authority-data")
    insecure_skip_tls_verify: bool = Field(default=False, alias="insecure-skip-tls-verify")
    tls_server_name: str | None = Field(default=None, alias="tls-server-name")


class ContextEntry(_Model):
    cluster: str
    user: str = ""
    namespace: str | None = None


class _Named(_Model):
    name: str


class NamedCluster(_Named):
    cluster: ClusterEntry


class NamedUser(_Named):
    user: UserEntry = Field(default_factory=UserEntry)


class NamedContext(_Named):
    context: ContextEntry


class KubeconfigFile(_Model):
    current_context: str | None = Field(default=None, alias="current-context")
    clusters: list[NamedCluster] = Field(default_factory=list)
    users: list[NamedUser] = Field(default_factory=list)
    contexts: list[NamedContext] = Field(default_factory=list)


@dataclass(frozen=True)
class Target:
    """The chosen context, with paths made absolute against the kubeconfig's folder."""

    path: Path
    context: str
    cluster_name: str
    cluster: ClusterEntry
    user_name: str
    user: UserEntry
    namespace: str | None = None   # the context's namespace, if it names one

    def resolve(self, value: str) -> Path:
        candidate = Path(value).expanduser()
        return candidate if candidate.is_absolute() else self.path.parent / candidate

    def exec_command(self) -> str:
        """client-go: a relative command holding a path separator is relative to the file."""
        assert self.user.exec is not None
        command = self.user.exec.command
        if os.sep in command and not os.path.isabs(command):
            return str(self.path.parent / command)
        return command


def load(path: Path, context: str | None = None) -> Target:
    import yaml

    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except OSError as exc:
        raise InfraError(f"cannot read the kubeconfig: {exc.strerror}", where=str(path)) \
            from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise InvalidInput(f"unusable kubeconfig: not YAML{at}", where=str(path)) from None
    if not isinstance(raw, dict):
        raise InvalidInput("unusable kubeconfig: not a mapping", where=str(path))
    try:
        doc = KubeconfigFile.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first.get("loc", ()))
        raise InvalidInput(f"unusable kubeconfig: {loc}: {first.get('msg')}",
                           where=str(path)) from None
    name = context or doc.current_context
    if not name:
        raise InvalidInput("unusable kubeconfig: no current-context", where=str(path))
    ctx = next((c.context for c in doc.contexts if c.name == name), None)
    if ctx is None:
        raise InvalidInput(f"unusable kubeconfig: context {name!r} is not defined",
                           where=str(path))
    cluster = next((c.cluster for c in doc.clusters if c.name == ctx.cluster), None)
    if cluster is None:
        raise InvalidInput(f"unusable kubeconfig: cluster {ctx.cluster!r} of context "
                           f"{name!r} is not defined", where=str(path))
    user = next((u.user for u in doc.users if u.name == ctx.user), None)
    if user is None:
        if ctx.user:
            raise InvalidInput(f"unusable kubeconfig: user {ctx.user!r} of context {name!r} "
                               "is not defined", where=str(path))
        user = UserEntry()
    if user.auth_provider is not None:
        provider = user.auth_provider.get("name", "?")
        raise InvalidInput(f"kubeconfig user {ctx.user!r}: auth-provider {provider!r} is not "
                           "supported (client-go removed it; use an exec credential plugin)",
                           where=str(path))
    if user.exec is not None:
        if user.exec.api_version not in EXEC_API_VERSIONS:
            raise InvalidInput(f"kubeconfig user {ctx.user!r}: exec apiVersion "
                               f"{user.exec.api_version!r} is not one of "
                               f"{', '.join(EXEC_API_VERSIONS)}", where=str(path))
        if user.exec.api_version.endswith("/v1") and user.exec.interactive_mode is None:
            raise InvalidInput(f"kubeconfig user {ctx.user!r}: exec interactiveMode must be "
                               "set for client.authentication.k8s.io/v1", where=str(path))
    return Target(path=path, context=name, cluster_name=ctx.cluster, cluster=cluster,
                  user_name=ctx.user, user=user, namespace=ctx.namespace)


def _decode(data: str, what: str, target: Target) -> bytes:
    try:
        return base64.b64decode(data, validate=True)
    except ValueError:
        raise InvalidInput(f"unusable kubeconfig: {what} is not base64",
                           where=str(target.path)) from None


def ssl_context(target: Target) -> ssl.SSLContext:
    """Server trust (the cluster's CA, or the system's) and the user's client certificate."""
    cluster = target.cluster
    context = ssl.create_default_context()
    if cluster.insecure_skip_tls_verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif cluster.certificate_authority_data:
        pem = _decode(cluster.certificate_authority_data, "certificate-authority-data", target)
        try:
            context.load_verify_locations(cadata=pem.decode())
        except (ssl.SSLError, UnicodeDecodeError):
            raise InvalidInput("unusable kubeconfig: certificate-authority-data is not a PEM "
                               "certificate", where=str(target.path)) from None
    elif cluster.certificate_authority:
        ca = target.resolve(cluster.certificate_authority)
        try:
            context.load_verify_locations(cafile=str(ca))
        except (OSError, ssl.SSLError):
            raise InvalidInput("unusable kubeconfig: certificate-authority cannot be loaded",
                               where=str(ca)) from None
    user = target.user
    cert = _decode(user.client_certificate_data, "client-certificate-data", target) \
        if user.client_certificate_data else None
    key = _decode(user.client_key_data, "client-key-data", target) \
        if user.client_key_data else None
    if cert is None and user.client_certificate:
        cert = _read(target.resolve(user.client_certificate))
    if key is None and user.client_key:
        key = _read(target.resolve(user.client_key))
    if (cert is None) != (key is None):
        raise InvalidInput(f"kubeconfig user {target.user_name!r}: a client certificate needs "
                           "both certificate and key", where=str(target.path))
    if cert is not None and key is not None:
        load_client_cert(context, cert, key, f"kubeconfig user {target.user_name!r}",
                         str(target.path))
    return context


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise InvalidInput(f"unusable kubeconfig: cannot read {exc.strerror}",
                           where=str(path)) from None


def load_client_cert(context: ssl.SSLContext, cert: bytes, key: bytes, who: str,
                     where: str) -> None:
    """ssl loads chains from files only: a private (0600) temporary file, removed at once.
    Called again with a renewed certificate, new connections present the new one."""
    with tempfile.TemporaryDirectory(prefix="imagekit-kube-") as folder:
        pem = Path(folder) / "client.pem"
        fd = os.open(pem, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(cert.rstrip(b"\n") + b"\n" + key)
        try:
            context.load_cert_chain(str(pem))
        except ssl.SSLError:
            raise InvalidInput(f"{who}: the client certificate and key do not load",
                               where=where) from None
