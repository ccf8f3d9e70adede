"""The acceptance controller's log-line protocol, written down (version 1).

The controller Pod (manifests/controller/) reports to the operation outside
through its log: one JSON object per line, after a fixed prefix. Each object carries `v`, the
protocol version; this imagekit reads version `PROTOCOL_VERSION` only. A line with an unknown
version, or one that starts with a prefix and does not parse as its model, is a
`ProtocolError` naming the line: never guessed at, never skipped (docs/design/cluster.md, "The
controller's log lines").

- `IMAGEKIT-ATTEMPT {AttemptLine}`: one attempt the in-Pod evidence store holds (its
  `attempt.json` record and every file of it, base64), printed by `accept_suites.py` with
  this very model (the controller image carries imagekit).
- `IMAGEKIT-RESULT {ResultLine}`: what a sub-script or the controller itself came to
  (`phase` "controller": it could not start a sub-script). Printed by `controller.py`, which
  is stdlib-only on purpose (it also runs on a bare python image, tests/cluster): it writes
  the same object by hand, and tests/cluster/test_accept_unit.py checks that its output
  validates here.
- `IMAGEKIT-HARNESS-ERROR {HarnessErrorLine}`: the suites' harness itself broke.

Other lines are the controller's own prose and are kept, unparsed, in `controller.log`.
"""

from __future__ import annotations

import base64
import json
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from imagekit.errors import ImagekitError
from imagekit.evidence.store import AttemptRecord

PROTOCOL_VERSION: Literal[1] = 1
ATTEMPT, RESULT, HARNESS_ERROR = "IMAGEKIT-ATTEMPT ", "IMAGEKIT-RESULT ", "IMAGEKIT-HARNESS-ERROR "


class ProtocolError(ImagekitError):
    """A controller line that this imagekit cannot read as the contract says."""


class _Line(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    PREFIX: ClassVar[str] = ""

    v: Literal[1] = PROTOCOL_VERSION

    def to_line(self) -> str:
        """The log line: prefix, then the object as sorted JSON on one line."""
        return self.PREFIX + json.dumps(self.model_dump(mode="json"), sort_keys=True)


class AttemptLine(_Line):
    """One in-Pod attempt: its record and its files (path relative to the attempt → base64)."""

    PREFIX: ClassVar[str] = ATTEMPT

    attempt: AttemptRecord
    files: dict[str, str] = Field(default_factory=dict)

    def file_bytes(self) -> dict[str, bytes]:
        return {name: base64.b64decode(data) for name, data in sorted(self.files.items())}


class ResultLine(_Line):
    """A sub-script's outcome as the controller saw it; extra fields are its data."""

    model_config = ConfigDict(extra="allow", frozen=True)
    PREFIX: ClassVar[str] = RESULT

    phase: str
    status: str
    detail: str = ""


class HarnessErrorLine(_Line):
    PREFIX: ClassVar[str] = HARNESS_ERROR

    error: str


class ControllerLog(BaseModel):
    """Everything the controller said through the protocol, in order."""

    model_config = ConfigDict(frozen=True)

    attempts: list[AttemptLine] = Field(default_factory=list)
    results: list[ResultLine] = Field(default_factory=list)
    harness_error: str | None = None


_MODELS: dict[str, type[_Line]] = {ATTEMPT: AttemptLine, RESULT: ResultLine,
                                   HARNESS_ERROR: HarnessErrorLine}


def parse_line(line: str, number: int = 0) -> _Line | None:
    """The protocol object of one log line; None for a line of prose."""
    for prefix, model in _MODELS.items():
        if not line.startswith(prefix):
            continue
        where = f"controller log line {number}" if number else "controller log"
        name = prefix.strip()
        try:
            doc: Any = json.loads(line.removeprefix(prefix))
        except ValueError as exc:
            raise ProtocolError(f"{name} line is not JSON: {exc}", where=where) from None
        if not isinstance(doc, dict):
            raise ProtocolError(f"{name} line is not a JSON object", where=where)
        version = doc.get("v")
        if version != PROTOCOL_VERSION:
            raise ProtocolError(f"{name} line of protocol version {version!r}; this imagekit "
                                f"reads version {PROTOCOL_VERSION} only (controller and "
                                "operation from different imagekit versions?)", where=where)
        try:
            return model.model_validate(doc)
        except ValidationError as exc:
            first = exc.errors()[0]
            at = ".".join(str(p) for p in first.get("loc", ()))
            raise ProtocolError(f"{name} line does not match the contract: {at}: "
                                f"{first.get('msg')}", where=where) from None
    return None


def parse_log(log: str) -> ControllerLog:
    attempts: list[AttemptLine] = []
    results: list[ResultLine] = []
    harness: str | None = None
    for number, line in enumerate(log.splitlines(), start=1):
        parsed = parse_line(line, number)
        if isinstance(parsed, AttemptLine):
            attempts.append(parsed)
        elif isinstance(parsed, ResultLine):
            results.append(parsed)
        elif isinstance(parsed, HarnessErrorLine):
            harness = parsed.error
    return ControllerLog(attempts=attempts, results=results, harness_error=harness)
