"""One registry's HTTP transport: endpoint, auth flow, the retry policy, errors that name it.

The shape is go-containerregistry's `pkg/v1/remote/transport`: a ping resolves the scheme and
trust once, an `httpx.Auth` answers challenges (`auth.RegistryAuth`), and every call of the
fetch and push modules goes through `Transport.call`, which runs it under the one retry policy
(`retry.Budget`, stamina) and turns whatever is left into one `TransportError` that says what
failed, why it was not retried longer, and where.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import httpx

from imagekit.errors import ImagekitError, TransportError
from imagekit.registry import lean, ratelimit
from imagekit.registry.auth import SCOPES, RegistryAuth
from imagekit.registry.credentials import CredentialSource
from imagekit.registry.endpoint import (
    api_host,
    is_loopback,
    is_verify_failure,
    speaks_plain_http,
    ssl_cause,
    ssl_context,
)
from imagekit.registry.interrupt import check as check_stop
from imagekit.registry.retry import (
    RETRY_STATUSES,
    Budget,
    RetryableStatus,
    RetryPolicy,
    _unresolvable,
    wall_left,
)
from imagekit.registry.shape import UploadPlan, UploadShape

T = TypeVar("T")
MAX_REDIRECTS = 10


class Transport:
    """Thread-safe: promote moves several blobs at once through one transport."""

    def __init__(self, registry: str, options) -> None:  # options: client.RegistryOptions
        self.registry = registry
        self.options = options
        self.policy: RetryPolicy = options.retry
        self.insecure = registry in options.insecure
        self.auth = RegistryAuth(registry, CredentialSource(options.docker_config),
                                 insecure=self.insecure)
        self.timeout = httpx.Timeout(options.timeout_s, connect=min(15.0, options.timeout_s))
        context = ssl_context(registry, options.ca_file, self.insecure, options.certs_d)
        self.http = httpx.Client(
            verify=context,
            timeout=self.timeout, follow_redirects=True, max_redirects=MAX_REDIRECTS,
            auth=self.auth,
            limits=httpx.Limits(max_connections=16, max_keepalive_connections=16))
        #: blob bodies (GET, upload PATCH) take the lean path of `lean.py` where it applies
        self.lean = lean.LeanPool(context) if lean.enabled(options.lean_http) else None
        #: the registry's upload shape for this run: configured, then what it taught
        self.plan = UploadPlan(options.shapes.get(registry) or UploadShape(),
                               options.chunk_size, options.chunk_grow_to)
        self._base: str | None = None
        self._failed: TransportError | None = None
        self._lock = threading.Lock()

    def close(self) -> None:
        self.http.close()
        if self.lean is not None:
            self.lean.close()

    # -- endpoint -------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        """Resolved once (scheme and trust)."""
        if self._base is None:
            with self._lock:
                if self._base is None:
                    self._base = self.call(self.registry, self._resolve_base)
        return self._base

    def _dead(self) -> None:
        """A registry whose connection or answers failed past the retry budget is not waited
        for again by every later call of the same client (pin resolving ten tags of one dead
        host waits once; parallel layer downloads stop together)."""
        failed = self._failed
        if failed is not None:
            raise TransportError(f"{failed.message} (a moment ago; not retried again)",
                                 where=failed.where)

    def _resolve_base(self, budget: Budget) -> str:
        """HTTPS first; plain HTTP only for loopback or --insecure registries (docker's rule).
        For those, a port that answers a TLS hello with plain HTTP is pinged over HTTP at once
        (`speaks_plain_http`), as the https attempt would have ended there anyway."""
        host = api_host(self.registry)
        if (self.insecure or is_loopback(self.registry)) and speaks_plain_http(
                self.registry, min(5.0, self.options.timeout_s)):
            self._check_ping(self._ping(f"http://{host}", budget))
            return f"http://{host}"
        try:
            self._check_ping(self._ping(f"https://{host}", budget))
            return f"https://{host}"
        except httpx.ConnectError as exc:
            if is_verify_failure(exc):
                raise TransportError(
                    f"TLS certificate of {self.registry} is not trusted; pass --ca-file or "
                    f"install it as /etc/docker/certs.d/{self.registry}/ca.crt (or --insecure "
                    "for a registry you accept unverified)", where=self.registry) from None
            cause = ssl_cause(exc)
            if cause is None:
                raise
            if not (self.insecure or is_loopback(self.registry)):
                raise TransportError(
                    f"TLS handshake with {self.registry} failed ({cause}); if it is a "
                    "plain-HTTP registry, only loopback addresses are used over HTTP without "
                    "--insecure REGISTRY", where=self.registry) from None
        self._check_ping(self._ping(f"http://{host}", budget))
        return f"http://{host}"

    def _ping(self, base: str, budget: Budget) -> httpx.Response:
        request = self.http.build_request("GET", f"{base}/v2/",
                                          timeout=budget.timeout(self.timeout))
        response = self.http.send(request, auth=None)
        response.close()
        return response

    def _check_ping(self, response: httpx.Response) -> None:
        if response.status_code in RETRY_STATUSES:
            raise RetryableStatus(response)
        if response.status_code not in (200, 401):
            raise TransportError(f"/v2/ answered HTTP {response.status_code}; not an OCI "
                                 "distribution registry?", where=self.registry)

    def url(self, path_or_url: str) -> str:
        if path_or_url.startswith(("http://", "https://")):
            return path_or_url
        return self.base_url + path_or_url

    # -- one exchange ---------------------------------------------------------------------
    def send(self, method: str, url: str, *, scopes: list[str], budget: Budget,
             headers: dict[str, str] | None = None, content=None,
             params: dict[str, str] | None = None, stream: bool = False,
             patient: bool = False) -> httpx.Response:
        """One authenticated exchange (the auth flow may add a token round trip); 429/5xx
        raise `RetryableStatus` for the caller's retry context. No retry here. `patient`: the
        answer may legitimately take long (a commit that re-hashes a large blob), so the
        client's own time-out applies rather than the time left before the deadline."""
        check_stop(self.registry)
        full: str | httpx.URL = self.url(url)
        if params:  # keep an upload location's own query (_state) and add ours
            full = httpx.URL(full).copy_merge_params(params)
        request = self.http.build_request(method, full, headers=headers, content=content,
                                          timeout=self.timeout if patient else
                                          budget.timeout(self.timeout),
                                          extensions={SCOPES: list(scopes)})
        response = self.http.send(request, stream=stream)
        ratelimit.record(self.registry, response.headers)
        if response.status_code in RETRY_STATUSES:
            response.close()
            self._throttled(response.status_code)
            raise RetryableStatus(response)
        if response.status_code == 401:  # the flow answered the challenge and was refused
            response.close()
            raise self.auth.unauthorized(scopes, 401)
        if not stream:  # the body was read whole: this exchange is done
            budget.answered()
        return response

    def _throttled(self, status: int) -> None:
        """A 429 says the registry enforces a quota: from now on each body waits for its
        `100 Continue`, so a refusal costs a round trip and not the body (upload shape)."""
        if status == 429:
            self.plan.refuses_bodies = True

    def send_body(self, method: str, url: str, *, scopes: list[str], budget: Budget,
                  headers: dict[str, str] | None = None, body=None, params=None,
                  patient: bool = False, expect: bool = False
                  ) -> httpx.Response | lean.LeanResponse | None:
        """A blob GET (`body` None, streamed) or upload PATCH (`body` an iterator, sent
        chunked) through the lean path (`lean.py`), with the Authorization header the httpx
        flow earned for `scopes`. None: the lean path does not apply here (off, a proxy, or a
        GET answered with a challenge or redirect): the caller uses `send`. 429/5xx raise
        `RetryableStatus` as `send` does."""
        if self.lean is None or self.lean.off:
            return None
        check_stop(self.registry)
        full: str | httpx.URL = self.url(url)
        if params:
            full = httpx.URL(full).copy_merge_params(params)
        sent = dict(headers or {})
        header = self.auth.header_for(scopes)
        if header:
            sent["Authorization"] = header
        timeout = self.options.timeout_s if patient else \
            budget.timeout(self.timeout).read or self.options.timeout_s
        response = self.lean.exchange(method, str(full), sent, timeout, body, expect)
        if response is None:
            return None
        ratelimit.record(self.registry, response.headers)
        if response.status_code in RETRY_STATUSES:
            response.close()
            self._throttled(response.status_code)
            raise RetryableStatus(response)  # type: ignore[arg-type]
        if body is not None:
            budget.answered()
            return response.finish()
        return response

    def send_small(self, method: str, url: str, *, scopes: list[str], budget: Budget,
                   headers: dict[str, str] | None = None, params: dict[str, str] | None = None,
                   patient: bool = False) -> httpx.Response | lean.LeanResponse:
        """A bodiless exchange with a small answer on a blob's way (blob HEAD, upload POST,
        commit PUT): the lean path where it applies (httpx's exchange costs ~0.5 ms more CPU,
        four of them per blob), else `send` — a challenge or a redirect always goes to httpx.
        The answer is read whole; 429/5xx raise `RetryableStatus`, a 401 after the flow
        `Unauthorized`, as `send` does."""
        response = self.send_body(method, url, scopes=scopes, budget=budget, headers=headers,
                                  params=params, patient=patient)
        if response is None:
            return self.send(method, url, scopes=scopes, budget=budget, headers=headers,
                             params=params, patient=patient)
        assert isinstance(response, lean.LeanResponse)
        budget.answered()
        return response.finish()

    # -- one call under the policy --------------------------------------------------------
    def call(self, where: str, func: Callable[[Budget], T]) -> T:
        """Run `func(budget)` under one retry budget; errors become one TransportError."""
        self._dead()
        budget = self.policy.budget(where)
        with self.errors(where, budget):
            for attempt in budget.attempts():
                with attempt:
                    return func(budget)
        raise AssertionError("unreachable")

    def request(self, method: str, url: str, *, scopes: list[str], where: str | None = None,
                headers: dict[str, str] | None = None, content: bytes | None = None,
                params: dict[str, str] | None = None, stream: bool = False) -> httpx.Response:
        """A request with auth and retries; the caller checks the status."""
        return self.call(where or self.registry, lambda budget: self.send(
            method, url, scopes=scopes, budget=budget, headers=headers, content=content,
            params=params, stream=stream))

    @contextmanager
    def errors(self, where: str, budget: Budget) -> Iterator[None]:
        """httpx's exceptions and exhausted retries as one TransportError naming `where`; the
        client remembers it (`_dead`)."""
        try:
            try:
                yield
            except TransportError as exc:
                if exc.message.startswith(("TLS ", "/v2/ answered")):
                    self._failed = exc
                raise
        except ImagekitError:
            raise
        except BaseException as exc:
            mapped = self._map(exc, where, budget)
            if mapped is None:
                raise
            if not isinstance(exc, RetryableStatus):
                # a host that cannot be reached is not waited for again; a server that
                # answered (5xx, 429) may answer another request, so only this call fails
                self._failed = mapped
            raise mapped from None

    def _other_host(self, exc: BaseException) -> str | None:
        """The URL (without query) of the failed request when it went to another host than
        the registry (a token realm), else None."""
        try:
            url = exc.request.url  # type: ignore[attr-defined]
        except (AttributeError, RuntimeError):
            return None
        if url.netloc.decode() == api_host(self.registry) and \
                (url.path == "/v2" or url.path.startswith("/v2/")):
            return None
        return str(url.copy_with(query=None))

    def _map(self, exc: BaseException, where: str, budget: Budget) -> TransportError | None:
        try:
            raise exc
        except RetryableStatus as exc:
            why = budget.gave_up or f"{budget.failures} attempts"
            return TransportError(f"registry answered HTTP {exc.status_code} and {why}"
                                  if "asks to retry" in why else
                                  f"registry kept answering HTTP {exc.status_code} ({why})",
                                  where=where)
        except httpx.TooManyRedirects:
            return TransportError(f"redirect loop (more than {MAX_REDIRECTS} redirects)",
                                  where=where)
        except httpx.TimeoutException as exc:
            wall = wall_left()
            if wall is not None and wall < 0.5:  # cut by the operation's own wall clock
                return TransportError(f"no answer before the operation's own deadline "
                                      f"({type(exc).__name__})", where=where)
            return TransportError(f"no answer within the {self.policy.budget_s:g} s deadline "
                                  f"({type(exc).__name__})", where=where)
        except httpx.ConnectError as exc:
            if _unresolvable(exc):
                text = f"cannot resolve the registry's host name ({exc})"
            elif ssl_cause(exc) is not None:
                text = f"TLS handshake failed ({ssl_cause(exc)})"
            else:
                text = f"cannot connect ({exc}; {budget.gave_up or 'not retried'})"
            realm = self._other_host(exc)
            if realm is not None:  # the 401's token realm failed, not the registry
                return TransportError(f"cannot connect to the token realm {realm} that the "
                                      f"registry's 401 names ({exc}; "
                                      f"{budget.gave_up or 'not retried'})", where=where)
            return TransportError(text, where=where)
        except httpx.HTTPError as exc:
            text = " ".join(str(exc).split()) or type(exc).__name__
            return TransportError(f"connection broken: {type(exc).__name__}: {text} "
                                  f"({budget.gave_up or 'not retried'})", where=where)
        except BaseException:  # noqa: BLE001 - not ours to map (KeyboardInterrupt, bugs)
            return None
