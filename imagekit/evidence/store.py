"""Append-only evidence store: records keyed by image digest, one directory per attempt.

Layout::

    <root>/index.jsonl                                  one line per finished attempt
    <root>/<key>/<kind>/<attempt-id>/attempt.json       AttemptRecord (written last)
    <root>/<key>/<kind>/<attempt-id>/<files…>           raw logs beside parsed results

`<key>` is `sha256/<hex>` for an image digest, or `name/<slug>` for work that has no digest
(yet), e.g. a build that failed before producing an image. The key is where an attempt is
filed; what it is *about* is its `subjects` (digests with roles, `imagekit.evidence.contract`),
and what it established is its typed `result` (one model per kind, `imagekit.evidence.kinds`):
`Attempt.write_result` writes it, `EvidenceStore.result` reads it back. Attempts of the previous
layout (no subjects, no result; `layout` 1) are read through `imagekit.evidence.legacy`.
Attempt directories are created exclusively and files opened with mode "x": a rerun can only
add, never overwrite. Finished attempts are made read-only.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import hashlib
import json
import os
import re
import secrets
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from imagekit import __version__
from imagekit.errors import EvidenceError, InvalidInput
from imagekit.evidence import legacy
from imagekit.evidence.contract import EvidenceResult, Role, Subject, model_for, parse_result
from imagekit.oci.digest import Digest
from imagekit.results import CheckResult, Status, overall

#: The attempt.json layout this code writes: 2 = subjects and a typed result;
#: 1 (absent in the file) = the previous layout, read through imagekit.evidence.legacy.
LAYOUT = 2

DEFAULT_ROOT_ENV = "IMAGEKIT_EVIDENCE_DIR"
_SLUG = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def default_root() -> Path:
    """./.evidence: the root when the caller names none (`IMAGEKIT_EVIDENCE_DIR` is the CLI's
    `--evidence-dir` default, read once by its settings and passed as `root`)."""
    return Path(".evidence").absolute()


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class EvidenceKey(BaseModel):
    """Digest of an image, or a name for work that has none."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    digest: Digest | None = None
    name: str | None = None

    @classmethod
    def of(cls, subject: Digest | str | EvidenceKey) -> EvidenceKey:
        if isinstance(subject, EvidenceKey):
            return subject
        if isinstance(subject, Digest):
            return cls(digest=subject)
        if subject.startswith(("sha256:", "sha512:")):
            return cls(digest=Digest.parse(subject))
        subject = subject.removeprefix("name:")  # the form str(key) and keys() print
        slug = subject.replace("/", "_").replace(":", "_").replace("@", "_")
        if not _SLUG.match(slug):
            raise InvalidInput(f"evidence name {subject!r} is not a usable name")
        return cls(name=slug)

    @property
    def relative(self) -> Path:
        if self.digest is not None:
            return Path(self.digest.algorithm) / self.digest.hex
        return Path("name") / str(self.name)

    def __str__(self) -> str:
        return str(self.digest) if self.digest is not None else f"name:{self.name}"


class FileEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    sha256: str
    size: int


