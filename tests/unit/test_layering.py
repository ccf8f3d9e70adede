"""The design card's rule, enforced: a lower layer never imports a higher one.

types (errors, results, oci, evidence, inputs, progress, stats, assets) < transports (registry,
engine, cluster) < operations (everything else, in `OPERATION_ORDER`) < cli. Imports inside
functions count too, and so do dynamic ones: `importlib.import_module("…")`, `__import__("…")`,
`importlib.util.find_spec("…")` with a literal (or a module-level constant) name are checked like
`import` statements, and any dynamic import at all is allowed only in `DYNAMIC_IMPORTS` (each
with its reason) — a bounce through importlib is invisible to readers and to this test
otherwise.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "imagekit"

#: progress: phases of long steps, reported by transports and operations alike (issue 19)
#: assets: the package data's locator (importlib.resources, stdlib only; issue 25)
#: settings: every IMAGEKIT_* variable, declared once (pydantic-settings; issue 25)
TYPES = {"errors", "results", "oci", "evidence", "inputs", "progress", "stats", "assets",
         "settings", "__init__"}
TRANSPORTS = {"registry", "engine", "cluster"}
CLI = {"cli", "__main__"}

#: Operations in order: one may import the operations of earlier rows (and its own package),
#: never a later row. The report reads every operation's results (and the infra state); the
#: promotion is handed its gate and never imports the report; the schema exporter lists every
#: model, so it comes last.
OPERATION_ORDER: tuple[frozenset[str], ...] = (
    # launch: the serve command's rules (pure); the spec's serve settings and the serve_args
    # probe's plan are built from them (issue 29)
    frozenset({"launch"}),
    # trust: whose signed statements count (keys, policy); read by names, report, attest
    frozenset({"spec", "infra", "trust"}),
    frozenset({"standins", "probe", "verify", "gpu", "acceptance", "promote",
               "sbom"}),
    frozenset({"build", "clusteraccept"}),  # clusteraccept: `cluster accept` (issue 15)
    frozenset({"imagesverify", "names"}),  # names: NAME -> the spec's latest verified build
    frozenset({"report"}),
    frozenset({"attest"}),  # signs the report's test-result and the SBOM (issue 16)
    frozenset({"schemas"}),
)

#: The only modules that may import by a computed name, and why.
DYNAMIC_IMPORTS = {
    "cli/__init__.py": "command discovery: imports each imagekit.cli.<command> module",
    "schemas/export.py": "the schema exporter loads each model it lists by dotted path",
    "infra/manager.py": "its own optional imagekit.infra.cluster (absent in a trimmed checkout)",
}


def layer_of(top: str) -> int:
    if top in TYPES:
        return 1
    if top in TRANSPORTS:
        return 2
    if top in CLI:
        return 4
    return 3


def operation_rank(top: str) -> int | None:
    for rank, names in enumerate(OPERATION_ORDER):
        if top in names:
            return rank
    return None


def _constants(tree: ast.Module) -> dict[str, str]:
    """Module-level NAME = "string" assignments (e.g. GATE_MODULE = "imagekit.report.gate")."""
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and \
                isinstance(node.value.value, str):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found[target.id] = node.value.value
    return found


#: importlib's parts that read files and metadata, never import a module
_NOT_IMPORTS = ("importlib.resources", "importlib.metadata")


def _reads_only(module: str, names: list[str] | None = None) -> bool:
    if any(module == m or module.startswith(m + ".") for m in _NOT_IMPORTS):
        return True
    return module == "importlib" and bool(names) and \
        all(f"importlib.{n}" in _NOT_IMPORTS for n in names or [])


def _is_package_data(relative: Path) -> bool:
    """Files under assets/ other than its __init__.py are package data (probes run inside
    images, controller scripts inside Pods), not modules of this package."""
    return relative.parts[0] == "assets" and relative.as_posix() != "assets/__init__.py"


def _dynamic_call(node: ast.Call) -> bool:
    func = node.func
    if isinstance(func, ast.Name):
        return func.id in ("__import__", "import_module", "find_spec")
    if isinstance(func, ast.Attribute):
        return func.attr in ("import_module", "find_spec", "__import__")
    return False


def imports_of(path: Path) -> tuple[set[str], list[str]]:
    """(imagekit sub-packages imported, descriptions of dynamic imports) of one file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    constants = _constants(tree)
    found: set[str] = set()
    dynamic: list[str] = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
            if any((n == "importlib" or n.startswith("importlib.")) and not _reads_only(n)
                   for n in names):
                dynamic.append(f"line {node.lineno}: import importlib")
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
            if (node.module == "importlib" or node.module.startswith("importlib.")) and \
                    not _reads_only(node.module, [a.name for a in node.names]):
                dynamic.append(f"line {node.lineno}: from {node.module} import …")
        elif isinstance(node, ast.Call) and _dynamic_call(node):
            target = None
            if node.args:
                arg = node.args[0]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    target = arg.value
                elif isinstance(arg, ast.Name):
                    target = constants.get(arg.id)
            dynamic.append(f"line {node.lineno}: dynamic import of "
                           f"{target or 'a computed name'}")
            if target:
                names = [target]
        for name in names:
            parts = name.split(".")
            if parts[0] == "imagekit" and len(parts) > 1:
                found.add(parts[1])
    return found, dynamic


