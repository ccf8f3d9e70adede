"""A tiny progress protocol: operations report bytes, the CLI decides whether to draw bars.

Operations stay free of rich; the CLI passes a rich-backed sink on a terminal and nothing with
`--json` (quiet machine output)."""

from __future__ import annotations

from typing import Protocol


class ProgressSink(Protocol):
    def add(self, description: str, total: int | None) -> int: ...

    def advance(self, task: int, amount: int) -> None: ...

    def finish(self, task: int) -> None: ...


class NullProgress:
    def add(self, description: str, total: int | None) -> int:
        return 0

    def advance(self, task: int, amount: int) -> None:
        return None

    def finish(self, task: int) -> None:
        return None
