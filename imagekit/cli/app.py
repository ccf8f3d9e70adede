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

from imagekit import doc_url
from imagekit.cli.surface import EXAMPLES, OPTIONS, ROOT_EXAMPLES, option
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
#: Text is never wrapped (soft_wrap): on a pipe rich would break lines at 80 columns, and a
#: line that carries a reference, a digest or a path must stay whole to be copied out of a CI
#: log (`$IMAGE`). A terminal wraps long lines itself; tables still fit the width.
console: Console = _LazyConsole(highlight=False, soft_wrap=True)  # type: ignore[assignment]
_err_console = _LazyConsole(stderr=True, highlight=False, soft_wrap=True)
err_console: Console = _err_console  # type: ignore[assignment]


#: `imagekit --help`: the commands under what the user is doing, in this order.
PANELS: dict[str, tuple[str, ...]] = {
    "Before you start": ("init", "doctor"),
    "Image phase": ("pin", "build", "probe", "images"),
    "Registry and signing": ("promote", "verify-mirror", "keys", "attest",
                             "verify-attestations"),
    "Evidence and reports": ("report", "gate", "evidence", "gpu-record", "schemas"),
    "Model acceptance": ("accept", "bench", "serve-command", "launch-log"),
    "Cluster": ("cluster",),
    "Local infrastructure": ("infra", "standins", "rehearsal"),
    "Setup": ("completion",),
}

#: One whole sentence per command, by its path: what every command list and docs/commands.md
#: show. A summary is never cut off (tests/unit/test_cli_surface.py).
SUMMARIES: dict[str, str] = {
    "init": "Write a starting images spec and the files it names into a folder of your own.",
    "doctor": "Check what a role needs before it starts: docker, registries, cluster RBAC, disk.",
    "pin": "Resolve the spec's base and mirror tags to digests in its lock file.",
    "build": "Build the fixed images from the lock's base digests, keeping every attempt's log.",
    "probe": "Run the in-image probes (pip check, find_spec, PyAV, CLI parsing) in an image.",
    "images": "Run the whole image phase over the images spec.",
    "images verify": "Build, push and probe every image of the spec, verify its mirrors and "
                     "write the manifest.",
    "promote": "Copy a verified digest hop by hop and read it back at every endpoint.",
    "verify-mirror": "Check that a copy of an image is content-identical to the official one.",
    "keys": "Manage the signing key that attestations and promotions are signed with.",
    "keys generate": "Make a signing key pair: keep NAME.key, give out NAME.pub and its "
                     "fingerprint.",
    "attest": "Sign an image's test-result and SBOM statements and attach them at its registry.",
    "verify-attestations": "Verify the signed attestations of the digest an image reference "
                           "serves.",
    "report": "Report what the evidence says about one image, leading with the decision.",
    "gate": "Say whether the promotion gate lets a digest through, and why.",
    "evidence": "List the evidence store and import signed statements into it.",
    "evidence list": "List the evidence attempts per key, oldest first.",
    "evidence pull": "Import the statements that trusted keys signed about an image.",
    "gpu-record": "Validate a GPU preflight record and add it to the evidence.",
    "schemas": "Export and check the JSON Schemas of the documents imagekit writes.",
    "schemas export": "Write the JSON Schema of every document imagekit writes.",
    "schemas check": "Fail when a checked-in JSON Schema differs from its model.",
    "accept": "Run acceptance suites against an OpenAI-compatible server and record evidence.",
    "bench": "Run a load matrix against a server and check completions, errors and tokens.",
    "serve-command": "Print the engine's serve command for a model, or its Pod.",
    "launch-log": "Read engine startup logs.",
    "launch-log parse": "Time weight loading and graph capture in an engine startup log.",
    "cluster": "Probe, pre-check and accept images on a Kubernetes cluster.",
    "cluster probe": "Run the zero-GPU probe Pod pinned by digest and check its imageID and "
                     "probes.",
    "cluster precheck": "Check a GPU Pod's node, taints, storage and priority before it is "
                        "submitted.",
    "cluster gpu-preflight": "Run the GPU preflight Pod pinned by digest and record its "
                             "verdict.",
    "cluster recreate": "Replace a Pod whose immutable fields change, once the old one is gone.",
    "cluster rbac": "Print the ServiceAccount and least-privilege RBAC the cluster commands "
                    "need, for kubectl apply.",
    "cluster accept": "Serve a model from an image on the cluster and accept it there.",
    "cluster model-volume": "Make the local volume that holds the model for cluster "
                            "acceptance.",
    "infra": "Start, stop and inspect the local Docker engine, registries and cluster.",
    "infra up": "Install and start whatever of the local infrastructure is missing.",
    "infra down": "Stop only the processes that imagekit started.",
    "infra status": "Show what runs and where, and the command that fixes what is missing.",
    "standins": "Build the local stand-in base images.",
    "standins build": "Build the stand-in bases that reproduce the known-broken upstream "
                      "images.",
    "standins model": "Build the real instruct model the semantic checks judge, offline, cached "
                      "by content.",
    "rehearsal": "Run the whole release path end to end on local stand-ins.",
    "completion": "Print the shell completion script for bash, zsh or fish.",
}

