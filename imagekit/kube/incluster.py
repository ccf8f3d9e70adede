"""In-cluster credentials, as client-go's `rest.InClusterConfig` finds them: inside a Pod the
kubelet sets `KUBERNETES_SERVICE_HOST` and `KUBERNETES_SERVICE_PORT` (the `kubernetes`
Service) and mounts the Pod's ServiceAccount at /var/run/secrets/kubernetes.io/serviceaccount:
`token` (a projected token the kubelet rotates in place: re-read when it changes, through
`TokenFileSource`), `ca.crt` (the cluster's CA) and `namespace` (the Pod's own namespace).

Where a connection comes from, first found wins (`choose`; the CLI puts the kubeconfig that
`imagekit infra up --cluster` recorded between the second and the third):

1. `--kubeconfig` (given to `Kube` as a path);
2. `$KUBECONFIG` (its first file; one that is missing is an error, not skipped);
3. `~/.kube/config`, when it is a file;
4. in-cluster, when both variables are set and the token file exists.

A token file that exists but cannot be read, or is empty, is one line and exit 2 before any
request (`KubeCredentialError`); so is a `ca.crt` that does not load. A missing `ca.crt` means
the system's trust store and a missing `namespace` means "default", as in client-go.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from imagekit.errors import InfraError

#: where the kubelet mounts a Pod's ServiceAccount
SERVICEACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


@dataclass(frozen=True)
class InCluster:
    """The API server a Pod reaches through the `kubernetes` Service, and the folder of its
    ServiceAccount's token, CA and namespace."""

    host: str
    port: str
    folder: Path = SERVICEACCOUNT_DIR

    @property
    def server(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host   # an IPv6 ClusterIP
        return f"https://{host}:{self.port}"

    @property
    def token(self) -> Path:
        return self.folder / "token"

    @property
    def ca(self) -> Path:
        return self.folder / "ca.crt"

    def namespace(self) -> str:
        """The Pod's own namespace; "default" where the file is missing (client-go)."""
        try:
            return (self.folder / "namespace").read_text().strip() or "default"
        except OSError:
            return "default"

    def user(self) -> str:
        """The token's subject (system:serviceaccount:NS:NAME), for messages; "serviceaccount"
        when the token says nothing readable."""
        try:
            token = self.token.read_text()
        except (OSError, UnicodeDecodeError):
            return "serviceaccount"
        return token_subject(token) or "serviceaccount"

    def ssl_context(self) -> ssl.SSLContext:
        from imagekit.kube.kubeauth import KubeCredentialError

        context = ssl.create_default_context()
        if not self.ca.exists():
            return context
        try:
            context.load_verify_locations(cafile=str(self.ca))
        except (OSError, ssl.SSLError):
            raise KubeCredentialError("in-cluster ServiceAccount: ca.crt cannot be loaded as "
                                      "a PEM certificate", where=str(self.ca)) from None
        return context


def token_subject(token: str) -> str | None:
    """A JWT bearer token's subject (a ServiceAccount's is system:serviceaccount:NS:NAME),
    read without checking the signature (the API server does that): for messages only. None
    for a token that is not a readable JWT."""
    try:
        payload = token.strip().split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError, binascii.Error, UnicodeDecodeError):
        return None
    subject = claims.get("sub") if isinstance(claims, dict) else None
    return subject if isinstance(subject, str) and subject else None


def detect(folder: Path | None = None, environ: Mapping[str, str] | None = None
           ) -> InCluster | None:
    """The in-cluster connection when this process runs in a Pod with a ServiceAccount token
    (both variables set, the token file there, readable or not); None otherwise."""
    env = os.environ if environ is None else environ
    host, port = env.get("KUBERNETES_SERVICE_HOST", ""), env.get("KUBERNETES_SERVICE_PORT", "")
    found = InCluster(host, port, folder or SERVICEACCOUNT_DIR)
    if not host or not port or not (found.token.exists() or found.token.is_symlink()):
        return None
    return found


def choose(kubeconfig: Path | None = None, *, serviceaccount_dir: Path | None = None,
           home: Path | None = None, environ: Mapping[str, str] | None = None
           ) -> Path | InCluster:
    """Where to connect, in the order above; InfraError naming each place looked at when
    none holds anything."""
    if kubeconfig is not None:
        return kubeconfig
    env = os.environ if environ is None else environ
    listed = env.get("KUBECONFIG", "")
    if listed:
        return Path(listed.split(os.pathsep)[0])
    default = (home or Path.home()) / ".kube" / "config"
    if default.is_file():
        return default
    found = detect(serviceaccount_dir, env)
    if found is not None:
        return found
    folder = serviceaccount_dir or SERVICEACCOUNT_DIR
    raise InfraError("no kubeconfig and no in-cluster ServiceAccount; run `imagekit infra up "
                     "--cluster`, pass --kubeconfig, set $KUBECONFIG, or run in a Pod "
                     f"({folder / 'token'} and $KUBERNETES_SERVICE_HOST)", where=str(default))
