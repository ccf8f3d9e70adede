"""Kubernetes credentials that stay valid for the whole run, as client-go keeps them.

`KubeAuth` is an `httpx.Auth`: every request, a watch and a log stream too, asks its
`CredentialSource` for the current credential at the moment it is sent.

- `ExecSource` runs the kubeconfig's exec credential plugin (client-go's
  `plugin/pkg/client/auth/exec`): `KUBERNETES_EXEC_INFO` in its environment, an
  `ExecCredential` of the configured apiVersion on stdout, cached until shortly before its
  `status.expirationTimestamp`, re-run then and after a 401. The request that met the 401 is
  sent once more with the new credential (unless its body was a stream).
- `TokenFileSource` re-reads `tokenFile` when the file changes, and after a 401.
- `StaticSource`: `token` or `username`/`password`, as given.

A plugin that is missing, exits non-zero or prints something that is not an ExecCredential is
one line naming the kubeconfig user (`KubeCredentialError`, exit 2). When a renewal fails, the
request that needed it raises that error (the run stops: it could not go on past the expiry),
and what follows — the run's cleanup — goes out with the last good credential while it is
still valid (the renewal margin, a tenth of its life, up to 60 s). After it has expired each
request tries the plugin again and, failing, sends the old credential: a 401 on it raises with
the plugin's reason, and `Kube` names what the run created and could not delete.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from pathlib import Path

import httpx

from imagekit.errors import InvalidInput
from imagekit.kube.kubeconfig import Target, load_client_cert

#: how long a plugin may run (a plugin that waits for a browser is interactive, not here)
EXEC_TIMEOUT_S = 60.0
#: renew this long before expiry: a tenth of the credential's life, between these bounds
#: (also the time left for cleanup when a renewal fails: EKS tokens, 15 min, leave 60 s)
MARGIN_MIN_S, MARGIN_MAX_S = 0.5, 60.0


class KubeCredentialError(InvalidInput):
    """The kubeconfig user's credential cannot be obtained or renewed."""


@dataclass(frozen=True)
class Credential:
    header: str | None                 # the Authorization header value
    expires_at: float | None = None    # wall-clock seconds; None: does not expire
    obtained_at: float = 0.0
    cert: bytes | None = None          # from an exec plugin: PEM client certificate + key
    key: bytes | None = None

    def renew_at(self) -> float | None:
        if self.expires_at is None:
            return None
        life = max(self.expires_at - self.obtained_at, 0.0)
        margin = min(max(life * 0.1, MARGIN_MIN_S), MARGIN_MAX_S)
        return self.expires_at - margin


class CredentialSource:
    """Gives the credential to send now; `renew` after the server refused `used`."""

    user: str
    where: str
    renewable: bool = False
    #: the last renewal's failure, kept for the message of a 401 that follows it
    failure: str | None = None

    def current(self) -> Credential:
        raise NotImplementedError

    def renew_in(self) -> float | None:
        """Seconds until the credential in use is due for renewal (None: it does not expire).
        Long requests (watches) end by then, so that the next request renews in time."""
        return None

    def renew(self, used: Credential) -> Credential | None:
        """A newer credential than `used`, or None when there is none to try."""
        return None

    def refused(self, used: Credential) -> KubeCredentialError | None:
        """The error for a 401 the source could not heal (None: let the 401 through)."""
        return None


class StaticSource(CredentialSource):
    def __init__(self, user: str, where: str, header: str | None) -> None:
        self.user, self.where = user, where
        self._credential = Credential(header=header)

    def current(self) -> Credential:
        return self._credential


