"""README.md and the workflow pages, typed as written.

Every console block runs, in order, in one bash session per page, in role folders that start
empty (the pages make them: `mkdir ci && cd ci`), against the local infrastructure; the output
each page shows is compared line by line where it is not elided (`<...>`). Every bash block
says why it is not run, and its imagekit commands must parse."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.docs.transcript import (
    command_lines,
    imagekit_argv,
    page_errors,
    parse_errors,
    run_page,
    shell_blocks,
)

REPO = Path(__file__).resolve().parents[2]
#: The order the roles hand over: each page starts where the previous one left its folders.
PAGES = [REPO / "README.md", *(REPO / "docs" / "workflows" / name for name in (
    "ci.md", "release-engineer.md", "operator.md", "auditor.md"))]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_block_runs_or_says_why_not(page: Path) -> None:
    assert page_errors(page) == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_commands_that_are_not_run_parse(page: Path) -> None:
    bad = []
    for block in shell_blocks(page):
        if block.kind != "bash":
            continue
        for line in command_lines(block.text):
            for argv in imagekit_argv(line):
                error = parse_errors(argv)
                if error:
                    bad.append(f"{block.where}: imagekit {' '.join(argv)}: {error}")
    assert bad == []


def _user_env(home: Path) -> dict[str, str]:
    """A user's shell: imagekit on PATH, an empty home, no evidence directory of the test
    session's, progress off (it is on stderr, for a person watching, not part of a page)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("IMAGEKIT_") and k not in ("DOCKER_CONFIG", "KUBECONFIG")}
    env.update(PATH=f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}",
               HOME=str(home), TERM="dumb", IMAGEKIT_PROGRESS="off", LC_ALL="C.UTF-8")
    return env


@pytest.mark.docker
@pytest.mark.registry
@pytest.mark.cluster
@pytest.mark.slow
def test_the_pages_run_as_typed(infra, tmp_path: Path) -> None:  # noqa: ARG001 - started
    home = tmp_path / "home"
    home.mkdir()
    failed = []
    for page in PAGES:
        run = run_page(page, tmp_path, _user_env(home), timeout=1800)
        if run.returncode != 0:
            failed.append(f"{page.name}:\n{run.output[-6000:]}")
    assert not failed, "\n\n".join(failed)
