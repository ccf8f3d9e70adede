"""The transcript harness itself: a page whose output changed fails, a page that says what it
promises passes, and a block that is not run must still parse."""

from __future__ import annotations

import os
from pathlib import Path

from tests.docs.transcript import imagekit_argv, page_errors, parse_errors, run_page

PAGE = """# A page

```console
$ mkdir work && cd work
$ echo "digest sha256:$(printf x | sha256sum | cut -c1-64)"
digest sha256:<digest>
$ printf 'one\\ntwo\\nthree\\n'
one
<...>
three
$ echo "again sha256:<digest>" | cut -c1-13
again sha256:
```

<!-- not run: needs a GPU cluster -->
```bash
imagekit cluster probe 127.0.0.1:5003/imagekit/vllm:v1 \\
  --pod-timeout 300
```
"""


def _env() -> dict[str, str]:
    return {**os.environ, "TERM": "dumb"}


def test_a_page_that_says_what_it_prints_passes(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(PAGE)
    assert page_errors(page) == []
    run = run_page(page, tmp_path, _env(), timeout=60)
    assert run.returncode == 0, run.output
    assert (tmp_path / "work").is_dir()


def test_a_changed_output_fails_and_names_the_line(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(PAGE.replace("one\n<...>", "uno\n<...>"))
    run = run_page(page, tmp_path, _env(), timeout=60)
    assert run.returncode != 0
    assert "uno" in run.output and "one" in run.output


def test_a_bash_block_must_say_why_it_is_not_run(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(PAGE.replace("<!-- not run: needs a GPU cluster -->\n", ""))
    [error] = page_errors(page)
    assert "page.md:15" in error and "not run" in error


def test_commands_of_a_block_that_is_not_run_still_parse() -> None:
    [argv] = imagekit_argv("DEST=x imagekit cluster probe REF --pod-timeout 300")
    assert parse_errors(argv) is None
    assert "No such option" in (parse_errors([*argv, "--no-such-option"]) or "")
    assert "No such command" in (parse_errors(["clustre", "probe", "REF"]) or "")
    [first, second] = imagekit_argv("imagekit cluster rbac | kubectl apply -f - && "
                                    "imagekit gate REF --json")
    assert first == ["cluster", "rbac"] and second == ["gate", "REF", "--json"]
