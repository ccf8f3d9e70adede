"""Writing to a registry (go-containerregistry's `remote` writer): manifests, mounts, blobs.

A blob upload is one call under the retry policy, with its state kept across attempts:
- chunks are streamed `PATCH`es from the verified source (no Content-Length: a stop request
  ends the body where it is and the registry acknowledges exactly what it got);
- after a failure the registry is asked where the upload stands (GET on the upload URL, its
  `Range` header) and the upload goes on from there: the source is read again from byte 0,
  the bytes the registry holds hashed but not sent again (a chunk's bytes are not kept in
  memory until acknowledged: 4 blobs x 128 MiB chunks of fresh pages cost a page fault per
  4 KiB and ~100 MB of RSS, measured); an upload the registry dropped starts over, and that
  is reported (`on_note`);
- after every acknowledged chunk the upload journal records the location and offset, so a
  rerun in a new process resumes where the registry allows it (the source is re-read and
  re-hashed from byte 0; only the missing bytes are sent) and starts over only when the
  registry refuses, saying so;
- the final `PUT ?digest=` (the commit) happens only after the source stream proved its
  digest, so bad bytes are never committed; a failed source cancels the session.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import httpx

from imagekit.errors import DigestMismatch, ImagekitError, TransportError
from imagekit.oci.digest import Digest
from imagekit.registry.auth import merge_scopes
from imagekit.registry.fetch import ManifestBlob, pull_scope, push_scope
from imagekit.registry.interrupt import STOP, Interrupted
from imagekit.registry.interrupt import check as check_stop
from imagekit.registry.journal import UploadJournal
from imagekit.registry.retry import Budget
from imagekit.registry.transport import Transport


def put_manifest(t: Transport, repository: str, reference: str | Digest,
                 manifest: ManifestBlob) -> Digest:
    where = f"{t.registry}/{repository}:{reference}"
    response = t.request("PUT", f"/v2/{repository}/manifests/{reference}", where=where,
                         scopes=push_scope(repository), content=manifest.data,
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


def mount_blob(t: Transport, repository: str, digest: Digest, from_repository: str) -> bool:
    """Cross-repository mount inside this registry: True when mounted (0 bytes moved)."""
    scopes = merge_scopes(push_scope(repository), pull_scope(from_repository))
    response = t.request("POST", f"/v2/{repository}/blobs/uploads/", scopes=scopes,
                         params={"mount": str(digest), "from": from_repository},
                         where=f"{t.registry}/{repository}@{digest}")
    if response.status_code == 201:
        return True
    if response.status_code == 202:  # not mountable; an upload session was opened: drop it
        location = response.headers.get("location")
        if location:
            with contextlib.suppress(ImagekitError):
                t.request("DELETE", location, scopes=push_scope(repository))
    return False


def _range_end(value: str | None, floor: int) -> int | None:
    """Bytes held from a `Range: 0-<last>` header. distribution answers `0-0` both for an
    empty upload and for one byte: then the smaller reading consistent with what we know
    (`floor`: bytes already acknowledged) is taken."""
    if not value:
        return 0 if value is not None else None
    start, _, last = value.strip().partition("-")
    try:
        first, end = int(start), int(last)
    except ValueError:
        return None
    if first != 0 or end < -1:
        return None
    if end <= 0:
        return 1 if floor >= 1 and end == 0 else 0
    return end + 1


class _Upload:
    """One blob's upload, its state surviving the retry attempts of the call."""

    def __init__(self, t: Transport, journal: UploadJournal, repository: str, digest: Digest,
                 size: int, open_source: Callable[[], Iterator[bytes]], chunk_size: int,
                 count: Callable[[int], None], on_note: Callable[[str], None]) -> None:
        self.t, self.journal, self.repository, self.digest = t, journal, repository, digest
        self.size, self.open_source, self.chunk_size = size, open_source, chunk_size
        self.count, self.on_note = count, on_note
        self.where = f"{t.registry}/{repository}@{digest}"
        self.scopes = push_scope(repository)
        self.location: str | None = None
        self.offset = 0                  # bytes the registry acknowledged
        self.streamed = 0                # bytes of the source passed to the current PATCH body
        self.pending: list[bytes] = []   # read from the source past `streamed`, not yet sent
        self.source: Iterator[bytes] | None = None
        self.failed = False              # the last attempt broke: ask the registry first
        self.drained = False

    # -- registry state -------------------------------------------------------------------
    def _status(self, budget: Budget, location: str) -> tuple[str | None, int, str]:
        """(location, bytes held, '') of an open upload, or (None, -1, why) when the
        registry refuses."""
        response = self.t.send("GET", location, scopes=self.scopes, budget=budget)
        if response.status_code != 204:
            detail = " ".join(response.text[:160].split())
            return None, -1, f"HTTP {response.status_code}{': ' + detail if detail else ''}"
        have = _range_end(response.headers.get("range"), floor=self.offset)
        if have is None:
            return None, -1, f"unreadable Range {response.headers.get('range')!r}"
        return self.t.url(response.headers.get("location") or location), have, ""

    def _exists(self, budget: Budget) -> bool:
        response = self.t.send_small("HEAD", f"/v2/{self.repository}/blobs/{self.digest}",
                                     scopes=pull_scope(self.repository), budget=budget)
        return response.status_code == 200

    def _start_session(self, budget: Budget) -> None:
        response = self.t.send_small("POST", f"/v2/{self.repository}/blobs/uploads/",
                                     scopes=self.scopes, budget=budget,
                                     headers={"Content-Length": "0"})
        response.close()
        if response.status_code != 202 or not response.headers.get("location"):
            raise TransportError(f"upload start answered HTTP {response.status_code}",
                                 where=self.where)
        self.location = self.t.url(response.headers["location"])

    def _open(self, budget: Budget) -> None:
        """A journaled upload the registry still holds, else a new session; then the source
        from byte 0, the bytes the registry holds hashed but not sent."""
        self._close_source()
        self.location, self.offset, self.pending, self.drained = None, 0, [], False
        remembered = self.journal.get(self.t.registry, self.repository, self.digest)
        if remembered is not None:
            location, have, why = self._status(budget, self.t.url(remembered[0]))
            self.journal.drop(self.t.registry, self.repository, self.digest)
            if location is not None and 0 < have <= self.size:
                self.location, self.offset = location, have
                self.on_note(f"{self.digest.short}: resumed the upload at byte {have} of "
                             f"{self.size} (the registry held it)")
            else:
                self.on_note(f"{self.digest.short}: the registry refused to resume the upload "
                             f"at byte {remembered[1]} ({why or f'it holds {have} bytes'}); "
                             "sent the blob from byte 0")
        if self.location is None:
            self._start_session(budget)
        self._skip_to(self.offset)

    def _skip_to(self, offset: int) -> None:
        """The source from byte 0, its first `offset` bytes (held by the registry) hashed and
        not sent again."""
        self._close_source()
        self.source = iter(self.open_source())
        self.pending, self.streamed = [], offset
        skipped = 0
        while skipped < offset:
            data = next(self.source, b"")
            if not data:
                raise DigestMismatch(f"blob ended before its descriptor's {self.size} bytes",
                                     where=self.where)
            if skipped + len(data) > offset:
                self.pending.append(data[offset - skipped:])
                data = data[:offset - skipped]
            skipped += len(data)

    def _recover(self, budget: Budget) -> None:
        """After a failure: where does the upload stand?"""
        if self.drained and self._exists(budget):
            self.location = "committed"  # the commit landed, its answer was lost
            return
        location, have, why = self._status(budget, self._at())
        if location is not None and self.offset <= have <= self.streamed:
            self._acknowledge(location, have)
            return
        self.journal.drop(self.t.registry, self.repository, self.digest)
        self.on_note(f"{self.digest.short}: the registry dropped the upload at byte "
                     f"{self.offset} ({why or f'it holds {have} bytes'}); sent the blob from "
                     "byte 0")
        self._open(budget)

    def _acknowledge(self, location: str, have: int) -> None:
        """The registry holds `have` bytes. Fewer than were streamed (a broken PATCH): the
        source is read again up to there (hashed, not sent), the upload goes on from `have`."""
        self.location, self.offset = location, have
        if have != self.streamed:
            self.on_note(f"{self.digest.short}: the registry holds {have} of the {self.streamed} "
                         "bytes sent; the source was read again to go on from there")
            self._skip_to(have)

    # -- sending --------------------------------------------------------------------------
    def _at(self) -> str:
        """The open upload's location (there is one whenever this is asked)."""
        if self.location is None:
            raise TransportError("no upload session is open", where=self.where)
        return self.location

    def _pull(self) -> bytes:
        data = next(self.source, b"") if self.source is not None else b""
        if not data:
            raise DigestMismatch(f"blob ended before its descriptor's {self.size} bytes",
                                 where=self.where)
        return data

    def _patch(self, budget: Budget) -> None:
        """One streamed chunk from `offset`: the pending bytes first, then the source."""
        end = min(self.size, self.offset + self.chunk_size)
        kept = self.pending
        self.streamed = self.offset

        def body() -> Iterator[bytes]:
            # each piece is let go once sent: the next read reuses its memory (no retention
            # of the chunk; a broken PATCH re-reads the source, see `_acknowledge`)
            position = self.offset
            while position < end and not STOP.is_set():
                if kept:
                    data = kept.pop(0)
                else:
                    try:
                        data = self._pull()
                    except Interrupted:  # the source stopped: end this body cleanly
                        return
                if len(data) > end - position:
                    kept.insert(0, data[end - position:])
                    data = data[:end - position]
                position += len(data)
                self.streamed = position
                yield data
                self.count(len(data))

        # Content-Range names the chunk (`<start>-<end>`, the distribution spec's chunked
        # upload): go-containerregistry's registry (`crane registry serve`, the referrers-API
        # registry) refuses a second PATCH without it ("Stream uploads after first write are not
        # allowed"); distribution 2.8 checks it only beside a Content-Length, which a streamed
        # body has not
        headers = {"Content-Type": "application/octet-stream"}
        if end > self.offset:
            headers["Content-Range"] = f"{self.offset}-{end - 1}"
        response = self.t.send_body("PATCH", self._at(), scopes=self.scopes, budget=budget,
                                    headers=headers, body=body())
        if response is None:  # the lean path is off here (a proxy, IMAGEKIT_LEAN_HTTP=0)
            response = self.t.send("PATCH", self._at(), scopes=self.scopes, budget=budget,
                                   headers=headers, content=body())
        # the spec says 202; go-containerregistry's registry (`crane registry serve`) says 204
        if response.status_code not in (202, 204):
            detail = " ".join(response.text[:300].split())
            raise TransportError(f"blob PATCH answered HTTP {response.status_code}: {detail}",
                                 where=self.where)
        location = self.t.url(response.headers.get("location") or self._at())
        have = _range_end(response.headers.get("range"), floor=min(1, self.streamed))
        if have is None:
            have = self.streamed
        if not self.offset <= have <= self.streamed:
            raise TransportError(f"registry acknowledged byte {have}, outside the chunk it was "
                                 f"sent ({self.offset}-{end})", where=self.where)
        self._acknowledge(location, have)
        budget.progress()
        if self.offset < self.size:
            self.journal.put(self.t.registry, self.repository, self.digest, self._at(),
                             self.offset)

    def _drain(self) -> None:
        """The source must end exactly at `size`: its digest check runs here."""
        if not self.drained:
            if self.pending or (self.source is not None and next(self.source, b"")):
                raise DigestMismatch(f"blob is longer than its descriptor's {self.size} bytes",
                                     where=self.where)
            self.drained = True

    def _commit(self, budget: Budget) -> None:
        response = self.t.send_small("PUT", self._at(), scopes=self.scopes, budget=budget,
                                     params={"digest": str(self.digest)},
                                     headers={"Content-Length": "0"}, patient=True)
        response.close()
        if response.status_code not in (201, 204):
            detail = response.text[:300].replace("\n", " ")
            raise TransportError(f"blob commit answered HTTP {response.status_code}: {detail}",
                                 where=self.where)
        self.location = "committed"

    def _close_source(self) -> None:
        close = getattr(self.source, "close", None)
        if close is not None:
            close()
        self.source = None

    # -- one attempt ----------------------------------------------------------------------
    def attempt(self, budget: Budget) -> None:
        try:
            if self.location is None:
                self._open(budget)
            elif self.failed:
                self._recover(budget)
            self.failed = False
            while self.location != "committed" and self.offset < self.size:
                check_stop(self.where)
                self._patch(budget)
                if STOP.is_set():
                    check_stop(f"{self.where}; {self.offset} of {self.size} bytes sent, the "
                               "rerun resumes there")
            if self.location != "committed":
                self._drain()
                self._commit(budget)
            self.journal.drop(self.t.registry, self.repository, self.digest)
            self._close_source()
        except (httpx.HTTPError, Exception) as exc:
            if isinstance(exc, ImagekitError):
                self._abandon(exc)
            else:
                self.failed = True  # the retry context decides; the next attempt asks first
            raise

    def _abandon(self, exc: ImagekitError) -> None:
        """A failure no retry fixes. An interrupt or a dead source registry may be resumed by
        a rerun (the journal stays); a bad source is cancelled, nothing committed."""
        self._close_source()
        location = self.location
        if isinstance(exc, (Interrupted, TransportError)) or location is None or \
                location == "committed":
            return
        self.journal.drop(self.t.registry, self.repository, self.digest)
        # best effort; the registry expires it anyway
        with contextlib.suppress(Exception):
            self.t.http.delete(location, timeout=2.0).close()


def upload_blob(t: Transport, journal: UploadJournal, repository: str, digest: Digest,
                open_source: Callable[[], Iterator[bytes]], *, size: int | None,
                chunk_size: int, on_bytes: Callable[[int], None] | None = None,
                on_note: Callable[[str], None] | None = None) -> int:
    """Upload a blob of `size` bytes from a verified source stream; returns the bytes sent
    (resends included). Without `size` the source is read into memory first (configs)."""
    where = f"{t.registry}/{repository}@{digest}"
    if size is None:
        whole = b"".join(open_source())
        if Digest.of_bytes(whole, digest.algorithm) != digest:
            raise DigestMismatch("blob content does not hash to its digest", where=where)
        size = len(whole)
        open_source = lambda: iter([whole])  # noqa: E731
    sent = [0]

    def count(n: int) -> None:
        sent[0] += n
        if on_bytes:
            on_bytes(n)

    upload = _Upload(t, journal, repository, digest, size, open_source, chunk_size, count,
                     on_note or (lambda note: None))
    t.call(where, upload.attempt)
    return sent[0]
