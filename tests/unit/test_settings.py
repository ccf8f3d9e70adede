"""One settings object: every IMAGEKIT_* variable declared once in
imagekit.settings, read at the CLI, handed down as arguments.

- the scan: below the CLI no module reads os.environ/getenv for an IMAGEKIT_* name (a name it
  cannot resolve counts as one), nothing in imagekit/ writes os.environ[...] or sys.modules, and
  nothing imports typer's private click; the scanner itself is shown to FAIL on each shape;
- every IMAGEKIT_* name the package spells is a settings field (or a named non-setting);
- docs/environment.md holds the table made from the model, so every field is documented;
- bad values are one line naming the variable; `--call-timeout` travels as an argument.
"""

from __future__ import annotations

import ast
import functools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from scan_helpers import MODULES_PROBE, string_constants

import imagekit
from imagekit.errors import InvalidInput
from imagekit.settings import (
    NOT_SETTINGS,
    RECEIVERS,
    REGISTRY_CLI,
    Settings,
    env_name,
    load,
    markdown_table,
)

PACKAGE = Path(imagekit.__file__).resolve().parent
ROOT = PACKAGE.parent

#: Reads of an IMAGEKIT_* variable allowed below the CLI, "module": "why": none. Every setting
#: is read once, in imagekit/settings.py at the CLI, and handed down (spec/loader.py,
#: infra/state.py, probe/runner.py, infra/apt.py and cluster/manifests.py were the last to
#: move). A variable that is not an imagekit setting (TMPDIR, KUBECONFIG, DOCKER_CONFIG inside
#: a child's environment) is not IMAGEKIT_* and not scanned; the Pod scripts under
#: manifests/ run in the Pod, not in this process, and are not scanned either. The scan
#: fails for any read elsewhere, and for an entry here that no longer reads.
ALLOWED: dict[str, str] = {}


@functools.cache
def _tree(source: str) -> ast.Module:
    return ast.parse(source)  # parsed once for the three scans


def _is_environ(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "environ"
            and isinstance(node.value, ast.Name) and node.value.id == "os")


def _key(node: ast.AST | None, constants: dict[str, str]) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name) and node.id in constants:
        return constants[node.id]
    return "<a name this scan cannot resolve>"


def env_reads(source: str) -> list[tuple[int, str]]:
    """(line, variable) of every read of an IMAGEKIT_* variable from the process environment
    (os.environ.get/[...]/in, os.getenv); a key that is not a literal or a module constant is
    reported too: it could be one."""
    tree = _tree(source)
    constants = string_constants(tree)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        key: str | None = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            environ_get = node.func.attr in ("get", "pop") and _is_environ(node.func.value)
            getenv = node.func.attr == "getenv" and isinstance(node.func.value, ast.Name) \
                and node.func.value.id == "os"
            if environ_get or getenv:
                key = _key(node.args[0] if node.args else None, constants)
        elif isinstance(node, ast.Subscript) and _is_environ(node.value) and \
                isinstance(node.ctx, ast.Load):
            key = _key(node.slice, constants)
        elif isinstance(node, ast.Compare) and any(_is_environ(c) for c in node.comparators):
            key = _key(node.left, constants)
        if key is not None and (key.startswith("IMAGEKIT_") or key.startswith("<")):
            found.append((getattr(node, "lineno", 0), key))
    return sorted(found)


