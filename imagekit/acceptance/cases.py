"""Semantic cases as data: what is asked, what the right answer is, and how an answer is matched.

Why data: a case only tells a healthy deployment from a broken one on a model that answers it
right when healthy. The record's cases were written for MiniMax-M3 and fail on a 135M model even
when its deployment is healthy, so each model gets its own calibrated set. Two sets ship
(`record`, the default, and `stand-in`, calibrated on SmolLM2-135M-Instruct); a user writes a
file of the same shape for any other model (docs/reference/cases.md).

A bad file is one line naming the field (exit 2), before any request is sent.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from imagekit.errors import InvalidInput

#: The shipped sets, by name: manifests/acceptance/cases/<name>.toml
SHIPPED = ("record", "stand-in")
DEFAULT = "record"

Match = Literal["exact", "contains", "integer", "integers", "regex"]
MATCH_HELP = {
    "exact": "the answer, stripped of surrounding whitespace, equals the expected text",
    "contains": "the expected text appears in the answer (case-insensitive)",
    "integer": "the answer's final integer equals the expected integer",
    "integers": "the answer's integers begin with the expected ones, in order",
    "regex": "the expected regular expression matches somewhere in the answer",
}
_INTEGER = re.compile(r"-?\d[\d,]*")


def _integers(text: str) -> list[int]:
    values = []
    for found in _INTEGER.findall(text):
        try:
            values.append(int(found.replace(",", "")))
        except ValueError:
            continue
    return values


class _Case(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    expected: str = Field(min_length=1)
    match: Match = "contains"

    @model_validator(mode="after")
    def _expected_fits_match(self) -> _Case:
        if self.match == "integer" and len(_integers(self.expected)) != 1:
            raise ValueError(f"expected {self.expected!r} is not one integer (match integer)")
        if self.match == "integers" and not _integers(self.expected):
            raise ValueError(f"expected {self.expected!r} holds no integer (match integers)")
        if self.match == "regex":
            try:
                re.compile(self.expected)
            except re.error as exc:
                raise ValueError(f"expected is not a regular expression: {exc}") from None
        return self

    def judge(self, answer: str) -> tuple[bool, str]:
        """(correct, why): why names the answer's part that was compared with what."""
        text = answer.strip()
        if self.match == "exact":
            ok = text == self.expected.strip()
            return ok, f"answer {'equals' if ok else 'differs from'} {self.expected!r}"
        if self.match == "contains":
            ok = self.expected.lower() in text.lower()
            return ok, f"{self.expected!r} {'found' if ok else 'not found'} in the answer"
        if self.match == "integer":
            values = _integers(text)
            one = _integers(self.expected)[0]
            last = values[-1] if values else None
            return last == one, f"final integer {last} {'=' if last == one else '!='} {one}"
        if self.match == "integers":
            wanted = _integers(self.expected)
            begin = _integers(text)[:len(wanted)]
            return begin == wanted, (f"integers {begin} "
                                     f"{'begin' if begin == wanted else 'do not begin'} with "
                                     f"{wanted}")
        ok = re.search(self.expected, text) is not None
        return ok, f"/{self.expected}/ {'matches' if ok else 'does not match'}"


class Arithmetic(_Case):
    """One problem asked `reproductions` times per inference mode: identical requests are
    reproductions of one problem, never an accuracy estimate."""

    prompt: str = Field(min_length=1)
    match: Match = "integer"
    reproductions: int = Field(3, ge=1, le=100)


class MultiTurn(_Case):
    """Earlier turns state a fact; the last turn asks it back. The model's own answers to the
    earlier turns go into the history as it gave them."""

    turns: list[str] = Field(min_length=2)


class Streaming(_Case):
    """Asked streamed and not streamed at temperature 0: the two contents must be equal, and
    the streamed one must match."""

    prompt: str = Field(min_length=1)
    compare_non_streaming: bool = True


