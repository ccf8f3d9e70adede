"""Registry authentication: the `WWW-Authenticate` challenge, Basic, and the Bearer token flow.

The distribution token protocol: a 401 names a realm, a service and the scopes the request
needs; the client asks the realm for a token for those scopes (with Basic credentials when it
has some, anonymously otherwise), then repeats the request with `Authorization: Bearer`.
Tokens are cached per scope set until shortly before they expire (`expires_in` from
`issued_at`, distribution's rules: at least 60 s); a due token is fetched again before the
request goes out, from the realm that issued it. An identity token is exchanged through the
OAuth2 refresh-token grant.

The realm is checked before anything is sent to it (go-containerregistry's
`validateRealmURL`, made stricter): https (plain http only for a loopback or `--insecure`
registry), and the registry's own host or the same domain (`registry-1.docker.io` →
`auth.docker.io`, `registry.gitlab.com` → `gitlab.com`); an IP address only the registry's
own. A realm elsewhere is refused (`RealmRefused`, exit 2) and gets no request at all, so
neither the credentials nor the request's scopes leave for another host.

`RegistryAuth` is that flow as an `httpx.Auth` (go-containerregistry's `transport.bearer` and
`transport.basic` in one): the request names the scopes it needs in its extensions
(`SCOPES`), the flow adds what it has cached, answers a 401 challenge once (fetching a token
through the same client, within the same time-out) and repeats the request. A streamed body
cannot be repeated: then the fresh token is cached and the 401 is raised as retryable, so the
upload resends the chunk after asking the registry where it stands.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import re
import threading
import time
from collections.abc import Generator
from dataclasses import dataclass, field

import httpx

from imagekit.errors import TransportError, Unauthorized
from imagekit.registry.credentials import Credential, CredentialSource
from imagekit.registry.endpoint import is_loopback
from imagekit.registry.retry import RETRY_STATUSES, RetryableStatus

#: request.extensions key: the scopes (list[str]) a request needs.
SCOPES = "imagekit.scopes"
#: distribution's token client: a token said to live less than this (or not saying) lives this
MINIMUM_TOKEN_LIFETIME_S = 60
#: fetch again this long before expiry: a tenth of the token's life, between these bounds
REFRESH_MARGIN_MIN_S, REFRESH_MARGIN_MAX_S = 5.0, 60.0
#: second-level labels under which the registrable domain is one label longer (co.uk, com.au)
_SECOND_LEVEL = {"co", "com", "net", "org", "gov", "edu", "ac", "or", "ne", "go"}


class RealmRefused(Unauthorized):
    """The registry's Bearer challenge names a token realm imagekit will not contact."""


@dataclass(frozen=True)
class Token:
    """A cached Bearer token: its header, when to fetch it again, and how it was got."""

    header: str
    refresh_at: float
    scopes: tuple[str, ...]
    challenge: Challenge

    def due(self, now: float) -> bool:
        return now >= self.refresh_at


def token_lifetime(body: dict, fetched_at: float) -> tuple[float, float]:
    """(expires_at, refresh_at) in wall-clock seconds for a token response: `expires_in` from
    `issued_at` when the server says when (and its clock agrees with ours enough that the token
    is not already over), else from when we asked."""
    expires_in = body.get("expires_in")
    life = float(expires_in) if isinstance(expires_in, (int, float)) and \
        not isinstance(expires_in, bool) else 0.0
    life = max(life, MINIMUM_TOKEN_LIFETIME_S)
    start = fetched_at
    issued = body.get("issued_at")
    if isinstance(issued, str) and issued:
        try:
            stamp = dt.datetime.fromisoformat(issued.replace("Z", "+00:00"))
            if stamp.tzinfo is None:
                stamp = stamp.replace(tzinfo=dt.UTC)
            if fetched_at < stamp.timestamp() + life:   # skew large enough: our own clock
                start = min(stamp.timestamp(), fetched_at)
        except ValueError:
            pass
    expires_at = start + life
    margin = min(max(life * 0.1, REFRESH_MARGIN_MIN_S), REFRESH_MARGIN_MAX_S)
    return expires_at, expires_at - margin


def _registrable(host: str) -> str:
    labels = host.lower().rstrip(".").split(".")
    keep = 3 if len(labels) >= 3 and len(labels[-1]) == 2 and labels[-2] in _SECOND_LEVEL else 2
    return ".".join(labels[-keep:])


