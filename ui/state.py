"""Session-state keys and defaults, shared by every page.

Widgets whose value must survive a page switch use keys starting with ``w_``;
``app.py`` keeps a shadow copy of them (Streamlit otherwise drops the state of
widgets that are not on the current page). Everything a user types stays in
this session: nothing here is shared between sessions, and API keys are never
written anywhere.
"""
from __future__ import annotations

import os
from typing import Any

import streamlit as st

from dbpa_core.cache import Cache, default_cache_dir
from dbpa_core.measures import DEFAULT_MEASURE

from . import presets

DEFAULT_MODEL = {"backend": "local"}

DEFAULTS: dict[str, Any] = {
    "w_base_prompt": presets.NICE_PROMPT,
    "w_samples": 20,
    "w_permutations": 2000,
    "w_measure": DEFAULT_MEASURE,
    "w_null": "base",
    "w_min_effect": 0.0,
    "w_correction": "holm",
    "w_alpha": 0.05,
    "w_temperature": 0.8,
    "w_max_tokens": 120,
    "w_seed": 0,
    "w_embedder": "local",
}


def default_models() -> list[dict[str, Any]]:
    """The embedded model, or replayed responses when ``DBPA_REPLAY_FILE`` names a file
    (demos without waiting for generation; the browser tests)."""
    replay = os.environ.get("DBPA_REPLAY_FILE")
    if replay:
        return [{"backend": "replay", "file": replay, "label": "replay"}]
    return [dict(DEFAULT_MODEL)]


def init() -> None:
    ss = st.session_state
    for k, v in DEFAULTS.items():
        ss.setdefault(k, v)
    ss.setdefault("models", default_models())           # configured models (Settings page)
    ss.setdefault("api_keys", {})                       # in memory only
    ss.setdefault("cache_dir", str(default_cache_dir()))
    ss.setdefault("perturbations", presets.default_perturbations())
    ss.setdefault("perturbations_version", 0)
    ss.setdefault("results", {})                        # page -> results


def keep_widget_state() -> None:
    """Keep ``w_*`` widget values across page switches.

    Streamlit deletes the state of a widget that is not rendered in a run, and a
    widget on another page is another widget even with the same key. So each run
    first copies every live ``w_*`` value into a shadow store, then sets every
    stored value again as a user value, which the page's widgets start from.
    """
    ss = st.session_state
    store = ss.setdefault("_persist", {})
    for k in list(ss.keys()):
        if isinstance(k, str) and k.startswith("w_"):
            store[k] = ss[k]
    for k, v in store.items():
        ss[k] = v


@st.cache_resource(show_spinner=False)
def _cache_for(directory: str) -> Cache:
    # one open cache per folder for the whole server: diskcache is thread- and
    # process-safe, and reopening its SQLite store on every rerun is wasted work
    return Cache(directory)


def cache() -> Cache:
    return _cache_for(st.session_state["cache_dir"])


def settings() -> dict[str, Any]:
    """The audit settings shared by every page (from the sidebar widgets)."""
    ss = st.session_state
    return {"samples": int(ss.w_samples), "permutations": int(ss.w_permutations),
            "measure": ss.w_measure, "correction": ss.w_correction, "alpha": float(ss.w_alpha),
            "temperature": float(ss.w_temperature), "max_tokens": int(ss.w_max_tokens),
            "seed": int(ss.w_seed), "embedder": {"backend": ss.w_embedder},
            "null": ss.w_null, "min_effect": float(ss.w_min_effect) or None}
