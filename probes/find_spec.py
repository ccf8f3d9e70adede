"""`importlib.util.find_spec` for the configured entry points (argv): each must resolve.

A module the image lacks is a FAIL (the record: uninstalling nixl passed pip check, failed here).
"""

import importlib.util
import sys

from _common import emit


def main(modules):
    if not modules:
        return emit("find_spec", "ERROR", "no modules to look up were configured")
    found, missing = {}, []
    for module in modules:
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError) as exc:  # a missing parent package raises
            spec = None
            found[module] = f"error: {type(exc).__name__}: {exc}"
        if spec is None:
            missing.append(module)
            found.setdefault(module, None)
        else:
            found[module] = spec.origin or "namespace"
    if missing:
        return emit("find_spec", "FAIL", "not importable: " + ", ".join(missing),
                    modules=found, missing=missing)
    return emit("find_spec", "PASS", "found: " + ", ".join(modules), modules=found, missing=[])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
