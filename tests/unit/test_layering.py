"""The design card's rule, enforced: a lower layer never imports a higher one.

types (errors, results, oci, evidence, inputs) < transports (registry, engine, cluster)
< operations (everything else) < cli. Imports inside functions count too.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "imagekit"

TYPES = {"errors", "results", "oci", "evidence", "inputs", "__init__"}
TRANSPORTS = {"registry", "engine", "cluster"}
CLI = {"cli", "__main__"}


def layer_of(top: str) -> int:
    if top in TYPES:
        return 1
    if top in TRANSPORTS:
        return 2
    if top in CLI:
        return 4
    return 3


def imagekit_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "imagekit" and len(parts) > 1:
                found.add(parts[1])
    return found


def test_no_module_imports_a_higher_layer() -> None:
    violations = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        top = relative.parts[0].removesuffix(".py")
        own = layer_of(top)
        for imported in imagekit_imports(path):
            if layer_of(imported) > own:
                violations.append(f"{relative} (layer {own}) imports imagekit.{imported} "
                                  f"(layer {layer_of(imported)})")
    assert not violations, "\n".join(violations)


def test_the_checker_sees_a_violation(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from imagekit.cli.app import app\n")
    assert imagekit_imports(bad) == {"cli"}
    assert layer_of("cli") > layer_of("oci")
