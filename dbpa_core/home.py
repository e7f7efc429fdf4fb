"""``DBPA_HOME``: the per-user folder that holds what outlives a session — the run history
database (:mod:`dbpa_core.history`) and the saved model definitions (``models.yaml``).

API keys are never written here: a saved model names the *environment variable* that holds
its key (``api_key_env``); a key typed into the dashboard stays in that browser session, and
so does a ``user:password@`` in a ``base_url`` (saved without it).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

MODELS_FILE = "models.yaml"
SETTINGS_FILE = "settings.yaml"
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


def settings_file() -> Path:
    """``$DBPA_HOME/settings.yaml``: the user's own settings (written by hand), e.g.
    ``allow_key_env: [MY_GATEWAY_TOKEN]``."""
    return dbpa_home() / SETTINGS_FILE


def setting(name: str) -> Any:
    """The value of ``name`` in :func:`settings_file` (a mapping written by hand), or None
    when the file, or the key, is missing or the file cannot be read."""
    from .spec_doc import SpecError, read_document

    source = settings_file()
    try:
        if not source.is_file():
            return None
        _, data = read_document(source.read_text(encoding="utf-8"), str(source))
    except (OSError, UnicodeDecodeError, SpecError):
        return None
    return data.get(name) if isinstance(data, dict) else None


class HomeError(OSError):
    """``DBPA_HOME`` cannot be used as a folder (one line that says why)."""


def ensure_home(folder: str | os.PathLike | None = None) -> Path:
    """Create ``folder`` (default ``DBPA_HOME``) if needed and return it; a
    :class:`HomeError` in one line when it cannot be a folder (a regular file, a
    read-only place)."""
    path = Path(folder) if folder else dbpa_home()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        pass
    except OSError as exc:
        raise HomeError(
            f"Cannot create the folder {path} ({exc.strerror or exc}); point "
            "DBPA_HOME at a folder you can write to."
        ) from None
    if not path.is_dir():
        raise HomeError(
            f"{path} is a file, not a folder: DBPA_HOME (where dbpa keeps the run "
            "history and saved models) must be a folder. Point DBPA_HOME at one."
        )
    return path


ALLOW_KEY_ENV_VAR = "DBPA_ALLOW_KEY_ENV"
"""The environment variable that lists more key variables a spec may send (commas or
spaces between), like ``allow_key_env`` in :func:`settings_file`."""


def allowed_key_envs() -> frozenset[str]:
    """Environment variables the operator allows specs to send as API keys (besides the LLM
    providers' own): ``allow_key_env`` in :func:`settings_file` (written by hand) and
    ``$DBPA_ALLOW_KEY_ENV``. Nothing the dashboard writes counts: the ``api_key_env`` of a
    model saved on its Settings page (:func:`models_file`) was chosen by whoever had the
    page open, not necessarily the operator. A settings file that is missing or cannot be
    read allows nothing more."""
    names: set[str] = set(re.split(r"[\s,]+", os.environ.get(ALLOW_KEY_ENV_VAR, "")))
    found = setting("allow_key_env")
    if isinstance(found, str):
        found = [found]
    if isinstance(found, list):
        names.update(x for x in found if isinstance(x, str))
    names.discard("")
    return frozenset(names)


def clean_model(model: dict[str, Any]) -> dict[str, Any]:
    """A model definition fit to be saved: no key, and no ``user:password@`` in its
    ``base_url`` (a credential, kept like a key: in the session only)."""
    out = {k: v for k, v in model.items() if v is not None and k.lower() not in SECRET_KEYS}
    if isinstance(out.get("base_url"), str):
        out["base_url"] = without_credentials(out["base_url"])
    return out


def without_credentials(url: str) -> str:
    """``url`` with its ``user:password@`` part removed (unchanged when it has none)."""
    from urllib.parse import urlsplit, urlunsplit

    try:
        u = urlsplit(url)
    except ValueError:
        return url
    if "@" not in u.netloc:
        return url
    return urlunsplit((u.scheme, u.netloc.rsplit("@", 1)[1], u.path, u.query, u.fragment))


def save_models(models: Sequence[dict[str, Any]], path: str | os.PathLike | None = None) -> Path:
    """Write model definitions (never keys) to ``models.yaml``, atomically."""
    target = Path(path) if path else models_file()
    ensure_home(target.parent)
    text = (
        "# Models added in the dbpa dashboard (keys are never saved here: `api_key_env`\n"
        "# names the environment variable that holds one).\n"
        + yaml.safe_dump(
            {"models": [clean_model(dict(m)) for m in models]}, sort_keys=False, allow_unicode=True
        )
    )
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, target)
    return target
