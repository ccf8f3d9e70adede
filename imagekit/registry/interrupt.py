"""A stop that loses nothing: SIGINT/SIGTERM ask transfers to stop at a clean boundary.

Why not just die: a blob upload cut in the middle of a request leaves the registry holding
bytes its signed upload state does not know about, and distribution then refuses to resume
("upload resumed at wrong offset") and cancels the session. So a first SIGINT/SIGTERM only
sets `STOP`: an upload ends its streamed PATCH where it is (the registry acknowledges exactly
what it got and the journal records it), downloads and new requests raise `Interrupted`, and
the operation records what it finished. A second signal interrupts at once. SIGKILL cannot be
caught; what the journal and the evidence hold from before it is what a rerun finds.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from imagekit.errors import ImagekitError

STOP = threading.Event()
_reason: list[str] = []


class Interrupted(ImagekitError):
    """The user (or a supervisor) asked the operation to stop; exit 130 like a shell."""

    exit_code = 130


def check(where: str | None = None) -> None:
    """Raise `Interrupted` once a stop was asked for."""
    if STOP.is_set():
        raise Interrupted(f"interrupted by {_reason[0] if _reason else 'a signal'}", where=where)


def request_stop(reason: str) -> None:
    if not STOP.is_set():
        _reason[:] = [reason]
        STOP.set()


@contextmanager
def stop_signals(handler: Callable[[int, object], None]) -> Iterator[None]:
    """`handler` for SIGINT and SIGTERM within this block, the previous handlers after it
    (main thread only: elsewhere signals cannot be handled, and the block runs as it is)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@contextmanager
def graceful() -> Iterator[None]:
    """Within this block SIGINT/SIGTERM stop transfers cleanly (main thread only; elsewhere a
    no-op). A second signal raises KeyboardInterrupt at once."""
    if threading.current_thread() is not threading.main_thread():
        yield        # a worker's block: the main thread's stop request is not its to clear
        return

    def handler(signum: int, frame: object) -> None:
        if STOP.is_set():
            raise KeyboardInterrupt
        request_stop(signal.Signals(signum).name)

    try:
        with stop_signals(handler):
            yield
    finally:
        STOP.clear()
        _reason.clear()