class TokenFileSource(CredentialSource):
    """A token file (projected ServiceAccount token): re-read when its mtime or size change."""

    renewable = True

    def __init__(self, user: str, where: str, path: Path, *, who: str | None = None,
                 what: str = "tokenFile") -> None:
        """`who` and `what` name the credential in messages: a kubeconfig user's tokenFile,
        or the in-cluster ServiceAccount's token."""
        self.user, self.where, self.path = user, where, path
        self.who, self.what = who or f"kubeconfig user {user!r}", what
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._credential: Credential | None = None

    def _read(self) -> Credential:
        try:
            stat = self.path.stat()
            token = self.path.read_text().strip()
        except OSError as exc:
            raise KubeCredentialError(f"{self.who}: cannot read {self.what}: {exc.strerror}",
                                      where=str(self.path)) from None
        except UnicodeDecodeError:
            raise KubeCredentialError(f"{self.who}: {self.what} is not text",
                                      where=str(self.path)) from None
        if not token:
            raise KubeCredentialError(f"{self.who}: {self.what} is empty",
                                      where=str(self.path))
        self._stamp = (stat.st_mtime_ns, stat.st_size)
        self._credential = Credential(header=f"Bearer {token}", obtained_at=time.time())
        return self._credential

    def current(self) -> Credential:
        with self._lock:
            try:
                stat = self.path.stat()
                stamp: tuple[int, int] | None = (stat.st_mtime_ns, stat.st_size)
            except OSError:
                stamp = None
            if self._credential is not None and stamp == self._stamp:
                return self._credential
            if self._credential is not None and stamp is None:
                return self._credential  # removed for a moment (atomic swap): keep the last
            return self._read()

    def renew(self, used: Credential) -> Credential | None:
        with self._lock:
            fresh = self._read()
        return fresh if fresh.header != used.header else None

    def refused(self, used: Credential) -> KubeCredentialError | None:
        return KubeCredentialError(f"{self.who}: the API server refused the token in "
                                   f"{self.what} (401)", where=str(self.path))


