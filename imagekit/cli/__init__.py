"""CLI entry point: imports every command module so each registers itself on the shared app,
and ends a finished run without the interpreter's teardown (`leave`)."""

from __future__ import annotations

import atexit
import importlib
import os
import sys
import threading

from imagekit.cli.app import app

#: Every module of this package but `app`, named here rather than listed by `pkgutil` at each
#: start (its import is ~17 ms of a promote's start-up); tests/unit/test_cli_exit.py checks
#: the list against the package's files.
COMMAND_MODULES = ("accept", "attest", "build", "cluster", "cluster_accept", "common",
                   "completion", "doctor", "engine_launch", "evidence", "gpu", "gpujob",
                   "infra", "reference", "registry", "rehearsal", "report", "surface",
                   "trustopts")


def _register() -> None:
    for name in COMMAND_MODULES:
        importlib.import_module(f"imagekit.cli.{name}")


_register()


def main() -> None:
    """The `imagekit` command: the app, then `leave` with its exit status."""
    try:
        app()
    except SystemExit as exc:
        leave(exc.code)
    leave(0)


def leave(code: int | str | None) -> None:
    """End the process once the run is done, without the interpreter's teardown.

    Why: at exit CPython frees every module's objects one by one (pydantic's schemas, httpx,
    rich, the evidence models): measured 0.15-0.2 s of CPU per `imagekit promote` (an
    interleaved A/B of whole runs), after the last byte is written. What an ordinary
    exit does that matters is done here first, in its order: the exit handlers (`atexit`:
    temporary directories' finalizers, logging's flush, the kubernetes client's pool) and the
    flush of stdout and stderr (a closed pipe is status 120, as CPython reports it). Where a
    thread that is not a daemon still runs, the ordinary exit is taken, which waits for it."""
    if any(t is not threading.main_thread() and not t.daemon for t in threading.enumerate()):
        sys.exit(code)
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:  # sys.exit("text"): the text on stderr, status 1 (CPython's rule)
        sys.stderr.write(f"{code}\n")
        status = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`imagekit … | head`), a closed stream
            status = status or 120
    os._exit(status & 0xFF)


__all__ = ["app", "leave", "main"]
