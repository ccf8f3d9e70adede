"""`RegistryClient`: the OCI distribution API of one registry — a small front.

The work is in modules of one concept each (go-containerregistry's `remote` and
`remote/transport` shape): `transport` (endpoint, the auth flow of `auth`, the one retry policy
of `retry`, errors that name the registry), `fetch` (manifests, tags, referrers, verified blob
streams) and `push` (manifests, mounts, resumable uploads).

What it promises:
- every manifest and blob it returns was hashed and matched its digest; a mismatch is
  `DigestMismatch`, whatever a `Docker-Content-Digest` header claimed;
- tags resolve with HEAD (`resolve_tag`); a manifest GET only when its body is needed;
- a failure that cannot heal ends in seconds, one that may heal is retried within the deadline
  (see `retry.py`); the error is one line naming the endpoint;
- a refusal is `Unauthorized` naming the registry and the credential sources tried, never a
  secret.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
from pydantic import BaseModel, ConfigDict, Field

from imagekit.oci.digest import Digest
from imagekit.registry import fetch, lean, push, ratelimit
from imagekit.registry.fetch import MAX_MANIFEST_BYTES, MIB, ManifestBlob
from imagekit.registry.journal import UploadJournal
from imagekit.registry.retry import RetryPolicy
from imagekit.registry.shape import UploadShape, load_shapes
from imagekit.registry.transport import Transport

if TYPE_CHECKING:
    from imagekit.settings import Settings

__all__ = ["MAX_MANIFEST_BYTES", "ManifestBlob", "RegistryClient", "RegistryOptions"]


class RegistryOptions(BaseModel):
    """How to reach registries: trust, insecure exceptions, credentials, retries, chunking."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    insecure: frozenset[str] = frozenset()
    ca_file: Path | None = None
    docker_config: Path | None = None
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    #: Bytes per upload PATCH (`IMAGEKIT_UPLOAD_CHUNK`): each acknowledged chunk is a point a
    #: rerun can resume from.
    chunk_size: int = Field(128 * MIB, gt=0)
    #: An upload's chunks double after each confirmed one up to this many bytes (None: every
    #: chunk is `chunk_size`); a registry's own `chunk_size` setting keeps them fixed.
    chunk_grow_to: int | None = Field(None, gt=0)
    read_size: int = 64 * 1024  # larger makes httpx re-chunk (measured: 2 MiB is 5x slower)
    timeout_s: float = 120.0
    #: Where interrupted uploads are remembered for a rerun (None: the default directory).
    upload_journal: Path | None = None
    #: docker's per-registry CA folders (None: /etc/docker/certs.d).
    certs_d: Path | None = None
    #: The http.client fast path for blob bodies (lean.py); off for A/B measurements.
    lean_http: bool = True
    #: Each registry's upload shape (`[registries."HOST"]` of a registries file or images.toml):
    #: chunk size, largest body, monolithic uploads, immutable tags (shape.py).
    shapes: dict[str, UploadShape] = {}
    #: The slowest transfer (bytes/s) a blob upload is given time for: its deadline is the
    #: call deadline plus its size at this rate, whatever the registry acknowledges.
    upload_min_rate: float = Field(float(1 << 20), gt=0)
    #: Seconds one whole referrers listing may take (referrers.py).
    referrers_deadline_s: float = Field(3.0, gt=0)  # = referrers.LISTING_DEADLINE_S

    @classmethod
    def from_settings(cls, settings: Settings, *, deadline: float | None = None,
                      **given: Any) -> RegistryOptions:
        """The options imagekit's settings ask for (the CLI reads them once and passes them
        here); `given` (a command's flags) wins, `deadline` is `--call-timeout`."""
        values: dict[str, Any] = {
            "retry": RetryPolicy.from_settings(settings, deadline),
            "upload_journal": settings.upload_journal, "certs_d": settings.docker_certs_d,
            "lean_http": settings.lean_http}
        if settings.docker_config is not None:
            values["docker_config"] = settings.docker_config
        if settings.upload_chunk is not None:
            values["chunk_size"] = settings.upload_chunk
        if settings.registries is not None:
            values["shapes"] = load_shapes(settings.registries)
        if settings.referrers_deadline is not None:
            values["referrers_deadline_s"] = settings.referrers_deadline
        return cls(**{**values, **given})


