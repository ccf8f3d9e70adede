"""The design card's rule, enforced: a lower layer never imports a higher one.

types (errors, results, oci, evidence, inputs, progress, stats, packaged) < transports (registry,
engine, cluster) < operations (everything else, in `OPERATION_ORDER`) < cli. Imports inside
functions count too, and so do dynamic ones: `importlib.import_module("…")`, `__import__("…")`,
`importlib.util.find_spec("…")` with a literal (or a module-level constant) name are checked like
`import` statements, and any dynamic import at all is allowed only in `DYNAMIC_IMPORTS` (each
with its reason) — a bounce through importlib is invisible to readers and to this test
otherwise (`importlib.resources` and `importlib.metadata` read files, they import nothing).

Every top-level module and package of imagekit has its place in this map, and CONTRIBUTING.md's
architecture list names exactly these places in this order.

No CLI module uses another's private names: neither
`from imagekit.cli.X import _y` nor `X._y` on a module bound by `import`, `from imagekit.cli
import X` or importlib; what the commands share is public (`imagekit.cli.common`).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from scan_helpers import string_constants

PACKAGE = Path(__file__).resolve().parents[2] / "imagekit"
README = PACKAGE.parent / "CONTRIBUTING.md"  # its `## Architecture` says the map

#: progress: phases of long steps, reported by transports and operations alike;
#: packaged: where the shipped folders (dockerfiles, probes, manifests, preflight) are, for every
#: layer;
#: settings: every IMAGEKIT_* variable, declared once (pydantic-settings)
TYPES = {"errors", "results", "oci", "evidence", "inputs", "progress", "stats", "packaged",
         "settings", "__init__"}
#: kube: the Kubernetes transport (its flows are cluster, clusteraccept, gpu)
TRANSPORTS = {"registry", "engine", "cluster", "kube"}
CLI = {"cli", "__main__"}

#: Operations in order: one may import the operations of earlier rows (and its own package),
#: never a later row. The report reads every operation's results (and the infra state); the
#: promotion is handed its gate and never imports the report; the schema exporter lists every
#: model, so it comes last.
OPERATION_ORDER: tuple[frozenset[str], ...] = (
    # launch: the serve command's rules (pure); the spec's serve settings and the serve_args
    # probe's plan are built from them
    frozenset({"launch"}),
    # trust: whose signed statements count (keys, policy); read by names, report, attest
    frozenset({"spec", "infra", "trust"}),
    # provenance: BuildKit's SLSA statement checked against the spec's lock and Dockerfile;
    # read by the report's gate and by attest
    frozenset({"standins", "probe", "verify", "gpu", "acceptance", "promote",
               "sbom", "provenance"}),
    frozenset({"build", "clusteraccept"}),  # clusteraccept: `cluster accept`
    frozenset({"imagesverify", "names"}),  # names: NAME -> the spec's latest verified build
    frozenset({"report"}),
    frozenset({"attest"}),  # signs the report's test-result and the SBOM
    # rehearsal: the release path end to end, each step an `imagekit` process;
    # doctor: what a role needs (docker, registries, cluster RBAC, disk, evidence, the signing
    # key), checked before it starts — reads the spec, the infra state, the build's engine
    # choice and the attest key loader
    frozenset({"rehearsal", "doctor"}),
    frozenset({"schemas"}),
)

#: Files under these folders are package data, not modules of imagekit. None is left inside the
#: package: the probes (run inside images), the Pod files and the preflight live at the
#: repository's top and the wheel maps them in (imagekit/packaged.py).
DATA_TREES: set[str] = set()

#: importlib's submodules that read files and metadata; they import nothing.
NOT_DYNAMIC = ("importlib.resources", "importlib.metadata")

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


def _dynamic_call(node: ast.Call) -> bool:
    func = node.func
    if isinstance(func, ast.Name):
        return func.id in ("__import__", "import_module", "find_spec")
    if isinstance(func, ast.Attribute):
        return func.attr in ("import_module", "find_spec", "__import__")
    return False


def _reads_only(module: str) -> bool:
    return any(module == m or module.startswith(m + ".") for m in NOT_DYNAMIC)


def imports_of(path: Path) -> tuple[set[str], list[str]]:
    """(imagekit sub-packages imported, descriptions of dynamic imports) of one file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    constants = string_constants(tree)
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
            if node.module == "importlib" and all(
                    _reads_only(f"importlib.{alias.name}") for alias in node.names):
                pass
            elif node.module == "importlib" or (node.module.startswith("importlib.")
                                                and not _reads_only(node.module)):
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


