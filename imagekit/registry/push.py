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
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import httpx

from imagekit.errors import (
    DigestMismatch,
    ImagekitError,
    RegistryBehaviour,
    TransportError,
    Unauthorized,
)
from imagekit.oci.digest import Digest
from imagekit.registry import fetch
from imagekit.registry.auth import merge_scopes
from imagekit.registry.fetch import ManifestBlob, pull_scope, push_scope
from imagekit.registry.interrupt import STOP, Interrupted
from imagekit.registry.interrupt import check as check_stop
from imagekit.registry.journal import UploadJournal
from imagekit.registry.retry import Budget, RetryableStatus
from imagekit.registry.shape import UploadPlan
from imagekit.registry.transport import Transport


def put_manifest(t: Transport, repository: str, reference: str | Digest,
                 manifest: ManifestBlob) -> Digest:
    where = f"{t.registry}/{repository}:{reference}"
    response = t.request("PUT", f"/v2/{repository}/manifests/{reference}", where=where,
                         scopes=push_scope(repository), content=manifest.data,
                         headers={"Content-Type": manifest.media_type})
    if response.status_code not in (200, 201, 202):
        detail = " ".join(response.text[:300].split())
        code = _error_code(response.text)
        if not isinstance(reference, Digest) and response.status_code in (400, 409) and (
                code in IMMUTABLE_TAG_CODES or "immutable" in detail.lower()) and \
                fetch.manifest_exists(t, repository, reference) not in (None, manifest.digest):
            t.plan.tags_refused = True  # the rest of the run asks before moving any blob
            raise RegistryBehaviour(
                f"the registry refused to move tag {reference} (HTTP {response.status_code} "
                f"{code or 'refused'}): it keeps tags immutable; promote to another tag, or mark "
                f"the registry `immutable_tags = true` (IMAGEKIT_REGISTRIES) to be told before "
                "any blob moves", where=where)
        raise TransportError(f"manifest PUT answered HTTP {response.status_code}: {detail}",
                             where=where)
    claimed = response.headers.get("docker-content-digest")
    if claimed and Digest.parse(claimed) != manifest.digest:
        raise DigestMismatch(f"registry stored the manifest as {claimed}, not "
                             f"{manifest.digest}", where=where)
    return manifest.digest


@dataclass(frozen=True)
class Mount:
    """A mount's outcome: `mounted` (0 bytes moved, the blob served), else the upload session
    a 202 opened (`session`, the spec's fallback: the upload goes on there), or None."""

    mounted: bool
    session: str | None = None


def mount_blob(t: Transport, repository: str, digest: Digest, from_repository: str,
               on_note: Callable[[str], None] | None = None) -> Mount:
    """Cross-repository mount inside this registry. Anything but a mount the registry then
    serves falls back to an upload, and `on_note` hears why: a 202 (not mounted, as ECR
    answers; the spec has the upload go on at its Location), a 401/403 (Harbor refuses a mount
    across projects; a token without pull on the source), or a 201 whose blob is then absent
    (a registry that claims a mount it did not do)."""
    note = on_note or (lambda text: None)
    scopes = merge_scopes(push_scope(repository), pull_scope(from_repository))
    where = f"{t.registry}/{repository}@{digest}"
    try:
        response = t.request("POST", f"/v2/{repository}/blobs/uploads/", scopes=scopes,
                             params={"mount": str(digest), "from": from_repository},
                             where=where)
    except Unauthorized:
        note(f"{digest.short}: mount from {from_repository} refused (HTTP 401); uploaded")
        return Mount(False)
    if response.status_code == 201:
        if fetch.blob_exists(t, repository, digest):
            return Mount(True)
        note(f"{digest.short}: mount from {from_repository} answered 201 but the blob is not "
             "served; uploaded")
        return Mount(False)
    if response.status_code == 202:  # not mounted: the upload session it opened is used
        note(f"{digest.short}: mount from {from_repository} answered 202 (not mounted); "
             "uploaded")
        location = response.headers.get("location")
        return Mount(False, t.url(location) if location else None)
    note(f"{digest.short}: mount from {from_repository} answered HTTP "
         f"{response.status_code}; uploaded")
    return Mount(False)


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


