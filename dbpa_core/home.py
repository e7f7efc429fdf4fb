"""``DBPA_HOME``: the per-user folder that holds what outlives a session — the run history
database (:mod:`dbpa_core.history`) and the saved model definitions (``models.yaml``).

API keys are never written here: a saved model names the *environment variable* that holds
its key (``api_key_env``); a key typed into the dashboard stays in that browser session.
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

MODELS_FILE = "models.yaml"
# never saved, whatever a caller passes in
SECRET_KEYS = frozenset({"api_key", "key", "token", "password", "secret"})


def dbpa_home() -> Path:
    """``$DBPA_HOME``, else the per-user data folder (``~/.local/share/dbpa`` on Linux)."""
    env = os.environ.get("DBPA_HOME")
    if env:
        return Path(env).expanduser()
    from platformdirs import user_data_dir

    return Path(user_data_dir("dbpa"))


def models_file() -> Path:
    return dbpa_home() / MODELS_FILE


def _clean(model: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in model.items() if v is not None and k.lower() not in SECRET_KEYS}


def save_models(models: Sequence[dict[str, Any]], path: str | os.PathLike | None = None) -> Path:
    """Write model definitions (never keys) to ``models.yaml``, atomically."""
    target = Path(path) if path else models_file()
    target.parent.mkdir(parents=True, exist_ok=True)
    text = ("# Models added in the dbpa dashboard (keys are never saved here: `api_key_env`\n"
            "# names the environment variable that holds one).\n"
            + yaml.safe_dump({"models": [_clean(dict(m)) for m in models]}, sort_keys=False,
                             allow_unicode=True))
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, target)
    return target


def load_models(path: str | os.PathLike | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """Saved model definitions, validated like a spec's ``model`` section.

    Returns ``(models, problems)``: entries that fail validation (a replay file that was
    deleted, a mistyped key) are left out and described in ``problems``; a missing file
    gives ``([], [])``.
    """
    from .spec import SpecError, _Doc, _model

    source = Path(path) if path else models_file()
    if not source.is_file():
        return [], []
    doc = _Doc(str(source))
    try:
        node = yaml.compose(source.read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
        raw = doc.convert(node) if node is not None else {}
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        return [], [f"{source}: not a valid models file ({exc}); it was left as it is"]
    entries = raw.get("models") if isinstance(raw, dict) else None
    if not isinstance(entries, list):
        return [], [f"{source}: expected a list under 'models'"]
    models, problems = [], []
    for i, entry in enumerate(entries):
        try:
            models.append(_model(doc, _clean(entry) if isinstance(entry, dict) else entry,
                                 ("models", i), source.parent))
        except SpecError as exc:
            problems.append(str(exc))
    return models, problems
