"""Model entries of a spec (``model:``, ``models:``, a judge's model, the dashboard's saved
models): checked against :class:`~dbpa_core.spec_schema.ModelEntry`, then what the schema
cannot say (the files they name exist, a server's URL is http(s), the API key variable is
one a spec may send).

Above :mod:`dbpa_core.spec_doc` and :mod:`dbpa_core.home` (the user's settings allow key
variables); below every spec that names a model.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from .backends.base import redact_url
from .spec_doc import SpecDoc, SpecError, existing_path, get_value, key_name
from .spec_schema import ModelEntry, validate_section

# The environment variables a spec may send to its server as an API key: those of LLM
# providers (and DBPA_*). A spec decides which variable goes to which URL, so any other
# name (a cloud, CI, registry or chat-bot token) must be allowed by the user: on the command
# line (--allow-key-env NAME) or in their own settings file ($DBPA_HOME/settings.yaml,
# `allow_key_env: [NAME, ...]`) — never by a spec alone.
LLM_KEY_ENVS = frozenset(
    {
        "OPENAI_API_KEY",
        "AZURE_OPENAI_API_KEY",
        "AZURE_OPENAI_KEY",
        "AZURE_API_KEY",
        "ANTHROPIC_API_KEY",
        "MISTRAL_API_KEY",
        "CODESTRAL_API_KEY",
        "TOGETHER_API_KEY",
        "TOGETHERAI_API_KEY",
        "GROQ_API_KEY",
        "OPENROUTER_API_KEY",
        "FIREWORKS_API_KEY",
        "FIREWORKS_AI_API_KEY",
        "DEEPSEEK_API_KEY",
        "GEMINI_API_KEY",
        "XAI_API_KEY",
        "PERPLEXITY_API_KEY",
        "PPLX_API_KEY",
        "COHERE_API_KEY",
        "CO_API_KEY",
        "AI21_API_KEY",
        "CEREBRAS_API_KEY",
        "DEEPINFRA_API_KEY",
        "DEEPINFRA_API_TOKEN",
        "NVIDIA_API_KEY",
        "NVIDIA_NIM_API_KEY",
        "SAMBANOVA_API_KEY",
        "NEBIUS_API_KEY",
        "HYPERBOLIC_API_KEY",
        "NOVITA_API_KEY",
        "LEPTON_API_KEY",
        "ANYSCALE_API_KEY",
        "OCTOAI_TOKEN",
        "REPLICATE_API_TOKEN",
        "VOYAGE_API_KEY",
        "JINA_API_KEY",
        "DASHSCOPE_API_KEY",
        "MOONSHOT_API_KEY",
        "ZHIPUAI_API_KEY",
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "HUGGINGFACEHUB_API_TOKEN",
        "HF_API_TOKEN",
        "LITELLM_API_KEY",
        "LITELLM_MASTER_KEY",
        "VLLM_API_KEY",
        "OLLAMA_API_KEY",
        "LM_STUDIO_API_KEY",
        "LLAMA_API_KEY",
        "OPENAI_COMPATIBLE_API_KEY",
    }
)
DBPA_KEY_ENV = re.compile(r"DBPA_[A-Z0-9_]+")


def key_env_allowed(name: str, allow_key_env: Iterable[str] | None = ()) -> bool:
    """May a spec send the variable ``name`` as an API key? Yes for an LLM provider's key
    variable (:data:`LLM_KEY_ENVS`) or a ``DBPA_*`` name, and for what the user allowed:
    ``allow_key_env`` (the command line), ``allow_key_env`` in their settings file or
    ``$DBPA_ALLOW_KEY_ENV`` (:func:`dbpa_core.home.allowed_key_envs`; never a model saved
    on the dashboard's Settings page)."""
    from .home import allowed_key_envs

    return (
        name in LLM_KEY_ENVS
        or bool(DBPA_KEY_ENV.fullmatch(name))
        or name in set(allow_key_env or ())
        or name in allowed_key_envs()
    )


def check_server(doc: SpecDoc, obj: dict, path: tuple, allow_key_env: Iterable[str] | None) -> None:
    """What the schema cannot say about the connection keys shared by an openai model and an
    openai embedder (their types are checked by :func:`validate_section` first): the URL
    must be http(s), and the key variable one a spec may send."""
    url = obj.get("base_url")
    if url is not None:
        from urllib.parse import urlsplit

        try:
            u = urlsplit(url)
            ok = u.scheme in ("http", "https") and bool(u.hostname)
        except ValueError:
            ok = False
        if not ok:
            raise doc.err(
                path + ("base_url",),
                f"{key_name(path + ('base_url',))} must be an http(s) "
                f"URL such as http://localhost:8000/v1, got {redact_url(url)!r}",
            )
    env = obj.get("api_key_env")
    if env is not None and not key_env_allowed(env, allow_key_env):
        from .home import settings_file

        raise doc.err(
            path + ("api_key_env",),
            (
                f"{key_name(path + ('api_key_env',))} {env!r} is not an LLM provider's API key variable "
                "(such as OPENAI_API_KEY, ANTHROPIC_API_KEY or HF_TOKEN, or a DBPA_* name); a spec "
                f"decides which variable is sent to which server, so other names must be allowed by "
                f"you: --allow-key-env {env} on the command line, 'allow_key_env: [{env}]' in "
                f"{settings_file()}, or {env} in $DBPA_ALLOW_KEY_ENV"
            ),
        )


_REPLAY_CHECKED: dict[tuple, str | None] = {}


def _check_replay(doc: SpecDoc, path: tuple, file: str) -> None:
    """A replay file must be UTF-8 JSON lines (read once per version of the file)."""
    from .backends.base import BackendError
    from .backends.replay import load_replay_file

    st = os.stat(file)
    stamp = (file, st.st_mtime_ns, st.st_size)
    if stamp not in _REPLAY_CHECKED:
        try:
            load_replay_file(file)
            _REPLAY_CHECKED[stamp] = None
        except BackendError as exc:
            _REPLAY_CHECKED[stamp] = str(exc)
    problem = _REPLAY_CHECKED[stamp]
    if problem:
        raise doc.err(path + ("file",), problem)


def model_entry(
    doc: SpecDoc, obj: Any, path: tuple, base_dir: Path, allow_key_env: Iterable[str] | None = ()
) -> dict[str, Any]:
    """A model entry: checked against :class:`~dbpa_core.spec_schema.ModelEntry`, then what
    the schema cannot say (the files it names exist, a server's URL and key variable)."""
    validate_section(doc, ModelEntry, obj, path)
    cfg = {k: v for k, v in obj.items() if v is not None}
    backend = cfg.setdefault("backend", "local")
    check_server(doc, obj, path, allow_key_env)
    if backend == "openai":
        if not get_value(doc, obj, "name", path, str, required=True).strip():
            raise doc.err(
                path + ("name",),
                f"{key_name(path + ('name',))} is empty: give the model "
                "name the server knows (e.g. gpt-4o-mini)",
            )
    elif backend == "hf":
        cfg["path"] = existing_path(doc, obj, path, "path", base_dir, "Hugging Face model folder")
    elif backend == "replay":
        cfg["file"] = existing_path(doc, obj, path, "file", base_dir, "replay file")
        _check_replay(doc, path, cfg["file"])
    return cfg


def load_models(path: str | os.PathLike | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """Saved model definitions, validated like a spec's ``model`` section.

    Returns ``(models, problems)``: entries that fail validation (a replay file that was
    deleted, a mistyped key) are left out and described in ``problems``; a missing file
    gives ``([], [])``.
    """
    from .home import clean_model, models_file

    source = Path(path) if path else models_file()
    if not source.is_file():
        return [], []
    doc = SpecDoc(str(source))
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
            models.append(
                model_entry(
                    doc,
                    clean_model(entry) if isinstance(entry, dict) else entry,
                    ("models", i),
                    source.parent,
                )
            )
        except SpecError as exc:
            problems.append(str(exc))
    return models, problems


__all__ = [
    "DBPA_KEY_ENV",
    "LLM_KEY_ENVS",
    "check_server",
    "key_env_allowed",
    "load_models",
    "model_entry",
]
