"""A registry's upload shape: its quirks as data, chosen per host and recorded with the result.

regclient's per-host config (`blobChunk`, `blobMax`) is the model: registries in the wild differ
in what a blob upload may look like, and those differences belong in one table, not in `if`
branches through the upload code.

- `chunk_size`: bytes per PATCH (None: the command's default, 16 MiB for promote);
- `max_body`: the largest request body the registry or a proxy in front of it takes (nginx's
  client_max_body_size, regclient's blobMax, opencontainers/distribution-spec#485): chunks are
  cut to it;
- `monolithic`: one `PUT ?digest=` with the whole blob, no PATCH (a registry without chunked
  uploads, as GHCR was);
- `immutable_tags`: a tag, once set, is never moved (ECR and Harbor tag immutability): a
  promote finds a tag that names another digest before any blob is sent.

Set per registry in a TOML file (`IMAGEKIT_REGISTRIES`) or in images.toml, both as
`[registries."HOST[:PORT]"]`. What a run learns (a 413 that made the chunks smaller, a refused
PATCH that made the uploads monolithic) is kept for the rest of the run on that registry's
transport (`UploadPlan`), and each hop records the shape it used.
"""

from __future__ import annotations

import re
import threading
import tomllib
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from imagekit.errors import InvalidInput

MIB = 1 << 20
#: Chunk sizes tried after a 413, in order, below the one refused; then one monolithic PUT.
SMALLER_CHUNKS = (4 * MIB, 1 * MIB)
_SIZE = re.compile(r"^\s*(\d+)\s*([kmg]i?b?|b)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1 << 10, "ki": 1 << 10,
          "m": 1000**2, "mb": 1000**2, "mib": MIB, "mi": MIB,
          "g": 1000**3, "gb": 1000**3, "gib": 1 << 30, "gi": 1 << 30}


def parse_size(value: Any) -> Any:
    """`16777216`, `"16MiB"`, `"10MB"`: bytes (a bare number is bytes)."""
    if value is None or isinstance(value, int):
        return value
    if isinstance(value, str):
        match = _SIZE.match(value)
        if match:
            return int(match.group(1)) * _UNITS[(match.group(2) or "").lower()]
    raise ValueError(f"{value!r} is not a size (bytes, or a number with kB/MB/MiB/GB/GiB)")


Size = Annotated[int | None, BeforeValidator(parse_size), Field(gt=0)]


class UploadShape(BaseModel):
    """What one registry accepts for a blob upload (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    chunk_size: Size = None
    max_body: Size = None
    monolithic: bool = False
    immutable_tags: bool = False


class RegistryShapes(BaseModel):
    """The `[registries."HOST"]` tables of a registries file or of images.toml."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    registries: dict[str, UploadShape] = {}


def load_shapes(path: Path) -> dict[str, UploadShape]:
    """A registries TOML file; a bad one is one line naming the file (exit 2)."""
    try:
        data = tomllib.loads(path.read_text())
    except OSError as exc:
        raise InvalidInput(f"cannot read the registries file ({exc.strerror})",
                           where=str(path)) from None
    except tomllib.TOMLDecodeError as exc:
        raise InvalidInput(f"registries file is not TOML ({exc})", where=str(path)) from None
    try:
        return dict(RegistryShapes.model_validate(data).registries)
    except ValidationError as exc:
        first = exc.errors()[0]
        at = ".".join(str(p) for p in first["loc"])
        raise InvalidInput(f"registries file: {at}: {first['msg']}", where=str(path)) from None


def human(size: int) -> str:
    if size % MIB == 0:
        return f"{size // MIB} MiB"
    if size >= MIB:
        return f"{size / MIB:.1f} MiB"
    return f"{size} bytes"


class UploadPlan:
    """One registry's upload shape during a run: what was configured, and what the registry
    taught (a 413, a refused PATCH). Thread-safe: the blobs of a hop upload at once, and each
    lesson is learned once per registry per run, not once per blob."""

    def __init__(self, shape: UploadShape, default_chunk: int, grow_to: int | None = None
                 ) -> None:
        self.shape = shape
        chunk = shape.chunk_size or default_chunk
        if shape.max_body is not None:
            chunk = min(chunk, shape.max_body)
        self._chunk = chunk
        #: an upload's chunks double after each confirmed one up to this (None: fixed), where
        #: the chunk is the command's default and not the registry's own setting: on a link
        #: each chunk boundary stops the upload for a round trip, and a 150 MB layer in 16 MiB
        #: chunks meets nine of them
        self._grow_to = None if shape.chunk_size is not None or grow_to is None else \
            min(grow_to, shape.max_body or grow_to)
        self._monolithic = shape.monolithic
        self._lessons: list[str] = []
        #: a body to this registry was refused (429, 413): from then on every body waits for
        #: `100 Continue`, so a refusal costs a round trip, not the body
        self.refuses_bodies = False
        #: the registry refused to move a tag this run (immutable tags, not configured)
        self.tags_refused = False
        self._lock = threading.Lock()

    @property
    def chunk(self) -> int:
        return self._chunk

    @property
    def taught(self) -> bool:
        """The registry refused a shape this run (its chunk is now a limit, not a start)."""
        with self._lock:
            return bool(self._lessons)

    def chunk_after(self, current: int) -> int:
        """The next chunk of an upload whose last one was `current` bytes: never above what
        the registry taught (a 413 shrinks the plan's chunk), else doubled up to the growth
        bound."""
        with self._lock:
            if self._lessons:
                return min(current, self._chunk)
            if self._grow_to is None:
                return current
            return max(self._chunk, min(current * 2, self._grow_to))

    @property
    def monolithic(self) -> bool:
        return self._monolithic

    def smaller(self, refused: int, status: int) -> bool:
        """A body of `refused` bytes was answered `status` (413): the next smaller chunk, once
        for the registry (another blob may have learned it meanwhile). False when no smaller
        chunk is left (then `go_monolithic`)."""
        with self._lock:
            if self._monolithic:
                return True
            if self._chunk < refused:
                return True  # learned meanwhile by another blob
            for size in SMALLER_CHUNKS:
                if size < refused:
                    self._lessons.append(f"HTTP {status} to a {human(refused)} PATCH: chunks "
                                         f"of {human(size)}")
                    self._chunk = size
                    return True
            return False

    @property
    def immutable_tags(self) -> bool:
        return self.shape.immutable_tags or self.tags_refused

    def go_monolithic(self, why: str) -> None:
        with self._lock:
            if not self._monolithic:
                self._monolithic = True
                self._lessons.append(f"{why}: one monolithic PUT per blob")

    def describe(self) -> str:
        """The shape used, and why it changed during the run (what a hop records)."""
        with self._lock:
            now = "monolithic PUT" if self._monolithic else f"chunked {human(self._chunk)}"
            if not self._monolithic and self._grow_to is not None and not self._lessons \
                    and self._grow_to > self._chunk:
                now += f", doubling to {human(self._grow_to)}"
            configured = []
            if self.shape.max_body is not None:
                configured.append(f"max body {human(self.shape.max_body)}")
            if self.shape.monolithic or self.shape.chunk_size is not None:
                configured.append("configured")
            text = now + (f" ({', '.join(configured)})" if configured else "")
            if self._lessons:
                text += "; learned: " + "; ".join(self._lessons)
            return text
