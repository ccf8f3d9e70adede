"""The evidence contract: explicit subjects with roles, and one result model per kind.

Producers and readers meet only here. A producer writes one `EvidenceResult` (a pydantic model
of its kind, with `kind` and `schema_version`) through `Attempt.write_result`; a reader gets it
back through `EvidenceStore.result(record)`, typed, or an `EvidenceError` naming the attempt.
The JSON on disk is the contract: a model change that is not additive needs a new
`schema_version` (and the reader of the old one kept).

Every attempt also states its subjects: the digests it speaks about and in which role. The gate
and the report of a digest read only attempts whose `subject` (role `Role.SUBJECT`) it is (or an
alias of the same image); a digest an attempt merely compared itself with (`compared_with`) or
was built from (`base`) is never judged by that attempt.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError

from imagekit.errors import EvidenceError
from imagekit.oci.digest import Digest


class Role(StrEnum):
    """How an attempt relates to a digest it names."""

    #: the attempt is about this image (its checks judge it)
    SUBJECT = "subject"
    #: another identity of the same image (image ID = config digest, the per-platform manifest
    #: under an index): the report links evidence keyed by it to the image
    ALIAS = "alias"
    #: the attempt compared the subject with this image (verify-copy: the official)
    COMPARED_WITH = "compared_with"
    #: the image the subject was built from (never judged by the attempt)
    BASE = "base"


class Subject(BaseModel):
    """One digest an attempt names, with its role and, when known, the reference it was
    reached by."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    digest: Digest
    role: Role = Role.SUBJECT
    reference: str | None = None

    @classmethod
    def of(cls, digest: Digest | str, role: Role = Role.SUBJECT,
           reference: str | None = None) -> Subject:
        return cls(digest=Digest.parse(str(digest)), role=role,
                   reference=str(reference) if reference is not None else None)


def judged(subjects: Iterable[Subject]) -> set[str]:
    """The digests an attempt's checks are about: its subjects and their aliases."""
    return {str(s.digest) for s in subjects if s.role in (Role.SUBJECT, Role.ALIAS)}


class EvidenceResult(BaseModel):
    """Base of every kind's result model. Subclasses pin `kind` (a Literal, or a pattern for a
    family such as `accept-*`) and `schema_version`, and are registered with `register`."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    #: the kind (or kind family pattern `accept-*`) this model is registered for
    KIND: ClassVar[str] = ""

    kind: str
    schema_version: int


_MODELS: dict[str, type[EvidenceResult]] = {}


def register(model: type[EvidenceResult]) -> type[EvidenceResult]:
    """Class decorator: the model of `model.KIND` (one model per kind; a family `name-*`
    covers every kind starting with `name-`)."""
    kind = model.KIND
    if not kind:
        raise TypeError(f"{model.__name__} has no KIND")
    known = _MODELS.get(kind)
    if known is not None and known is not model:
        raise TypeError(f"evidence kind {kind!r} already has a model: {known.__name__}")
    _MODELS[kind] = model
    return model


def model_for(kind: str) -> type[EvidenceResult] | None:
    """The result model registered for `kind` (exact, else its `family-*`), or None."""
    if kind in _MODELS:
        return _MODELS[kind]
    for pattern, model in _MODELS.items():
        if pattern.endswith("-*") and kind.startswith(pattern[:-1]):
            return model
    return None


def registered() -> dict[str, type[EvidenceResult]]:
    """Every kind (or family) and its model, for docs and schema export."""
    return dict(sorted(_MODELS.items()))


def parse_result(kind: str, data: dict, *, where: str = "") -> EvidenceResult:
    """Validate stored result data against the model of its kind."""
    model = model_for(kind)
    if model is None:
        raise EvidenceError(f"no result model for evidence kind {kind!r}", where=where)
    try:
        result = model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        location = ".".join(str(p) for p in first.get("loc", ()))
        raise EvidenceError(f"{kind} result does not match {model.__name__} "
                            f"({location}: {first.get('msg')})", where=where) from None
    if result.kind != kind:
        raise EvidenceError(f"result of kind {result.kind!r} in a {kind!r} attempt",
                            where=where)
    return result
