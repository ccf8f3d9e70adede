"""`RegistryClient`: the OCI distribution API of one registry, on httpx.

What it promises:
- every manifest and blob it returns was hashed and matched its digest; a mismatch is
  `DigestMismatch`, whatever a `Docker-Content-Digest` header claimed;
- blobs are streamed (never held whole in memory) and a broken download resumes with a Range
  request from where it stopped, the hash carrying on;
- 429/5xx/broken connections are retried (see `retry.py`), honouring Retry-After;
- uploads are chunked; a failed chunk is resent after asking the registry where the upload
  stands, and an upload the registry dropped is restarted. The final PUT (the commit) happens
  only after the source stream has been verified, so bad bytes are never committed;
- a refusal is `Unauthorized` naming the registry and the credential sources tried, never a
  secret.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import stamina
from pydantic import BaseModel, ConfigDict, Field

from imagekit.errors import DigestMismatch, InvalidInput, NotFound, TransportError, Unauthorized
from imagekit.oci import mediatypes as mt
from imagekit.oci.digest import Digest
from imagekit.registry import auth as _auth
from imagekit.registry.credentials import Credential, CredentialSource
from imagekit.registry.journal import UploadJournal
from imagekit.registry.endpoint import (
    api_host,
    is_loopback,
    is_verify_failure,
    ssl_cause,
    ssl_context,
)
from imagekit.registry.retry import RETRY_STATUSES, RetryableStatus, RetryPolicy, backoff_hook

MIB = 1 << 20
MAX_MANIFEST_BYTES = 4 * MIB


class RegistryOptions(BaseModel):
    """How to reach registries: trust, insecure exceptions, credentials, retries, chunking."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    insecure: frozenset[str] = frozenset()
    ca_file: Path | None = None
    docker_config: Path | None = None
    retry: RetryPolicy = Field(default_factory=RetryPolicy.from_env)
    chunk_size: int = 128 * MIB
    read_size: int = 64 * 1024  # larger makes httpx re-chunk (measured: 2 MiB is 5x slower)
    timeout_s: float = 120.0
    #: Where interrupted uploads are remembered for a rerun (None: the default directory).
    upload_journal: Path | None = None


@dataclass(frozen=True)
class ManifestBlob:
    """Manifest bytes exactly as served (their sha256 is `digest`) with their media type."""

    data: bytes
    media_type: str
    digest: Digest


class _RestartUpload(Exception):
    """The registry no longer knows the upload session: start the blob again."""