class AttemptRecord(BaseModel):
    """Written last into every attempt directory: what ran, when, its verdict, its files."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str
    kind: str
    attempt_id: str
    started: dt.datetime
    finished: dt.datetime
    status: Status
    summary: str = ""
    checks: list[CheckResult] = []
    files: list[FileEntry] = []
    context: dict[str, Any] = {}
    layout: int = 1
    subjects: list[Subject] = []
    result: dict[str, Any] | None = None


class Attempt:
    """An open attempt directory; write files, then `finish()` (or let the context manager)."""

    def __init__(self, store: EvidenceStore, key: EvidenceKey, kind: str, path: Path,
                 attempt_id: str, context: dict[str, Any],
                 subjects: list[Subject] | None = None) -> None:
        self.store, self.key, self.kind, self.path = store, key, kind, path
        self.attempt_id = attempt_id
        self.started = _now()
        # which imagekit made the record (a context given, e.g. refiled from a Pod, wins)
        self.context = {"imagekit_version": __version__, **context}
        self.checks: list[CheckResult] = []
        self.record: AttemptRecord | None = None
        self.subjects: list[Subject] = []
        self.result: EvidenceResult | None = None
        for subject in subjects if subjects is not None else _default_subjects(key):
            self.add_subject(subject.digest, subject.role, subject.reference)

    def add_subject(self, digest: Digest | str, role: Role = Role.SUBJECT,
                    reference: str | None = None) -> None:
        """Name a digest this attempt speaks about (e.g. a build learns its pushed digest
        only after the push). A digest already named in the same role is not repeated."""
        subject = Subject.of(digest, role, reference)
        for index, known in enumerate(self.subjects):
            if known.digest == subject.digest and known.role == subject.role:
                if known.reference is None and subject.reference is not None:
                    self.subjects[index] = subject
                return
        self.subjects.append(subject)

    def write_result(self, result: EvidenceResult) -> None:
        """The one way to record what this attempt established: the result model of its kind
        (`imagekit.evidence.kinds`), stored in attempt.json when the attempt finishes."""
        if self.record is not None:
            raise EvidenceError("the attempt is finished; its result cannot change",
                                where=str(self.path))
        model = model_for(self.kind)
        if model is None or not isinstance(result, model) or result.kind != self.kind:
            raise EvidenceError(f"a {type(result).__name__} ({result.kind}) is not the result "
                                f"model of kind {self.kind!r}", where=str(self.path))
        if self.result is not None:
            raise EvidenceError("an attempt has one result", where=str(self.path))
        self.result = result

    def _target(self, name: str) -> Path:
        target = (self.path / name).resolve()
        if self.path.resolve() not in target.parents:
            raise EvidenceError(f"evidence file name escapes its attempt: {name}")
        if name == "attempt.json":
            raise EvidenceError("attempt.json is written by finish() only")
        target.parent.mkdir(parents=True, exist_ok=True)
        return target

    def write_bytes(self, name: str, data: bytes) -> Path:
        target = self._target(name)
        try:
            with open(target, "xb") as handle:
                handle.write(data)
        except FileExistsError:
            raise EvidenceError(f"evidence file already exists, not overwriting: {target}") \
                from None
        except OSError as exc:  # a full disk: no half-written file is left to be read
            target.unlink(missing_ok=True)
            raise _disk_error(exc, target) from None
        return target

    def write_text(self, name: str, text: str) -> Path:
        return self.write_bytes(name, text.encode())

    def write_json(self, name: str, value: BaseModel | dict | list) -> Path:
        if isinstance(value, BaseModel):
            text = value.model_dump_json(indent=2, by_alias=True)
        else:
            text = json.dumps(value, indent=2, sort_keys=True, default=str)
        return self.write_text(name, text + "\n")

    def add_check(self, check: CheckResult) -> None:
        self.checks.append(check)

    def finish(self, status: Status | None = None, summary: str = "",
               checks: list[CheckResult] | None = None) -> AttemptRecord:
        if self.record is not None:
            return self.record
        if checks is not None:
            self.checks = list(checks)
        if status is None:
            status = overall(self.checks)
        files = []
        for file in sorted(p for p in self.path.rglob("*") if p.is_file()):
            data = file.read_bytes()
            files.append(FileEntry(path=str(file.relative_to(self.path)),
                                   sha256=hashlib.sha256(data).hexdigest(), size=len(data)))
        self.record = AttemptRecord(
            key=str(self.key), kind=self.kind, attempt_id=self.attempt_id,
            started=self.started, finished=_now(), status=status, summary=summary,
            checks=self.checks, files=files, context=self.context, layout=LAYOUT,
            subjects=self.subjects,
            result=self.result.model_dump(mode="json") if self.result is not None else None)
        # attempt.json appears whole or not at all (a full disk leaves no half record): written
        # beside it, then linked in place (a link fails where one exists, as "x" did)
        final, partial = self.path / "attempt.json", self.path / ".attempt.json.partial"
        try:
            with open(partial, "x") as handle:
                handle.write(self.record.model_dump_json(indent=2) + "\n")
                handle.flush()
                os.fsync(handle.fileno())
            os.link(partial, final)
        except OSError as exc:
            self.record = None
            if isinstance(exc, FileExistsError):
                raise
            raise _disk_error(exc, final) from None
        finally:
            partial.unlink(missing_ok=True)
        for file in self.path.rglob("*"):
            if file.is_file():
                file.chmod(0o444)
        self.store._append_index(self.record, self.path)
        return self.record


def _disk_error(exc: OSError, where: Path) -> OSError | EvidenceError:
    """A full disk (or quota) as one line naming the file; other OS errors as they are."""
    import errno

    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return EvidenceError(f"disk full ({exc.strerror}): evidence not written, nothing "
                             "recorded", where=str(where))
    return exc


def _default_subjects(key: EvidenceKey) -> list[Subject]:
    """An attempt filed under a digest is about that digest unless it says otherwise."""
    return [Subject(digest=key.digest)] if key.digest is not None else []


class EvidenceStore:
    def __init__(self, root: Path | str | None = None) -> None:
        self.root = Path(root).absolute() if root is not None else default_root()

    def _new_attempt_dir(self, key: EvidenceKey, kind: str) -> tuple[Path, str]:
        if not _SLUG.match(kind):
            raise InvalidInput(f"evidence kind {kind!r} is not a usable name")
        parent = self.root / key.relative / kind
        parent.mkdir(parents=True, exist_ok=True)
        for _ in range(20):
            attempt_id = f"{_now():%Y%m%dT%H%M%S.%fZ}-{secrets.token_hex(3)}"
            path = parent / attempt_id
            try:
                path.mkdir()
            except FileExistsError:
                continue
            return path, attempt_id
        raise EvidenceError(f"could not create a fresh attempt directory under {parent}")

    def begin(self, subject: Digest | str | EvidenceKey, kind: str, *,
              subjects: list[Subject] | None = None, **context: Any) -> Attempt:
        """Open an attempt filed under `subject` (a digest or a name). `subjects`: the digests
        it is about, with roles; default: the key's digest as the subject."""
        key = EvidenceKey.of(subject)
        path, attempt_id = self._new_attempt_dir(key, kind)
        return Attempt(self, key, kind, path, attempt_id, context, subjects)

    @contextmanager
    def attempt(self, subject: Digest | str | EvidenceKey, kind: str, *,
                subjects: list[Subject] | None = None, **context: Any) -> Iterator[Attempt]:
        """Open an attempt; on an exception it is finished as ERROR with the traceback kept."""
        attempt = self.begin(subject, kind, subjects=subjects, **context)
        try:
            yield attempt
        except BaseException as exc:
            if attempt.record is None:
                with contextlib.suppress(EvidenceError):
                    attempt.write_text("error.log", "".join(
                        traceback.format_exception(type(exc), exc, exc.__traceback__)))
                try:
                    attempt.finish(Status.ERROR, summary=f"{type(exc).__name__}: {exc}"[:500])
                except EvidenceError:
                    if not isinstance(exc, EvidenceError):
                        raise exc from None  # the first error, not the full disk it met
                    raise
            raise
        else:
            attempt.finish()

    def _append_index(self, record: AttemptRecord, path: Path) -> None:
        line = json.dumps({
            "key": record.key, "kind": record.kind, "attempt_id": record.attempt_id,
            "status": record.status.value, "finished": record.finished.isoformat(),
            "path": str(path.relative_to(self.root)), "summary": record.summary,
            "subjects": [f"{s.role.value}:{s.digest}" for s in record.subjects],
        }, sort_keys=True)
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / "index.jsonl", "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            size = handle.seek(0, os.SEEK_END)
            try:
                handle.write(line + "\n")
                handle.flush()
            except OSError as exc:  # no half line left for the next one to be glued to
                handle.truncate(size)
                raise _disk_error(exc, self.root / "index.jsonl") from None

    def attempts(self, subject: Digest | str | EvidenceKey,
                 kind: str | None = None) -> list[AttemptRecord]:
        """Finished attempts of a key (oldest first), read from the directories themselves."""
        key = EvidenceKey.of(subject)
        base = self.root / key.relative
        if not base.is_dir():
            return []
        records = []
        kinds = [base / kind] if kind else sorted(p for p in base.iterdir() if p.is_dir())
        for kind_dir in kinds:
            if not kind_dir.is_dir():
                continue
            for attempt_dir in sorted(kind_dir.iterdir()):
                record_file = attempt_dir / "attempt.json"
                if record_file.is_file():
                    records.append(AttemptRecord.model_validate_json(record_file.read_text()))
        return sorted(records, key=lambda r: (r.started, r.attempt_id))

    def latest(self, subject: Digest | str | EvidenceKey, kind: str) -> AttemptRecord | None:
        found = self.attempts(subject, kind)
        return found[-1] if found else None

    def result(self, record: AttemptRecord) -> EvidenceResult | None:
        """The typed result of an attempt (the model of its kind). Attempts of the previous
        layout — and, while producers move over, attempts written through the file API alone
        (no `write_result`) — are read by `imagekit.evidence.legacy` from the files they kept;
        None when nothing is known. EvidenceError when stored data does not match its model."""
        if record.result is not None:
            return parse_result(record.kind, record.result, where=str(self.path_of(record)))
        return legacy.result(self, record)

    def subjects(self, record: AttemptRecord) -> list[Subject]:
        """What an attempt is about. An attempt that names none (the previous layout, or one
        written through the file API alone) has them derived from its key, context and files
        as the old reader did (verify-copy: the copy is the subject)."""
        if record.subjects or record.layout >= 2 and record.result is not None:
            return list(record.subjects)
        return legacy.subjects(self, record)

    def path_of(self, record: AttemptRecord) -> Path:
        return self.root / EvidenceKey.of(record.key).relative / \
            record.kind / record.attempt_id

    def keys(self) -> list[str]:
        """Every key that has at least one attempt."""
        found = []
        for algorithm_dir in sorted(self.root.glob("*")):
            if algorithm_dir.is_dir():
                for key_dir in sorted(algorithm_dir.iterdir()):
                    prefix = "name:" if algorithm_dir.name == "name" else \
                        f"{algorithm_dir.name}:"
                    found.append(prefix + key_dir.name)
        return found

    def index(self) -> list[dict]:
        index_file = self.root / "index.jsonl"
        if not index_file.exists():
            return []
        return [json.loads(line) for line in index_file.read_text().splitlines() if line]