class Needle(BaseModel):
    """A generated document with one key line, asked under each wrapper at each position, plus
    a no-answer control (a document without the key: the right answer is `not_found`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: the document's share of the room the served context leaves (max_model_len less the
    #: answer budget and a margin), 0 < size <= 1
    size: float = Field(1.0, gt=0.0, le=1.0)
    #: an upper bound in tokens, whatever the context (None: none)
    max_tokens: int | None = Field(None, ge=200)
    #: a served context whose room is below this is named a context limit, not scored
    min_tokens: int = Field(200, ge=50)
    positions: list[float] = Field([0.1, 0.5, 0.9], min_length=1)
    samples: int = Field(3, ge=1, le=20)
    control: bool = True
    seed: int = 20240531
    #: the filler the document is made of: `zh-records` (the record's) or `en-records`
    filler: Literal["zh-records", "en-records"] = "zh-records"
    #: the look-alike keys (a draft, a test key, a staging key) placed in the document
    distractors: bool = True
    not_found: str = Field("NOT_FOUND", min_length=1)
    #: name -> template with {document}, {not_found} and (optional) {key_label}
    wrappers: dict[str, str] = Field(min_length=1)
    answer_tokens: int = Field(1024, ge=1)

    @field_validator("positions")
    @classmethod
    def _positions(cls, value: list[float]) -> list[float]:
        bad = [p for p in value if not 0.0 <= p <= 1.0]
        if bad:
            raise ValueError(f"position {bad[0]} is outside 0.0..1.0")
        return value

    @field_validator("wrappers")
    @classmethod
    def _templates(cls, value: dict[str, str]) -> dict[str, str]:
        for name, template in value.items():
            if "{document}" not in template:
                raise ValueError(f"wrapper {name!r} has no {{document}} placeholder")
            try:
                template.format(document="", not_found="", key_label="")
            except (KeyError, IndexError, ValueError) as exc:
                raise ValueError(f"wrapper {name!r}: unknown placeholder {exc}") from None
        return value


class Cases(BaseModel):
    """A cases file: the semantic cases of one model."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: what the set is called in evidence and reports
    name: str = Field(min_length=1, max_length=80)
    #: the model the cases were calibrated on (words, shown in reports)
    calibrated_on: str = Field(min_length=1)
    description: str = ""
    arithmetic: Arithmetic
    multi_turn: MultiTurn
    streaming: Streaming
    needle: Needle

    def facts(self) -> dict[str, str]:
        return {"cases": self.name, "calibrated_on": self.calibrated_on}


def shipped_path(name: str) -> Path:
    from imagekit import packaged

    return packaged.path("manifests", "acceptance", "cases", f"{name}.toml")


def parse(text: str, where: str) -> Cases:
    """A cases file's text, validated; one line naming the field on any fault."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InvalidInput(f"cases file is not TOML: {exc}", where=where) from None
    try:
        return Cases.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "(top)"
        message = str(first["msg"]).removeprefix("Value error, ")
        raise InvalidInput(f"cases file field {field}: {message}", where=where) from None


def load(name_or_file: str | Path | None = None) -> tuple[Cases, str]:
    """(cases, text): a shipped set by name (`record`, `stand-in`), or a file a user wrote.
    The text travels as it is (the cluster controller gets the same bytes)."""
    from imagekit.inputs import read_text

    value = str(name_or_file) if name_or_file is not None else DEFAULT
    if value in SHIPPED:
        path = shipped_path(value)
        text = path.read_text(encoding="utf-8")
        return parse(text, str(path)), text
    path = Path(value)
    if not path.suffix and not path.exists():
        raise InvalidInput(f"no cases set named {value!r}; use {', '.join(SHIPPED)} or a "
                           "cases file (TOML)", where="--cases")
    text = read_text(path, "cases file", max_bytes=1024 * 1024)
    return parse(text, str(path)), text


def default() -> Cases:
    return load(DEFAULT)[0]
