"""Import smoke tests, the fast tier's net under everything: every module of dbpa_core and
ui imports, every dashboard page compiles and finds every name it takes from its imports,
and every command answers --help. The pages themselves run in tests/app (slow: AppTest)."""

from __future__ import annotations

import argparse
import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

import dbpa_core
import ui
from dbpa_core.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted(p.name for p in (ROOT / "pages").glob("*.py")) + ["../app.py"]


def _modules(package) -> list[str]:
    return sorted(
        m.name
        for m in pkgutil.walk_packages(package.__path__, package.__name__ + ".")
        # a migration script is read by alembic, and __main__ runs the command line
        if ".migrations." not in m.name and not m.name.endswith(".__main__")
    )


@pytest.mark.parametrize("name", _modules(dbpa_core) + _modules(ui))
def test_every_module_imports(name):
    importlib.import_module(name)


@pytest.mark.parametrize("page", PAGES)
def test_every_page_compiles_and_its_imports_resolve(page):
    path = (ROOT / "pages" / page).resolve()
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    compile(tree, str(path), "exec")
    modules = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                modules[a.asname or a.name] = importlib.import_module(a.name)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            base = importlib.import_module(node.module)
            for a in node.names:
                if hasattr(base, a.name):
                    modules[a.asname or a.name] = getattr(base, a.name)
                else:  # a submodule: from ui import widgets
                    modules[a.asname or a.name] = importlib.import_module(f"{node.module}.{a.name}")
    # every `module.name` the page reads from a module of ours exists there
    ours = {k: m for k, m in modules.items() if getattr(m, "__name__", "").startswith(("ui", "dbpa_core"))}
    missing = sorted(
        f"{node.value.id}.{node.attr} (line {node.lineno})"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id in ours
        and not hasattr(ours[node.value.id], node.attr)
    )
    assert not missing, f"{page} reads names its modules do not have: {missing}"


def _commands() -> list[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sorted(sub.choices)


@pytest.mark.parametrize("command", _commands())
def test_every_command_answers_help(command, capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args([command, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: dbpa " + command), out[:200]