def modules(package: Path) -> list[Path]:
    """The package's own modules (package data under DATA_TREES left out)."""
    found = []
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package).parts
        if parts[0] in DATA_TREES and parts[1:] != ("__init__.py",):
            continue
        found.append(path)
    return found


def violations(package: Path) -> list[str]:
    found = []
    for path in modules(package):
        relative = path.relative_to(package)
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


# ------------------------------------------------------------ no cross-CLI private names

def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _cli_module(name: str | None) -> bool:
    return name is not None and (name == "imagekit.cli" or name.startswith("imagekit.cli."))


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def cli_private_uses(path: Path, package: Path) -> list[str]:
    """Private names of another CLI module that this file uses: imported by name, or read as an
    attribute of that module however it was bound (import … as, from imagekit.cli import X,
    importlib.import_module("imagekit.cli.X"), getattr(X, "_y"))."""
    relative = path.relative_to(package)
    own = "imagekit." + ".".join(relative.with_suffix("").parts).removesuffix(".__init__")
    tree = ast.parse(path.read_text(), filename=str(path))
    constants = string_constants(tree)

    def literal(node: ast.expr) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.Name):
            return constants.get(node.id)
        return None

    def dynamic_target(node: ast.expr) -> str | None:
        if isinstance(node, ast.Call) and _dynamic_call(node) and node.args:
            return literal(node.args[0])
        return None

    aliases: dict[str, str] = {}   # a local name bound to a CLI module
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:  # from .cluster import _x (relative to this file's package)
                base = own.split(".")[:len(own.split(".")) - node.level +
                                   (1 if relative.name == "__init__.py" else 0)]
                module = ".".join(base + ([module] if module else []))
            for alias in node.names:
                if module == "imagekit.cli" and not _private(alias.name):
                    aliases[alias.asname or alias.name] = f"imagekit.cli.{alias.name}"
                if _cli_module(module) and module != own and _private(alias.name):
                    found.append(f"{relative}: line {node.lineno}: from {module} import "
                                 f"{alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if _cli_module(alias.name) and alias.asname:
                    aliases[alias.asname] = alias.name
        elif isinstance(node, ast.Assign) and _cli_module(dynamic_target(node.value)):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    aliases[target.id] = str(dynamic_target(node.value))

    def module_of(node: ast.expr) -> str | None:
        target = dynamic_target(node)
        if target is not None:
            return target
        dotted = _dotted(node)
        if dotted is None:
            return None
        head, _, rest = dotted.partition(".")
        if head in aliases:
            return aliases[head] + (f".{rest}" if rest else "")
        return dotted if _cli_module(dotted) else None

    for node in ast.walk(tree):
        used: tuple[ast.expr, str] | None = None
        if isinstance(node, ast.Attribute) and _private(node.attr):
            used = (node.value, node.attr)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id == "getattr" and len(node.args) >= 2:
            attr = literal(node.args[1])
            if attr is not None and _private(attr):
                used = (node.args[0], attr)
        if used is not None:
            owner = module_of(used[0])
            if _cli_module(owner) and owner != own:
                line = getattr(node, "lineno", 0)
                found.append(f"{relative}: line {line}: {owner}.{used[1]}")
    return found


def cli_violations(package: Path) -> list[str]:
    """Over the CLI's files (any other module that imports the CLI breaks the layering)."""
    return [problem for path in modules(package)
            if path.relative_to(package).parts[0] in CLI | {"__main__.py"}
            for problem in cli_private_uses(path, package)]


def test_no_cli_module_uses_another_cli_modules_private_names() -> None:
    problems = cli_violations(PACKAGE)
    assert not problems, "\n".join(problems)


def test_planted_cross_cli_private_uses_fail_the_check(tmp_path: Path) -> None:
    """What cli/cluster_accept.py and cli/gpujob.py did, and the importlib form of it."""
    root = _tree(tmp_path, {
        "cli/__init__.py": "",
        "cli/cluster.py": "def _finish(): ...\n\n\ndef finish(): ...\n\n\n"
                          "def _own():\n    return _finish()\n",
        "cli/accept.py": "from imagekit.cli.cluster import _finish, finish\n",
        "cli/job.py": "from imagekit.cli import cluster as cluster_cli\n\n\n"
                      "def f():\n    cluster_cli.finish()\n    return cluster_cli._finish()\n",
        "cli/bounce.py": "import importlib\nCLI = \"imagekit.cli.cluster\"\n\n\n"
                         "def f():\n    mod = importlib.import_module(CLI)\n"
                         "    importlib.import_module(\"imagekit.cli.cluster\")._finish()\n"
                         "    return mod._finish, getattr(mod, \"_finish\")\n",
        "cli/dotted.py": "import imagekit.cli.cluster\n\n\n"
                         "def f():\n    return imagekit.cli.cluster._finish\n",
        "cli/relative.py": "from .cluster import _finish\n",
        "cli/fine.py": "import imagekit.cli.cluster as c\n\n\n"
                       "def f():\n    return c.finish, c.__doc__\n",
    })
    problems = cli_violations(root)
    expected = {
        "cli/accept.py: line 1: from imagekit.cli.cluster import _finish",
        "cli/job.py: line 6: imagekit.cli.cluster._finish",
        "cli/bounce.py: line 7: imagekit.cli.cluster._finish",
        "cli/bounce.py: line 8: imagekit.cli.cluster._finish",
        "cli/dotted.py: line 5: imagekit.cli.cluster._finish",
        "cli/relative.py: line 1: from imagekit.cli.cluster import _finish",
    }
    assert expected <= set(problems), problems
    assert sum("bounce.py: line 8" in p for p in problems) == 2, problems  # attr and getattr
    assert not [p for p in problems if p.startswith(("cli/fine.py", "cli/cluster.py"))]


# ----------------------------------------------------- the map is complete, README says it

def top_level_names(package: Path) -> set[str]:
    return {p.name.removesuffix(".py") for p in package.iterdir()
            if (p.is_dir() and (p / "__init__.py").is_file()) or p.suffix == ".py"}


def test_every_top_level_module_has_a_place_in_the_map() -> None:
    placed = TYPES | TRANSPORTS | CLI | set().union(*OPERATION_ORDER)
    missing = top_level_names(PACKAGE) - placed
    assert not missing, \
        f"give these a layer (and a line in CONTRIBUTING.md's architecture): {missing}"
    assert not placed - top_level_names(PACKAGE), "the map names a package that is gone"


def readme_layers(text: str) -> dict[str, object]:
    """The layers CONTRIBUTING.md's `## Architecture` list gives: types, transports, operation
    rows."""
    section = text.split("\n## Architecture\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.split(r"\n(?=\d\. \*\*)", "\n" + section)
    by_title = {re.match(r"\d\. \*\*(\w+)", b.strip()).group(1): b  # type: ignore[union-attr]
                for b in blocks if re.match(r"\s*\d\. \*\*", b)}
    head = by_title["Types"].split("\n   - ", 1)[0]
    types = set(re.findall(r"`imagekit\.(\w+)`", head))
    transports = set(re.findall(r"\n   - `imagekit\.(\w+)`", by_title["Transports"]))
    rows = []
    for line in re.findall(r"\n   \d+\. (.*(?:\n      .*)*)", by_title["Operations"]):
        outside = re.sub(r"\([^()]*\)", "", line.replace("\n", " "))
        rows.append(frozenset(re.findall(r"`(\w+)`", outside)))
    return {"types": types, "transports": transports, "operations": tuple(rows)}


def test_readme_architecture_lists_exactly_the_tests_layers() -> None:
    said = readme_layers(README.read_text())
    assert said["types"] == TYPES - {"__init__"}, said["types"]
    assert said["transports"] == TRANSPORTS, said["transports"]
    assert said["operations"] == OPERATION_ORDER, said["operations"]


def test_a_readme_that_leaves_a_package_out_is_seen() -> None:
    text = README.read_text()
    said = readme_layers(text.replace("`imagekit.progress`", "progress", 1))
    assert said["types"] != TYPES - {"__init__"}
    said = readme_layers(text.replace("`build`, `clusteraccept`", "`build`", 1))
    assert said["operations"] != OPERATION_ORDER


def test_no_cli_module_patches_a_command_at_import() -> None:
    """`--nodes` is declared on `gpu-preflight` itself (cli/gpujob.py used to graft it on by
    rewriting the callback's `inspect.signature` at import)."""
    import inspect

    from imagekit.cli import cluster

    patched = [f"{path.relative_to(PACKAGE)}: line {node.lineno}"
               for path in modules(PACKAGE) if path.relative_to(PACKAGE).parts[0] == "cli"
               for node in ast.walk(ast.parse(path.read_text()))
               if isinstance(node, ast.Attribute) and node.attr == "__signature__"]
    assert not patched, patched
    (info,) = [c for c in cluster.cluster_app.registered_commands if c.name == "gpu-preflight"]
    assert info.callback is not None and info.callback.__module__ == "imagekit.cli.cluster"
    assert {"nodes", "gpus_per_node", "pods_per_node", "pod_env", "job_mode", "each_node"} <= \
        set(inspect.signature(info.callback).parameters)


def test_the_shipped_folders_locator_is_a_type_layer_module(tmp_path: Path) -> None:
    """packaged.py (where the shipped folders are) is read by every layer, so it is a type:
    an import of a higher layer from it is a violation."""
    root = _tree(tmp_path, {
        "packaged.py": "from pathlib import Path\n\n\ndef f():\n"
                       "    from imagekit.cli.app import app\n",
    })
    problems = violations(root)
    assert problems == ["packaged.py (layer 1) imports imagekit.cli (layer 4)"], problems


# ----------------------------------------------- inside the report: one derivation, no circle

#: imagekit/report's modules in order: the records; the derivation (the one place a report's
#: decision is made); reading the store and the registry's statements; the renderers. A module
#: imports only its own step or earlier ones — imports inside functions count, so none can
#: hide a circle — and no two modules import each other, however indirectly.
REPORT_ORDER: tuple[frozenset[str], ...] = (
    frozenset({"models", "required", "accepted", "links", "svg"}),
    frozenset({"decision"}),
    frozenset({"collect", "trusted", "gate", "chain", "previous", "resolve"}),
    frozenset({"glance", "markdown", "html", "junit", "intoto", "render", "batch", "__init__"}),
)
REPORT_STEPS = ("records", "the derivation", "reading", "renderers")


def report_imports(path: Path, modules_here: set[str]) -> set[str]:
    """The imagekit.report modules one file imports (`from imagekit.report import glance`
    is the module; a name re-exported by the package is the package's `__init__`)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            parts = node.module.split(".")
            if parts[:2] != ["imagekit", "report"]:
                continue
            if len(parts) > 2:
                found.add(parts[2])
            else:
                found |= {a.name if a.name in modules_here else "__init__" for a in node.names}
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[:2] == ["imagekit", "report"]:
                    found.add(parts[2] if len(parts) > 2 else "__init__")
    return found


def report_violations(report_dir: Path) -> list[str]:
    names = {p.stem for p in report_dir.glob("*.py")}
    step = {name: n for n, row in enumerate(REPORT_ORDER) for name in row}
    graph = {name: report_imports(report_dir / f"{name}.py", names) - {name} for name in names}
    found = [f"report/{name}.py has no step in REPORT_ORDER" for name in sorted(names - set(step))]
    for name, imported in sorted(graph.items()):
        for other in sorted(imported):
            if other in step and name in step and step[other] > step[name]:
                found.append(f"report/{name}.py ({REPORT_STEPS[step[name]]}) imports "
                             f"report/{other}.py ({REPORT_STEPS[step[other]]})")
    state: dict[str, int] = {}

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        for other in sorted(graph.get(name, ())):
            if state.get(other) == 1:
                cycle = path[path.index(other):] + [other] if other in path else [name, other]
                found.append("report modules import each other: " + " -> ".join(cycle))
            elif other in graph and not state.get(other):
                visit(other, [*path, other])
        state[name] = 2

    for name in sorted(graph):
        if not state.get(name):
            visit(name, [name])
    return found


def test_the_report_derives_once_below_every_renderer_and_never_circles() -> None:
    problems = report_violations(PACKAGE / "report")
    assert not problems, "\n".join(problems)


def test_a_planted_back_import_and_a_circle_inside_the_report_are_seen(tmp_path: Path) -> None:
    """What models.py did (it imported the renderers' glance inside a function to reach the
    decision), and a circle between two reading modules."""
    root = _tree(tmp_path, {
        "report/models.py": "def outcome():\n    from imagekit.report.glance import decide\n",
        "report/glance.py": "from imagekit.report.models import outcome\n",
        "report/collect.py": "def f():\n    from imagekit.report import gate\n",
        "report/gate.py": "from imagekit.report.collect import f\n",
    })
    problems = report_violations(root / "report")
    assert "report/models.py (records) imports report/glance.py (renderers)" in problems
    assert any(p.startswith("report modules import each other:") and "models" in p
               and "glance" in p for p in problems), problems
    assert any(p.startswith("report modules import each other:") and "collect" in p
               and "gate" in p for p in problems), problems


def test_contributing_names_the_reports_steps_in_order() -> None:
    row = next(line for line in re.findall(r"\n   \d+\. (.*(?:\n      .*)*)",
                                           README.read_text()) if line.startswith("`report`"))
    text = " ".join(row.split())
    steps = re.split(r"; ", text.split("(", 1)[1].rsplit(")", 1)[0])
    said = []
    for label in REPORT_STEPS:
        [part] = [s for s in steps if s.startswith(label + " ") or f": {label} " in s]
        said.append(frozenset(re.findall(r"`(\w+)`", part.split(label, 1)[1])))
    assert tuple(said) == REPORT_ORDER, said
