"""`imagekit completion bash|zsh|fish`: the shell's completion script, on stdout.

The script calls `imagekit` back with $_IMAGEKIT_COMPLETE set; the root group answers from the
command tree (typer's completion classes, `imagekit.cli.app.OneLineGroup.main`)."""

from __future__ import annotations

import sys

import typer

from imagekit.cli.app import COMPLETE_VAR, app, guarded
from imagekit.errors import InvalidInput

SHELLS = ("bash", "zsh", "fish")


@app.command("completion")
@guarded
def completion(shell: str = typer.Argument(..., metavar="SHELL",
                                           help="bash, zsh or fish.")) -> None:
    """Print the completion script for SHELL. Load it where the shell reads completions, e.g.
    `imagekit completion bash > ~/.local/share/bash-completion/completions/imagekit`."""
    if shell not in SHELLS:
        raise InvalidInput(f"no completion for {shell!r}; use {', '.join(SHELLS)}", where=shell)
    from typer.completion import get_completion_script

    script = get_completion_script(prog_name="imagekit", complete_var=COMPLETE_VAR, shell=shell)
    sys.stdout.write(script + "\n")
