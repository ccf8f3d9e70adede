"""The shared typer app and the few helpers every command uses.

Every command module under imagekit/cli/ registers its commands on `app` (or adds a sub-app);
errors from imagekit.errors become one line on stderr and the class's exit code.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import typer
from pydantic import BaseModel
from rich.console import Console

from imagekit.errors import ImagekitError

app = typer.Typer(
    name="imagekit",
    help="Build, verify, promote and accept LLM inference-server images, with evidence.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

#: Human output goes to stderr-free stdout; machine output (--json) is the only stdout then.
console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)

F = TypeVar("F", bound=Callable[..., Any])


def fail(message: str, code: int = 2) -> "typer.Exit":
    err_console.print(f"imagekit: error: {message}", markup=False, soft_wrap=True)
    return typer.Exit(code)


def guarded(func: F) -> F:
    """Map ImagekitError to `imagekit: error: <what> (<where>)` and its exit code."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except ImagekitError as exc:
            raise fail(exc.one_line(), exc.exit_code) from None
        except KeyboardInterrupt:
            raise fail("interrupted", 130) from None

    return wrapper  # type: ignore[return-value]


def print_json(value: BaseModel | dict | list) -> None:
    """Machine output: one JSON document on stdout, nothing else."""
    if isinstance(value, BaseModel):
        text = value.model_dump_json(indent=2, by_alias=True)
    else:
        text = json.dumps(value, indent=2, default=str)
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def show_progress(json_output: bool) -> bool:
    """Progress bars only for people: on a terminal and not when --json was asked."""
    return not json_output and sys.stderr.isatty()
