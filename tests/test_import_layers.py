"""The imports point down the layers: pages → ui → dbpa_core, and no module of dbpa_core
imports itself back through another (a cycle). The graph is read from the source files
with ``ast`` — every import, at module level or inside a function — so nothing is run."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _package_of(path: Path, name: str) -> str:
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def _statements(tree: ast.AST, module_level: bool):
    """Every node of ``tree`` but those under ``if TYPE_CHECKING:`` (never run: a type named
    in an annotation, which may point up the layers); with ``module_level``, not inside a
    function either (run only when called)."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if (isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test)) or (
                module_level and isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            ):
                continue
            todo.append(child)


def imports_of(path: Path, known: set[str], *, module_level: bool = False) -> set[str]:
    """The modules among ``known`` that ``path`` imports (``from . import x`` names the
    submodule ``x`` when there is one, else the package); ``module_level``: only the
    imports run when the module is imported."""
    name = _module_name(path)
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: set[str] = set()

    def add(target: str) -> None:
        while target and target not in known:  # `a.b.func` → the module `a.b`
            target = target.rpartition(".")[0]
        if target:
            found.add(target)

    for node in _statements(tree, module_level):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _package_of(path, name)
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module or ""
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                add(sub if sub in known else base)
    found.discard(name)
    return found


def import_graph(*packages: str, module_level: bool = False) -> dict[str, set[str]]:
    files = [p for pkg in packages for p in sorted((ROOT / pkg).rglob("*.py"))]
    known = {_module_name(p) for p in files}
    return {_module_name(p): imports_of(p, known, module_level=module_level) for p in files}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as ``[a, b, ..., a]``, or None when it has none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def _edges_into(graph: dict[str, set[str]], source: str, target: str) -> list[str]:
    return sorted(
        f"{m} imports {t}"
        for m, deps in graph.items()
        if m.split(".")[0] == source
        for t in deps
        if t.split(".")[0] == target
    )


def test_the_cycle_finder_and_the_import_reader():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    known = {
        "dbpa_core",
        "dbpa_core.fmt",
        "dbpa_core.fidelity",
        "dbpa_core.fidelity.curve",
        "dbpa_core.fidelity.report",
        "dbpa_core.outputs",
    }
    analysis = ROOT / "dbpa_core" / "fidelity" / "analysis.py"
    everything = imports_of(analysis, known)
    # `from . import curve as cv`, `from ..fmt import fmt_pct`, `from .report import ...`
    assert {"dbpa_core.fidelity.curve", "dbpa_core.fmt", "dbpa_core.fidelity.report"} <= everything
    # `from ..outputs import write_files` is inside a method: run only when it is called
    assert "dbpa_core.outputs" in everything
    assert "dbpa_core.outputs" not in imports_of(analysis, known, module_level=True)


def test_dbpa_core_has_no_import_cycle():
    """Importing any module of dbpa_core never comes back to it (imports run when a module
    is imported)."""
    graph = import_graph("dbpa_core", module_level=True)
    assert len(graph) > 50
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " → ".join(cycle or ())


def test_dbpa_core_has_no_import_cycle_even_inside_functions():
    """The modules of dbpa_core form layers: not even an import inside a function closes a
    circle (what two modules share lives one floor down, as the spec document reader
    below the sections that use it)."""
    graph = import_graph("dbpa_core")
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle (imports inside functions included): " + " → ".join(cycle or ())
    # the floors of the spec: the reader, the model entries, the sections, the spec
    assert not graph["dbpa_core.spec_doc"] & {"dbpa_core.home", "dbpa_core.spec", "dbpa_core.spec_models"}
    assert (
        "dbpa_core.spec" not in graph["dbpa_core.home"] | graph["dbpa_core.checks"] | graph["dbpa_core.cases"]
    )


SUBPACKAGES = sorted(p.parent.name for p in (ROOT / "dbpa_core").glob("*/__init__.py"))


@pytest.mark.parametrize("package", SUBPACKAGES)
def test_no_import_cycle_inside_a_subpackage_even_inside_functions(package):
    """Inside each subpackage (fidelity, attacks, ...) not even an import inside a function
    closes a cycle: the modules form layers."""
    prefix = f"dbpa_core.{package}"
    graph = {
        m: {t for t in deps if t.startswith(prefix + ".")}
        for m, deps in import_graph(f"dbpa_core/{package}").items()
    }
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " → ".join(cycle or ())


@pytest.mark.parametrize(("lower", "upper"), [("dbpa_core", "ui"), ("dbpa_core", "pages"), ("ui", "pages")])
def test_imports_point_down_the_layers(lower, upper):
    graph = import_graph("dbpa_core", "ui", "pages")
    assert not _edges_into(graph, lower, upper)


def test_ui_has_no_import_cycle():
    cycle = find_cycle(import_graph("ui", module_level=True))
    assert cycle is None, "import cycle: " + " → ".join(cycle or ())
