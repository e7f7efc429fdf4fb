"""The command line is one package, dbpa_core/cli/, with a module per command registered the
same way; the library never imports it (imports point down the layers); every text table is
printed by one helper, fmt.table."""

import argparse
import ast
import pathlib
import subprocess
import sys

import pytest

from dbpa_core import cli
from dbpa_core.fmt import table

ROOT = pathlib.Path(__file__).resolve().parents[1]
LIB = ROOT / "dbpa_core"


def test_every_command_is_a_module_with_add_parser_and_run():
    names = []
    for command in cli.COMMANDS:
        sub = argparse.ArgumentParser().add_subparsers()
        parser = command.add_parser(sub)
        assert isinstance(parser, argparse.ArgumentParser) and callable(command.run)
        names += list(sub.choices)
    assert names == [
        "audit",
        "estimate",
        "attack",
        "fidelity",
        "schema",
        "cache",
        "sensitivity",
        "import",
        "history",
        "report",
        "scan",
        "ui",
        "setup",
        "examples",
    ]
    ap = cli.build_parser()
    for name in names:  # each command runs its module's run()
        argv = {
            "audit": ["audit", "s.yaml"],
            "estimate": ["estimate", "s.yaml"],
            "attack": ["attack", "s.yaml"],
            "cache": ["cache", "info"],
            "sensitivity": ["sensitivity", "s.yaml"],
            "import": ["import", "f.csv"],
            "report": ["report", "1", "--out", "r.html"],
            "scan": ["scan", "m.yaml"],
        }.get(name, [name])
        func = ap.parse_args(argv).func
        assert func.__module__ == f"dbpa_core.cli.{'import_' if name == 'import' else name}"


def test_the_library_below_the_cli_never_imports_it():
    """dbpa_core.suite used to import the CLI's table helper and history recorder."""
    upward = []
    for path in LIB.rglob("*.py"):
        if "cli" in path.relative_to(LIB).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                mod = node.module or ""
                names = [a.name for a in node.names]
                depth = len(path.relative_to(LIB).parts) - 1  # dots that reach dbpa_core
                top = "dbpa_core" + ("." + mod if mod else "")
                target = mod if node.level == 0 else (top if node.level == depth + 1 else mod)
                if target.startswith("dbpa_core.cli") or (target == "dbpa_core" and "cli" in names):
                    upward.append(str(path.relative_to(ROOT)))
            elif isinstance(node, ast.Import):
                if any(a.name.startswith("dbpa_core.cli") for a in node.names):
                    upward.append(str(path.relative_to(ROOT)))
    assert upward == []


def test_the_old_modules_are_gone():
    assert not (LIB / "cli.py").exists() and not (LIB / "history_cli.py").exists()
    assert not (LIB / "fidelity" / "command.py").exists()


def test_python_m_and_a_light_start():
    """`python -m dbpa_core.cli` is the dbpa command, and importing it loads no numpy (the
    commands import what they need when they run)."""
    proc = subprocess.run(
        [sys.executable, "-m", "dbpa_core.cli", "--help"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0 and "usage: dbpa" in proc.stdout and "history" in proc.stdout
    code = "import sys, dbpa_core.cli; print('numpy' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "False", proc.stderr


def test_table_keeps_cells_as_written_and_aligns_on_request():
    text = table(
        [("doctor", "0.0010", "***", "1,000"), ("a", "< 0.001", "", "20")],
        ("name", "p", "", "needed"),
        align="lllr",
    )
    lines = text.splitlines()
    assert lines[0].split() == ["name", "p", "needed"]
    assert set(lines[1].replace(" ", "")) == {"-"}
    assert "0.0010" in lines[2] and "< 0.001" in lines[3]  # never re-read as numbers
    assert lines[2].endswith(" 1,000") and lines[3].endswith("    20")  # right-aligned
    assert all(line == line.rstrip() for line in lines)
    # columns line up: each cell starts where its header starts
    assert lines[2].index("0.0010") == lines[0].index("p") == lines[3].index("< 0.001")


def test_table_with_free_text_last_column_keeps_a_short_rule():
    sentence = "sim-close is at least as good as uniform on at least 90 % of these questions."
    text = table([("sim-close", "uniform", sentence)], ("first", "second", "verdict"), free_last=True)
    rule = text.splitlines()[1]
    assert rule.endswith("  -------") and text.splitlines()[2].endswith(sentence)


@pytest.mark.parametrize("rows", [[], [("x",)]])
def test_table_with_few_rows(rows):
    text = table(rows, ("only",))
    assert text.splitlines()[0] == "only" and text.splitlines()[1].strip("-") == ""
