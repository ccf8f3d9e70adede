"""A tiny progress protocol: operations report bytes and phases, the CLI decides how to show them.

Operations stay free of rich. The CLI passes a rich-backed sink on a terminal (a bar per blob and
a total), `LineProgress` on a pipe (one line per blob and per phase, with elapsed seconds and
bytes: a log a person or CI can read afterwards), and `NullProgress` for `--json` (machine
output: stderr stays empty unless `--verbose`; the per-blob figures are in the JSON instead).
"""

from __future__ import annotations

import threading
import time
from typing import Protocol, TextIO


class ProgressSink(Protocol):
    def add(self, description: str, total: int | None) -> int: ...

    def advance(self, task: int, amount: int) -> None: ...

    def finish(self, task: int) -> None: ...


def phase(sink: object, text: str) -> None:
    """Tell `sink` a phase began or ended (sinks without `phase` ignore it)."""
    report = getattr(sink, "phase", None)
    if report is not None:
        report(text)


def human_bytes(count: int) -> str:
    size = float(count)
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    raise AssertionError("unreachable")


class NullProgress:
    def add(self, description: str, total: int | None) -> int:
        return 0

    def advance(self, task: int, amount: int) -> None:
        return None

    def finish(self, task: int) -> None:
        return None

    def phase(self, text: str) -> None:
        return None


class LineProgress:
    """One line per finished blob (`bytes in seconds, rate`) and per phase, each with the
    seconds since the command's transfers began; a total when closed. Thread-safe."""

    def __init__(self, stream: TextIO, prefix: str = "imagekit") -> None:
        self.stream, self.prefix = stream, prefix
        self.started = time.monotonic()
        self._lock = threading.Lock()
        self._tasks: dict[int, list] = {}  # id -> [description, total, done, started]
        self._next = 1
        self.moved = 0

    def _line(self, text: str) -> None:
        elapsed = time.monotonic() - self.started
        self.stream.write(f"{self.prefix}: [{elapsed:6.2f}s] {text}\n")
        self.stream.flush()

    def add(self, description: str, total: int | None) -> int:
        with self._lock:
            task, self._next = self._next, self._next + 1
            self._tasks[task] = [description, total, 0, time.monotonic()]
            return task

    def advance(self, task: int, amount: int) -> None:
        with self._lock:
            entry = self._tasks.get(task)
            if entry is not None:
                entry[2] += amount
            self.moved += amount

    def finish(self, task: int) -> None:
        with self._lock:
            entry = self._tasks.pop(task, None)
            if entry is None:
                return
            description, total, done, started = entry
            took = max(time.monotonic() - started, 1e-6)
            of = f" of {human_bytes(total)}" if total is not None and total != done else ""
            self._line(f"{description}: {human_bytes(done)}{of} in {took:.2f}s "
                       f"({human_bytes(int(done / took))}/s)")

    def phase(self, text: str) -> None:
        with self._lock:
            self._line(text)

    def close(self) -> None:
        with self._lock:
            if self.moved:
                took = max(time.monotonic() - self.started, 1e-6)
                self._line(f"total: {human_bytes(self.moved)} in {took:.2f}s "
                           f"({human_bytes(int(self.moved / took))}/s)")


class PhaseSink:
    """Bytes of blobs as phases of the one progress mechanism (`imagekit.progress`): each blob a
    phase of `step` ended with its bytes and seconds, each phase line a phase of its own. Used
    when `IMAGEKIT_PROGRESS` asks for it explicitly (the rehearsal's children: JSON events it
    re-draws under its step)."""

    def __init__(self, progress, step: str) -> None:  # progress: imagekit.progress.Progress
        self.progress, self.step = progress, step
        self._lock = threading.Lock()
        self._phases: dict[int, list] = {}
        self._next = 1

    def add(self, description: str, total: int | None) -> int:
        phase_ = self.progress.phase(self.step, description)
        with self._lock:
            task, self._next = self._next, self._next + 1
            self._phases[task] = [phase_, 0]
            return task

    def advance(self, task: int, amount: int) -> None:
        with self._lock:
            entry = self._phases.get(task)
            if entry is not None:
                entry[1] += amount

    def finish(self, task: int) -> None:
        with self._lock:
            entry = self._phases.pop(task, None)
        if entry is not None:
            took = max(entry[0].elapsed, 1e-6)
            entry[0].done(f"{human_bytes(entry[1])} in {took:.2f}s "
                          f"({human_bytes(int(entry[1] / took))}/s)")

    def phase(self, text: str) -> None:
        self.progress.phase(self.step, text).done()