class ExecSource(CredentialSource):
    """An exec credential plugin, run when needed; thread-safe (one run at a time)."""

    renewable = True

    def __init__(self, target: Target, *, clock: Callable[[], float] = time.time,
                 on_cert: Callable[[bytes, bytes], None] | None = None) -> None:
        assert target.user.exec is not None
        self.target = target
        self.config = target.user.exec
        self.user = target.user_name
        self.where = str(target.path)
        self.runs = 0
        self._clock = clock
        self._on_cert = on_cert
        self._lock = threading.Lock()
        self._credential: Credential | None = None
        self._draining = False   # a renewal failed: the run stops, its cleanup goes on

    # -- what callers use -------------------------------------------------------------------
    def current(self) -> Credential:
        with self._lock:
            cached = self._credential
            now = self._clock()
            if cached is not None:
                renew_at = cached.renew_at()
                if renew_at is None or now < renew_at:
                    return cached
                if self._draining and cached.expires_at is not None and \
                        now < cached.expires_at:
                    return cached   # cleanup after a failed renewal: the last good one
            try:
                return self._store(self._run())
            except KubeCredentialError as exc:
                if cached is None:
                    raise
                self.failure = exc.message.split(": ", 1)[-1]
                if self._draining:
                    return cached   # expired as well: the server decides, a 401 says why
                self._draining = True
                until = cached.expires_at or now
                when = "expires" if until > now else "expired"
                stamp = dt.datetime.fromtimestamp(until, dt.UTC)
                raise KubeCredentialError(
                    f"kubeconfig user {self.user!r}: the exec plugin could not renew the "
                    f"credential, which {when} at {stamp:%H:%M:%S} UTC: {self.failure}; "
                    "stopped here, cleanup runs with the last good credential",
                    where=self.where) from None

    def renew_in(self) -> float | None:
        cached = self._credential
        renew_at = cached.renew_at() if cached is not None else None
        if cached is None or renew_at is None:
            return None
        if self._draining:   # cleanup's waits end when the last good credential does
            return max((cached.expires_at or renew_at) - self._clock(), 0.0)
        return max(renew_at - self._clock(), 0.0)

    def renew(self, used: Credential) -> Credential | None:
        """After a 401: the plugin is run again (once per refused credential)."""
        with self._lock:
            cached = self._credential
            if cached is not None and cached is not used:
                return cached  # another request renewed it meanwhile
            try:
                return self._store(self._run())
            except KubeCredentialError as exc:
                if cached is None:
                    raise
                self.failure = exc.message.split(": ", 1)[-1]
                return None

    def refused(self, used: Credential) -> KubeCredentialError | None:
        if self.failure:
            return KubeCredentialError(
                f"kubeconfig user {self.user!r}: the API server refused the credential (401) "
                f"and the exec plugin could not renew it: {self.failure}", where=self.where)
        return KubeCredentialError(
            f"kubeconfig user {self.user!r}: the API server refused the exec plugin's fresh "
            "credential (401)", where=self.where)

    # -- the plugin ---------------------------------------------------------------------------
    def _store(self, fresh: Credential) -> Credential:
        self.failure = None
        self._draining = False
        self._credential = fresh
        if fresh.cert is not None and fresh.key is not None and self._on_cert is not None:
            self._on_cert(fresh.cert, fresh.key)
        return fresh

    def _fail(self, what: str) -> KubeCredentialError:
        return KubeCredentialError(f"kubeconfig user {self.user!r}: {what}", where=self.where)

    def _interactive(self) -> bool:
        mode = self.config.interactive_mode or "IfAvailable"
        can = sys.stdin is not None and sys.stdin.isatty()
        if mode == "Always" and not can:
            raise self._fail(f"exec plugin {self.config.command!r} needs an interactive "
                             "terminal (interactiveMode: Always) and stdin is not one")
        return mode != "Never" and can

    def _run(self) -> Credential:
        command = self.target.exec_command()
        interactive = self._interactive()
        info: dict = {"apiVersion": self.config.api_version, "kind": "ExecCredential",
                      "spec": {"interactive": interactive}}
        if self.config.provide_cluster_info:
            cluster = self.target.cluster
            info["spec"]["cluster"] = {
                "server": cluster.server,
                "insecure-skip-tls-verify": cluster.insecure_skip_tls_verify,
                **({"certificate-authority-data": cluster.certificate_authority_data}
                   if cluster.certificate_authority_data else {}),
                **({"tls-server-name": cluster.tls_server_name}
                   if cluster.tls_server_name else {})}
        env = dict(os.environ)
        env.update({e.name: e.value for e in self.config.env})
        env["KUBERNETES_EXEC_INFO"] = json.dumps(info)
        started = self._clock()
        self.runs += 1
        try:
            result = subprocess.run(
                [command, *self.config.args], env=env, stdout=subprocess.PIPE,
                stderr=None if interactive else subprocess.PIPE,
                stdin=None if interactive else subprocess.DEVNULL,
                timeout=EXEC_TIMEOUT_S, check=False)
        except FileNotFoundError:
            hint = (self.config.install_hint or "").strip().splitlines()
            raise self._fail(f"exec plugin {command!r} not found"
                             + (f"; {hint[0].strip()}" if hint else "")) from None
        except PermissionError:
            raise self._fail(f"exec plugin {command!r} is not executable") from None
        except subprocess.TimeoutExpired:
            raise self._fail(f"exec plugin {command!r} did not finish within "
                             f"{EXEC_TIMEOUT_S:.0f}s") from None
        except OSError as exc:
            raise self._fail(f"exec plugin {command!r} cannot run: {exc.strerror}") from None
        if result.returncode != 0:
            err = (result.stderr or b"").decode(errors="replace").strip().splitlines()
            raise self._fail(f"exec plugin {command!r} exited {result.returncode}"
                             + (f": {err[-1].strip()[:200]}" if err else ""))
        return self._parse(command, result.stdout, started)

    def _parse(self, command: str, stdout: bytes, started: float) -> Credential:
        try:
            doc = json.loads(stdout)
        except ValueError:
            raise self._fail(f"exec plugin {command!r} printed no ExecCredential JSON") \
                from None
        if not isinstance(doc, dict) or doc.get("kind") != "ExecCredential":
            raise self._fail(f"exec plugin {command!r} printed JSON that is not an "
                             "ExecCredential")
        if doc.get("apiVersion") != self.config.api_version:
            raise self._fail(f"exec plugin {command!r} answered apiVersion "
                             f"{doc.get('apiVersion')!r}, the kubeconfig asks for "
                             f"{self.config.api_version!r}")
        status = doc.get("status")
        if not isinstance(status, dict):
            raise self._fail(f"exec plugin {command!r} printed an ExecCredential without "
                             "status")
        token = status.get("token")
        cert, key = status.get("clientCertificateData"), status.get("clientKeyData")
        if token is not None and (not isinstance(token, str) or not token):
            raise self._fail(f"exec plugin {command!r} printed an empty token")
        if bool(cert) != bool(key):
            raise self._fail(f"exec plugin {command!r} printed a client certificate without "
                             "its key (or a key without certificate)")
        if not token and not cert:
            raise self._fail(f"exec plugin {command!r} printed neither a token nor a client "
                             "certificate")
        expires_at = None
        stamp = status.get("expirationTimestamp")
        if stamp:
            try:
                parsed = dt.datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
            except ValueError:
                raise self._fail(f"exec plugin {command!r} printed an unreadable "
                                 f"expirationTimestamp {str(stamp)[:40]!r}") from None
            if parsed.tzinfo is None:
                parsed = parsed.replace(tzinfo=dt.UTC)
            expires_at = parsed.timestamp()
        return Credential(header=f"Bearer {token}" if token else None, expires_at=expires_at,
                          obtained_at=started,
                          cert=cert.encode() if isinstance(cert, str) and cert else None,
                          key=key.encode() if isinstance(key, str) and key else None)