def ambient_writes(source: str) -> list[tuple[int, str]]:
    """os.environ[...] = / os.environ.update / os.putenv, sys.modules[...] = /
    sys.modules.setdefault, and imports of typer's private click."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(_tree(source)):
        if isinstance(node, (ast.Assign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Subscript):
                    if _is_environ(target.value):
                        found.append((node.lineno, "os.environ[...] ="))
                    if isinstance(target.value, ast.Attribute) and \
                            target.value.attr == "modules":
                        found.append((node.lineno, "sys.modules[...] ="))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr == "update" and _is_environ(node.func.value):
                found.append((node.lineno, "os.environ.update"))
            if node.func.attr == "putenv":
                found.append((node.lineno, "os.putenv"))
            if node.func.attr == "setdefault" and isinstance(node.func.value, ast.Attribute) \
                    and node.func.value.attr == "modules":
                found.append((node.lineno, "sys.modules.setdefault"))
        elif isinstance(node, ast.ImportFrom) and node.module and \
                node.module.startswith("typer._"):
            found.append((node.lineno, f"from {node.module} import"))
        elif isinstance(node, ast.Import) and any(a.name.startswith("typer._")
                                                  for a in node.names):
            found.append((node.lineno, "import typer._…"))
    return sorted(found)


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _below_the_cli(path: Path) -> bool:
    rel = path.relative_to(PACKAGE).as_posix()
    return rel != "settings.py" and not rel.startswith("cli/")


def test_the_scanner_fails_on_each_shape() -> None:
    """The case that makes the check FAIL: each way a module could read or write ambiently."""
    reads = env_reads(
        'import os\nNAME = "IMAGEKIT_X"\n'
        'a = os.environ.get("IMAGEKIT_DEADLINE")\n'
        'b = os.environ[NAME]\n'
        'c = os.getenv("IMAGEKIT_Y", "1")\n'
        'd = "IMAGEKIT_Z" in os.environ\n'
        'def f(env):\n    return os.environ.get(env)\n'
        'e = os.environ.get("HOME")\n')
    assert reads == [(3, "IMAGEKIT_DEADLINE"), (4, "IMAGEKIT_X"), (5, "IMAGEKIT_Y"),
                     (6, "IMAGEKIT_Z"), (8, "<a name this scan cannot resolve>")], reads
    writes = ambient_writes(
        'import os, sys\nos.environ["IMAGEKIT_DEADLINE"] = "5"\nos.environ.update(a="1")\n'
        'sys.modules["httpx._main"] = None\nsys.modules.setdefault("x", None)\n'
        'from typer._click.exceptions import ClickException\n')
    assert [what for _, what in writes] == [
        "os.environ[...] =", "os.environ.update", "sys.modules[...] =",
        "sys.modules.setdefault", "from typer._click.exceptions import"], writes


def test_no_lower_layer_reads_an_imagekit_variable() -> None:
    offenders, stale = [], []
    for path in _modules():
        if not _below_the_cli(path):
            continue
        rel = path.relative_to(PACKAGE).as_posix()
        reads = env_reads(path.read_text())
        if reads and rel not in ALLOWED:
            offenders += [f"imagekit/{rel}:{line}: {key}" for line, key in reads]
        if not reads and rel in ALLOWED:
            stale.append(rel)
    assert not offenders, "read it in imagekit/settings.py and pass it down:\n" + \
        "\n".join(offenders)
    assert not stale, f"no longer read there: drop from ALLOWED: {stale}"


def test_nothing_writes_the_environment_or_sys_modules_or_imports_private_typer() -> None:
    found = [f"imagekit/{p.relative_to(PACKAGE).as_posix()}:{line}: {what}"
             for p in _modules() for line, what in ambient_writes(p.read_text())]
    assert not found, "\n".join(found)


def test_every_imagekit_name_the_package_spells_is_a_setting() -> None:
    declared = {env_name(f) for f in Settings.model_fields} | set(NOT_SETTINGS)
    spelled: dict[str, str] = {}
    for path in _modules():
        for node in ast.walk(_tree(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                    re.fullmatch(r"IMAGEKIT_[A-Z0-9_]+", node.value):
                spelled.setdefault(node.value, path.relative_to(PACKAGE).as_posix())
    undeclared = {name: where for name, where in spelled.items() if name not in declared}
    assert not undeclared, f"declare these in imagekit/settings.py: {undeclared}"
    assert len(Settings.model_fields) >= 34


def test_docs_hold_the_table_of_the_model() -> None:
    """Every field documented: docs/environment.md holds exactly the generated table (regenerate
    with `python -c 'from imagekit.settings import markdown_table; print(markdown_table())'`)."""
    page = (ROOT / "docs" / "environment.md").read_text()
    assert markdown_table() in page, "docs/environment.md is not the model's table: regenerate it"
    for field in Settings.model_fields:
        assert f"`{env_name(field)}`" in page, field
    test_only = [f for f, i in Settings.model_fields.items()
                 if isinstance(i.json_schema_extra, dict) and i.json_schema_extra.get("test_only")]
    assert test_only and all(f"`{env_name(f)}` |" in page for f in test_only)


def _reads(source: str, field: str) -> bool:
    """Whether a CLI module reads the field off the settings (`settings().F`, `given.F`,
    `settings().F_list()`, `_settings.F`)."""
    return re.search(rf"(settings\(\)|given|_settings)\.{field}(_list|_paths)?\b", source) \
        is not None


def test_the_table_says_who_reads_each_setting_and_it_is_so() -> None:
    """docs/environment.md's "read by" column is the code: every CLI module it names reads the
    setting (a registry knob: builds its RegistryOptions with from_settings, which reads it),
    and every CLI module that reads a setting is named. The case that FAILS: a module reading a
    field the table does not list it for, or a listed one that does not read it."""
    assert set(RECEIVERS) == set(Settings.model_fields)
    cli = {p.stem: p.read_text() for p in (PACKAGE / "cli").glob("*.py")}
    registry = (PACKAGE / "registry" / "client.py").read_text() + \
        (PACKAGE / "registry" / "retry.py").read_text()
    wrong: list[str] = []
    for field, (read_by, _) in RECEIVERS.items():
        named = set(re.findall(r"cli/(\w+)", read_by))
        via_options = set(REGISTRY_CLI) <= named and f"settings.{field}" in registry
        for module in sorted(named):
            if module not in cli:
                wrong.append(f"{field}: no imagekit/cli/{module}.py")
            elif not (_reads(cli[module], field) or
                      (via_options and "from_settings(" in cli[module]) or
                      (field == "images_spec" and "images_spec(" in cli[module])):
                wrong.append(f"{field}: cli/{module} does not read it")
        wrong += [f"{field}: cli/{m} reads it, the table does not say so"
                  for m, source in cli.items() if _reads(source, field) and m not in named]
    assert not wrong, "\n".join(wrong)
    assert not _reads("x = settings().deadline2", "deadline") and \
        _reads("given.required_checks_list()", "required_checks")


@pytest.mark.parametrize("name,value,words", [
    ("IMAGEKIT_DEADLINE", "nan", "IMAGEKIT_DEADLINE must be a finite number, not nan"),
    ("IMAGEKIT_DEADLINE", "-1", "IMAGEKIT_DEADLINE must be > 0, not -1"),
    ("IMAGEKIT_RETRY_ATTEMPTS", "x", "IMAGEKIT_RETRY_ATTEMPTS must be an integer, not x"),
    ("IMAGEKIT_RETRY_ATTEMPTS", "0", "IMAGEKIT_RETRY_ATTEMPTS must be between 1 and 1000"),
    ("IMAGEKIT_RETRY_WAIT_MAX", "inf", "IMAGEKIT_RETRY_WAIT_MAX must be a finite number"),
    ("IMAGEKIT_REFERRERS_DEADLINE", "abc", "IMAGEKIT_REFERRERS_DEADLINE must be a number"),
    ("IMAGEKIT_UPLOAD_CHUNK", "-4", "IMAGEKIT_UPLOAD_CHUNK must be between 1"),
])
def test_a_bad_value_is_one_line_naming_the_variable(name: str, value: str, words: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        load({name: value})
    assert words in caught.value.one_line() and caught.value.where == name


def test_values_keep_their_old_meaning() -> None:
    assert load({}) == Settings.model_validate({})
    given = load({"IMAGEKIT_LEAN_HTTP": "off", "IMAGEKIT_DEBUG": "true", "IMAGEKIT_DEADLINE": "",
                  "IMAGEKIT_REQUIRED_LINKS": "", "IMAGEKIT_PROGRESS": "JSON ",
                  "IMAGEKIT_RETRY_WAIT_JITTER": "0", "DOCKER_CONFIG": "/cfg",
                  "IMAGEKIT_API_KEY": "s3cret", "IMAGEKIT_DEBIAN_MIRROR": "http://m/debian/"})
    assert given.lean_http is False and given.debug is False      # only "1" turns debug on
    assert given.deadline is None                                  # empty = unset
    assert given.required_links_list() == [""]                     # empty = require nothing
    assert given.required_checks_list() is None                    # unset = the defaults
    assert given.progress == "json" and given.retry_wait_jitter == 0.0
    assert given.docker_config == Path("/cfg") and given.debian_mirror == "http://m/debian"
    assert "s3cret" not in repr(given) and given.api_key is not None
    assert load({"IMAGEKIT_PROGRESS": "loud"}).progress is None     # unknown: ignored


def test_deadline_travels_as_an_argument_not_through_the_environment(monkeypatch) -> None:
    from imagekit.registry import RegistryOptions

    monkeypatch.delenv("IMAGEKIT_DEADLINE", raising=False)
    settings = load({"IMAGEKIT_DEADLINE": "7", "IMAGEKIT_RETRY_ATTEMPTS": "3",
                     "IMAGEKIT_UPLOAD_CHUNK": "4096", "IMAGEKIT_LEAN_HTTP": "0",
                     "IMAGEKIT_REFERRERS_DEADLINE": "1.5"})
    options = RegistryOptions.from_settings(settings)
    assert (options.retry.deadline, options.retry.attempts, options.chunk_size,
            options.lean_http, options.referrers_deadline_s) == (7.0, 3, 4096, False, 1.5)
    flagged = RegistryOptions.from_settings(settings, deadline=2.0, chunk_size=1 << 24)
    assert flagged.retry.deadline == 2.0 and flagged.chunk_size == 1 << 24  # flags win
    assert "IMAGEKIT_DEADLINE" not in os.environ
    assert RegistryOptions().retry.deadline == 30.0 and RegistryOptions().lean_http


def test_the_cli_reads_the_environment_it_was_given() -> None:
    """End to end, as a user runs it: a bad variable is one line, exit 2, before anything."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "IMAGEKIT_DEADLINE": "nan"}
    env.pop("IMAGEKIT_PROGRESS", None)
    done = subprocess.run([sys.executable, "-m", "imagekit", "evidence", "list", "--json"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == ("imagekit: error: IMAGEKIT_DEADLINE must be a finite "
                                   "number, not nan (IMAGEKIT_DEADLINE)"), done.stderr


@pytest.mark.parametrize("args", [("--help",), ("promote", "--help"), ("cluster", "--help")])
def test_help_does_not_pay_for_pydantic_settings(args: tuple[str, ...]) -> None:
    """The settings are read by the command's first line, not by the root callback, which also
    runs for `imagekit CMD --help` (the 0.3 s budget: tests/unit/test_cli_startup.py)."""
    done = subprocess.run([sys.executable, "-c", MODULES_PROBE, *args], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                          text=True, timeout=60)
    loaded = set(json.loads(done.stderr.strip().splitlines()[-1]))
    assert "pydantic_settings" not in loaded, args
    assert "imagekit" in loaded  # the probe ran the CLI


def test_tmpdir_reaches_the_programs_imagekit_starts_without_an_environment_write(
        tmp_path, monkeypatch) -> None:
    """`imagekit --tmpdir DIR` sets tempfile.tempdir (every temporary file of the process) and
    the programs imagekit starts get TMPDIR=DIR from child_env; os.environ stays as it was."""
    import tempfile

    from imagekit.progress import child_env, run_logged

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    before = dict(os.environ)
    assert child_env({"X": "1"})["TMPDIR"] == str(tmp_path) and child_env()["PATH"]
    log = tmp_path / "child.log"
    code, _ = run_logged([sys.executable, "-c", "import os; print(os.environ['TMPDIR'])"], log,
                         "child")
    assert code == 0 and log.read_text().strip().endswith(str(tmp_path))
    assert dict(os.environ) == before


def test_an_error_still_names_the_nested_command_without_private_typer(tmp_path) -> None:
    """`_command_path` walks the public Group API (no typer._click context stack): an error
    without a place of its own names the whole command, as before."""
    done = subprocess.run([sys.executable, "-m", "imagekit", "evidence", "pull",
                           "127.0.0.1:1/a:b", "--evidence-dir", str(tmp_path / "ev")],
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.strip().endswith("(imagekit evidence pull)"), \
        done.stderr
