"""The shared typer app and the few helpers every command uses.

Every command module under imagekit/cli/ registers its commands on `app` (or adds a sub-app);
errors from imagekit.errors become one line on stderr and the class's exit code.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import typer
from typer.core import TyperGroup

from imagekit.errors import ImagekitError

if TYPE_CHECKING:  # pydantic and rich are not imported for --help: each command imports its own
    from pydantic import BaseModel
    from rich.console import Console

    from imagekit.evidence import EvidenceStore
    from imagekit.progress import Progress
    from imagekit.settings import Settings


class _LazyConsole:
    """rich's Console, made on first use, so that `imagekit --help` does not import rich."""

    def __init__(self, **kwargs: Any) -> None:
        self._kwargs = kwargs
        self._console: Console | None = None

    def _real(self) -> Console:
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._kwargs)
        return self._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real(), name)

    # dunders are looked up on the type, not through __getattr__ (rich's Live uses `with`)
    def __enter__(self) -> Console:
        return self._real().__enter__()

    def __exit__(self, *exc: Any) -> None:
        self._real().__exit__(*exc)


#: Human output goes to stderr-free stdout; machine output (--json) is the only stdout then.
console: Console = _LazyConsole(highlight=False)  # type: ignore[assignment]
_err_console = _LazyConsole(stderr=True, highlight=False)
err_console: Console = _err_console  # type: ignore[assignment]


class OneLineGroup(TyperGroup):
    """The root group: a bad option or argument is one line on stderr, exit 2 — not click's
    usage box. (Errors inside a command are `guarded`'s; this covers what typer parses.)"""

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True,
             windows_expand_args: bool = True, **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False,
                                windows_expand_args=windows_expand_args, **extra)
        try:
            code = super().main(args, prog_name or "imagekit", complete_var,
                                standalone_mode=False, windows_expand_args=windows_expand_args,
                                **extra)
        except typer.Abort:
            err_console.print("imagekit: error: aborted", markup=False)
            sys.exit(1)
        except Exception as exc:
            if not _is_click_error(exc):
                raise
            if type(exc).__name__ == "NoArgsIsHelpError":  # `imagekit cluster`: its help
                exc.show()  # type: ignore[attr-defined]
                sys.exit(exc.exit_code)  # type: ignore[attr-defined]
            ctx = getattr(exc, "ctx", None)
            where = ctx.command_path if ctx is not None else "imagekit"
            text = " ".join(exc.format_message().split()).rstrip(".")  # type: ignore[attr-defined]
            err_console.print(f"imagekit: error: {text} ({where})", markup=False, soft_wrap=True,
                              emoji=False, highlight=False)
            sys.exit(2)
        sys.exit(code if isinstance(code, int) else 0)

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        """click's documented hook: the words after `imagekit` are kept, so that an error can
        name the command that refused (`imagekit cluster probe`) without click's private
        context stack."""
        global _invoked
        _invoked = list(args)
        return super().resolve_command(ctx, args)


def _is_click_error(exc: BaseException) -> bool:
    """One of click's own errors (a bad option, a missing argument, no arguments at all).
    typer vendors click and its classes are not public API, so they are known by what click
    documents every `ClickException` to have: `format_message()`, `show()` and `exit_code`."""
    return callable(getattr(exc, "format_message", None)) and callable(
        getattr(exc, "show", None)) and isinstance(getattr(exc, "exit_code", None), int)


app = typer.Typer(
    name="imagekit",
    cls=OneLineGroup,
    help="Build, verify, promote and accept LLM inference-server images, with evidence.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    # plain click help: typer's rich help alone imports ~0.15 s of rich/markdown modules, half
    # the `imagekit --help` budget (0.3 s, issue 17)
    rich_markup_mode=None,
)


def _show_version(value: bool) -> None:
    if value:
        from imagekit import __version__

        sys.stdout.write(f"imagekit {__version__}\n")
        raise typer.Exit()


@app.callback()
def _root(ctx: typer.Context,
          version: bool = typer.Option(False, "--version", is_eager=True,
                                       callback=_show_version,
                                       help="Show imagekit's version and exit."),
          tmpdir: Path = typer.Option(
        None, "--tmpdir", metavar="DIR",
        help="Where every temporary file of this run goes (default $TMPDIR, else /tmp); each "
             "is removed when the run ends, interrupted (Ctrl-C) or not.")) -> None:
    """Build, verify, promote and accept LLM inference-server images, with evidence."""
    global _root_ctx, _settings
    _root_ctx, _settings = ctx, None  # the settings are read once, by the command's first line
    if tmpdir is None:
        return
    if not tmpdir.is_dir() or not os.access(tmpdir, os.W_OK | os.X_OK):
        raise fail(f"--tmpdir {tmpdir}: not a writable directory (imagekit)")
    import tempfile

    # every temporary file of this process is made by `tempfile` with its default directory,
    # which this sets (the stdlib's own knob; no environment write): build contexts, layer
    # folders, kubeconfigs. Programs imagekit starts get it as TMPDIR from `child_env`.
    tempfile.tempdir = str(tmpdir.absolute())


