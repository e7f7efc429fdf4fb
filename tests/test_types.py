"""dbpa_core type-checks clean: mypy, with the project's own configuration ([tool.mypy] in
pyproject.toml: every function annotated, every body checked), finds no error.

The full check takes about 40 s of CPU on a cold cache (torch's, transformers', numba's,
spaCy's, Streamlit's and sentence-transformers' own types are not read: they are Any), so
it is marked slow: ``make test`` runs it, ``make test-fast`` leaves it out. The
configuration's guard below is fast."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _mypy_config() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["tool"]["mypy"]


def test_mypy_config_checks_every_function_of_the_library():
    cfg = _mypy_config()
    assert cfg["files"] == ["dbpa_core"]
    assert cfg["python_version"] == "3.11"
    # every function typed, and the bodies of all of them checked
    assert cfg["disallow_untyped_defs"] is True
    assert cfg["check_untyped_defs"] is True
    # no check switched off to reach zero errors: no blanket ignore_errors, and the
    # overrides (if any) only say which third-party packages have no types or are not
    # read (follow_imports = "skip": they are Any); none of them names dbpa_core
    assert not cfg.get("ignore_errors", False)
    for override in cfg.get("overrides", []):
        assert set(override) <= {"module", "ignore_missing_imports", "follow_imports"}, override
        assert override.get("follow_imports", "skip") == "skip", override
        modules = [override["module"]] if isinstance(override["module"], str) else override["module"]
        assert not any(m.split(".")[0] == "dbpa_core" for m in modules), override


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_mypy_finds_no_error_in_dbpa_core():
    # run from the repository root, so that mypy reads pyproject.toml and checks this
    # checkout's dbpa_core (its `files`), not an installed copy
    proc = subprocess.run(
        [sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=900
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"mypy found errors in dbpa_core:\n{output}"
    assert "Success: no issues found" in proc.stdout, output