#: Spellings that were removed, and what to type instead: one line, exit 2.
RENAMED_COMMANDS: dict[str, str] = {"verify": "verify-attestations",
                                    "verify-copy": "verify-mirror"}
RENAMED_OPTIONS: dict[tuple[str, str], str] = {
    ("accept", "--timeout"): "--request-timeout",
    ("bench", "--timeout"): "--request-timeout",
    ("cluster accept", "--timeout"): "--run-timeout",
    ("cluster probe", "--timeout"): "--pod-timeout",
    ("cluster gpu-preflight", "--timeout"): "--pod-timeout",
    ("cluster recreate", "--timeout"): "--delete-timeout",
    ("accept", "--require"): "--require-capability",
    ("cluster accept", "--require"): "--require-capability",
    ("gate", "--require"): "--require-check",
    ("report", "--require"): "--require-check",
    ("verify-attestations", "--require"): "--require-link",
    ("promote", "--deadline"): "--call-timeout",
    ("verify-mirror", "--deadline"): "--call-timeout",
    ("promote", "--await-deadline"): "--await-timeout",
    # one name, one meaning: a public key to trust is --trust-key everywhere, a platform of an
    # image index --platform (promote's narrowing --only-platform), the engine's device --device
    ("verify-attestations", "--key"): "--trust-key",
    ("verify-attestations", "--type"): "--require-type",
    ("promote", "--platform"): "--only-platform",
    ("cluster accept", "--platform"): "--device",
    # where results are filed: one --evidence-key (a digest or a name)
    ("accept", "--digest"): "--evidence-key",
    ("accept", "--name"): "--evidence-key",
    ("bench", "--digest"): "--evidence-key",
    ("bench", "--name"): "--evidence-key",
    ("gpu-record", "--digest"): "--evidence-key",
    ("gpu-record", "--name"): "--evidence-key",
    ("launch-log parse", "--subject"): "--evidence-key",
    ("serve-command", "--name"): "--pod-name",
    ("bench", "--image"): "--compare-with",
    ("build", "--all"): "--all-images",
    # the engine's launch: its variables are --engine-env KEY=VALUE, its extra arguments
    # --engine-arg, on every command
    ("probe", "--serve-env"): "--engine-env",
    ("probe", "--serve-arg"): "--engine-arg",
    ("cluster accept", "--tp"): "--engine-env TP=N",
    ("cluster accept", "--max-context"): "--engine-env MAX_CONTEXT=N",
    ("cluster accept", "--max-requests"): "--engine-env MAX_REQUESTS=N",
    # a folder to write into is --out-dir (--out is one file)
    ("rehearsal", "--out"): "--out-dir",
    ("keys generate", "--out"): "--out-dir",
    ("keys generate", "--force"): "--overwrite",
    ("cluster model-volume", "--claim"): "--model-claim",
}