_root_ctx: typer.Context | None = None
_invoked: list[str] = []
_settings: Settings | None = None


def settings() -> Settings:
    """imagekit's settings (imagekit.settings), read from the environment once per run, at
    the first line of the command (`guarded`), so that a bad variable is one line before any
    side effect. Not in the root callback itself: that runs for `imagekit CMD --help` too, which
    must not pay for pydantic (tests/unit/test_cli_startup.py). Commands hand the values down."""
    global _settings
    if _settings is None:
        from imagekit.settings import load

        _settings = load()
    return _settings


F = TypeVar("F", bound=Callable[..., Any])


def fail(message: str, code: int = 2) -> typer.Exit:
    err_console.print(f"imagekit: error: {message}", markup=False, soft_wrap=True)
    return typer.Exit(code)


def guarded(func: F) -> F:
    """Map ImagekitError to `imagekit: error: <what> (<where>)` and its exit code."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            chosen = settings().progress  # IMAGEKIT_DEADLINE=nan: one line, before anything
            if chosen is None:
                return func(*args, **kwargs)
            from imagekit import progress

            # IMAGEKIT_PROGRESS (the rehearsal's children): what operations report into when
            # the command installs no progress of its own (progress_for installs one over it)
            with progress.using(progress.make(chosen)):
                return func(*args, **kwargs)
        except ImagekitError as exc:
            if not exc.where:  # every error says where: at least the command that refused
                exc.where = _command_path()
            raise fail(exc.one_line(), exc.exit_code) from None
        except KeyboardInterrupt:
            raise fail("interrupted", 130) from None
        except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
            # the safety net under the checks of imagekit.inputs: a file that cannot be read or
            # parsed is one line, never a traceback (IMAGEKIT_DEBUG=1 shows the traceback)
            if _settings is not None and _settings.debug:
                raise
            text = _one_line(exc)
            raise fail(text if text.endswith(")") else f"{text} ({_command_path()})", 2) \
                from None

    return wrapper  # type: ignore[return-value]


def _command_path() -> str:
    """The command that runs (`imagekit cluster probe`): the root context the callback kept,
    walked along the words `resolve_command` kept, through click's public Group API."""
    ctx = _root_ctx
    if ctx is None:
        return "imagekit"
    path: list[str] = [ctx.command_path]
    command: Any = ctx.command
    for word in _invoked:
        if not hasattr(command, "list_commands"):
            break
        if word in command.list_commands(ctx):
            path.append(word)
            command = command.get_command(ctx, word)
    return " ".join(path)


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, OSError):
        where = f" ({exc.filename})" if exc.filename else ""
        return f"{exc.strerror or type(exc).__name__}{where}"
    if isinstance(exc, UnicodeDecodeError):
        return f"input is not UTF-8 text (byte {exc.start})"
    if hasattr(exc, "errors") and callable(exc.errors):  # pydantic's ValidationError
        try:
            first = exc.errors()[0]
            loc = ".".join(str(p) for p in first.get("loc", ()))
            return f"invalid input: {loc + ': ' if loc else ''}{first.get('msg', exc)}"
        except Exception:  # noqa: BLE001 - any shape: fall back to the message
            pass
    text = " ".join(str(exc).split())
    return f"invalid input: {text[:200] or type(exc).__name__}"


def evidence_store(directory: Path | None, *, write: bool = True) -> EvidenceStore:
    """The evidence store, its root checked first: writable (created when missing) for a
    command that records, existing when one that only reads was given a directory. Called
    before any network or cluster work, so nothing is done that could not be recorded."""
    from imagekit.evidence import EvidenceStore
    from imagekit.inputs import existing_dir, writable_dir

    store = EvidenceStore(directory if directory is not None else settings().evidence_dir)
    if write:
        writable_dir(store.root, "--evidence-dir")
    elif directory is not None:
        existing_dir(store.root, "--evidence-dir")
    return store


def print_json(value: BaseModel | dict | list) -> None:
    """Machine output: one JSON document on stdout, nothing else."""
    if hasattr(value, "model_dump_json"):
        text = value.model_dump_json(indent=2, by_alias=True)
    else:
        text = json.dumps(value, indent=2, default=str)
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


@contextlib.contextmanager
def progress_for(json_output: bool) -> Iterator[Progress]:
    """The command's progress for its long steps (imagekit.progress): rich on a terminal, one
    line per phase on a pipe, JSON lines on stderr with --json; IMAGEKIT_PROGRESS overrides.
    Installed as the current progress, so operations and transports report into it."""
    from imagekit import progress

    mode = progress.choose_mode(json_output, sys.stderr.isatty(), settings().progress)
    sink = progress.make(mode, console=_err_console._real() if mode == "rich" else None)
    with progress.using(sink):
        yield sink


def show_progress(json_output: bool) -> bool:
    """Progress bars only for people: on a terminal and not when --json was asked."""
    return not json_output and sys.stderr.isatty()