#: Error codes of a manifest PUT refused because the tag may not move (ECR answers 400
#: TAG_INVALID for an immutable tag, Harbor 409/400 with "immutable" in the message); taken as
#: such only while the tag names another digest (distribution's TAG_INVALID also means "the
#: tag in the URL does not match the manifest").
IMMUTABLE_TAG_CODES = ("TAG_INVALID", "MANIFEST_TAG_IMMUTABLE", "TAG_IMMUTABLE")
#: Answers to a PATCH that mean "this registry takes no chunked uploads" (GHCR answered PATCH
#: with 405 for years; a 501 says the same): the rest goes as one monolithic PUT.
PATCH_REFUSED = frozenset({405, 501})
#: Error codes of a refused commit that say the registry did not keep what it acknowledged.
LOST_BYTES_CODES = ("DIGEST_INVALID", "BLOB_UPLOAD_INVALID", "SIZE_INVALID")


def _error_code(text: str) -> str:
    """The first `errors[].code` of a distribution error body, '' when there is none."""
    try:
        code = json.loads(text)["errors"][0]["code"]
    except (ValueError, KeyError, IndexError, TypeError):
        return ""
    return code if isinstance(code, str) else ""


class _Upload:
    """One blob's upload, its state surviving the retry attempts of the call.

    Bounded whatever the registry answers: progress is an offset the registry confirms beyond
    the highest it confirmed before (never "a PATCH was accepted"); the bytes sent are at most
    the blob's size plus what each fault the registry caused cost (the body it broke, refused
    or lost: at most one chunk), plus, once per blob, the bytes an upload the registry
    cancelled had held (the one restart from byte 0); and the whole upload ends by a deadline
    scaled to the size. Past either bound, one `RegistryBehaviour` names what the registry
    did."""

    def __init__(self, t: Transport, journal: UploadJournal, repository: str, digest: Digest,
                 size: int, open_source: Callable[[], Iterator[bytes]],
                 count: Callable[[int], None], on_note: Callable[[str], None],
                 plan: UploadPlan, min_rate: float, session: str | None = None) -> None:
        self.t, self.journal, self.repository, self.digest = t, journal, repository, digest
        self.size, self.open_source, self.plan = size, open_source, plan
        self.on_bytes, self.on_note = count, on_note
        self.where = f"{t.registry}/{repository}@{digest}"
        self.scopes = push_scope(repository)
        self.location: str | None = None
        self.chunk = plan.chunk          # this upload's next chunk (it grows, see UploadPlan)
        self.session = session           # an open session to start in (a mount's 202)
        self.offset = 0                  # bytes the upload holds (the registry's word, or ours)
        self.streamed = 0                # bytes of the source passed to the current body
        self.pending: list[bytes] = []   # read from the source past `streamed`, not yet sent
        self.source: Iterator[bytes] | None = None
        self.failed = False              # the last attempt broke: ask the registry first
        self.drained = False
        # -- the bounds ---------------------------------------------------------------------
        self.sent = 0                    # bytes put on the wire, resends included
        self.request_sent = 0            # `sent` when the current body request began
        self.allowance = size            # bytes it may send: size + what the faults cost
        self.faults: list[str] = []      # what the registry did, one entry per fault
        self.high = 0                    # the highest confirmed offset: progress is beyond it
        self.restarted = False           # the one restart from byte 0 a blob is given
        self.tracking: str | None = None  # why the offset is imagekit's own count
        self.last_range: int | None = None
        self.deadline_s = t.policy.budget_s + size / min_rate
        self.deadline_at = time.monotonic() + self.deadline_s

    # -- the bounds -----------------------------------------------------------------------
    def count(self, n: int) -> None:
        self.sent += n
        self.on_bytes(n)

    def _fault(self, what: str) -> None:
        """The registry caused a resend: the body of the request it broke, refused or lost
        (at most one chunk) is added to what the upload may send."""
        lost = max(0, self.sent - self.request_sent)
        self.allowance += lost
        self.request_sent = self.sent
        self.faults.append(what)

    def _behaviour(self) -> str:
        said = [*([self.tracking] if self.tracking else []), *self.faults[-3:]]
        return "; ".join(dict.fromkeys(said)) or "it answered every request as accepted"

    def _spend(self, n: int) -> None:
        """Before a body of `n` bytes: within the byte budget and the deadline, or one line."""
        if self.sent + n > self.allowance:
            raise RegistryBehaviour(
                f"upload stopped at its byte budget: {self.sent} bytes sent for a blob of "
                f"{self.size}, {len(self.faults)} fault(s) caused by the registry; the next "
                f"{n} bytes would pass size plus what the faults cost (what the registry did: "
                f"{self._behaviour()})", where=self.where)
        if time.monotonic() > self.deadline_at:
            raise RegistryBehaviour(
                f"upload past its deadline of {self.deadline_s:.0f} s ({self.offset} of "
                f"{self.size} bytes held, {self.sent} sent; what the registry did: "
                f"{self._behaviour()})", where=self.where)
        self.request_sent = self.sent

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

    def _exists(self, budget: Budget) -> int | None:
        """The size the registry serves the blob at (HEAD), None when absent."""
        response = self.t.send_small("HEAD", f"/v2/{self.repository}/blobs/{self.digest}",
                                     scopes=pull_scope(self.repository), budget=budget)
        if response.status_code != 200:
            return None
        length = response.headers.get("content-length") or ""
        return int(length) if length.isdigit() else self.size

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
        self.tracking, self.last_range = None, None
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
        if self.location is None and self.session is not None:
            self.location, self.session = self.session, None
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

    def _recover(self, budget: Budget, refused: bool = False) -> None:
        """After a failure or a refused body (`refused`: the registry said it took none of
        it): where does the upload stand?"""
        if self.drained and self._exists(budget) is not None:
            self.location = "committed"  # the commit landed, its answer was lost
            return
        location, have, why = self._status(budget, self._at())
        trusted = self.tracking is None or have in (self.offset, self.streamed)
        if location is not None and self.offset <= have <= self.streamed and trusted:
            self._acknowledge(location, have, quiet=refused)
            return
        if location is not None and not trusted:
            why = f"its Range says {have}, which cannot be trusted after a broken request"
        self.journal.drop(self.t.registry, self.repository, self.digest)
        self.on_note(f"{self.digest.short}: the registry dropped the upload at byte "
                     f"{self.offset} ({why or f'it holds {have} bytes'}); sent the blob from "
                     "byte 0")
        self.faults.append(f"upload dropped at byte {self.offset}")
        if not self.restarted:
            # distribution cancels an upload whose signed state lags what it holds (an answer
            # lost on the way back): nothing but byte 0 heals it, so one restart per blob may
            # send again what the registry had held; a second one meets the budget
            self.allowance += self.offset
            self.restarted = True
        self._open(budget)

    def _acknowledge(self, location: str, have: int, quiet: bool = False) -> None:
        """The registry holds `have` bytes. Fewer than were streamed (a broken PATCH, a
        refused body): the source is read again up to there (hashed, not sent), the upload
        goes on from `have`."""
        self.location, self.offset = location, have
        if have != self.streamed:
            if not quiet:
                self.on_note(f"{self.digest.short}: the registry holds {have} of the "
                             f"{self.streamed} bytes sent; the source was read again to go on "
                             "from there")
            self._skip_to(have)

    def _confirm(self, location: str, have: int | None, budget: Budget) -> None:
        """A PATCH was accepted: its Range says where the upload stands. A Range that
        contradicts what was sent (stuck at an earlier chunk, running backwards, past the end:
        ECR's stuck Range, aws/containers-roadmap#2831) is not followed: imagekit counts the
        offset itself for the rest of this upload, and the committed digest and size decide."""
        if have is None or self.tracking is not None:
            have = self.streamed
        elif have != self.streamed:
            if have < self.streamed and have == self.last_range:
                kind = "stuck"
            elif have < self.offset:
                kind = "running backwards"
            elif have < self.streamed:
                kind = "short of the bytes it accepted"
            else:
                kind = "past the bytes sent"
            self.tracking = (f"the registry's Range said byte {have} after {self.streamed} "
                             f"were sent ({kind})")
            self.on_note(f"{self.digest.short}: {self.tracking}; its Range is not followed for "
                         "the rest of this upload (the offset is counted here, the committed "
                         "digest and size decide)")
            self.journal.drop(self.t.registry, self.repository, self.digest)
            self.last_range = have
            have = self.streamed
        else:
            self.last_range = have
        self.location, self.offset = location, have
        self.request_sent = self.sent
        if self.offset > self.high:  # progress: only bytes beyond the highest confirmed
            self.high = self.offset
            budget.progress()
        if self.offset < self.size and self.tracking is None:
            self.journal.put(self.t.registry, self.repository, self.digest, self._at(),
                             self.offset)

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

    def _body(self, end: int, *, last: bool) -> Iterator[bytes]:
        """The source from `offset` to `end`: the pending bytes first. Each piece is let go
        once sent (no retention of the chunk; a broken body re-reads the source, see
        `_acknowledge`). `last`: the body ends the blob, so the source must end there and its
        digest is proven before the body's end is sent (a bad source voids the request)."""
        kept = self.pending
        position = self.offset
        while position < end and not STOP.is_set():
            if kept:
                data = kept.pop(0)
            else:
                try:
                    data = self._pull()
                except Interrupted:  # the source stopped: end this body cleanly
                    if last:
                        raise
                    return
            if len(data) > end - position:
                kept.insert(0, data[end - position:])
                data = data[:end - position]
            position += len(data)
            self.streamed = position
            yield data
            self.count(len(data))
        if last:  # a short last body would be committed short: void the request instead
            if position < end:
                check_stop(self.where)
            self._drain()

    def _send(self, method: str, budget: Budget, headers: dict[str, str], body,
              params: dict[str, str] | None = None):
        """A body request; where the registry refused a body before (429, 413) the body
        waits for `100 Continue`, so the next refusal costs no bytes."""
        response = self.t.send_body(method, self._at(), scopes=self.scopes, budget=budget,
                                    headers=headers, body=body, params=params,
                                    expect=self.plan.refuses_bodies)
        if response is None:  # the lean path is off here (a proxy, IMAGEKIT_LEAN_HTTP=0)
            response = self.t.send(method, self._at(), scopes=self.scopes, budget=budget,
                                   headers=headers, content=body, params=params)
        return response

    def _refused(self, response, length: int, budget: Budget) -> bool:
        """A PATCH the registry would not take whole: a 413 makes the chunks smaller (then
        one monolithic PUT), a refused PATCH makes the rest monolithic; the upload then goes
        on from where the registry stands. False: not such a refusal."""
        status = response.status_code
        code = _error_code(response.text) if status >= 400 else ""
        if status == 413:
            self.plan.refuses_bodies = True
            self._fault(f"HTTP 413 to a {length}-byte PATCH")
            if not self.plan.smaller(length, status):
                self.plan.go_monolithic(f"HTTP 413 to a {length}-byte PATCH")
        elif status == 404 and code in ("BLOB_UPLOAD_UNKNOWN", ""):
            # the registry no longer knows the upload (purged, restarted): it goes on from where
            # the registry stands, which is byte 0 of a new session
            self._fault(f"upload unknown at byte {self.offset} (HTTP 404"
                        f"{' ' + code if code else ''})")
        elif status in PATCH_REFUSED or code == "UNSUPPORTED":
            why = f"PATCH refused (HTTP {status}{' ' + code if code else ''})"
            self.plan.refuses_bodies = True
            self._fault(why)
            self.plan.go_monolithic(why)
        else:
            return False
        self.on_note(f"{self.digest.short}: {self.faults[-1]}; now {self.plan.describe()}")
        self._recover(budget, refused=True)
        return True

    def _patch(self, budget: Budget) -> None:
        """One streamed chunk from `offset`: the pending bytes first, then the source."""
        if self.plan.taught:  # a refused body (413) made the registry's chunk a limit
            self.chunk = min(self.chunk, self.plan.chunk)
        end = min(self.size, self.offset + self.chunk)
        self._spend(end - self.offset)
        self.streamed = self.offset
        # Content-Range names the chunk (`<start>-<end>`, the distribution spec's chunked
        # upload): go-containerregistry's registry (`crane registry serve`, the referrers-API
        # registry) refuses a second PATCH without it ("Stream uploads after first write are not
        # allowed"); distribution 2.8 checks it only beside a Content-Length, which a streamed
        # body has not
        headers = {"Content-Type": "application/octet-stream"}
        if end > self.offset:
            headers["Content-Range"] = f"{self.offset}-{end - 1}"
        response = self._send("PATCH", budget, headers, self._body(end, last=False))
        if self._refused(response, end - self.offset, budget):
            return
        # the spec says 202; go-containerregistry's registry (`crane registry serve`) says 204
        if response.status_code not in (202, 204):
            detail = " ".join(response.text[:300].split())
            raise TransportError(f"blob PATCH answered HTTP {response.status_code}: {detail}",
                                 where=self.where)
        location = self.t.url(response.headers.get("location") or self._at())
        have = _range_end(response.headers.get("range"), floor=min(1, self.streamed))
        self._confirm(location, have, budget)
        self.chunk = self.plan.chunk_after(self.chunk)

    def _drain(self) -> None:
        """The source must end exactly at `size`: its digest check runs here."""
        if not self.drained:
            if self.pending or (self.source is not None and next(self.source, b"")):
                raise DigestMismatch(f"blob is longer than its descriptor's {self.size} bytes",
                                     where=self.where)
            self.drained = True

    def _commit(self, budget: Budget) -> None:
        """`PUT ?digest=` with the bytes not yet sent as its body (none after the chunks;
        the whole blob for a monolithic upload)."""
        rest = self.size - self.offset
        self._spend(rest)
        self.streamed = self.offset
        headers = {"Content-Type": "application/octet-stream"}
        if rest:
            response = self._send("PUT", budget, headers, self._body(self.size, last=True),
                                  params={"digest": str(self.digest)})
            if response.status_code == 413:
                self._fault(f"HTTP 413 to a {rest}-byte PUT")
                raise RegistryBehaviour(
                    f"the registry refused a {rest}-byte body (HTTP 413) in every shape tried "
                    f"({self.plan.describe()}); set its max_body or chunk_size "
                    "(IMAGEKIT_REGISTRIES)", where=self.where)
        else:
            self._drain()
            response = self.t.send_small("PUT", self._at(), scopes=self.scopes, budget=budget,
                                         params={"digest": str(self.digest)},
                                         headers={"Content-Length": "0"}, patient=True)
        response.close()
        if response.status_code not in (201, 204):
            detail = " ".join(response.text[:300].split())
            code = _error_code(response.text)
            if code in LOST_BYTES_CODES or response.status_code == 416:
                raise RegistryBehaviour(
                    f"the registry refused the commit (HTTP {response.status_code} "
                    f"{code}) after accepting all {self.size} bytes: it did not keep what it "
                    f"acknowledged (what the registry did: {self._behaviour()})",
                    where=self.where)
            raise TransportError(f"blob commit answered HTTP {response.status_code}: {detail}",
                                 where=self.where)
        self.location = "committed"
        if self.tracking is not None:  # the registry's offsets were not followed: prove it
            served = self._exists(budget)
            if served != self.size:
                raise RegistryBehaviour(
                    f"the registry committed the blob but serves {served} bytes, not "
                    f"{self.size} ({self.tracking})", where=self.where)

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
            while self.location != "committed":
                check_stop(self.where)
                if self.offset < self.size and not self.plan.monolithic:
                    self._patch(budget)
                    if STOP.is_set():
                        check_stop(f"{self.where}; {self.offset} of {self.size} bytes sent, "
                                   "the rerun resumes there")
                else:
                    self._commit(budget)
            self.journal.drop(self.t.registry, self.repository, self.digest)
            self._close_source()
        except (httpx.HTTPError, Exception) as exc:
            if isinstance(exc, ImagekitError):
                self._abandon(exc)
            else:  # (a 429 has already made later bodies ask first: Transport._throttled)
                self._fault(f"HTTP {exc.status_code}" if isinstance(exc, RetryableStatus)
                            else f"{type(exc).__name__}")
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
                on_bytes: Callable[[int], None] | None = None,
                on_note: Callable[[str], None] | None = None,
                min_rate: float = 1 << 20, session: str | None = None) -> int:
    """Upload a blob of `size` bytes from a verified source stream in the registry's upload
    shape (`t.plan`); returns the bytes sent (resends included). Without `size` the source is
    read into memory first (configs). `min_rate` (bytes/s): the slowest transfer the upload's
    deadline allows for (the call deadline plus the size at this rate). `session`: an upload
    session already open for this blob (a mount answered 202), used instead of a new one."""
    where = f"{t.registry}/{repository}@{digest}"
    if size is None:
        whole = b"".join(open_source())
        if Digest.of_bytes(whole, digest.algorithm) != digest:
            raise DigestMismatch("blob content does not hash to its digest", where=where)
        size = len(whole)
        open_source = lambda: iter([whole])  # noqa: E731
    upload = _Upload(t, journal, repository, digest, size, open_source,
                     on_bytes or (lambda n: None), on_note or (lambda note: None), t.plan,
                     min_rate, session)
    t.call(where, upload.attempt)
    return upload.sent
