"""Help and errors point at the documentation by its address (imagekit.DOCS_URL, the one base;
`doc_url(page)`), never at a path inside a checkout, which a user of the wheel does not have;
no user text speaks the project's own jargon; `-h` is `--help` on every command; and
`imagekit completion SHELL` prints a script whose callback completes."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from imagekit import DOCS_URL, doc_url
from imagekit.cli import app
from imagekit.cli.app import EPILOG, SUMMARIES
from imagekit.cli.surface import EXAMPLES, OPTIONS

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "imagekit"
#: a path inside the checkout, as user text must not name one
CHECKOUT_PATH = re.compile(r"(?<![\w/.:-])(?:docs|gpu_checks|tests|imagekit)/[\w./-]+|"
                           r"(?<![\w/.:-])[\w/]+/[\w]+\.py\b")
#: the project's own word for the field report the user never saw
JARGON = re.compile(r"\bthe record\b|\brecord section\b|\bthe record's\b")


def _everything(group: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    found = [(path, group)]
    for name, command in getattr(group, "commands", {}).items():
        if not command.hidden:
            found += _everything(command, (*path, name))
    return found


TREE = _everything(typer.main.get_command(app))


def user_text() -> dict[str, str]:
    """Every text a user reads in help: summaries, help of commands, options and arguments,
    the option table, the examples and the root's closing lines."""
    texts = {f"summary {k}": v for k, v in SUMMARIES.items()}
    texts.update({f"table {k}": v.meaning for k, v in OPTIONS.items()})
    texts.update({f"examples {k}": " ".join(v) for k, v in EXAMPLES.items()})
    texts["epilog"] = EPILOG
    for path, command in TREE:
        where = "imagekit " + " ".join(path)
        texts[where] = command.help or ""
        for param in command.params:
            texts[f"{where} {param.name}"] = getattr(param, "help", None) or ""
    return texts


def test_docs_url_is_the_documentation_pyproject_names() -> None:
    urls = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["urls"]
    assert urls["Documentation"] == DOCS_URL + "README.md" == doc_url("README")
    assert doc_url("commands", "imagekit-pin") == DOCS_URL + "commands.md#imagekit-pin"


def test_every_doc_url_in_the_code_names_a_page_that_exists() -> None:
    pages = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "doc_url" \
                    and node.args and isinstance(node.args[0], ast.Constant):
                pages.add(node.args[0].value)
    assert {"README", "commands", "reference/trust-policy", "reference/rbac"} <= pages
    missing = [page for page in pages if not (REPO / "docs" / f"{page}.md").is_file()]
    assert not missing, missing


def test_no_user_text_names_a_checkout_path_or_jargon() -> None:
    found = {where: CHECKOUT_PATH.findall(text) + JARGON.findall(text)
             for where, text in user_text().items()}
    assert not {k: v for k, v in found.items() if v}, {k: v for k, v in found.items() if v}


def test_the_scan_sees_a_path_and_jargon() -> None:
    """The patterns can fail: a repository path, a .py path, the jargon."""
    assert CHECKOUT_PATH.findall("run as -m (gpu_checks/preflight/__main__.py)")
    assert CHECKOUT_PATH.findall("one Pod per node (imagekit/gpu/fleet.py)")
    assert CHECKOUT_PATH.findall("Docs: docs/README.md to start")
    assert not CHECKOUT_PATH.findall(f"Docs: {doc_url('README')}; ./dockerfiles/images.toml")
    assert JARGON.findall("reproduce the record's broken images")


def test_no_error_message_names_a_checkout_path() -> None:
    """String constants of the code that are not docstrings: what errors and output say."""
    found = []
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef |
                                    ast.AsyncFunctionDef)
                      and node.body and isinstance(node.body[0], ast.Expr)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                    id(node) not in docstrings and re.search(r"(?<![\w/.:-])(?:docs|gpu_checks)/",
                                                             node.value):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: {node.value[:80]}")
    assert not found, found


@pytest.mark.parametrize("path", [p for p, _ in TREE], ids=lambda p: " ".join(p) or "imagekit")
def test_h_is_help_everywhere(path: tuple[str, ...]) -> None:
    runner = CliRunner()
    short = runner.invoke(app, [*path, "-h"], prog_name="imagekit")
    long = runner.invoke(app, [*path, "--help"], prog_name="imagekit")
    assert short.exit_code == long.exit_code == 0, short.output
    assert short.output == long.output and "-h, --help" in long.output


def _complete(shell_line: str) -> list[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "_IMAGEKIT_COMPLETE": "complete_bash",
           "COMP_WORDS": shell_line, "COMP_CWORD": str(len(shell_line.split()) - 1)}
    done = subprocess.run([sys.executable, "-m", "imagekit"], env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_completion_prints_a_script_and_its_callback_completes() -> None:
    for shell in ("bash", "zsh", "fish"):
        done = subprocess.run([sys.executable, "-m", "imagekit", "completion", shell],
                              capture_output=True, text=True, timeout=60, cwd=REPO, check=False)
        assert done.returncode == 0, done.stderr
        assert "_IMAGEKIT_COMPLETE=complete_" + shell in done.stdout
    assert _complete("imagekit clu") == ["cluster"]
    assert "gpu-preflight" in _complete("imagekit cluster g")
    assert "--only-platform" in _complete("imagekit promote --only")


def test_completion_of_an_unknown_shell_is_one_line() -> None:
    done = subprocess.run([sys.executable, "-m", "imagekit", "completion", "tcsh"],
                          capture_output=True, text=True, timeout=60, cwd=REPO, check=False)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith("imagekit: error: no completion for 'tcsh'")
