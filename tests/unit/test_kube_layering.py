"""Only the Kubernetes transport (imagekit/kube/) knows API paths: no flow, CLI module or
other package writes an `/api/v1…` or `/apis/…` string. Flows ask `kube.resource(kind)` and
discovery names the path.

String literals and the literal parts of f-strings count; comments and docstrings do not
(they may say what a path is)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "imagekit"
TRANSPORT = "kube"
#: outside the transport, and why
ALLOWED = {
    "infra/cluster.py": "brings the API server up itself: polls its readiness with the "
                        "bootstrap admin token before any kubeconfig or discovery can work "
                        "(infrastructure, not a flow)",
}


def _docstrings(tree: ast.AST) -> set[int]:
    ids: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def api_paths(source: str, filename: str = "<source>") -> list[tuple[int, str]]:
    """(line, text) of every string literal (f-string parts included) that is an API path."""
    tree = ast.parse(source, filename=filename)
    skip = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                id(node) not in skip:
            text = node.value
            if text.startswith(("/api/", "/apis/", "api/v1", "apis/")) or \
                    "/api/v1" in text or "/apis/" in text:
                found.append((node.lineno, text))
    return sorted(found)


def violations(package: Path) -> list[str]:
    problems = []
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package).as_posix()
        if relative.split("/")[0] == TRANSPORT or relative in ALLOWED:
            continue
        source = path.read_text()
        if "api/" not in source and "apis/" not in source:
            continue   # nothing to find: not worth a parse
        for line, text in api_paths(source, relative):
            problems.append(f"{relative}:{line}: builds an API path {text[:60]!r}; ask "
                            "kube.resource(kind) instead")
    return problems


def test_no_api_path_outside_the_transport() -> None:
    problems = violations(PACKAGE)
    assert not problems, "\n".join(problems)


def test_the_scan_sees_a_planted_path(tmp_path: Path) -> None:
    """The case that makes the check FAIL: a flow writing a core or a group path, plain or in
    an f-string, is found; the same text in a comment or a docstring is not."""
    flow = tmp_path / "imagekit" / "cluster" / "planted.py"
    flow.parent.mkdir(parents=True)
    flow.write_text('"""Reads /api/v1/nodes (a docstring may say so)."""\n'
                    "# GET /api/v1/pods: a comment may too\n"
                    "def f(kube, ns, name):\n"
                    '    kube.get(f"/api/v1/namespaces/{ns}/pods/{name}")\n'
                    '    return kube.list("/apis/batch/v1/jobs")\n')
    (tmp_path / "imagekit" / "kube").mkdir()
    (tmp_path / "imagekit" / "kube" / "client.py").write_text('ROOT = "/api/v1"\n')
    problems = violations(tmp_path / "imagekit")
    assert len(problems) == 2, problems
    assert problems[0].startswith("cluster/planted.py:4: builds an API path '/api/v1/namespaces/")
    assert problems[1].startswith("cluster/planted.py:5: builds an API path '/apis/batch/v1/")


def test_every_allowed_file_still_needs_its_exception() -> None:
    for relative in ALLOWED:
        assert api_paths((PACKAGE / relative).read_text()), \
            f"{relative} no longer builds an API path: drop it from ALLOWED"
