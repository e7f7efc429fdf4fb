"""Session-state keys and defaults, shared by every page.

Widgets whose value must survive a page switch use keys starting with ``w_``;
``app.py`` keeps a shadow copy of them (Streamlit otherwise drops the state of
widgets that are not on the current page). Everything a user types stays in
this session, except model definitions (never keys), which are saved in
``$DBPA_HOME/models.yaml`` so that added models survive a reload, and finished
audits, which are recorded in the run history (``$DBPA_HOME/history.sqlite3``).
"""

from __future__ import annotations

import os
from typing import Any

import streamlit as st

from dbpa_core.cache import Cache, default_cache_dir
from dbpa_core.history import History
from dbpa_core.home import save_models as _save_models
from dbpa_core.measures import DEFAULT_MEASURE
from dbpa_core.spec import model_label
from dbpa_core.spec_models import load_models

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
    "w_audit_name": "",
}


# (widget key, what the sidebar calls it, lowest, highest) of the settings a page checks
# before Run: their fields have no bounds of their own, so that a value out of range is
# seen (and named) instead of silently replaced by the last valid one
CHECKED_NUMBERS = (
    ("w_samples", "Samples per prompt (k)", 2, 500),
    ("w_permutations", "Permutations (B)", 100, 100_000),
)


def number_problem() -> str | None:
    """One line naming the first checked sidebar setting that is out of its range (with
    the range), or None when every one is in range."""
    ss = st.session_state
    for key, label, lo, hi in CHECKED_NUMBERS:
        value = ss.get(key, DEFAULTS[key])
        if value is None or not lo <= value <= hi:
            now = "empty" if value is None else f"{value:,}"
            return f"{label} must be between {lo:,} and {hi:,} (it is {now}): change it in the sidebar."
    return None


def demo_file() -> str | None:
    """The replay file of demo mode (``DBPA_REPLAY_FILE``), or None."""
    return os.environ.get("DBPA_REPLAY_FILE") or None


@st.cache_data(show_spinner=False, max_entries=8)
def _recorded_models(path: str, mtime: float) -> list[str]:
    """Model names recorded in a replay file, most responses first."""
    from collections import Counter

    from dbpa_core.backends.replay import load_replay_file

    counts: Counter = Counter()
    for (_prompt, model), responses in load_replay_file(path).items():
        if model:
            counts[model] += len(responses)
    return [m for m, _ in counts.most_common()]


@st.cache_data(show_spinner=False, max_entries=8)
def _models_answering(path: str, mtime: float, prompt: str, k: int) -> list[str]:
    """Model names of a replay file that hold ``k`` answers to ``prompt``, most first."""
    from dbpa_core.backends.replay import load_replay_file

    return [m for m in _recorded_models(path, mtime) if len(load_replay_file(path).get((prompt, m), ())) >= k]


def demo_defaults() -> dict[str, Any]:
    """Widget values that make the demo's pages show what the recording can: the Persona
    explorer on every recorded model that answers its example (personas x models)."""
    replay = demo_file()
    if not replay:
        return {}
    try:
        names = _models_answering(
            replay, os.path.getmtime(replay), presets.NICE_PROMPT, DEFAULTS["w_samples"]
        )
    except Exception:  # noqa: BLE001 - a broken file is reported when a run uses it
        return {}
    if len(names) < 2:
        return {}
    return {"w_persona_models": [f"{n} (recorded)" for n in names]}


def demo_banner() -> str | None:
    """One line that says the dashboard is a demo (None when it is not)."""
    replay = demo_file()
    if not replay:
        return None
    return (
        "**Demo mode**: every answer is replayed from responses recorded with the embedded "
        f"model (`{os.path.basename(replay)}`), so only the recorded prompts can run and "
        "nothing is sampled. Start the dashboard without `DBPA_REPLAY_FILE` to audit real "
        "models."
    )


def default_models() -> list[dict[str, Any]]:
    """The embedded model and two temperature variants of it (so that Model comparison
    runs out of the box). In demo mode (``DBPA_REPLAY_FILE``): one replay model per model
    recorded in the file — for the shipped demo, SmolLM2 at T = 0.8, 1.2 and 0.4."""
    replay = demo_file()
    if replay:
        try:
            names = _recorded_models(replay, os.path.getmtime(replay))
        except Exception:  # noqa: BLE001 - a broken file is reported when a run uses it
            names = []
        if not names:
            return [{"backend": "replay", "file": replay, "label": "replay"}]
        return [{"backend": "replay", "file": replay, "name": n, "label": f"{n} (recorded)"} for n in names]
    return [dict(DEFAULT_MODEL)] + [
        {"backend": "local", "temperature": t} for t in presets.VARIANT_TEMPERATURES
    ]


def _initial_models() -> tuple[list[dict[str, Any]], list[str]]:
    """The default models merged with the ones saved in ``$DBPA_HOME/models.yaml``."""
    try:
        saved, problems = load_models()
    except OSError as exc:
        saved, problems = [], [f"The saved models could not be read: {exc}"]
    defaults = default_models()
    if demo_file():
        labels = {model_label(m) for m in defaults}
        return defaults + [m for m in saved if model_label(m) not in labels], problems
    return (saved or defaults), problems


def save_models() -> str | None:
    """Save the session's model definitions (never keys; in demo mode, only the ones the
    user added). Returns an error message, or None when saved."""
    models = st.session_state["models"]
    if demo_file():
        defaults = default_models()
        models = [m for m in models if m not in defaults]
    try:
        _save_models(models)
    except OSError as exc:
        return f"The models could not be saved to $DBPA_HOME ({exc}); they last this session."
    return None


