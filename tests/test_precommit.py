"""The pre-commit hooks: ruff, ruff format and the lock check, all local (the project's
.venv), so that a commit is checked as `make lint` checks it and nothing is downloaded."""

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def _hooks() -> dict[str, dict]:
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    assert [r["repo"] for r in config["repos"]] == ["local"]  # no hook repository to fetch
    return {h["id"]: h for r in config["repos"] for h in r["hooks"]}


def test_the_hooks_are_ruff_ruff_format_and_the_lock_check():
    hooks = _hooks()
    assert set(hooks) == {"ruff", "ruff-format", "lock-check"}
    assert hooks["ruff"]["entry"].startswith(".venv/bin/ruff check")
    assert hooks["ruff-format"]["entry"].startswith(".venv/bin/ruff format")
    assert "tests/test_lock.py" in hooks["lock-check"]["entry"]
    assert hooks["lock-check"]["pass_filenames"] is False


def test_every_hook_runs_the_projects_own_tools():
    for hook in _hooks().values():
        assert hook["language"] == "system", hook["id"]  # no environment pre-commit builds
        tool = hook["entry"].split()[0]
        assert tool.startswith(".venv/bin/"), hook["entry"]
        # the tool the Makefile installs (lint and lock-check call the same ones)
        assert (ROOT / tool).exists(), f"{tool} missing: run make venv"