def realm_refusal(realm: httpx.URL, registry: str, insecure: bool) -> str | None:
    """Why `realm` may not receive this registry's token request, or None when it may."""
    from imagekit.registry.endpoint import host_of

    if realm.scheme not in ("https", "http"):
        return f"its scheme {realm.scheme!r} is not https"
    if realm.scheme == "http" and not insecure and not (
            is_loopback(registry) and is_loopback(realm.netloc.decode())):
        return "it is plain HTTP (use --insecure for this registry to allow it)"
    realm_host = (realm.host or "").lower()
    registry_host = host_of(registry).lower()
    if not realm_host:
        return "it names no host"
    if realm_host == registry_host:
        return None
    try:
        same = ipaddress.ip_address(realm_host) == ipaddress.ip_address(registry_host)
        return None if same else "it is another address than the registry's"
    except ValueError:
        pass
    for host in (realm_host, registry_host):
        try:
            ipaddress.ip_address(host)
            return "it is another host than the registry's"
        except ValueError:
            continue
    if "." not in realm_host or "." not in registry_host or \
            _registrable(realm_host) != _registrable(registry_host):
        return f"its domain is not the registry's ({_registrable(registry_host)})"
    return None

_PARAM = re.compile(r'([A-Za-z_][A-Za-z0-9_-]*)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]+))')


@dataclass(frozen=True)
class Challenge:
    scheme: str  # "basic" or "bearer" (lower case)
    params: dict[str, str] = field(default_factory=dict)

    @property
    def realm(self) -> str | None:
        return self.params.get("realm")

    @property
    def service(self) -> str | None:
        return self.params.get("service")

    @property
    def scopes(self) -> list[str]:
        return [s for s in self.params.get("scope", "").split(" ") if s]


def parse_challenges(header: str) -> list[Challenge]:
    """Parse `Bearer realm="…",service="…",scope="…"` (and Basic), several schemes allowed."""
    found: list[Challenge] = []
    for match in re.finditer(r"(?i)\b(basic|bearer)\b", header):
        start = match.end()
        nxt = re.search(r"(?i)(?:^|,)\s*(basic|bearer)\b", header[start:])
        chunk = header[start:start + nxt.start()] if nxt else header[start:]
        params = {m.group(1).lower(): (m.group(2) if m.group(2) is not None else m.group(3))
                  for m in _PARAM.finditer(chunk)}
        found.append(Challenge(match.group(1).lower(), params))
    return found


