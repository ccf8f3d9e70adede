"""One name, one meaning, across the whole command tree: every option of every command is in
imagekit.cli.surface.OPTIONS, with the table's placeholder, default, variable and spellings,
and its help starts with the table's sentence. The checker is shown failing on a command that
declares an option with another default, placeholder or help, or one the table lacks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer

from imagekit.cli import app
from imagekit.cli.app import RENAMED_OPTIONS
from imagekit.cli.surface import OPTIONS, OptionSpec

REPO = Path(__file__).resolve().parents[2]


def _same(value: Any) -> Any:
    """A default as compared: no value (None, [], ()) is None; a sequence is a list."""
    if value is None or value == [] or value == ():
        return None
    if isinstance(value, tuple | list):
        return list(value)
    return value


def commands(group: Any, path: tuple[str, ...] = ()) -> list[tuple[str, Any]]:
    """(path, command) of `group` and of everything under it, the group itself first."""
    found = [(" ".join(path) or "imagekit", group)]
    for name, command in getattr(group, "commands", {}).items():
        if hasattr(command, "commands"):
            found += commands(command, (*path, name))
        else:
            found.append((" ".join((*path, name)), command))
    return found


def option_problems(root: Any, table: dict[str, OptionSpec]) -> list[str]:
    """Every way an option of the tree `root` differs from `table`, one line each."""
    problems = []
    for path, command in commands(root):
        for option in (p for p in command.params if p.param_type_name == "option"):
            name = next((o for o in option.opts if o.startswith("--")), option.opts[0])
            where = f"{path} {name}"
            spec = table.get(name)
            if spec is None:
                problems.append(f"{where}: not in the option table")
                continue
            spellings = sorted([name, *([spec.short] if spec.short else [])])
            if sorted(option.opts) != spellings:
                problems.append(f"{where}: spelled {option.opts}, the table {spellings}")
            if option.secondary_opts != ([spec.negative] if spec.negative else []):
                problems.append(f"{where}: off spelling {option.secondary_opts}, the table "
                                f"{spec.negative}")
            if option.metavar != spec.placeholder:
                problems.append(f"{where}: placeholder {option.metavar!r}, the table "
                                f"{spec.placeholder!r}")
            if _same(option.default) != _same(spec.default):
                problems.append(f"{where}: default {option.default!r}, the table "
                                f"{spec.default!r}")
            if option.multiple != spec.repeatable:
                problems.append(f"{where}: {'repeatable' if option.multiple else 'given once'}"
                                f", the table {'repeatable' if spec.repeatable else 'once'}")
            if option.envvar != spec.envvar:
                problems.append(f"{where}: variable {option.envvar!r}, the table "
                                f"{spec.envvar!r}")
            if not (option.help or "").startswith(spec.meaning):
                problems.append(f"{where}: help does not start with the table's sentence "
                                f"{spec.meaning!r}")
    return problems


def _tree() -> Any:
    return typer.main.get_command(app)


def test_every_option_of_every_command_is_the_tables() -> None:
    problems = option_problems(_tree(), OPTIONS)
    assert not problems, "\n".join(problems)


def test_the_checker_fails_on_another_default() -> None:
    """The same name with another default (a 300 s --pod-timeout beside the table's 900) is
    named; so are another placeholder, help that does not say the table's sentence, and a name
    the table does not hold."""
    tiny = typer.Typer(add_completion=False)

    @tiny.command()
    def probe(timeout: float = typer.Option(300, "--pod-timeout", metavar="SECONDS",
                                            help=OPTIONS["--pod-timeout"].meaning),
              gpus: int = typer.Option(8, "--gpus", metavar="COUNT",
                                       help=OPTIONS["--gpus"].meaning),
              namespace: str = typer.Option("imagekit", "--namespace", metavar="NAMESPACE",
                                            help="Where the Pod goes."),
              brand_new: str = typer.Option(None, "--brand-new", metavar="X",
                                            help="Nobody's.")) -> None:
        """A command declared by hand."""

    @tiny.command()
    def other() -> None:
        """A second command, so typer keeps a group."""

    problems = option_problems(typer.main.get_command(tiny), OPTIONS)
    assert any("--pod-timeout: default 300" in p and "the table 900.0" in p
               for p in problems), problems
    assert any("--gpus: placeholder 'COUNT'" in p for p in problems), problems
    assert any("--namespace: help does not start" in p for p in problems), problems
    assert any("--brand-new: not in the option table" in p for p in problems), problems
    assert len(problems) == 4, problems


def test_the_checker_passes_a_command_declared_through_the_table() -> None:
    """...and holds nothing against an option declared with `option()` (the check above is
    not one that always fails)."""
    from imagekit.cli.surface import option

    tiny = typer.Typer(add_completion=False)

    @tiny.command()
    def probe(timeout: float = option("--pod-timeout"),
              cluster: bool = option("--cluster"),
              out: str = option("--out", note="A note of this command.")) -> None:
        """A command declared through the table."""

    @tiny.command()
    def other() -> None:
        """A second command."""

    assert option_problems(typer.main.get_command(tiny), OPTIONS) == []


def test_each_meaning_is_one_sentence_and_each_placeholder_names_what_to_type() -> None:
    for name, spec in OPTIONS.items():
        assert spec.meaning[0].isupper() or spec.meaning.startswith(("disabled", "--")), name
        assert spec.meaning.endswith(".") and not spec.meaning.endswith(".."), name
        assert (spec.placeholder is None) == isinstance(spec.default, bool), name


def test_every_option_of_the_table_is_declared() -> None:
    """No stale entry. `--name` is the key pair's name that `keys generate` takes."""
    declared = {o for _, c in commands(_tree()) for p in c.params
                if p.param_type_name == "option" for o in p.opts if o.startswith("--")}
    assert set(OPTIONS) - declared <= {"--name"}, sorted(set(OPTIONS) - declared)


def test_every_renamed_option_names_a_declared_one() -> None:
    """An old spelling's line names what to type now: an option of that very command."""
    tree = dict(commands(_tree()))
    for (path, old), new in RENAMED_OPTIONS.items():
        command = tree[path]
        names = {o for p in command.params for o in (*p.opts, *p.secondary_opts)}
        assert new.split()[0] in names, (path, old, new)
        assert old not in names, (path, old)


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "imagekit", *args], capture_output=True,
                          text=True, timeout=60, check=False, cwd=REPO)