def source_for(target: Target, context: ssl.SSLContext,
               clock: Callable[[], float] = time.time) -> CredentialSource:
    """The user's credential source, client-go's precedence: exec, tokenFile, token, basic."""
    user, where = target.user, str(target.path)
    if user.exec is not None:
        return ExecSource(target, clock=clock, on_cert=lambda cert, key: load_client_cert(
            context, cert, key, f"kubeconfig user {target.user_name!r}", where))
    if user.token_file:
        return TokenFileSource(target.user_name, where, target.resolve(user.token_file))
    if user.token:
        return StaticSource(target.user_name, where, f"Bearer {user.token}")
    if user.username is not None and user.password is not None:
        pair = base64.b64encode(f"{user.username}:{user.password}".encode()).decode()
        return StaticSource(target.user_name, where, f"Basic {pair}")
    return StaticSource(target.user_name, where, None)


class KubeAuth(httpx.Auth):
    """The current credential on every request; after a 401 one renewal and one resend."""

    requires_request_body = False
    requires_response_body = False

    def __init__(self, source: CredentialSource) -> None:
        self.source = source

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response,
                                                              None]:
        used = self.source.current()
        _apply(request, used)
        repeatable = isinstance(request.stream, httpx.ByteStream)  # before it is consumed
        response = yield request
        if response.status_code != 401 or not self.source.renewable:
            return
        fresh = self.source.renew(used)
        if fresh is None:
            error = self.source.refused(used)
            if error is not None:
                response.close()
                raise error
            return
        if not repeatable:
            return  # a streamed body cannot be sent twice; the next request uses `fresh`
        response.close()
        _apply(request, fresh)
        response = yield request
        if response.status_code == 401:
            error = self.source.refused(fresh)
            if error is not None:
                response.close()
                raise error


def _apply(request: httpx.Request, credential: Credential) -> None:
    if credential.header:
        request.headers["Authorization"] = credential.header
    else:
        request.headers.pop("Authorization", None)