def basic_header(username: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()


def repository_scope(repository: str, actions: str) -> str:
    return f"repository:{repository}:{actions}"


def merge_scopes(*groups: list[str]) -> list[str]:
    """Union of scopes; actions on the same resource are merged (pull + push -> pull,push)."""
    merged: dict[str, list[str]] = {}
    plain: list[str] = []
    for group in groups:
        for scope in group:
            parts = scope.split(":")
            if len(parts) < 3:
                if scope not in plain:
                    plain.append(scope)
                continue
            resource = ":".join(parts[:-1])
            actions = merged.setdefault(resource, [])
            for action in parts[-1].split(","):
                if action and action not in actions:
                    actions.append(action)
    scopes = [f"{resource}:{','.join(sorted(actions))}" for resource, actions in merged.items()]
    return sorted(scopes) + plain


class RegistryAuth(httpx.Auth):
    """Anonymous, Basic or Bearer for one registry, as the registry's challenge asks."""

    requires_response_body = False  # blob bodies stream; the token response is read here

    def __init__(self, registry: str, credentials: CredentialSource, *,
                 insecure: bool = False) -> None:
        self.registry = registry
        self.insecure = insecure
        self._credentials = credentials
        self._lock = threading.Lock()
        self._credential: Credential | None = None
        self._sources: list[str] = []
        self._looked_up = False
        self._basic: str | None = None
        self._bearer = False
        #: the cached token per scope set (sorted tuple of scopes).
        self.tokens: dict[tuple[str, ...], Token] = {}
        #: wall clock (tests move it)
        self.clock = time.time

    # -- credentials ----------------------------------------------------------------------
    def credential(self) -> Credential | None:
        with self._lock:
            if not self._looked_up:
                found = self._credentials.lookup(self.registry)
                self._credential, self._sources = found.credential, found.sources
                self._looked_up = True
            return self._credential

    def sources(self) -> list[str]:
        self.credential()
        return list(self._sources)

    def unauthorized(self, scopes: list[str], status: int) -> Unauthorized:
        credential = self.credential()
        who = f"the credentials ({credential})" if credential else "anonymous access"
        what = "refused" if status == 401 else "denied access to"
        scope_text = ", ".join(scopes) or "the API"
        tried = "; ".join(self._sources) or "none"
        return Unauthorized(f"registry {self.registry} {what} {who} for {scope_text} "
                            f"(HTTP {status}; credential sources tried: {tried})",
                            where=self.registry)

    def header_for(self, scopes: list[str]) -> str | None:
        """The header to send for `scopes` now; a Bearer token due for renewal is not sent
        (the lean path then meets the 401 and leaves the request to the httpx flow)."""
        if self._bearer:
            token = self.tokens.get(tuple(sorted(scopes)))
            return token.header if token is not None and not token.due(self.clock()) else None
        return self._basic

    # -- the flow -------------------------------------------------------------------------
    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response,
                                                              None]:
        scopes = list(request.extensions.get(SCOPES, []))
        cached = self.tokens.get(tuple(sorted(scopes))) if self._bearer else None
        if cached is not None and cached.due(self.clock()):
            # about to expire: a new one from the realm that issued it, before the request
            header: str | None = yield from self._fetch(cached.challenge, list(cached.scopes),
                                                        scopes, request)
        else:
            header = self.header_for(scopes)
        if header:
            request.headers["Authorization"] = header
        response = yield request
        if response.status_code == 403:
            raise self.unauthorized(scopes, 403)
        if response.status_code != 401:
            return
        fresh = yield from self._answer(response, scopes, request)
        if not isinstance(request.stream, httpx.ByteStream):
            if not header:
                raise self.unauthorized(scopes, 401)
            # an expired token mid-upload: the fresh one is cached; the caller resends
            raise RetryableStatus(response)
        request.headers["Authorization"] = fresh
        response = yield request
        if response.status_code in (401, 403):
            raise self.unauthorized(scopes, response.status_code)

    def _answer(self, response: httpx.Response, scopes: list[str], parent: httpx.Request
                ) -> Generator[httpx.Request, httpx.Response, str]:
        """The Authorization header that answers this 401 challenge."""
        challenges = parse_challenges(response.headers.get("www-authenticate", ""))
        if not challenges:
            raise self.unauthorized(scopes, response.status_code)
        bearer = next((c for c in challenges if c.scheme == "bearer"), None)
        credential = self.credential()
        if bearer is None:
            if credential is None or credential.identity_token:
                raise self.unauthorized(scopes, response.status_code)
            with self._lock:
                self._bearer = False
                self._basic = basic_header(credential.username, credential.secret)
            return self._basic
        wanted = merge_scopes(scopes, bearer.scopes)
        return (yield from self._fetch(bearer, wanted, scopes, parent))

    def _fetch(self, challenge: Challenge, wanted: list[str], scopes: list[str],
               parent: httpx.Request) -> Generator[httpx.Request, httpx.Response, str]:
        """A token for `wanted` from the challenge's realm, cached under `scopes`."""
        fetched_at = self.clock()
        token, body = yield from self._token(challenge, wanted, self.credential(), parent)
        header = f"Bearer {token}"
        _, refresh_at = token_lifetime(body, fetched_at)
        with self._lock:
            self._bearer = True
            self.tokens[tuple(sorted(scopes))] = Token(header, refresh_at, tuple(wanted),
                                                       challenge)
        return header

    def _token(self, challenge: Challenge, scopes: list[str], credential: Credential | None,
               parent: httpx.Request
               ) -> Generator[httpx.Request, httpx.Response, tuple[str, dict]]:
        where = f"{self.registry} realm {challenge.realm}"
        if not challenge.realm:
            raise TransportError("Bearer challenge without a realm", where=self.registry)
        try:
            realm = httpx.URL(challenge.realm)
        except httpx.InvalidURL:
            raise TransportError("Bearer challenge with an unusable realm", where=where) \
                from None
        refusal = realm_refusal(realm, self.registry, self.insecure)
        if refusal is not None:   # before any request: no credential, no scope goes there
            raise RealmRefused(f"registry {self.registry} names the token realm "
                               f"{challenge.realm}, which is refused: {refusal}; nothing was "
                               "sent to it", where=self.registry)
        extensions = {"timeout": parent.extensions["timeout"]} \
            if "timeout" in parent.extensions else {}
        if credential is not None and credential.identity_token:
            request = httpx.Request("POST", realm, data={
                "grant_type": "refresh_token", "refresh_token": credential.secret,
                "service": challenge.service or "", "scope": " ".join(scopes),
                "client_id": "imagekit"}, extensions=extensions)
        else:
            params: list[tuple[str, str]] = []
            if challenge.service:
                params.append(("service", challenge.service))
            params += [("scope", s) for s in scopes]
            headers = {}
            if credential is not None:
                headers["Authorization"] = basic_header(credential.username, credential.secret)
            # a tuple: httpx's params type takes a covariant tuple, not a list[tuple[str, str]]
            request = httpx.Request("GET", realm, params=tuple(params), headers=headers,
                                    extensions=extensions)
        response = yield request
        response.read()
        if response.status_code in RETRY_STATUSES:
            raise RetryableStatus(response)
        if response.status_code in (401, 403):
            raise self.unauthorized(scopes, response.status_code)
        if response.status_code != 200:
            raise TransportError(f"token service answered HTTP {response.status_code}",
                                 where=where)
        try:
            body = response.json()
        except ValueError:
            raise TransportError("token service answered non-JSON", where=where) from None
        token = body.get("token") or body.get("access_token") if isinstance(body, dict) else None
        if not token or not isinstance(token, str):
            raise TransportError("token service answered without a token", where=where)
        return token, body
