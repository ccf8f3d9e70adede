"""README and workflow pages as transcripts: which fenced blocks run, which are only parsed.

The pages are the user's guide, so their commands must work as typed. Two kinds of blocks:

- ```console blocks hold `$ command` lines and the output the page promises. byexample (a
  doctest-style runner for shell transcripts) types them into one bash session per page and
  compares the output line by line; `<...>` elides lines, `<name>` captures a value that later
  commands use again (`+paste`).
- ```bash blocks are not run. Each one follows an HTML comment that says why
  (`<!-- not run: needs a GPU cluster -->`); its imagekit command lines must still parse with
  the real CLI: every command and option must exist.

A block of any other shell kind, or a bash block that does not say why it is not run, is
an error of the page.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from markdown_it import MarkdownIt

SHELL_KINDS = {"console", "bash", "sh", "shell", "shell-session"}
NOT_RUN = re.compile(r"<!--\s*not run:\s*(?P<why>[^>]+?)\s*-->")
#: byexample's command, from the environment the tests run in
BYEXAMPLE = [str(Path(sys.executable).with_name("byexample"))]


@dataclass(frozen=True)
class Block:
    """One fenced shell block of a page."""

    page: Path
    line: int
    kind: str
    text: str
    not_run: str | None  # why it is not run, from the HTML comment right before it

    @property
    def where(self) -> str:
        return f"{self.page.name}:{self.line}"


def shell_blocks(page: Path) -> list[Block]:
    """Every fenced shell block of `page`, with the not-run reason that precedes it, if any."""
    tokens = MarkdownIt("commonmark").parse(page.read_text())
    blocks: list[Block] = []
    previous_html = ""
    for token in tokens:
        if token.type == "html_block":
            previous_html = token.content
            continue
        if token.type == "fence":
            kind = token.info.split()[0] if token.info.strip() else ""
            if kind in SHELL_KINDS:
                match = NOT_RUN.search(previous_html)
                line = (token.map[0] + 1) if token.map else 0
                blocks.append(Block(page, line, kind, token.content,
                                    match.group("why") if match else None))
        if token.type not in ("paragraph_open", "paragraph_close", "inline"):
            previous_html = ""
    return blocks


def page_errors(page: Path) -> list[str]:
    """What is wrong with a page's blocks, before anything runs."""
    errors = []
    for block in shell_blocks(page):
        if block.kind == "console":
            if not any(line.startswith("$ ") for line in block.text.splitlines()):
                errors.append(f"{block.where}: a console block with no `$ ` command")
            if block.not_run:
                errors.append(f"{block.where}: a console block is always run; use ```bash for "
                              "a block that is not")
        elif block.kind == "bash":
            if not block.not_run:
                errors.append(f"{block.where}: a bash block must follow "
                              "<!-- not run: WHY --> (or be a console block that runs)")
        else:
            errors.append(f"{block.where}: use ```console (run) or ```bash (not run), "
                          f"not ```{block.kind}")
    return errors


def command_lines(text: str) -> list[str]:
    """The logical command lines of a bash block: continuations joined, comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", text)
    lines = []
    for raw in joined.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            lines.append(line)
    return lines


def imagekit_argv(line: str) -> list[list[str]]:
    """The argument lists of every `imagekit …` command in one shell line (pipes, `&&` and
    `;` split it; variable assignments before a command are dropped)."""
    words = shlex.split(line, comments=True)
    commands: list[list[str]] = [[]]
    for word in words:
        if word in ("|", "||", "&&", ";"):
            commands.append([])
        else:
            commands[-1].append(word)
    found = []
    for command in commands:
        while command and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", command[0]):
            command = command[1:]
        if command and command[0] == "imagekit":
            found.append(command[1:])
    return found


def parse_errors(argv: list[str]) -> str | None:
    """None when the real CLI parses `argv` (commands and options exist, values convert);
    else click's message. Nothing runs: click's contexts are made, the callback is not called."""
    from typer.main import get_command

    from imagekit.cli import app

    command = get_command(app)
    name, args, parent = "imagekit", list(argv), None
    try:
        while True:
            ctx = command.make_context(name, args, parent=parent)
            if not hasattr(command, "resolve_command"):  # a leaf command: parsed
                return None
            # a group keeps the subcommand's words apart (click's documented `Group.invoke`
            # reads the same two lists)
            rest = [*getattr(ctx, "_protected_args", []), *ctx.args]
            if not rest:
                return None
            found, sub, args = command.resolve_command(ctx, rest)
            if sub is None:
                return f"No such command {found!r}"
            name, command, parent = found or "", sub, ctx
    except Exception as exc:  # typer vendors click: its errors are known by click's API
        if type(exc).__name__ == "Exit":  # an eager option (--version, --help) ends parsing
            return None
        if not callable(getattr(exc, "format_message", None)):
            raise
        return str(exc.format_message())


@dataclass(frozen=True)
class Run:
    """What byexample said about one page."""

    page: Path
    returncode: int
    output: str


def run_page(page: Path, cwd: Path, env: dict[str, str], timeout: float) -> Run:
    """Type the page's console blocks into one bash session in `cwd` and compare the output.

    `+paste` lets a captured `<digest>` be used by later commands; `+norm-ws` compares
    whitespace runs as one space (tables pad to the terminal's width); the terminal is 80
    columns, the width README's outputs are written for."""
    argv = [*BYEXAMPLE, "-l", "shell", "--timeout", str(int(timeout)), "--pretty", "none",
            "--no-progress-bar", "-o", "+paste +norm-ws +geometry=200x80", str(page)]
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout + 60, check=False)
    return Run(page, done.returncode, done.stdout + done.stderr)
