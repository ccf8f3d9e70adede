"""Helpers the unit tests that read the package share (not a test module)."""

from __future__ import annotations

import ast


def string_constants(tree: ast.Module) -> dict[str, str]:
    """Module-level NAME = "string" assignments (e.g. GATE_MODULE = "imagekit.report.gate")."""
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and \
                isinstance(node.value.value, str):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found[target.id] = node.value.value
    return found


# run `imagekit ARGS` in a fresh interpreter and print the top-level modules it imported
MODULES_PROBE = """
import json, runpy, sys
sys.argv = ["imagekit", *sys.argv[1:]]
try:
    runpy.run_module("imagekit", run_name="__main__")
except SystemExit:
    pass
sys.stderr.write(json.dumps(sorted({m.split(".")[0] for m in sys.modules})))
"""