def imagekit_imports(path: Path) -> set[str]:
    return imports_of(path)[0]


def violations(package: Path) -> list[str]:
    found = []
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package)
        if _is_package_data(relative):
            continue
        top = relative.parts[0].removesuffix(".py")
        own = layer_of(top)
        imported, dynamic = imports_of(path)
        if dynamic and relative.as_posix() not in DYNAMIC_IMPORTS:
            found += [f"{relative}: {d} (allowed only in {', '.join(DYNAMIC_IMPORTS)})"
                      for d in dynamic]
        for name in imported:
            if name == top:
                continue
            if layer_of(name) > own:
                found.append(f"{relative} (layer {own}) imports imagekit.{name} "
                             f"(layer {layer_of(name)})")
            elif own == 3 and layer_of(name) == 3:
                mine, theirs = operation_rank(top), operation_rank(name)
                if mine is None or theirs is None:
                    found.append(f"{relative}: operation {top if mine is None else name} "
                                 "has no place in OPERATION_ORDER")
                elif theirs > mine:
                    found.append(f"{relative} (operation rank {mine}) imports imagekit.{name} "
                                 f"(rank {theirs})")
    return found


def test_no_module_imports_a_higher_layer() -> None:
    problems = violations(PACKAGE)
    assert not problems, "\n".join(problems)


def test_the_checker_sees_a_violation(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from imagekit.cli.app import app\n")
    assert imagekit_imports(bad) == {"cli"}
    assert layer_of("cli") > layer_of("oci")


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "imagekit"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_a_planted_importlib_bounce_fails_the_check(tmp_path: Path) -> None:
    """An operation that reaches the report through importlib (what promote/run.py did)."""
    root = _tree(tmp_path, {
        "promote/run.py": "import importlib\n\n\ndef gate():\n"
                          "    return importlib.import_module(\"imagekit.report.gate\")\n",
        "report/gate.py": "def enforce(): ...\n",
    })
    problems = violations(root)
    assert any("promote/run.py" in p and "import importlib" in p for p in problems), problems
    assert any("promote/run.py (operation rank 2) imports imagekit.report" in p
               for p in problems), problems


def test_a_constant_name_and_dunder_import_are_seen(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "oci/x.py": "MODULE = \"imagekit.registry.client\"\n\n\ndef f():\n"
                    "    return __import__(MODULE)\n",
    })
    problems = violations(root)
    assert any("dynamic import of imagekit.registry.client" in p for p in problems), problems
    assert any("oci/x.py (layer 1) imports imagekit.registry" in p for p in problems), problems


def test_an_allowed_dynamic_import_is_still_layer_checked(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "schemas/export.py": "import importlib\n\n\ndef f(name):\n"
                             "    return importlib.import_module(name)\n",
        "infra/manager.py": "import importlib\nCLUSTER = \"imagekit.cli.app\"\n\n\ndef f():\n"
                            "    return importlib.import_module(CLUSTER)\n",
    })
    problems = violations(root)
    assert not any("schemas/export.py" in p for p in problems), problems
    assert any("infra/manager.py (layer 3) imports imagekit.cli" in p for p in problems)


def test_package_data_is_not_a_module_but_its_locator_is_checked(tmp_path: Path) -> None:
    """Scripts under assets/ (probes, controller files) run inside images and Pods and are not
    layer-checked; assets/__init__.py is a type-layer module (importlib.resources is allowed,
    an import of a higher layer is not)."""
    root = _tree(tmp_path, {
        "assets/__init__.py": "from importlib import resources\n\n\ndef f():\n"
                              "    from imagekit.cli.app import app\n",
        "assets/probes/p.py": "import importlib\n\nimportlib.import_module('vllm')\n",
        "assets/manifests/controller/c.py": "from imagekit.acceptance import x\n",
    })
    problems = violations(root)
    assert problems == ["assets/__init__.py (layer 1) imports imagekit.cli (layer 4)"], problems
