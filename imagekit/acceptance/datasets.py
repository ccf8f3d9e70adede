"""Load-round prompts read from a file (models.Dataset): a JSON-lines prompt column, ShareGPT
conversations, or a timed trace. Read once per file version, kept in file order: replaying a
dataset means sending its entries in the order they are written.

Every defect of the file is bad input (one line, exit 2) naming the file and the line, found
when the matrix is loaded, before any request is sent.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from imagekit.acceptance.models import Dataset
from imagekit.errors import InvalidInput

HUMAN_ROLES = ("human", "user")
REPLY_ROLES = ("gpt", "assistant", "chatgpt", "model")


@dataclass(frozen=True)
class Turn:
    """One request's worth of a dataset entry. `prompt` None: sized random words for
    `input_tokens` (trace rows without text). `output_tokens`: max_tokens the data sets;
    `reply_words`: the length of the recorded reply, turned into tokens with the calibration."""

    prompt: str | None
    input_tokens: int | None = None
    output_tokens: int | None = None
    reply_words: int | None = None


@dataclass(frozen=True)
class Entry:
    """A single request (one turn) or a conversation (its turns, in order); `at_s`: a trace
    row's send time from the trace's start."""

    turns: tuple[Turn, ...]
    at_s: float | None = None


@dataclass(frozen=True)
class Loaded:
    entries: tuple[Entry, ...]
    sha256: str

    @property
    def has_output_lengths(self) -> bool:
        return all(t.output_tokens is not None or t.reply_words is not None
                   for e in self.entries for t in e.turns)


def resolve(dataset: Dataset, base: Path) -> tuple[Dataset, Loaded]:
    """The dataset with its path made absolute (relative paths are the matrix file's) and its
    digest filled in, and its entries; a pinned digest that differs is refused."""
    path = Path(dataset.path).expanduser()
    if not path.is_absolute():
        path = (base / path).resolve()
    if not path.is_file():
        raise InvalidInput("dataset file does not exist", where=str(path))
    stat = path.stat()
    loaded = _load(str(path), stat.st_mtime_ns, stat.st_size, dataset.format, dataset.column,
                   dataset.output_column, dataset.multi_turn)
    if dataset.sha256 and dataset.sha256 != loaded.sha256:
        raise InvalidInput(f"dataset sha256 is {loaded.sha256}, the matrix pins "
                           f"{dataset.sha256}", where=str(path))
    return dataset.model_copy(update={"path": str(path), "sha256": loaded.sha256}), loaded


def entries(dataset: Dataset) -> Loaded:
    """The entries of a dataset already resolved (absolute path)."""
    return resolve(dataset, Path("/"))[1]


@lru_cache(maxsize=16)
def _load(path: str, mtime_ns: int, size: int, fmt: str, column: str,
          output_column: str | None, multi_turn: bool) -> Loaded:
    try:
        raw = Path(path).read_bytes()
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"cannot read dataset: {exc}", where=path) from None
    rows = _rows(text, path, allow_list=fmt == "sharegpt")
    if not rows:
        raise InvalidInput("dataset has no rows", where=path)
    if fmt == "jsonl":
        found = [_prompt_row(row, n, path, column, output_column) for n, row in rows]
    elif fmt == "sharegpt":
        found = [_conversation(row, n, path, multi_turn) for n, row in rows]
    else:
        found = _trace(rows, path)
    return Loaded(entries=tuple(found), sha256=hashlib.sha256(raw).hexdigest())


def _rows(text: str, path: str, *, allow_list: bool) -> list[tuple[int, Any]]:
    """(line number, parsed object) in file order; a ShareGPT file may be one JSON list."""
    if allow_list and text.lstrip().startswith("["):
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise InvalidInput(f"dataset is not valid JSON: {exc}", where=path) from None
        return list(enumerate(data, 1))
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append((n, json.loads(line)))
        except ValueError as exc:
            raise InvalidInput(f"dataset line {n} is not JSON: {exc}", where=path) from None
    return rows


def _object(row: Any, n: int, path: str) -> dict:
    if not isinstance(row, dict):
        raise InvalidInput(f"dataset row {n} is not a JSON object", where=path)
    return row


def _length(row: dict, key: str, n: int, path: str, *, minimum: int = 1) -> int:
    value = row.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise InvalidInput(f"dataset row {n}: {key!r} must be an integer >= {minimum}, got "
                           f"{value!r}", where=path)
    return value


def _prompt_row(row: Any, n: int, path: str, column: str, output_column: str | None) -> Entry:
    row = _object(row, n, path)
    if column not in row:
        raise InvalidInput(f"dataset row {n} has no column {column!r} (columns: "
                           f"{', '.join(sorted(row)) or 'none'})", where=path)
    prompt = row[column]
    if not isinstance(prompt, str) or not prompt.strip():
        raise InvalidInput(f"dataset row {n}: column {column!r} is not a non-empty string",
                           where=path)
    output = _length(row, output_column, n, path) if output_column else None
    return Entry(turns=(Turn(prompt=prompt, output_tokens=output),))


def _conversation(row: Any, n: int, path: str, multi_turn: bool) -> Entry:
    row = _object(row, n, path)
    messages = row.get("conversations", row.get("messages"))
    if not isinstance(messages, list):
        raise InvalidInput(f"dataset row {n} has no 'conversations' (or 'messages') list",
                           where=path)
    turns: list[Turn] = []
    for message in messages:
        if not isinstance(message, dict):
            raise InvalidInput(f"dataset row {n}: a turn is not a JSON object", where=path)
        role = str(message.get("from", message.get("role", ""))).lower()
        value = message.get("value", message.get("content"))
        if not isinstance(value, str):
            raise InvalidInput(f"dataset row {n}: a turn has no text ('value' or 'content')",
                               where=path)
        if role in HUMAN_ROLES:
            turns.append(Turn(prompt=value))
        elif role in REPLY_ROLES and turns and turns[-1].reply_words is None:
            turns[-1] = Turn(prompt=turns[-1].prompt, reply_words=max(1, len(value.split())))
    if not turns:
        raise InvalidInput(f"dataset row {n} has no human turn", where=path)
    return Entry(turns=tuple(turns if multi_turn else turns[:1]))


def _trace(rows: list[tuple[int, Any]], path: str) -> list[Entry]:
    out: list[Entry] = []
    first: float | None = None
    previous = -1.0
    for n, row in rows:
        row = _object(row, n, path)
        stamp = row.get("timestamp")
        if not isinstance(stamp, (int, float)) or isinstance(stamp, bool) or stamp < 0:
            raise InvalidInput(f"dataset row {n}: 'timestamp' (milliseconds) must be a number "
                               f">= 0, got {stamp!r}", where=path)
        if stamp < previous:
            raise InvalidInput(f"dataset row {n}: timestamp {stamp} is before the previous "
                               f"row's {previous} (a trace is replayed in order)", where=path)
        previous = float(stamp)
        first = previous if first is None else first
        text = row.get("input_text")
        if text is not None and (not isinstance(text, str) or not text.strip()):
            raise InvalidInput(f"dataset row {n}: 'input_text' is not a non-empty string",
                               where=path)
        inputs = None if text else _length(row, "input_length", n, path)
        output = _length(row, "output_length", n, path)
        out.append(Entry(turns=(Turn(prompt=text, input_tokens=inputs, output_tokens=output),),
                         at_s=(previous - first) / 1000))
    return out
