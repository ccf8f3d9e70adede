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
import atexit, json, runpy, sys
# an exit handler: the CLI ends through imagekit.cli.leave (os._exit after the handlers)
atexit.register(lambda: sys.stderr.write(
    json.dumps(sorted({m.split(".")[0] for m in sys.modules}))))
sys.argv = ["imagekit", *sys.argv[1:]]
runpy.run_module("imagekit", run_name="__main__")
"""
