"""The layers: pdtui's packages import each other one way, in the order docs/architecture.md lists (every import
counts, a function's too); the engine never knows the UI (nothing outside pdtui/ui imports textual), and the product
never loads the sim (the stand-ins of systemd, SGLang, Slurm and SSH serve ``pdtui demo`` and the tests alone)."""

import ast
import re
from functools import cache
from itertools import pairwise
from pathlib import Path

import pdtui

PACKAGE = Path(pdtui.__file__).parent
CORE = [p for p in PACKAGE.rglob("*.py") if "ui" not in p.relative_to(PACKAGE).parts[:1]
        and p.name not in ("cli.py",)]


@cache
def parsed(path: Path) -> ast.Module:
    """A module's tree, parsed once for all the tests here (they only read it)."""
    return ast.parse(path.read_text())


def imported_modules(path: Path) -> set[str]:
    tree = parsed(path)
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


# The layers of pdtui's packages, from the bottom, as docs/architecture.md lists them: a package imports only packages
# of its own layer or below (its own layer's one way: the graph has no cycle). The sim sits just under the command
# line: it may import every layer below, and only cli.py's demo functions import it (the tests below).
LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"support"}),
    frozenset({"config", "hosts"}),
    frozenset({"vocabulary"}),
    frozenset({"servers"}),
    frozenset({"fabric"}),
    frozenset({"gpus"}),
    frozenset({"engine"}),
    frozenset({"targets"}),
    frozenset({"faces", "ui", "web"}),
    frozenset({"commands"}),
    frozenset({"sim"}),
    frozenset({"cli", "__main__"}),
)
ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"


def pdtui_imports(path: Path) -> set[str]:
    """Every pdtui module ``path`` imports, wherever the import stands (a function's, a TYPE_CHECKING block's):
    ``from pdtui import sim`` counts as ``pdtui.sim``."""
    names = set()
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module == "pdtui" and not node.level:
            names |= {f"pdtui.{a.name}" for a in node.names if _is_module(a.name)}
        elif isinstance(node, ast.ImportFrom):
            names.add(_absolute(path, node))
    return {name for name in names if name.startswith("pdtui.")}


def _is_module(name: str) -> bool:
    """Whether ``from pdtui import name`` imports one of its modules (not ``__version__``)."""
    return (PACKAGE / name).is_dir() or (PACKAGE / f"{name}.py").is_file()


def _absolute(path: Path, node: ast.ImportFrom) -> str:
    """An ImportFrom's module, a relative one resolved against ``path``'s package."""
    if not node.level:
        return node.module or ""
    parts = ("pdtui", *path.relative_to(PACKAGE).parent.parts)
    base = parts[:len(parts) - node.level + 1]
    return ".".join((*base, node.module) if node.module else base)


def package_of(path: Path) -> str:
    """The top-level package a module of pdtui belongs to (``cli`` for cli.py)."""
    return path.relative_to(PACKAGE).parts[0].removesuffix(".py")


