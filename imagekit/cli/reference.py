"""docs/commands.md, written from the CLI itself: a section `## imagekit <command>` for every
command and subcommand, with its one-sentence summary and its help as `--help` prints it at a
fixed width. `make docs` writes it; tests/unit/test_cli_surface.py fails when it is stale."""

from __future__ import annotations

import sys
from typing import Any

import typer

from imagekit.cli.app import SUMMARIES, app

WIDTH = 100

HEADER = """# Command reference

Every `imagekit` command and option, as `imagekit COMMAND --help` prints them. This page is
written from the CLI (`make docs`); a test fails when it differs from the CLI. Start with
[the docs index](README.md) for what to run when.
"""


def _sections(command: Any, ctx: Any, path: list[str]) -> list[tuple[str, str, str]]:
    """(path, summary, help text) for `command` and everything under it, in the order
    `--help` lists them."""
    found = [(" ".join(path), SUMMARIES.get(" ".join(path[1:]), ""), command.get_help(ctx))]
    if hasattr(command, "list_commands"):
        for name in command.list_commands(ctx):
            child = command.get_command(ctx, name)
            if child is None or child.hidden:
                continue
            child_ctx = child.context_class(child, info_name=name, parent=ctx,
                                            terminal_width=WIDTH, max_content_width=WIDTH)
            found.extend(_sections(child, child_ctx, [*path, name]))
    return found


def commands_markdown(root: Any = None) -> str:
    """The whole page (`root`: the click tree, by default imagekit's own)."""
    root = root if root is not None else typer.main.get_command(app)
    # the root's settings (`-h` beside `--help`), as `imagekit` itself makes its context
    ctx = root.context_class(root, info_name="imagekit", terminal_width=WIDTH,
                             max_content_width=WIDTH, **root.context_settings)
    sections = _sections(root, ctx, ["imagekit"])
    lines = [HEADER]
    for path, _, _ in sections[1:]:
        anchor = path.replace(" ", "-")
        lines.append(f"- [`{path}`](#{anchor})")
    lines.append("")
    for path, summary, text in sections:
        lines += [f"## {path}", ""]
        if summary:
            lines += [summary, ""]
        lines += ["```text", text.rstrip(), "```", ""]
    return "\n".join(lines)


@app.command("docs-commands", hidden=True)
def docs_commands() -> None:
    """Print docs/commands.md (`make docs` writes it)."""
    sys.stdout.write(commands_markdown())
