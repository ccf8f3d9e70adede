"""Required checks: which evidence must exist (and pass) before a digest may be promoted.

A requirement is `kind` (every current check of that kind must pass, and there must be at least
one) or `kind:name` (that one check). The list comes from, in order: the caller, the
`IMAGEKIT_REQUIRED_CHECKS` environment variable (comma separated), `DEFAULT_REQUIRED`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict

from imagekit.errors import InvalidInput

REQUIRED_ENV = "IMAGEKIT_REQUIRED_CHECKS"
#: Evidence kinds recorded under a command's earlier name -> the command's name now. The
#: evidence keeps the kind it was written with (append-only); reports, the gate and
#: requirements speak the current name, and accept the earlier one as input.
CURRENT_KINDS = {"verify-copy": "verify-mirror"}
#: In-image probes and the image manifest must exist and pass before anything is promoted.
DEFAULT_REQUIRED: tuple[str, ...] = ("probe", "images-verify")
_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def current_kind(kind: str) -> str:
    """The name a person knows an evidence kind by today (`verify-copy` -> `verify-mirror`)."""
    return CURRENT_KINDS.get(kind, kind)


class Requirement(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: str
    name: str | None = None

    @classmethod
    def parse(cls, text: str) -> Requirement:
        kind, sep, name = text.strip().partition(":")
        if not _PART.match(kind) or (sep and not name.strip()):
            raise InvalidInput("a required check looks like KIND or KIND:CHECK, e.g. "
                               "probe:pip_check", where=repr(text))
        return cls(kind=current_kind(kind), name=name.strip() or None)

    def matches(self, kind: str, name: str) -> bool:
        return kind == self.kind and (self.name is None or name == self.name)

    def __str__(self) -> str:
        return f"{self.kind}:{self.name}" if self.name else self.kind


def parse_requirements(required: Iterable[str] | None = None) -> list[Requirement]:
    """Caller's list (the CLI's `--require-check`, else `$IMAGEKIT_REQUIRED_CHECKS` from its
    settings), else the defaults; duplicates dropped."""
    if required is None:
        required = DEFAULT_REQUIRED
    result: list[Requirement] = []
    for text in required:
        requirement = Requirement.parse(text)
        if requirement not in result:
            result.append(requirement)
    return result