@pytest.mark.parametrize("args", [
    ("cluster", "gpu-preflight", "127.0.0.1:5003/imagekit/vllm:v1", "--nodes", "2",
     "--gpus-per-node", "8", "--key", "operator.key"),
    ("cluster", "gpu-preflight", "127.0.0.1:5003/imagekit/vllm:v1", "--nodes", "2",
     "--gpus-per-node", "8", "--gpus", "4", "--storage-label", "x=y"),
    ("cluster", "gpu-preflight", "127.0.0.1:5003/imagekit/vllm:v1", "--each-node", "--submit",
     "--storage-driver", "csi.example"),
    ("cluster", "gpu-preflight", "127.0.0.1:5003/imagekit/vllm:v1", "--cordon-failed"),
])
def test_gpu_preflight_refuses_what_its_mode_would_ignore(args: tuple[str, ...]) -> None:
    """`--nodes N` drops --key, --gpus and --storage-*; one line, exit 2, before anything."""
    done = _run(*args)
    assert done.returncode == 2, done.stdout + done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("imagekit: error: --") and "do" in line and "nothing with" in line
    given = [a for a in args[3:] if a.startswith("--") and a not in
             ("--nodes", "--gpus-per-node", "--each-node", "--submit")]
    assert all(flag in line for flag in given), (given, line)


def test_each_node_has_no_dry_run() -> None:
    done = _run("cluster", "gpu-preflight", "127.0.0.1:5003/imagekit/vllm:v1", "--each-node")
    assert (done.returncode, done.stderr.count("\n")) == (2, 1), done.stderr
    assert "--submit" in done.stderr
