"""No module imports another module's private names (``from .x import _name``): what two
modules share is public and documented where it lives (``dbpa_core/_validate.py``, a
module whose name alone is private, exists for exactly this). Read with ``ast``.

``KNOWN`` lists the imports of private names that were there when this test was written:
debt to pay back (make the name public where it lives, or move it down into a module
both import), never to add to. A new one fails the test with its file and name.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("dbpa_core", "ui", "pages")

KNOWN = {
    ("dbpa_core/attacks/battery.py", "_jsonable"),
    ("dbpa_core/attacks/leaks.py", "_level"),
    ("dbpa_core/attacks/leaks.py", "_number_parts"),
    ("dbpa_core/attacks/spec.py", "_Doc"),
    ("dbpa_core/attacks/spec.py", "_check_keys"),
    ("dbpa_core/attacks/spec.py", "_existing"),
    ("dbpa_core/attacks/spec.py", "_get"),
    ("dbpa_core/attacks/spec.py", "_model"),
    ("dbpa_core/attacks/spec.py", "_name"),
    ("dbpa_core/attacks/spec.py", "_section"),
    ("dbpa_core/audit.py", "_jsonable"),
    ("dbpa_core/batch.py", "_cached_record"),
    ("dbpa_core/batch.py", "_sample_value"),
    ("dbpa_core/cases.py", "_existing"),
    ("dbpa_core/checks.py", "_model"),
    ("dbpa_core/checks.py", "_name"),
    ("dbpa_core/checks.py", "_shown"),
    ("dbpa_core/cli/scan.py", "_model"),
    ("dbpa_core/explain.py", "_jsonable"),
    ("dbpa_core/fidelity/data.py", "_shares_problem"),
    ("dbpa_core/fidelity/discrepancy.py", "_binary_kl_upper"),
    ("dbpa_core/fidelity/simulate.py", "_Doc"),
    ("dbpa_core/fidelity/simulate.py", "_check_keys"),
    ("dbpa_core/fidelity/simulate.py", "_existing"),
    ("dbpa_core/fidelity/simulate.py", "_get"),
    ("dbpa_core/fidelity/simulate.py", "_model"),
    ("dbpa_core/fidelity/simulate.py", "_name"),
    ("dbpa_core/history.py", "_shown"),
    ("dbpa_core/home.py", "_Doc"),
    ("dbpa_core/home.py", "_model"),
    ("dbpa_core/sensitivity.py", "_jsonable"),
    ("dbpa_core/suite.py", "_jsonable"),
    ("ui/attack_figures.py", "_layout"),
    ("ui/battery.py", "_md"),
    ("ui/checks_figures.py", "_layout"),
    ("ui/checks_figures.py", "_signed"),
    ("ui/checks_view.py", "_judge_request"),
    ("ui/fidelity.py", "_check_questions"),
    ("ui/fidelity.py", "_md"),
    ("ui/fidelity_figures.py", "_layout"),
    ("ui/history_figures.py", "_layout"),
    ("ui/sensitivity_figures.py", "_layout"),
    ("ui/suite_figures.py", "_layout"),
    ("ui/suite_view.py", "_jsonable"),
    ("ui/suite_view.py", "_spec"),
    ("ui/why_figures.py", "_layout"),
}


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