def package_graph() -> dict[tuple[str, str], set[str]]:
    """Each arrow between two of pdtui's top-level packages, with the modules that draw it."""
    arrows: dict[tuple[str, str], set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        if path.parent == PACKAGE and path.name == "__init__.py":
            continue
        source = package_of(path)
        for target in {name.split(".")[1] for name in pdtui_imports(path)} - {source}:
            arrows.setdefault((source, target), set()).add(str(path.relative_to(PACKAGE)))
    return arrows


def _cycle(arrows: set[tuple[str, str]]) -> list[str]:
    """One cycle of the graph (its packages, the first again at the end), or [] when it has none."""
    following: dict[str, list[str]] = {}
    for source, target in sorted(arrows):
        following.setdefault(source, []).append(target)
    done: set[str] = set()

    def visit(package: str, path: list[str]) -> list[str]:
        if package in path:
            return path[path.index(package):] + [package]
        if package in done:
            return []
        for target in following.get(package, []):
            found = visit(target, [*path, package])
            if found:
                return found
        done.add(package)
        return []

    return next((found for package in sorted(following) if (found := visit(package, []))), [])


def test_the_cycle_finder_finds_one():
    assert _cycle({("a", "b"), ("b", "c"), ("c", "a")}) == ["a", "b", "c", "a"]
    assert _cycle({("a", "b"), ("b", "c"), ("a", "c")}) == []


def test_the_packages_import_each_other_one_way_only():
    """No two packages reach each other, however far round: an arrow runs down, never back up."""
    arrows = package_graph()
    cycle = _cycle(set(arrows))
    assert cycle == [], {" -> ".join(cycle): [sorted(arrows[pair]) for pair in pairwise(cycle)]}


def test_every_package_has_its_layer():
    """A new package is placed in the layers (here and in docs/architecture.md) before anything may import it."""
    packages = {package_of(p) for p in PACKAGE.rglob("*.py")} - {"__init__"}
    assert packages == set().union(*LAYERS)


def test_each_package_imports_only_its_layer_and_the_layers_below():
    layer = {package: n for n, packages in enumerate(LAYERS) for package in packages}
    upward = {f"{a} -> {b}": sorted(files) for (a, b), files in package_graph().items() if layer[b] > layer[a]}
    assert upward == {}


def documented_layers(text: str) -> tuple[frozenset[str], ...]:
    """The layers as docs/architecture.md's first code block lists them, one line each from the bottom: the
    packages (``engine/``) and top-level modules (``cli.py``) a line begins with."""
    block = text.split("```", 2)[1]
    layers = []
    for line in block.splitlines():
        if not line or line[0].isspace():
            continue
        names = []
        for word in line.split():
            if not re.fullmatch(r"\w+/|\w+\.py", word):
                break
            names.append(word.removesuffix("/").removesuffix(".py"))
        layers.append(frozenset(names))
    return tuple(layers)


def test_the_layers_are_the_ones_the_architecture_lists():
    assert documented_layers(ARCHITECTURE.read_text()) == LAYERS


def test_core_modules_exist():
    rel = {str(p.relative_to(PACKAGE)) for p in CORE}
    assert {"engine/orchestrator.py", "engine/states.py", "config/schema.py", "targets/systemd/commands.py"} <= rel


def _sim_imports(node: ast.AST) -> list[ast.AST]:
    found = []
    for each in ast.walk(node):
        if isinstance(each, ast.Import) and any(a.name.startswith("pdtui.sim") for a in each.names):
            found.append(each)
        elif isinstance(each, ast.ImportFrom) and each.module and (
                each.module.startswith("pdtui.sim") or each.module == "pdtui" and any(a.name == "sim" for a in each.names)):
            found.append(each)
    return found


def test_no_product_module_imports_the_sim():
    """The stand-ins stay out of the product's path: nothing outside pdtui/sim imports them but the CLI."""
    product = [p for p in PACKAGE.rglob("*.py") if p.relative_to(PACKAGE).parts[0] not in ("sim", "cli.py")]
    offenders = {str(p.relative_to(PACKAGE)) for p in product if _sim_imports(parsed(p))}
    assert offenders == set()


def test_the_cli_loads_the_sim_only_on_the_demo_path():
    """``pdtui status`` must not pay for (or depend on) the stand-ins: only the CLI's own demo functions import
    them (the demo's command lives in the sim: sim/demo_command.py)."""
    tree = parsed(PACKAGE / "cli.py")
    demo_functions = [f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name.startswith("_demo")]
    allowed = {id(node) for f in demo_functions for node in _sim_imports(f)}
    others = [node.lineno for node in _sim_imports(tree) if id(node) not in allowed]
    assert allowed and others == []


def test_no_core_module_imports_textual():
    offenders = {str(p.relative_to(PACKAGE)): sorted(m for m in imported_modules(p)
                                                     if m == "textual" or m.startswith("textual."))
                 for p in CORE}
    assert {k: v for k, v in offenders.items() if v} == {}


def _ui_import(node: ast.AST) -> bool:
    if isinstance(node, ast.Import):
        return any(a.name.startswith("pdtui.ui") for a in node.names)
    return isinstance(node, ast.ImportFrom) and bool(node.module) and (
        node.module.startswith("pdtui.ui") or node.module == "pdtui" and any(a.name == "ui" for a in node.names))


def test_cli_imports_the_ui_only_lazily():
    """Neither the command line nor the subcommands load the UI when their module loads (``status --once`` and the
    headless faces never pay for Textual)."""
    for path in [PACKAGE / "cli.py", *(PACKAGE / "commands").rglob("*.py")]:
        assert not any(_ui_import(n) for n in parsed(path).body), path


TARGET_WORDS = frozenset({"is_job", "cluster", "clusters", "hosts", "unit_dir", "job"})
# The engine's modules that still name a target kind, each with why.
NAMES_A_TARGET: dict[str, str] = {}


def test_the_engine_never_asks_which_kind_of_target_a_service_runs_on():
    """No engine module imports a target (the orchestrator is handed them: engine/session.py's Targets, which the
    commands fill with targets/registry.py's Registry) or names a kind: a new target is a package, not a branch."""
    naming = {}
    for path in (PACKAGE / "engine").rglob("*.py"):
        rel = str(path.relative_to(PACKAGE))
        imports = sorted(m for m in pdtui_imports(path) if m == "pdtui.targets" or m.startswith("pdtui.targets."))
        words = {node.attr for node in ast.walk(parsed(path)) if isinstance(node, ast.Attribute)}
        if imports or words & TARGET_WORDS:
            naming[rel] = sorted(words & TARGET_WORDS) + imports
    assert set(naming) == set(NAMES_A_TARGET), naming


def _sglang_imports(node: ast.AST) -> list[ast.AST]:
    return [each for each in ast.walk(node)
            if isinstance(each, ast.Import) and any(a.name.startswith("pdtui.servers.sglang") for a in each.names)
            or isinstance(each, ast.ImportFrom) and each.module and (
                each.module.startswith("pdtui.servers.sglang")
                or each.module == "pdtui.servers" and any(a.name == "sglang" for a in each.names))]


def test_only_the_servers_interface_names_sglang():
    """Everything but SGLang's own package reaches it through pdtui.servers (serving_for, serving_named), which
    imports it by its name in ENGINES at the first call: a second serving engine is a package and an entry there,
    not edits across pdtui."""
    own = PACKAGE / "servers" / "sglang"
    offenders = {str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
                 if own not in p.parents and _sglang_imports(parsed(p))}
    assert offenders == set()


def test_every_engine_the_config_may_name_is_a_package_of_servers():
    from pdtui.config.defaults import ENGINES as CONFIG_ENGINES
    from pdtui.servers import ENGINES, serving_named
    assert tuple(ENGINES) == CONFIG_ENGINES
    for name, module in ENGINES.items():
        assert module.startswith(f"pdtui.servers.{name}.")
        assert serving_named(name).name == name


def test_each_target_builds_on_the_engine_and_never_on_another_target():
    for package in (PACKAGE / "targets").iterdir():
        if not package.is_dir() or package.name.startswith("_"):
            continue
        others = {f"pdtui.targets.{p.name}" for p in (PACKAGE / "targets").iterdir()
                  if p.is_dir() and p.name != package.name}
        offenders = {str(p.relative_to(PACKAGE)): sorted(m for m in imported_modules(p)
                                                         if any(m.startswith(o) for o in others))
                     for p in package.rglob("*.py")}
        assert {k: v for k, v in offenders.items() if v} == {}


def test_the_engine_reaches_its_serving_engine_only_through_the_servers_interface():
    """SGLang is one package behind pdtui.servers.ServingEngine: a second serving engine is a package, not edits to
    the engine (its runs, orchestrator, checks, figures), the targets' runs or the registry."""
    through_interface = [*(PACKAGE / "engine").rglob("*.py"), *(PACKAGE / "targets").rglob("*_run.py"),
                         PACKAGE / "targets" / "registry.py"]
    offenders = {str(p.relative_to(PACKAGE)): sorted(m for m in imported_modules(p) if m.startswith("pdtui.servers."))
                 for p in through_interface}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_benches_and_the_package_never_import_the_tests():
    """A bench measures pdtui, not its tests: what a bench shares with them lives in the package (pdtui/sim) or in
    bench/."""
    code = [*PACKAGE.rglob("*.py"), *(PACKAGE.parent / "bench").glob("*.py")]
    offenders = {str(p.relative_to(PACKAGE.parent)) for p in code
                 if any(m == "tests" or m.startswith("tests.") for m in imported_modules(p))}
    assert offenders == set()
