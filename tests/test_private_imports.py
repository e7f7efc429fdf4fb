"""No module imports another module's private names (``from .x import _name``): what two
modules share is public and documented where it lives (``dbpa_core/_validate.py``, a
module whose name alone is private, exists for exactly this). Read with ``ast``.

There is none left: a new one fails the test with its file and name (make the name
public where it lives, or move it down into a module both import). ``KNOWN`` is the debt
allowed, and stays empty.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("dbpa_core", "ui", "pages")

KNOWN: set[tuple[str, str]] = set()


def private_imports() -> set[tuple[str, str]]:
    """(file, name) of every ``from ... import _name`` in the packages (dunder names and
    whole private modules such as ``_validate`` are not private names)."""
    found = set()
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom):
                    for alias in node.names:
                        if alias.name.startswith("_") and not alias.name.startswith("__"):
                            found.add((path.relative_to(ROOT).as_posix(), alias.name))
    return found


def test_the_reader_finds_a_private_import(tmp_path):
    tree = ast.parse("from .types import _jsonable, jsonable\nfrom . import _validate\n")
    names = [a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names]
    assert [n for n in names if n.startswith("_") and not n.startswith("__")] == ["_jsonable", "_validate"]


def test_no_new_import_of_a_private_name():
    new = sorted(private_imports() - KNOWN - {(f, "_validate") for f, _ in private_imports()})
    assert not new, (
        "private names imported from another module (make them public where they live): "
        + ", ".join(f"{f} imports {n}" for f, n in new)
    )


def test_the_run_interface_and_its_outputs_import_no_private_name():
    mine = ("dbpa_core/runs/", "dbpa_core/report.py", "dbpa_core/junit.py", "dbpa_core/intervals.py")
    assert not [x for x in private_imports() if x[0].startswith(mine)]


def private_uses() -> set[tuple[str, str]]:
    """(file, ``module._name``) of every private name reached through one of the project's
    own modules imported whole (``from ui import runner`` then ``runner._save_run``)."""
    found = set()
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            ours: set[str] = set()
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and (
                    node.level or (node.module or "").split(".")[0] in PACKAGES
                ):
                    ours.update(a.asname or a.name for a in node.names)
                elif isinstance(node, ast.Import):
                    ours.update(a.asname or a.name for a in node.names if a.name.split(".")[0] in PACKAGES)
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.Attribute)
                    and isinstance(node.value, ast.Name)
                    and node.value.id in ours
                    and node.attr.startswith("_")
                    and not node.attr.startswith("__")
                ):
                    found.add((path.relative_to(ROOT).as_posix(), f"{node.value.id}.{node.attr}"))
    return found


def test_no_private_name_is_reached_through_a_module():
    assert not private_uses(), "private names used from another module: " + ", ".join(
        f"{f} uses {n}" for f, n in sorted(private_uses())
    )