#: The root help's closing lines: a release's path, then where the docs are.
EPILOG = "\n".join(["Examples:", *(f"  {line}" for line in ROOT_EXAMPLES), "",
                     f"Docs: {doc_url('README')} to start, {doc_url('commands')} for every "
                     "command and option."])


class SentenceGroup(TyperGroup):
    """A command group whose list gives each command's whole one-sentence summary (SUMMARIES),
    never click's summary cut off at 45 characters."""

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        self._section(ctx, formatter, "Commands", [
            name for name in self.list_commands(ctx)
            if not getattr(self.get_command(ctx, name), "hidden", False)])

    def _section(self, ctx: Any, formatter: Any, title: str, names: Sequence[str]) -> None:
        """One titled list of commands, each with its SUMMARIES sentence (none when empty)."""
        rows = [(name, summary_of(ctx.command_path, name)) for name in names]
        if rows:
            with formatter.section(title):
                formatter.write_dl(rows)


def summary_of(group_path: str, name: str) -> str:
    """The SUMMARIES sentence of `name` under the group at `group_path` (`imagekit cluster`)."""
    words = group_path.split()[1:]
    return SUMMARIES.get(" ".join([*words, name]), "")


def _fill_placeholders(group: Any, path: tuple[str, ...] = ()) -> None:
    """Every option's placeholder from OPTIONS, every argument's from its name (REF, FILE…):
    typer would print Python types (`<str>`, `<int range>`). Every command's help ends with its
    EXAMPLES and the address of its section in the command reference."""
    for name, command in group.commands.items():
        if hasattr(command, "commands"):
            _fill_placeholders(command, (*path, name))
            continue
        for param in command.params:
            if param.param_type_name == "argument":
                param.metavar = param.metavar or ARGUMENTS.get(param.name, param.name.upper())
                # typer lists an argument as `REF <str>`: the placeholder alone says it
                param.display_type_rich = _no_type
            elif not param.is_flag and param.metavar is None and param.opts[0] in OPTIONS:
                param.metavar = OPTIONS[param.opts[0]].placeholder
        if not command.hidden:
            command.epilog = examples_epilog(" ".join((*path, name)))


def examples_epilog(path: str) -> str:
    """A command's closing lines: its examples as written (click's \\b keeps a paragraph from
    being rewrapped), then where its documentation is."""
    anchor = "-".join(["imagekit", *path.split()])
    lines = ["\b", "Examples:", *(f"  {line}" for line in EXAMPLES.get(path, ()))]
    return "\n".join(lines) + f"\n\n\b\nDocs: {doc_url('commands', anchor)}"


def _no_type(ctx: Any) -> None:
    return None


#: Arguments by their name: what to type.
ARGUMENTS: dict[str, str] = {"reference": "REF", "source": "REF", "target": "REF",
                             "image": "NAME", "official": "OFFICIAL", "copy": "COPY",
                             "key": "KEY", "directory": "DIR", "file": "FILE", "log": "FILE",
                             "pod_file": "FILE", "extra": "ARG", "subject": "NAME|REF|DIGEST"}


def _renamed(group: Any, args: Sequence[str]) -> str | None:
    """The one line for a removed spelling among `args`, else None."""
    words: list[str] = []
    command = group
    for arg in args:
        if arg.startswith("-") or not hasattr(command, "commands"):
            break
        if not words and arg in RENAMED_COMMANDS:
            return f"'{arg}' is now '{RENAMED_COMMANDS[arg]}' (imagekit)"
        if arg not in command.commands:
            break
        words.append(arg)
        command = command.commands[arg]
    path = " ".join(words)
    for arg in args:
        if arg == "--":                       # what follows is the engine's, not imagekit's
            break
        old = arg.split("=", 1)[0]            # `--require=probe` is the same spelling
        new = RENAMED_OPTIONS.get((path, old))
        if new is not None:
            return f"{old} is now {new} (imagekit {path})"
    return None


#: The variable the completion scripts set when they ask imagekit for completions.
COMPLETE_VAR = "_IMAGEKIT_COMPLETE"