class RegistryClient:
    """One registry host. Thread-safe: promote copies several blobs at once through one client."""

    def __init__(self, registry: str, options: RegistryOptions | None = None) -> None:
        self.registry = registry
        self.options = options or RegistryOptions()
        self._insecure = registry in self.options.insecure
        self._http = httpx.Client(
            verify=ssl_context(registry, self.options.ca_file, self._insecure),
            timeout=httpx.Timeout(self.options.timeout_s, connect=15.0),
            follow_redirects=True,
            limits=httpx.Limits(max_connections=16, max_keepalive_connections=16),
        )
        self._base: str | None = None
        self._lock = threading.Lock()
        self._credentials = CredentialSource(self.options.docker_config)
        self._credential: Credential | None = None
        self._sources: list[str] = []
        self._looked_up = False
        self._basic: str | None = None
        self._tokens: dict[tuple[str, ...], str] = {}
        self._challenge: _auth.Challenge | None = None
        self._journal = UploadJournal(self.options.upload_journal)

    # -- lifecycle -------------------------------------------------------------------------
    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "RegistryClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- endpoint --------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        if self._base is None:
            with self._lock:
                if self._base is None:
                    self._base = self._resolve_base()
        return self._base

    def _resolve_base(self) -> str:
        """HTTPS first; plain HTTP only for loopback or --insecure registries (docker's rule)."""
        host = api_host(self.registry)
        https = f"https://{host}"
        may_use_http = self._insecure or is_loopback(self.registry)

        def ping(url: str) -> httpx.Response:
            return self._http.get(f"{url}/v2/")

        for attempt in self._retrying():
            with attempt:
                try:
                    response = ping(https)
                except httpx.ConnectError as exc:
                    if is_verify_failure(exc):
                        raise TransportError(
                            f"TLS certificate of {self.registry} is not trusted; pass --ca-file "
                            f"or install it as /etc/docker/certs.d/{self.registry}/ca.crt "
                            "(or --insecure for a registry you accept unverified)",
                            where=self.registry) from None
                    if ssl_cause(exc) is None:
                        raise
                    if not may_use_http:
                        raise TransportError(
                            f"TLS handshake with {self.registry} failed ({ssl_cause(exc)}); if "
                            "it is a plain-HTTP registry, only loopback addresses are used over "
                            "HTTP without --insecure REGISTRY", where=self.registry) from None
                    response = ping(f"http://{host}")
                    self._check_ping(response)
                    return f"http://{host}"
                self._check_ping(response)
                return https
        raise AssertionError("unreachable")

    def _check_ping(self, response: httpx.Response) -> None:
        if response.status_code in RETRY_STATUSES:
            raise RetryableStatus(response)
        if response.status_code not in (200, 401):
            raise TransportError(f"/v2/ answered HTTP {response.status_code}; not an OCI "
                                 "distribution registry?", where=self.registry)

    def ping(self) -> str:
        """Resolve the endpoint (scheme, trust); returns the base URL."""
        return self._wrap(lambda: self.base_url)

    def _url(self, path_or_url: str) -> str:
        if path_or_url.startswith(("http://", "https://")):
            return path_or_url
        return self.base_url + path_or_url

    # -- retries ---------------------------------------------------------------------------
    def _retrying(self):
        policy = self.options.retry
        return stamina.retry_context(
            on=backoff_hook(policy), attempts=policy.attempts, timeout=policy.timeout,
            wait_initial=policy.wait_initial, wait_max=policy.wait_max,
            wait_jitter=policy.wait_jitter)

    def _wrap(self, func: Callable[[], Any]) -> Any:
        """Turn what is left after retries into imagekit errors that name this registry."""
        try:
            return func()
        except RetryableStatus as exc:
            raise TransportError(f"registry kept answering HTTP {exc.status_code} after "
                                 f"{self.options.retry.attempts} attempts",
                                 where=self.registry) from None
        except httpx.TransportError as exc:
            raise TransportError(f"cannot reach registry: {type(exc).__name__}: {exc}",
                                 where=self.registry) from None

    # -- auth ------------------------------------------------------------------------------
    def _lookup(self) -> Credential | None:
        if not self._looked_up:
            found = self._credentials.lookup(self.registry)
            self._credential, self._sources = found.credential, found.sources
            self._looked_up = True
        return self._credential

    def credential_sources(self) -> list[str]:
        self._lookup()
        return list(self._sources)

    def _unauthorized(self, scopes: list[str], status: int) -> Unauthorized:
        credential = self._lookup()
        who = f"the credentials ({credential})" if credential else "anonymous access"
        what = "refused" if status == 401 else "denied access to"
        scope_text = ", ".join(scopes) or "the API"
        tried = "; ".join(self._sources) or "none"
        return Unauthorized(f"registry {self.registry} {what} {who} for {scope_text} "
                            f"(HTTP {status}; credential sources tried: {tried})",
                            where=self.registry)

    def _auth_header(self, scopes: list[str]) -> str | None:
        if self._challenge is not None and self._challenge.scheme == "bearer":
            return self._tokens.get(tuple(sorted(scopes)))
        return self._basic

    def _authenticate(self, response: httpx.Response, scopes: list[str]) -> str:
        """Answer a 401 challenge; returns the Authorization header to repeat with."""
        challenges = _auth.parse_challenges(response.headers.get("www-authenticate", ""))
        if not challenges:
            raise self._unauthorized(scopes, response.status_code)
        bearer = next((c for c in challenges if c.scheme == "bearer"), None)
        credential = self._lookup()
        if bearer is None:
            if credential is None or credential.identity_token:
                raise self._unauthorized(scopes, response.status_code)
            with self._lock:
                self._challenge = challenges[0]
                self._basic = _auth.basic_header(credential.username, credential.secret)
            return self._basic
        wanted = _auth.merge_scopes(scopes, bearer.scopes)
        token = self._fetch_token(bearer, wanted, credential)
        header = f"Bearer {token}"
        with self._lock:
            self._challenge = bearer
            self._tokens[tuple(sorted(scopes))] = header
        return header

    def _fetch_token(self, challenge: _auth.Challenge, scopes: list[str],
                     credential: Credential | None) -> str:
        if not challenge.realm:
            raise TransportError("Bearer challenge without a realm", where=self.registry)
        realm = httpx.URL(challenge.realm)
        if credential is not None and realm.scheme != "https" and \
                not is_loopback(realm.netloc.decode()) and not self._insecure:
            raise TransportError(f"token realm {challenge.realm} is plain HTTP; credentials are "
                                 "not sent there (use --insecure for this registry to allow it)",
                                 where=self.registry)
        params: list[tuple[str, str]] = []
        if challenge.service:
            params.append(("service", challenge.service))
        params += [("scope", s) for s in scopes]
        if credential is not None and credential.identity_token:
            response = self._http.post(challenge.realm, data={
                "grant_type": "refresh_token", "refresh_token": credential.secret,
                "service": challenge.service or "", "scope": " ".join(scopes),
                "client_id": "imagekit"})
        else:
            headers = {}
            if credential is not None:
                headers["Authorization"] = _auth.basic_header(credential.username,
                                                              credential.secret)
            response = self._http.get(challenge.realm, params=params, headers=headers)
        if response.status_code in RETRY_STATUSES:
            raise RetryableStatus(response)
        if response.status_code in (401, 403):
            raise self._unauthorized(scopes, response.status_code)
        if response.status_code != 200:
            raise TransportError(f"token service answered HTTP {response.status_code}",
                                 where=f"{self.registry} realm {challenge.realm}")
        try:
            body = response.json()
        except ValueError:
            raise TransportError("token service answered non-JSON",
                                 where=f"{self.registry} realm {challenge.realm}") from None
        token = body.get("token") or body.get("access_token")
        if not token:
            raise TransportError("token service answered without a token",
                                 where=f"{self.registry} realm {challenge.realm}")
        return token

    # -- one request -----------------------------------------------------------------------
    def _send(self, method: str, url: str, scopes: list[str], headers: dict[str, str] | None,
              content: bytes | None, params: dict[str, str] | None, stream: bool
              ) -> httpx.Response:
        """One authenticated exchange: send, answer a 401 challenge once, send again."""
        full: str | httpx.URL = self._url(url)
        if params:  # keep an upload location's own query (_state) and add ours
            full, params = httpx.URL(full).copy_merge_params(params), None
        sent_headers = dict(headers or {})
        header = self._auth_header(scopes)
        if header:
            sent_headers["Authorization"] = header
        request = self._http.build_request(method, full, headers=sent_headers, content=content,
                                           params=params)
        response = self._http.send(request, stream=stream)
        if response.status_code == 401:
            response.close()
            sent_headers["Authorization"] = self._authenticate(response, scopes)
            request = self._http.build_request(method, full, headers=sent_headers,
                                               content=content, params=params)
            response = self._http.send(request, stream=stream)
            if response.status_code in (401, 403):
                response.close()
                raise self._unauthorized(scopes, response.status_code)
        elif response.status_code == 403:
            response.close()
            raise self._unauthorized(scopes, 403)
        if response.status_code in RETRY_STATUSES:
            response.close()
            raise RetryableStatus(response)
        return response

    def request(self, method: str, url: str, *, scopes: list[str],
                headers: dict[str, str] | None = None, content: bytes | None = None,
                params: dict[str, str] | None = None, stream: bool = False,
                retry: bool = True) -> httpx.Response:
        """A request with auth and (when `retry`) retries; the caller checks the status."""
        def once() -> httpx.Response:
            return self._send(method, url, scopes, headers, content, params, stream)

        if not retry:
            return once()

        def retried() -> httpx.Response:
            for attempt in self._retrying():
                with attempt:
                    return once()
            raise AssertionError("unreachable")

        return self._wrap(retried)

    # -- manifests -------------------------------------------------------------------------
    @staticmethod
    def pull_scope(repository: str) -> list[str]:
        return [_auth.repository_scope(repository, "pull")]

    @staticmethod
    def push_scope(repository: str) -> list[str]:
        return [_auth.repository_scope(repository, "pull,push")]

    def get_manifest(self, repository: str, reference: str | Digest) -> ManifestBlob:
        """GET a manifest (any of the four kinds) and prove its digest by hashing the body."""
        where = f"{self.registry}/{repository}@{reference}" if isinstance(reference, Digest) \
            else f"{self.registry}/{repository}:{reference}"
        response = self.request("GET", f"/v2/{repository}/manifests/{reference}",
                                scopes=self.pull_scope(repository),
                                headers={"Accept": mt.MANIFEST_ACCEPT})
        if response.status_code == 404:
            raise NotFound("manifest not found", where=where)
        if response.status_code != 200:
            raise TransportError(f"manifest GET answered HTTP {response.status_code}",
                                 where=where)
        data = response.content
        if len(data) > MAX_MANIFEST_BYTES:
            raise TransportError("manifest larger than 4 MiB", where=where)
        computed = Digest.of_bytes(data, reference.algorithm if isinstance(reference, Digest)
                                   else "sha256")
        if isinstance(reference, Digest) and computed != reference:
            raise DigestMismatch(f"manifest bytes hash to {computed}, not the digest asked for",
                                 where=where)
        claimed = response.headers.get("docker-content-digest")
        if claimed and not isinstance(reference, Digest):
            try:
                claimed_digest = Digest.parse(claimed)
            except InvalidInput:
                claimed_digest = None
            if claimed_digest is not None and claimed_digest.algorithm == computed.algorithm \
                    and claimed_digest != computed:
                raise DigestMismatch(f"registry claims {claimed_digest} but the manifest bytes "
                                     f"hash to {computed}", where=where)
        media_type = (response.headers.get("content-type") or "").split(";")[0].strip()
        try:
            body_type = json.loads(data).get("mediaType")
        except (ValueError, AttributeError):
            body_type = None
        return ManifestBlob(data, body_type or media_type, computed)

    def manifest_exists(self, repository: str, reference: str | Digest) -> Digest | None:
        """HEAD a manifest: the digest the registry claims, None when absent. A hint only:
        anything that matters is re-read with `get_manifest`."""
        response = self.request("HEAD", f"/v2/{repository}/manifests/{reference}",
                                scopes=self.pull_scope(repository),
                                headers={"Accept": mt.MANIFEST_ACCEPT})
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise TransportError(f"manifest HEAD answered HTTP {response.status_code}",
                                 where=f"{self.registry}/{repository}:{reference}")
        claimed = response.headers.get("docker-content-digest")
        if isinstance(reference, Digest):
            return reference
        return Digest.parse(claimed) if claimed else None

    def put_manifest(self, repository: str, reference: str | Digest, manifest: ManifestBlob
                     ) -> Digest:
        where = f"{self.registry}/{repository}:{reference}"
        response = self.request("PUT", f"/v2/{repository}/manifests/{reference}",
                                scopes=self.push_scope(repository), content=manifest.data,
                                headers={"Content-Type": manifest.media_type})
        if response.status_code not in (200, 201, 202):
            detail = response.text[:300].replace("\n", " ")
            raise TransportError(f"manifest PUT answered HTTP {response.status_code}: {detail}",
                                 where=where)
        claimed = response.headers.get("docker-content-digest")
        if claimed and Digest.parse(claimed) != manifest.digest:
            raise DigestMismatch(f"registry stored the manifest as {claimed}, not "
                                 f"{manifest.digest}", where=where)
        return manifest.digest

    def list_tags(self, repository: str) -> list[str]:
        tags: list[str] = []
        url: str | None = f"/v2/{repository}/tags/list"
        while url:
            response = self.request("GET", url, scopes=self.pull_scope(repository))
            if response.status_code == 404:
                return []
            if response.status_code != 200:
                raise TransportError(f"tags list answered HTTP {response.status_code}",
                                     where=f"{self.registry}/{repository}")
            tags += response.json().get("tags") or []
            link = response.links.get("next", {}).get("url")
            url = link if link else None
        return tags

    def referrers(self, repository: str, digest: Digest) -> list[dict]:
        """The OCI referrers API; [] where the registry does not implement it."""
        response = self.request("GET", f"/v2/{repository}/referrers/{digest}",
                                scopes=self.pull_scope(repository),
                                headers={"Accept": mt.OCI_INDEX})
        if response.status_code != 200:
            return []
        try:
            return list(response.json().get("manifests") or [])
        except (ValueError, AttributeError):
            return []

    # -- blobs: read -----------------------------------------------------------------------
    def blob_exists(self, repository: str, digest: Digest) -> bool:
        response = self.request("HEAD", f"/v2/{repository}/blobs/{digest}",
                                scopes=self.pull_scope(repository))
        if response.status_code == 200:
            return True
        if response.status_code == 404:
            return False
        raise TransportError(f"blob HEAD answered HTTP {response.status_code}",
                             where=f"{self.registry}/{repository}@{digest}")

    def get_blob_bytes(self, repository: str, digest: Digest, size: int | None = None
                       ) -> bytes:
        """A small blob (a config) whole, verified."""
        return b"".join(self.blob_chunks(repository, digest, size))

    def blob_chunks(self, repository: str, digest: Digest, size: int | None = None
                    ) -> Iterator[bytes]:
        """Stream a blob, hashing as it goes; raises DigestMismatch after the last byte if the
        content is not `digest` (so a consumer commits nothing before the stream ends)."""
        where = f"{self.registry}/{repository}@{digest}"
        hasher = digest.hasher()
        position = 0
        failures = 0
        while True:
            headers = {"Range": f"bytes={position}-"} if position else {}
            response = self.request("GET", f"/v2/{repository}/blobs/{digest}",
                                    scopes=self.pull_scope(repository), headers=headers,
                                    stream=True)
            try:
                if response.status_code == 404:
                    raise NotFound("blob not found", where=where)
                if response.status_code not in (200, 206):
                    raise TransportError(f"blob GET answered HTTP {response.status_code}",
                                         where=where)
                skip = position if response.status_code == 200 else 0
                for data in response.iter_raw(self.options.read_size):
                    if skip:
                        if len(data) <= skip:
                            skip -= len(data)
                            continue
                        data, skip = data[skip:], 0
                    hasher.update(data)
                    position += len(data)
                    if size is not None and position > size:
                        raise DigestMismatch(f"blob is longer than its descriptor's {size} "
                                             "bytes", where=where)
                    yield data
                break
            except httpx.TransportError as exc:
                failures += 1
                if failures >= self.options.retry.attempts:
                    raise TransportError(f"blob download kept failing at byte {position}: "
                                         f"{type(exc).__name__}", where=where) from None
                time.sleep(min(self.options.retry.wait_max,
                               self.options.retry.wait_initial * 2 ** failures))
            finally:
                response.close()
        if hasher.hexdigest() != digest.hex:
            raise DigestMismatch(f"blob content hashes to {digest.algorithm}:"
                                 f"{hasher.hexdigest()}, not its digest", where=where)
        if size is not None and position != size:
            raise DigestMismatch(f"blob has {position} bytes, its descriptor says {size}",
                                 where=where)

    # -- blobs: write ----------------------------------------------------------------------
    def mount_blob(self, repository: str, digest: Digest, from_repository: str) -> bool:
        """Cross-repository mount inside this registry: True when mounted (0 bytes moved)."""
        scopes = _auth.merge_scopes(self.push_scope(repository),
                                    self.pull_scope(from_repository))
        response = self.request("POST", f"/v2/{repository}/blobs/uploads/",
                                scopes=scopes,
                                params={"mount": str(digest), "from": from_repository})
        if response.status_code == 201:
            return True
        if response.status_code == 202:  # not mountable; an upload session was opened: drop it
            location = response.headers.get("location")
            if location:
                try:
                    self.request("DELETE", location, scopes=self.push_scope(repository))
                except TransportError:
                    pass
        return False

    def _start_upload(self, repository: str) -> str:
        response = self.request("POST", f"/v2/{repository}/blobs/uploads/",
                                scopes=self.push_scope(repository))
        if response.status_code != 202 or not response.headers.get("location"):
            raise TransportError(f"upload start answered HTTP {response.status_code}",
                                 where=f"{self.registry}/{repository}")
        return self._url(response.headers["location"])

    def _upload_status(self, repository: str, location: str) -> tuple[str, int] | None:
        """(location, bytes the registry holds) of an open upload; None when it is gone."""
        try:
            response = self.request("GET", location, scopes=self.push_scope(repository))
        except TransportError:
            return None
        if response.status_code != 204:
            return None
        end = response.headers.get("range", "0--1").rpartition("-")[2]
        try:
            have = int(end) + 1
        except ValueError:
            return None
        return self._url(response.headers.get("location") or location), have

    def _send_part(self, repository: str, digest: Digest, location: str, offset: int,
                   length: int, body: Callable[[], Iterator[bytes]], kept: list[bytes],
                   refill: Callable[[], None], on_bytes: Callable[[int], None] | None) -> str:
        """PATCH one chunk, streamed from the source while it is kept for a resend. On a
        failure, ask the registry where the upload stands: same offset -> resend the kept
        chunk; anything else -> the registry dropped it (restart the blob)."""
        policy = self.options.retry
        headers = {"Content-Type": "application/octet-stream",
                   "Content-Length": str(length)}
        if length:
            headers["Content-Range"] = f"{offset}-{offset + length - 1}"
        stream: Iterator[bytes] = body()
        for failure in range(policy.attempts):
            try:
                response = self._send_stream("PATCH", location, repository, headers, stream,
                                             on_bytes)
            except (RetryableStatus, httpx.TransportError) as exc:
                refill()  # finish reading this chunk from the source into `kept`
                wait = getattr(exc, "retry_after", None)
                time.sleep(min(policy.retry_after_max, wait) if wait is not None else
                           min(policy.wait_max, policy.wait_initial * 2 ** failure))
                status = self._upload_status(repository, location)
                if status is None or status[1] != offset:
                    raise _RestartUpload() from None
                location = status[0]
                stream = iter(list(kept))
                continue
            if response.status_code == 202:
                return self._url(response.headers.get("location") or location)
            if response.status_code in (400, 404, 416):
                raise _RestartUpload()
            detail = response.text[:300].replace("\n", " ")
            raise TransportError(f"blob PATCH answered HTTP {response.status_code}: {detail}",
                                 where=f"{self.registry}/{repository}@{digest}")
        raise _RestartUpload()

    def _send_stream(self, method: str, location: str, repository: str,
                     headers: dict[str, str], stream: Iterator[bytes],
                     on_bytes: Callable[[int], None] | None) -> httpx.Response:
        """One streamed request (no retry here: a body cannot be replayed blindly). The
        stream is not re-sent on a 401: uploads start with a POST that authenticates first."""
        sent_headers = dict(headers)
        header = self._auth_header(self.push_scope(repository))
        if header:
            sent_headers["Authorization"] = header

        def counted() -> Iterator[bytes]:
            for data in stream:
                yield data
                if on_bytes:
                    on_bytes(len(data))

        request = self._http.build_request(method, self._url(location), headers=sent_headers,
                                           content=counted())
        response = self._http.send(request)
        if response.status_code == 401 and header:
            # an expired token mid-upload: fetch a fresh one (Unauthorized if really refused)
            # and let the caller resend this chunk after checking the upload's state
            self._authenticate(response, self.push_scope(repository))
            raise RetryableStatus(response)
        if response.status_code in (401, 403):
            raise self._unauthorized(self.push_scope(repository), response.status_code)
        if response.status_code in RETRY_STATUSES:
            raise RetryableStatus(response)
        return response

    def _commit(self, repository: str, digest: Digest, location: str) -> None:
        """The final PUT ?digest=: only after the source stream proved its digest."""
        policy = self.options.retry
        for failure in range(policy.attempts):
            try:
                response = self.request("PUT", location, scopes=self.push_scope(repository),
                                        params={"digest": str(digest)}, retry=False,
                                        headers={"Content-Length": "0"})
            except (RetryableStatus, httpx.TransportError):
                time.sleep(min(policy.wait_max, policy.wait_initial * 2 ** failure))
                if self.blob_exists(repository, digest):
                    return  # the commit landed, its answer was lost
                status = self._upload_status(repository, location)
                if status is None:
                    raise _RestartUpload() from None
                location = status[0]
                continue
            if response.status_code in (201, 204):
                return
            if response.status_code in (400, 404, 416):
                raise _RestartUpload()
            detail = response.text[:300].replace("\n", " ")
            raise TransportError(f"blob commit answered HTTP {response.status_code}: {detail}",
                                 where=f"{self.registry}/{repository}@{digest}")
        raise _RestartUpload()

    def upload_blob(self, repository: str, digest: Digest,
                    open_source: Callable[[], Iterator[bytes]],
                    on_bytes: Callable[[int], None] | None = None, *,
                    size: int | None = None) -> int:
        """Upload a blob of `size` bytes from a verified source stream; returns the bytes
        sent (resends included). `open_source` is called again when the upload has to start
        over. The commit happens only after the source stream ended without DigestMismatch.
        Without `size` the source is read into memory first (fine for configs and tests;
        large blobs pass their descriptor's size and stream)."""
        policy = self.options.retry
        if size is None:
            whole = b"".join(open_source())
            if Digest.of_bytes(whole, digest.algorithm) != digest:
                raise DigestMismatch("blob content does not hash to its digest",
                                     where=f"{self.registry}/{repository}@{digest}")
            size = len(whole)
            open_source = lambda: iter([whole])  # noqa: E731
        sent: list[int] = [0]

        def count(n: int) -> None:
            sent[0] += n
            if on_bytes:
                on_bytes(n)

        for restart in range(policy.attempts):
            try:
                self._upload_once(repository, digest, size, open_source(), count)
                return sent[0]
            except _RestartUpload:
                if self.blob_exists(repository, digest):
                    return sent[0]
                time.sleep(min(policy.wait_max, policy.wait_initial * 2 ** restart))
        raise TransportError("blob upload kept being dropped by the registry",
                             where=f"{self.registry}/{repository}@{digest}")

    def _upload_once(self, repository: str, digest: Digest, size: int,
                     source: Iterator[bytes], on_bytes: Callable[[int], None]) -> None:
        start = 0
        location = None
        remembered = self._journal.get(self.registry, repository, digest)
        if remembered is not None:
            status = self._upload_status(repository, self._url(remembered[0]))
            if status is not None and status[1] == remembered[1] and 0 < status[1] <= size:
                location, start = status  # resume where the interrupted run stopped
            self._journal.drop(self.registry, repository, digest)
        if location is None:
            location = self._start_upload(repository)
        try:
            self._upload_parts(repository, digest, size, iter(source), on_bytes, location,
                               start)
        except (_RestartUpload, KeyboardInterrupt, TransportError):
            raise  # the session may be resumable (journal) or is gone already
        except BaseException:
            self._journal.drop(self.registry, repository, digest)
            try:  # a failed source (e.g. DigestMismatch): cancel the session, commit nothing
                self.request("DELETE", location, scopes=self.push_scope(repository),
                             retry=False).close()
            except Exception:  # noqa: BLE001 - best effort; the registry expires it anyway
                pass
            raise

    def _upload_parts(self, repository: str, digest: Digest, size: int,
                      source: Iterator[bytes], on_bytes: Callable[[int], None],
                      location: str, start: int = 0) -> None:
        where = f"{self.registry}/{repository}@{digest}"
        leftover = [b""]
        skipped = 0
        while skipped < start:  # bytes the registry already holds: hashed, not sent again
            data = next(source, b"")
            if not data:
                raise DigestMismatch(f"blob ended before its descriptor's {size} bytes",
                                     where=where)
            if skipped + len(data) > start:
                data, leftover[0] = data[:start - skipped], data[start - skipped:]
            skipped += len(data)
        offset = start
        while offset < size:
            length = min(self.options.chunk_size, size - offset)
            kept: list[bytes] = []
            state = {"need": length}

            def pull() -> bytes | None:
                """Next piece of this chunk from the source (kept for a resend)."""
                if state["need"] <= 0:
                    return None
                data = leftover[0]
                leftover[0] = b""
                if not data:
                    data = next(source, b"")
                    if not data:
                        raise DigestMismatch(f"blob ended before its descriptor's {size} "
                                             "bytes", where=where)
                if len(data) > state["need"]:
                    data, leftover[0] = data[:state["need"]], data[state["need"]:]
                state["need"] -= len(data)
                kept.append(data)
                return data

            def body() -> Iterator[bytes]:
                while (data := pull()) is not None:
                    yield data

            def refill() -> None:
                while pull() is not None:
                    pass

            location = self._send_part(repository, digest, location, offset, length, body,
                                       kept, refill, on_bytes)
            offset += length
            if offset < size:
                self._journal.put(self.registry, repository, digest, location, offset)
        if leftover[0] or next(source, b""):  # drains the source: its digest check runs here
            raise DigestMismatch(f"blob is longer than its descriptor's {size} bytes",
                                 where=where)
        self._commit(repository, digest, location)
        self._journal.drop(self.registry, repository, digest)
