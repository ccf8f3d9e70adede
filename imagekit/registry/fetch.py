"""Reading from a registry (go-containerregistry's `remote` fetcher): manifests, tags,
referrers, blobs. Every byte returned was hashed and matched its digest.

- A tag is resolved with HEAD (`resolve`): registries such as Docker Hub count manifest GETs
  as pulls, HEADs not. A GET is made only when the body is needed, and a GET by tag is checked
  against the `Docker-Content-Digest` the registry claims.
- Blobs stream (never whole in memory), through the lean HTTP/1.1 path of `lean.py` where it
  applies (1 MiB reads; httpx's 64 KiB reads through h11 cost more CPU than the sha256); a
  broken download resumes with a Range request from where it stopped, the hash carrying
  on. Bytes received are progress: the retry budget starts again, so only a download that
  stops moving ends.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx

from imagekit.errors import (
    DigestMismatch,
    InvalidInput,
    NotFound,
    RegistryBehaviour,
    TransportError,
)
from imagekit.oci import mediatypes as mt
from imagekit.oci.digest import Digest
from imagekit.registry import lean
from imagekit.registry.auth import repository_scope
from imagekit.registry.interrupt import check as check_stop
from imagekit.registry.retry import Budget
from imagekit.registry.transport import Transport

MIB = 1 << 20
MAX_MANIFEST_BYTES = 4 * MIB


@dataclass(frozen=True)
class ManifestBlob:
    """Manifest bytes exactly as served (their sha256 is `digest`) with their media type."""

    data: bytes
    media_type: str
    digest: Digest


def pull_scope(repository: str) -> list[str]:
    return [repository_scope(repository, "pull")]


def push_scope(repository: str) -> list[str]:
    return [repository_scope(repository, "pull,push")]


def _where(t: Transport, repository: str, reference: str | Digest) -> str:
    return f"{t.registry}/{repository}@{reference}" if isinstance(reference, Digest) \
        else f"{t.registry}/{repository}:{reference}"


def _claimed(response: httpx.Response) -> Digest | None:
    claimed = response.headers.get("docker-content-digest")
    if not claimed:
        return None
    try:
        return Digest.parse(claimed)
    except InvalidInput:
        return None


def get_manifest(t: Transport, repository: str, reference: str | Digest) -> ManifestBlob:
    """GET a manifest (any of the four kinds) and prove its digest by hashing the body."""
    where = _where(t, repository, reference)

    def once(budget: Budget) -> tuple[httpx.Response, bytes]:
        response = t.send("GET", f"/v2/{repository}/manifests/{reference}",
                          scopes=pull_scope(repository), budget=budget,
                          headers={"Accept": mt.MANIFEST_ACCEPT}, stream=True)
        try:
            if response.status_code != 200:
                return response, b""
            length = int(response.headers.get("content-length") or 0)
            if length > MAX_MANIFEST_BYTES:
                raise TransportError("manifest larger than 4 MiB", where=where)
            data = bytearray()
            for piece in response.iter_bytes():
                data += piece
                if len(data) > MAX_MANIFEST_BYTES:
                    raise TransportError("manifest larger than 4 MiB", where=where)
            return response, bytes(data)
        finally:
            response.close()

    response, data = t.call(where, once)
    if response.status_code == 404:
        raise NotFound("manifest not found", where=where)
    if response.status_code != 200:
        raise TransportError(f"manifest GET answered HTTP {response.status_code}", where=where)
    computed = Digest.of_bytes(data, reference.algorithm if isinstance(reference, Digest)
                               else "sha256")
    if isinstance(reference, Digest) and computed != reference:
        raise DigestMismatch(f"manifest bytes hash to {computed}, not the digest asked for",
                             where=where)
    claimed = _claimed(response)
    if claimed is not None and not isinstance(reference, Digest) and \
            claimed.algorithm == computed.algorithm and claimed != computed:
        raise DigestMismatch(f"registry claims {claimed} but the manifest bytes hash to "
                             f"{computed}", where=where)
    media_type = (response.headers.get("content-type") or "").split(";")[0].strip()
    try:
        body_type = json.loads(data).get("mediaType")
    except (ValueError, AttributeError):
        body_type = None
    return ManifestBlob(data, body_type or media_type, computed)


def head_manifest(t: Transport, repository: str, reference: str | Digest
                  ) -> tuple[Digest | None, bool]:
    """HEAD a manifest: (the digest the registry claims or None, whether it exists)."""
    where = _where(t, repository, reference)
    response = t.request("HEAD", f"/v2/{repository}/manifests/{reference}", where=where,
                         scopes=pull_scope(repository), headers={"Accept": mt.MANIFEST_ACCEPT})
    if response.status_code == 404:
        return None, False
    if response.status_code != 200:
        raise TransportError(f"manifest HEAD answered HTTP {response.status_code}", where=where)
    if isinstance(reference, Digest):
        return reference, True
    return _claimed(response), True


def manifest_exists(t: Transport, repository: str, reference: str | Digest) -> Digest | None:
    """The digest the registry claims, None when absent. A hint only: anything that matters
    is re-read with `get_manifest`."""
    return head_manifest(t, repository, reference)[0]


def resolve(t: Transport, repository: str, tag: str) -> Digest:
    """A tag's digest with a HEAD (not counted as a pull); a GET only when the registry sends
    no Docker-Content-Digest. The tag -> digest mapping is the registry's word either way;
    content read later by digest is hashed."""
    claimed, found = head_manifest(t, repository, tag)
    if not found:
        raise NotFound("manifest not found", where=_where(t, repository, tag))
    if claimed is not None:
        return claimed
    return get_manifest(t, repository, tag).digest


def list_tags(t: Transport, repository: str) -> list[str]:
    tags: list[str] = []
    url: str | None = f"/v2/{repository}/tags/list"
    where = f"{t.registry}/{repository}"
    while url:
        response = t.request("GET", url, scopes=pull_scope(repository), where=where)
        if response.status_code == 404:
            return []
        if response.status_code != 200:
            raise TransportError(f"tags list answered HTTP {response.status_code}", where=where)
        try:
            tags += response.json().get("tags") or []
        except (ValueError, AttributeError):
            raise TransportError("tags list is not JSON", where=where) from None
        link = response.links.get("next", {}).get("url")
        url = link if link else None
    return tags


def referrers(t: Transport, repository: str, digest: Digest) -> list[dict]:
    """The OCI referrers API; [] where the registry does not implement it."""
    response = t.request("GET", f"/v2/{repository}/referrers/{digest}",
                         scopes=pull_scope(repository), headers={"Accept": mt.OCI_INDEX},
                         where=f"{t.registry}/{repository}@{digest}")
    if response.status_code != 200:
        return []
    from imagekit.oci.referrers import dedupe, parse_index

    where = f"{t.registry}/{repository} referrers of {digest}"
    index = parse_index(response.content, where, what="referrers API index")
    return [e.dump() for e in dedupe(list(index.manifests), where)]


def blob_exists(t: Transport, repository: str, digest: Digest) -> bool:
    where = f"{t.registry}/{repository}@{digest}"
    response = t.call(where, lambda budget: t.send_small(
        "HEAD", f"/v2/{repository}/blobs/{digest}", scopes=pull_scope(repository),
        budget=budget))
    if response.status_code == 200:
        return True
    if response.status_code == 404:
        return False
    raise TransportError(f"blob HEAD answered HTTP {response.status_code}", where=where)


def _content_range_start(value: str | None) -> tuple[int | None, int | None]:
    """(first byte, total) of a `Content-Range: bytes FIRST-LAST/TOTAL` header; None where the
    header is absent or unreadable (TOTAL may be `*`)."""
    if not value:
        return None, None
    unit, _, rest = value.strip().partition(" ")
    span, _, total = rest.partition("/")
    first = span.partition("-")[0]
    if unit.lower() != "bytes" or not first.strip().isdigit():
        return None, None
    return int(first), int(total) if total.strip().isdigit() else None


def _resumed(resumes: list[str]) -> str:
    return f" (resumed: {'; '.join(resumes)})" if resumes else ""


def blob_chunks(t: Transport, repository: str, digest: Digest, size: int | None = None,
                read_size: int = 64 * 1024, lean_read_size: int = lean.READ_SIZE,
                min_rate: float = float(1 << 20)) -> Iterator[bytes]:
    """Stream a blob, hashing as it goes; raises DigestMismatch after the last byte if the
    content is not `digest` (so a consumer commits nothing before the stream ends).

    A download that breaks resumes with `Range: bytes=N-`, and the answer is held to it
    (relays and caches do not always honour ranges):
    - 200 with the whole body: the blob restarts from byte 0 with a fresh hash; the first N
      bytes are hashed again, not passed on again, and must equal the N already passed on;
    - 206 whose `Content-Range` starts elsewhere than N, or names another total: fails there,
      naming both offsets; a 206 that lies about its offset is caught by the digest, and the
      error lists every resume (offset, status) of the download;
    - more bytes than the descriptor's `size`: stops at byte size+1 (a Content-Length that
      announces more fails before the body is read);
    - fewer: asked again from where it ended; a blob that has no more bytes fails naming it.

    Bounded as an upload is: the bytes received are at most the size plus one chunk (the
    registry's upload chunk) per answer that had to be asked again, and the download ends by
    a deadline of the call deadline plus the size at `min_rate`; past either, one
    `RegistryBehaviour` line (a relay that restarts whole bodies forever never ends otherwise).
    """
    where = f"{t.registry}/{repository}@{digest}"
    hasher = digest.hasher()
    position = 0          # bytes passed on to the consumer (and hashed)
    resumes: list[str] = []
    short_endings = 0     # clean endings before `size`, in a row without new bytes
    received = 0          # bytes read off the wire, re-sent prefixes included
    allowance = size      # what may be received: size + one chunk per answer asked again
    asked = 0
    deadline_s = t.policy.budget_s + (size or 0) / min_rate
    deadline_at = time.monotonic() + deadline_s
    budget = t.policy.budget(where)
    with t.errors(where, budget):
        for attempt in budget.attempts():
            with attempt:
                asked += 1
                if asked > 1 and allowance is not None:
                    allowance += t.plan.chunk
                headers = {"Range": f"bytes={position}-"} if position else {}
                path, scopes = f"/v2/{repository}/blobs/{digest}", pull_scope(repository)
                response = t.send_body("GET", path, scopes=scopes, budget=budget,
                                       headers=headers)
                pieces = lean_read_size
                if response is None:  # not for the lean path: httpx, as for everything else
                    response = t.send("GET", path, scopes=scopes, budget=budget,
                                      headers=headers, stream=True)
                    pieces = read_size
                try:
                    status = response.status_code
                    if status == 404:
                        raise NotFound("blob not found", where=where)
                    if status == 416 and position:
                        raise DigestMismatch(
                            f"blob is truncated at the registry: it ends at byte {position} of "
                            f"its descriptor's {size} bytes (a Range request from byte "
                            f"{position} answered HTTP 416)" + _resumed(resumes), where=where)
                    if status not in (200, 206):
                        raise TransportError(f"blob GET answered HTTP {status}", where=where)
                    length = response.headers.get("content-length") or ""
                    announced = int(length) if length.isdigit() else None
                    skip, check, before = 0, hasher, None
                    if status == 206:
                        first, total = _content_range_start(response.headers.get("content-range"))
                        if first is not None and first != position:
                            raise DigestMismatch(
                                f"a Range request from byte {position} was answered 206 from "
                                f"byte {first} (Content-Range "
                                f"{response.headers.get('content-range')!r}): a relay that "
                                "does not honour ranges" + _resumed(resumes), where=where)
                        if size is not None and total is not None and total != size:
                            raise DigestMismatch(
                                f"blob is {total} bytes by the registry's Content-Range, its "
                                f"descriptor says {size}" + _resumed(resumes), where=where)
                        if position:
                            resumes.append(f"from byte {position}: 206")
                        expected = None if size is None else size - position
                    else:
                        if position:  # Range ignored: start again, prove the prefix equal
                            resumes.append(f"from byte {position}: 200 with the whole body, "
                                           "restarted from byte 0")
                            skip, check, before = position, digest.hasher(), hasher
                        expected = size
                    if expected is not None and announced is not None and announced > expected:
                        raise DigestMismatch(
                            f"blob is longer than its descriptor's {size} bytes: the answer "
                            f"announces {announced} bytes from byte "
                            f"{position if status == 206 else 0} (nothing read)"
                            + _resumed(resumes), where=where)
                    got = 0
                    chunks = response.iter_raw(pieces) \
                        if not isinstance(response, lean.LeanResponse) or size is None else \
                        response.iter_raw(pieces, limit=(size + 1 - position) + skip)
                    for data in chunks:
                        check_stop(where)
                        got += len(data)
                        received += len(data)
                        if size is not None and allowance is not None and \
                                received > allowance + len(data) and \
                                position + len(data) <= size:  # a longer body: said below
                            raise RegistryBehaviour(
                                f"download stopped at its byte budget: {received} bytes "
                                f"received for a blob of {size} after {asked - 1} answer(s) "
                                "asked again" + _resumed(resumes), where=where)
                        if time.monotonic() > deadline_at:
                            raise RegistryBehaviour(
                                f"download past its deadline of {deadline_s:.0f} s "
                                f"({position} of {size} bytes)" + _resumed(resumes),
                                where=where)
                        if skip:
                            head, data = data[:skip], data[skip:]
                            check.update(head)
                            skip -= len(head)
                            if skip == 0 and before is not None and \
                                    check.digest() != before.digest():
                                raise DigestMismatch(
                                    f"a Range request from byte {position} was answered 200 "
                                    f"with a whole body whose first {position} bytes differ "
                                    "from those already received" + _resumed(resumes),
                                    where=where)
                            if not data:
                                continue
                        if size is not None and position + len(data) > size:
                            raise DigestMismatch(
                                f"blob is longer than its descriptor's {size} bytes: byte "
                                f"{size + 1} arrived and the download stopped there"
                                + _resumed(resumes), where=where)
                        check.update(data)
                        hasher = check
                        position += len(data)
                        budget.progress()
                        short_endings = 0
                        yield data
                    if skip:  # a whole body shorter than what was already passed on
                        raise DigestMismatch(
                            f"a Range request from byte {position} was answered 200 with a "
                            f"whole body of {got} bytes, fewer than those already received"
                            + _resumed(resumes), where=where)
                    hasher = check
                finally:
                    response.close()
                if size is not None and position < size:
                    short_endings += 1
                    if short_endings > 1 or got == 0:
                        raise DigestMismatch(
                            f"blob is truncated at the registry: it ends at byte {position} of "
                            f"its descriptor's {size} bytes (asked again from byte {position}: "
                            "no more bytes)"
                            + _resumed(resumes), where=where)
                    # an answer that ended cleanly but early: resumed like a cut
                    raise httpx.RemoteProtocolError(
                        f"blob body ended at byte {position} of {size}")
    if size is not None and position < size:   # cut short: said so, not "changed"
        raise DigestMismatch(f"blob is truncated: {position} of its descriptor's {size} bytes"
                             + _resumed(resumes), where=where)
    if hasher.hexdigest() != digest.hex:
        raise DigestMismatch(f"blob content hashes to {digest.algorithm}:{hasher.hexdigest()}, "
                             "not its digest" + _resumed(resumes), where=where)
    if size is not None and position != size:
        raise DigestMismatch(f"blob has {position} bytes, its descriptor says {size}",
                             where=where)