class OneLineGroup(SentenceGroup):
    """The root group: a bad option or argument is one line on stderr, exit 2 — not click's
    usage box (errors inside a command are `guarded`'s; this covers what typer parses). Its
    help lists the commands under PANELS, with examples after."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _fill_placeholders(self)

    def list_commands(self, ctx: Any) -> list[str]:
        """The commands in PANELS' order (then any that no panel names, e.g. hidden ones)."""
        ordered = [name for names in PANELS.values() for name in names if name in self.commands]
        return ordered + [name for name in self.commands if name not in ordered]

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        for panel, names in PANELS.items():
            self._section(ctx, formatter, panel, [n for n in names if n in self.commands])

    def format_epilog(self, ctx: Any, formatter: Any) -> None:
        """The examples as written: one command a line, never rewrapped."""
        formatter.write_paragraph()
        formatter.write("".join(f"{line}\n" for line in EPILOG.splitlines()))

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True,
             windows_expand_args: bool = True, **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False,
                                windows_expand_args=windows_expand_args, **extra)
        if os.environ.get(COMPLETE_VAR):  # the shell asks for completions: typer's classes
            from typer.completion import completion_init

            completion_init()
        renamed = _renamed(self, sys.argv[1:] if args is None else list(args))
        if renamed is not None:
            err_console.print(f"imagekit: error: {renamed}", markup=False, soft_wrap=True)
            sys.exit(2)
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
    epilog=EPILOG,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # `imagekit completion SHELL` prints the script (typer's --install-completion would add two
    # options to the root and detect the shell at every start)
    add_completion=False,
    # -h is --help on every command (a context's settings pass to its subcommands)
    context_settings={"help_option_names": ["-h", "--help"]},
    # plain click help: typer's rich help alone imports ~0.15 s of rich/markdown modules, half
    # the `imagekit --help` budget (0.3 s)
    rich_markup_mode=None,
)


def version_text() -> str:
    """What `imagekit --version` prints: the version, then what this release supports."""
    from imagekit import SUPPORTED, __version__

    supported = ", ".join(f"{name} {versions}" for name, versions in SUPPORTED.items())
    return f"imagekit {__version__}\nsupports: {supported}\n"


def _show_version(value: bool) -> None:
    if value:
        sys.stdout.write(version_text())
        raise typer.Exit()


@app.callback()
def _root(ctx: typer.Context,
          version: bool = option("--version", is_eager=True, callback=_show_version),
          tmpdir: Path = option("--tmpdir")) -> None:
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
        with _stop_signals():
            return _run_guarded(func, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


class StopSignal(KeyboardInterrupt):
    """SIGINT or SIGTERM, by name: a KeyboardInterrupt, so every `finally` runs."""


@contextlib.contextmanager
def _stop_signals() -> Iterator[None]:
    """SIGTERM stops a command as SIGINT does: a KeyboardInterrupt, so every `finally` runs
    (a cluster run deletes its Pods, ConfigMaps, Secrets and Services; an evidence attempt is
    closed as not passed). A second signal while that cleanup runs is ignored, so one impatient
    Ctrl-C does not leave objects behind; a third stops at once."""
    import signal

    from imagekit.registry.interrupt import stop_signals

    received = 0

    def handler(signum: int, frame: Any) -> None:
        nonlocal received
        received += 1
        if received != 2:
            raise StopSignal(signal.Signals(signum).name)

    with stop_signals(handler):
        yield


def _run_guarded(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """The command, its errors mapped to one line and an exit code."""
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
    except KeyboardInterrupt as exc:
        said = f"interrupted by {exc.args[0]}" if isinstance(exc, StopSignal) else "interrupted"
        raise fail(f"{said} ({_command_path()})", 130) from None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        # the safety net under the checks of imagekit.inputs: a file that cannot be read or
        # parsed is one line, never a traceback (IMAGEKIT_DEBUG=1 shows the traceback)
        if _settings is not None and _settings.debug:
            raise
        text = _one_line(exc)
        raise fail(text if text.endswith(")") else f"{text} ({_command_path()})", 2) \
            from None


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