def model_identity(model: dict[str, Any]) -> tuple:
    """What makes two model definitions the same model, whatever their labels: backend,
    name, server (and key variable), file or folder, temperature variant."""
    kind = model.get("backend", "local")
    where = None
    if kind == "openai":
        from dbpa_core.backends.openai_compat import OpenAIClientSettings

        where = (OpenAIClientSettings(base_url=model.get("base_url")).host, model.get("api_key_env"))
    elif kind in ("hf", "replay"):
        where = os.path.realpath(str(model.get("path" if kind == "hf" else "file") or ""))
    name = model.get("name") if kind != "local" else None
    return kind, name, where, model.get("temperature")


def same_model(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return model_identity(a) == model_identity(b)


def free_label(label: str) -> str:
    """``label``, or ``label (2)``, ``(3)``, … when a configured model already has it."""
    taken = {model_label(m) for m in st.session_state["models"]}
    n, free = 2, label
    while free in taken:
        free, n = f"{label} ({n})", n + 1
    return free


def remember(key: str, value: Any) -> None:
    """Set a ``w_*`` widget value, also in the page-switch store (see keep_widget_state),
    so that the page it belongs to starts from it."""
    st.session_state[key] = value
    st.session_state.setdefault("_persist", {})[key] = value


def page_names() -> dict[str, str]:
    """The audit name of each page (by its file's stem), as last typed or loaded there."""
    return st.session_state.setdefault("_audit_names", {})


def use_page_name(page: str) -> None:
    """Show ``page``'s own audit name in the sidebar's name field (one widget shared by the
    pages): swapped in when the page changes, so a name typed or loaded on one page never
    renames the audits of the others."""
    ss = st.session_state
    current = ss.get("_audit_name_page")
    if current != page:
        names = page_names()
        if current is None and page not in names:  # the session's first page keeps a name
            names[page] = str(ss.get("w_audit_name") or "")  # set before it was shown
        remember("w_audit_name", names.get(page, ""))
        ss["_audit_name_page"] = page


def name_page(page: str, name: str) -> None:
    """Give ``page`` (a file stem) an audit name before it is opened (History's load)."""
    page_names()[page] = name
    current = st.session_state.get("_audit_name_page")
    # the shared field holds the name of the page it was last shown on
    remember("w_audit_name", name if current == page else page_names().get(current, ""))


# the model pickers of the pages: one model, or several
SINGLE_PICKERS = ("w_landing_model", "w_bat_model")
MULTI_PICKERS = ("w_persona_models", "w_roc_models", "w_models_others", "w_fid_models")


def select_everywhere(labels: list[str]) -> None:
    """Make newly added models the ones the pages use: the model of a one-model page (the
    first of ``labels``), and more models of a several-models page."""
    if not labels:
        return
    ss = st.session_state
    for key in SINGLE_PICKERS:
        remember(key, labels[0])
    for key in MULTI_PICKERS:
        remember(key, [m for m in ss.get(key, []) if m not in labels] + list(labels))


def use_cache_dir(typed: str) -> str | None:
    """Make ``typed`` the session's cache folder (created if need be). Returns why it
    cannot be (the current folder stays), or None."""
    ss = st.session_state
    current = ss["cache_dir"]
    folder = (typed or "").strip()
    if not folder:
        return f"The cache folder cannot be empty: still using {current}."
    path = os.path.abspath(os.path.expanduser(folder))
    try:
        os.makedirs(path, exist_ok=True)
        probe = os.path.join(path, f".dbpa-write-test-{os.getpid()}")
        with open(probe, "wb"):
            pass
        os.remove(probe)
    except OSError as exc:
        return f"Cannot use {folder} as the cache folder ({exc.strerror or exc}): still using {current}."
    ss["cache_dir"] = path
    return None


def history() -> History:
    """The run history (``$DBPA_HOME/history.sqlite3``, or the database ``$DBPA_DATABASE_URL``
    names)."""
    return History()


def init() -> None:
    ss = st.session_state
    for k, v in DEFAULTS.items():
        ss.setdefault(k, v)
    if "models" not in ss:  # configured models (Settings page)
        ss["models"], ss["model_problems"] = _initial_models()
    ss.setdefault("model_problems", [])
    ss.setdefault("api_keys", {})  # in memory only, by sampling.key_slot (variable at server)
    ss.setdefault("cache_dir", str(default_cache_dir()))
    ss.setdefault("perturbations", presets.default_perturbations())
    ss.setdefault("perturbations_version", 0)
    ss.setdefault("results", {})  # page -> results
    ss.setdefault("results_meta", {})  # page -> when, run id, inputs
    if not ss.get("_demo_defaults_set"):
        ss["_demo_defaults_set"] = True
        for k, v in demo_defaults().items():
            if k not in ss.get("_persist", {}):
                remember(k, v)


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
    return {
        "samples": int(ss.w_samples or 0),
        "permutations": int(ss.w_permutations or 0),
        "measure": ss.w_measure,
        "correction": ss.w_correction,
        "alpha": float(ss.w_alpha),
        "temperature": float(ss.w_temperature),
        "max_tokens": int(ss.w_max_tokens),
        "seed": int(ss.w_seed),
        "embedder": {"backend": ss.w_embedder},
        "null": ss.w_null,
        "min_effect": float(ss.w_min_effect) or None,
    }
