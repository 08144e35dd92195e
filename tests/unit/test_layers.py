"""The engine never knows the UI: nothing outside pdtui/ui imports textual."""

import ast
from pathlib import Path

import pdtui

PACKAGE = Path(pdtui.__file__).parent
CORE = [p for p in PACKAGE.rglob("*.py") if "ui" not in p.relative_to(PACKAGE).parts[:1]
        and p.name not in ("cli.py",)]


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_core_modules_exist():
    rel = {str(p.relative_to(PACKAGE)) for p in CORE}
    assert {"engine/orchestrator.py", "engine/states.py", "config/schema.py", "systemd.py"} <= rel


def test_no_core_module_imports_textual():
    offenders = {str(p.relative_to(PACKAGE)): sorted(m for m in imported_modules(p)
                                                     if m == "textual" or m.startswith("textual."))
                 for p in CORE}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_cli_imports_the_ui_only_lazily():
    tree = ast.parse((PACKAGE / "cli.py").read_text())
    top_level = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert not any(getattr(n, "module", "") and n.module.startswith("pdtui.ui") for n in top_level)