class RegistryClient:
    """One registry host. Thread-safe: promote copies several blobs at once through one client."""

    def __init__(self, registry: str, options: RegistryOptions | None = None) -> None:
        self.registry = registry
        self.options = options or RegistryOptions()
        self.transport = Transport(registry, self.options)
        self._journal = UploadJournal(self.options.upload_journal)

    # -- lifecycle -------------------------------------------------------------------------
    def close(self) -> None:
        self.transport.close()

    def __enter__(self) -> RegistryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- endpoint and raw requests ---------------------------------------------------------
    @property
    def base_url(self) -> str:
        return self.transport.base_url

    def ping(self) -> str:
        """Resolve the endpoint (scheme, trust); returns the base URL."""
        return self.transport.base_url

    def credential_sources(self) -> list[str]:
        return self.transport.auth.sources()

    def request(self, method: str, url: str, *, scopes: list[str],
                headers: dict[str, str] | None = None, content: bytes | None = None,
                params: dict[str, str] | None = None, stream: bool = False
                ) -> httpx.Response:
        """A request (path under /v2/... or a full URL) with auth and retries; the caller
        checks the status. For API the other methods do not cover (e.g. referrers tags)."""
        return self.transport.request(method, url, scopes=scopes, headers=headers,
                                      content=content, params=params, stream=stream)

    pull_scope = staticmethod(fetch.pull_scope)
    push_scope = staticmethod(fetch.push_scope)

    # -- manifests and tags ----------------------------------------------------------------
    def get_manifest(self, repository: str, reference: str | Digest) -> ManifestBlob:
        """GET a manifest by tag or digest, its bytes hashed (the digest is proven)."""
        return fetch.get_manifest(self.transport, repository, reference)

    def head_manifest(self, repository: str, reference: str | Digest
                      ) -> tuple[Digest | None, bool]:
        """HEAD: (claimed digest or None, exists)."""
        return fetch.head_manifest(self.transport, repository, reference)

    def manifest_exists(self, repository: str, reference: str | Digest) -> Digest | None:
        """HEAD a manifest: the digest the registry claims, None when absent (a hint)."""
        return fetch.manifest_exists(self.transport, repository, reference)

    def resolve_tag(self, repository: str, tag: str, *, prove: bool = False,
                    known: Digest | None = None) -> Digest:
        """Tag -> digest with a HEAD (GET only when the registry sends no digest header).
        `prove`: a digest other than `known` (e.g. what a lock holds) is proven by reading
        the manifest by that digest and hashing it — one GET only when something changed."""
        digest = fetch.resolve(self.transport, repository, tag)
        if prove and digest != known:
            fetch.get_manifest(self.transport, repository, digest)
        return digest

    def put_manifest(self, repository: str, reference: str | Digest, manifest: ManifestBlob
                     ) -> Digest:
        return push.put_manifest(self.transport, repository, reference, manifest)

    def list_tags(self, repository: str) -> list[str]:
        return fetch.list_tags(self.transport, repository)

    def referrers(self, repository: str, digest: Digest) -> list[dict]:
        """The OCI referrers API; [] where the registry does not implement it."""
        return fetch.referrers(self.transport, repository, digest)

    # -- blobs -----------------------------------------------------------------------------
    def blob_exists(self, repository: str, digest: Digest) -> bool:
        return fetch.blob_exists(self.transport, repository, digest)

    def get_blob_bytes(self, repository: str, digest: Digest, size: int | None = None
                       ) -> bytes:
        """A small blob (a config) whole, verified."""
        return b"".join(self.blob_chunks(repository, digest, size))

    def blob_chunks(self, repository: str, digest: Digest, size: int | None = None, *,
                    piece: int | None = None) -> Iterator[bytes]:
        """Stream a blob, hashing as it goes; DigestMismatch after the last byte if the
        content is not `digest` (so a consumer commits nothing before the stream ends).
        `piece`: bytes per piece on the lean path (`lean.READ_SIZE` by default)."""
        return fetch.blob_chunks(self.transport, repository, digest, size,
                                 self.options.read_size, piece or lean.READ_SIZE,
                                 self.options.upload_min_rate)

    def mount_blob(self, repository: str, digest: Digest, from_repository: str,
                   on_note: Callable[[str], None] | None = None) -> push.Mount:
        """Cross-repository mount inside this registry: `.mounted` when mounted and served (0
        bytes moved), else `.session` may hold the upload session the registry opened instead;
        `on_note` hears why a mount fell back to an upload."""
        return push.mount_blob(self.transport, repository, digest, from_repository, on_note)

    @property
    def shape(self) -> UploadShape:
        """This registry's configured upload shape."""
        return self.transport.plan.shape

    def immutable_tags(self) -> bool:
        """Tags here are never moved: configured, or a refused tag PUT taught it this run."""
        return self.transport.plan.immutable_tags

    def rate_limit(self) -> ratelimit.RateLimit | None:
        """The last `RateLimit-Remaining` this registry sent in this process, if any."""
        return ratelimit.last(self.registry)

    def upload_shape(self) -> str:
        """The upload shape in use now, and what the registry taught this run."""
        return self.transport.plan.describe()

    def upload_blob(self, repository: str, digest: Digest,
                    open_source: Callable[[], Iterator[bytes]],
                    on_bytes: Callable[[int], None] | None = None, *,
                    size: int | None = None,
                    on_note: Callable[[str], None] | None = None,
                    session: str | None = None) -> int:
        """Upload a blob from a verified source stream (resumable, see `push`); returns the
        bytes sent. `on_note` hears of resumes and restarts; `session`: an upload session
        already open for it (a mount's 202)."""
        return push.upload_blob(self.transport, self._journal, repository, digest,
                                open_source, size=size, on_bytes=on_bytes, on_note=on_note,
                                min_rate=self.options.upload_min_rate, session=session)
