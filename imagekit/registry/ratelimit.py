"""`RateLimit-Remaining` as registries send it (Docker Hub: `ratelimit-remaining: 76;w=21600`).

A registry that counts pulls says how many are left; imagekit keeps the last value per registry
so the CLI can report it (and so tag resolution can be seen to cost HEADs, not GETs)."""

from __future__ import annotations

import re
import threading

from pydantic import BaseModel, ConfigDict

_NUMBER = re.compile(r"^\s*(\d+)\s*(?:;\s*w\s*=\s*(\d+))?")
_seen: dict[str, RateLimit] = {}
_lock = threading.Lock()


class RateLimit(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    registry: str
    remaining: int
    limit: int | None = None
    window_s: int | None = None

    def __str__(self) -> str:
        text = f"{self.registry}: RateLimit-Remaining {self.remaining}"
        if self.limit is not None:
            text += f" of {self.limit}"
        if self.window_s is not None:
            text += f" per {self.window_s} s"
        return text


def parse(registry: str, headers) -> RateLimit | None:
    """From response headers (case-insensitive mapping); None when the registry sent none."""
    remaining = _NUMBER.match(headers.get("ratelimit-remaining") or "")
    if remaining is None:
        return None
    limit = _NUMBER.match(headers.get("ratelimit-limit") or "")
    window = remaining.group(2) or (limit.group(2) if limit else None)
    return RateLimit(registry=registry, remaining=int(remaining.group(1)),
                     limit=int(limit.group(1)) if limit else None,
                     window_s=int(window) if window else None)


def record(registry: str, headers) -> None:
    found = parse(registry, headers)
    if found is not None:
        with _lock:
            _seen[registry] = found


def last(registry: str) -> RateLimit | None:
    """The last rate limit `registry` reported in this process, None when it sent none."""
    with _lock:
        return _seen.get(registry)


def seen() -> list[RateLimit]:
    """The last rate limit each registry reported in this process."""
    with _lock:
        return [_seen[key] for key in sorted(_seen)]


def clear() -> None:
    with _lock:
        _seen.clear()
