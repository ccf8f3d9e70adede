"""The surface a user meets: `imagekit --help` grouped by what the user is doing, one whole
sentence per command, a placeholder and a help text on every option, one spelling one meaning,
old spellings refused in one line, and docs/commands.md current with the CLI."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer

from imagekit.cli import app
from imagekit.cli.app import PANELS, RENAMED_COMMANDS, RENAMED_OPTIONS, SUMMARIES
from imagekit.cli.reference import commands_markdown
from imagekit.cli.surface import OPTIONS

REPO = Path(__file__).resolve().parents[2]
#: what typer prints when an option has no placeholder: a Python type
PYTHON_TYPE = re.compile(r"<(?:str|int|float|bool|path|file|list\[[^\]]*\]|\w+ range)>")
PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_/=:.,|\[\]-]*$")


def _tree() -> Any:
    return typer.main.get_command(app)


def _commands(group: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    found = []
    for name, command in group.commands.items():
        if command.hidden:
            continue
        found.append(((*path, name), command))
        if hasattr(command, "commands"):
            found += _commands(command, (*path, name))
    return found


def _options(command: Any) -> list[Any]:
    return [p for p in command.params if p.param_type_name == "option"]


def _extra_option(command: Any, name: str, *, metavar: str | None) -> Any:
    """A copy of one of `command`'s text options under another name (typer's own class)."""
    import copy

    [model] = [o for o in _options(command) if o.opts == ["--namespace"]]
    extra = copy.copy(model)
    extra.opts, extra.name, extra.metavar = [name], name.lstrip("-").replace("-", "_"), metavar
    extra.help = "An option nobody documented."
    command.params.append(extra)
    return extra


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "imagekit", *args], capture_output=True,
                          text=True, timeout=60, check=False, cwd=REPO)


def test_docs_commands_md_is_the_cli() -> None:
    """Regenerate it: the diff is empty (`make docs` writes it)."""
    assert (REPO / "docs" / "commands.md").read_text() == commands_markdown(), \
        "docs/commands.md is stale: run `make docs`"


def test_an_option_added_without_regenerating_is_seen() -> None:
    """The staleness check can fail: the same tree with one more option writes another page."""
    root = _tree()
    before = commands_markdown(root)
    probe = root.commands["cluster"].commands["probe"]
    _extra_option(probe, "--brand-new", metavar="NEW")
    after = commands_markdown(root)
    assert "--brand-new" in after and after != before


def test_every_command_has_a_section_in_docs_commands_md() -> None:
    text = (REPO / "docs" / "commands.md").read_text()
    headed = set(re.findall(r"^## (imagekit.*)$", text, re.M))
    assert headed == {"imagekit"} | {"imagekit " + " ".join(p) for p, _ in _commands(_tree())}


def test_every_option_has_help_and_a_placeholder_that_names_what_to_type() -> None:
    missing_help, bad = [], []
    for path, command in _commands(_tree()):
        for option in _options(command):
            where = f"imagekit {' '.join(path)} {option.opts[0]}"
            if not (option.help or "").strip():
                missing_help.append(where)
            if not option.is_flag and not PLACEHOLDER.match(option.metavar or ""):
                bad.append(f"{where}: {option.metavar!r}")
        for argument in (p for p in command.params if p.param_type_name == "argument"):
            if not PLACEHOLDER.match(argument.metavar or ""):
                bad.append(f"imagekit {' '.join(path)} {argument.name}: {argument.metavar!r}")
    assert not missing_help, missing_help
    assert not bad, bad


def test_no_help_page_prints_a_python_type() -> None:
    """Every page as `--help` prints it (docs/commands.md holds them all)."""
    text = commands_markdown()
    assert not PYTHON_TYPE.findall(text), sorted(set(PYTHON_TYPE.findall(text)))
    assert "{reference}" not in text and "<str>" not in text


def test_a_python_type_placeholder_is_seen() -> None:
    """The check above can fail: an option without a placeholder prints its type."""
    root = _tree()
    probe = root.commands["cluster"].commands["probe"]
    _extra_option(probe, "--untyped", metavar=None)
    assert PYTHON_TYPE.search(commands_markdown(root))


def test_help_groups_commands_by_what_the_user_does() -> None:
    done = _run("--help")
    assert done.returncode == 0, done.stderr
    text = done.stdout
    positions = [text.index(f"\n{panel}:\n") for panel in PANELS]
    assert positions == sorted(positions), "panels out of order"
    top = set(_tree().commands) - {name for name, c in _tree().commands.items() if c.hidden}
    placed = [name for names in PANELS.values() for name in names]
    assert sorted(placed) == sorted(top), "each command in exactly one panel"
    assert "..." not in text.split("Examples:")[0].split("\n", 1)[1]
    assert "Examples:" in text
    assert "https://github.com/imagekit/imagekit/blob/main/docs/commands.md" in text
    for line in ("  imagekit pin && imagekit images verify",):
        assert line in text.splitlines()


def test_every_summary_is_one_whole_sentence() -> None:
    paths = {" ".join(path) for path, _ in _commands(_tree())}
    assert set(SUMMARIES) == paths, (paths ^ set(SUMMARIES))
    for path, sentence in SUMMARIES.items():
        assert sentence.endswith(".") and not sentence.endswith("..."), path
        assert sentence[0].isupper() and ". " not in sentence[:-1], path
        assert len(sentence) <= 100, path
    for group in ("", "cluster"):
        done = _run(*group.split(), "--help")
        for line in done.stdout.splitlines():
            if not line.startswith("Usage:"):
                assert not line.rstrip().endswith("..."), line


def test_one_spelling_one_meaning() -> None:
    """--key is a private signing key everywhere (verify-attestations' public keys are
    --trust-key only); --trust-key a public key; one --namespace default; no bound or
    requirement without its name. (tests/unit/test_cli_options.py holds every option to the
    table.)"""
    for path, command in _commands(_tree()):
        for option in _options(command):
            names = set(option.opts)
            assert not names & {"--timeout", "--require", "--deadline", "--await-deadline",
                                "--digest", "--subject", "--serve-env", "--tp"}, path
            if "--namespace" in names:
                assert option.default == "imagekit", path
            if "--key" in names:
                assert names == {"--key"} and "private" in option.help.lower(), path
            if "--trust-key" in names:
                assert names == {"--trust-key"} and "public key" in option.help.lower(), path
    assert OPTIONS["--key"].placeholder == "FILE" and OPTIONS["--trust-key"].placeholder == "KEY"


RENAMES = [((path, old), new) for (path, old), new in RENAMED_OPTIONS.items()]


@pytest.mark.parametrize(("where", "new"), RENAMES, ids=[f"{p}{o}" for (p, o), _ in RENAMES])
def test_an_old_option_is_refused_naming_the_new_one(where: tuple[str, str], new: str) -> None:
    path, old = where
    done = _run(*path.split(), old, "5")
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr == f"imagekit: error: {old} is now {new} (imagekit {path})\n"
    assert done.stdout == ""
    [new_option] = [o for p, c in _commands(_tree()) if " ".join(p) == path
                    for o in _options(c) if new.split()[0] in o.opts]
    assert new_option.help


@pytest.mark.parametrize(("old", "new"), sorted(RENAMED_COMMANDS.items()))
def test_an_old_command_is_refused_naming_the_new_one(old: str, new: str) -> None:
    done = _run(old, "127.0.0.1:1/x:y")
    assert done.returncode == 2
    assert done.stderr == f"imagekit: error: '{old}' is now '{new}' (imagekit)\n"


def test_the_equals_form_of_an_old_option_is_refused_too() -> None:
    done = _run("gate", "sglang", "--require=probe")
    assert (done.returncode, done.stderr) == (
        2, "imagekit: error: --require is now --require-check (imagekit gate)\n")


def test_a_new_spelling_is_not_mistaken_for_an_old_one() -> None:
    """--require-check parses (and fails later for its own reason, not as a rename)."""
    done = _run("gate", "sha256:" + "0" * 64, "--require-check", "probe",
                "--evidence-dir", "/nonexistent-imagekit-store")
    assert "is now" not in done.stderr
