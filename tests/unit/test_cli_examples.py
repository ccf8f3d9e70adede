"""The examples every command's help ends with (imagekit.cli.surface.EXAMPLES): each leaf
command has two to four, each one is a command line of that very command, and each one parses
(click's make_context with its arguments raises nothing): an example with a removed option or
a wrong value fails here, shown below with one."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer

from imagekit.cli import app
from imagekit.cli.surface import EXAMPLES, ROOT_EXAMPLES

REPO = Path(__file__).resolve().parents[2]
#: where an example's own words end: what follows is the shell's (a pipe, a redirection, …)
SHELL_WORDS = ("|", ">", ">>", "&&", ";")


def _leaves(group: Any, path: tuple[str, ...] = ()) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for name, command in group.commands.items():
        if command.hidden:
            continue
        if hasattr(command, "commands"):
            found.update(_leaves(command, (*path, name)))
        else:
            found[" ".join((*path, name))] = command
    return found


LEAVES = _leaves(typer.main.get_command(app))


def parse_example(line: str, leaves: dict[str, Any]) -> str:
    """Parse one example as its command would (raises what click raises); its command path."""
    words = shlex.split(line)
    words = words[:next((i for i, w in enumerate(words) if w in SHELL_WORDS), len(words))]
    assert words[0] == "imagekit", line
    path = next(p for p in sorted(leaves, key=len, reverse=True)
                if words[1:1 + len(p.split())] == p.split())
    command = leaves[path]
    command.make_context(f"imagekit {path}", words[1 + len(path.split()):])
    return path


def test_every_leaf_command_has_two_to_four_examples() -> None:
    assert set(EXAMPLES) == set(LEAVES), set(EXAMPLES) ^ set(LEAVES)
    for path, lines in EXAMPLES.items():
        assert 2 <= len(lines) <= 4, path


@pytest.mark.parametrize(("path", "line"), [(p, line) for p, lines in EXAMPLES.items()
                                            for line in lines])
def test_each_example_is_its_command_and_parses(path: str, line: str) -> None:
    assert parse_example(line, LEAVES) == path


@pytest.mark.parametrize("line", [part.strip() for line in ROOT_EXAMPLES
                                  for part in line.split("&&")])
def test_the_root_examples_parse(line: str) -> None:
    parse_example(line, LEAVES)


def test_an_example_that_does_not_parse_is_seen() -> None:
    """The check can fail: a removed spelling, a value that is not a number."""
    for line in ("imagekit cluster accept vllm --tp 8",
                 "imagekit cluster probe vllm --pod-timeout soon"):
        with pytest.raises(Exception) as raised:
            parse_example(line, LEAVES)
        assert callable(getattr(raised.value, "format_message", None)), raised.value


def test_help_ends_with_the_examples_and_the_docs_address() -> None:
    done = subprocess.run([sys.executable, "-m", "imagekit", "cluster", "probe", "-h"],
                          capture_output=True, text=True, timeout=60, cwd=REPO, check=False)
    assert done.returncode == 0, done.stderr
    lines = [line.strip() for line in done.stdout.splitlines()]
    tail = lines[lines.index("Examples:") + 1:]
    assert tail[:len(EXAMPLES["cluster probe"])] == list(EXAMPLES["cluster probe"])
    assert tail[-1] == ("Docs: https://github.com/imagekit/imagekit/blob/main/docs/"
                        "commands.md#imagekit-cluster-probe")


def test_the_rehearsals_cluster_commands_parse() -> None:
    """The rehearsal runs `imagekit` children with option lists built in code: they are held to
    the same tree (a renamed option there would be the rehearsal failing at run time)."""
    from imagekit.clusteraccept import rehearsal

    accept = rehearsal.accept_args("127.0.0.1:5003/imagekit/vllm:v1", "local")
    volume = rehearsal.volume_args("node-1")
    assert parse_example(shlex.join(["imagekit", *accept]), LEAVES) == "cluster accept"
    assert parse_example(shlex.join(["imagekit", *volume]), LEAVES) == "cluster model-volume"
