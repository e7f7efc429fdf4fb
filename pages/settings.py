"""Models (saved in $DBPA_HOME, keys never), keys (kept in this browser session only) and
the cache."""
import os

import streamlit as st

from dbpa_core.backends.base import redact_url
from dbpa_core.cache import CacheError
from dbpa_core.home import models_file
from dbpa_core.spec import model_label
from ui import connection, state, widgets
from ui.widgets import md_escape

widgets.page_setup()
st.title("Settings")
ss = st.session_state

st.subheader("Models")
st.caption("The embedded SmolLM2-135M runs offline with no key. Add any OpenAI-compatible "
           "server (OpenAI, vLLM, Ollama, llama.cpp), a local Hugging Face folder, or a "
           f"replay file of recorded responses. Models are saved in `{models_file()}` and come "
           "back after a reload; API keys never are.")
for problem in ss.get("model_problems", []):
    st.warning(md_escape(problem))
note = ss.pop("_settings_note", None)
if note:
    getattr(st, note[0])(note[1])


def _select_everywhere(label: str) -> None:
    """Make a newly added model the one each audit page uses (or one of them)."""
    ss["w_landing_model"] = label
    for key in ("w_persona_models", "w_roc_models", "w_models_others"):
        chosen = [m for m in ss.get(key, []) if m != label]
        ss[key] = chosen + [label]


for i, m in enumerate(list(ss["models"])):
    c1, c2, c3 = st.columns([5, 1, 1])
    desc = {"local": "embedded, offline", "openai": redact_url(m.get("base_url", "")),
            "hf": m.get("path", ""), "replay": m.get("file", "")}[m.get("backend", "local")]
    c1.markdown(f"**{md_escape(model_label(m))}** · `{m.get('backend', 'local')}` · "
                f"{md_escape(desc)}")
    if c2.button("Test", key=f"settings_test_{i}", help="One tiny call (a replay file: read it)"):
        with st.spinner(f"Testing {model_label(m)} …"):
            check = connection.check_model(m, api_keys=ss["api_keys"], cache_dir=ss["cache_dir"])
        (st.success if check.ok else st.error)(md_escape(check.message))
    if len(ss["models"]) > 1 and c3.button("Remove", key=f"settings_rm_{i}"):
        ss["models"].pop(i)
        error = state.save_models()
        if error:
            ss["_settings_note"] = ("warning", error)
        st.rerun()

st.markdown("**Add a model**")
backend = st.radio("Backend", ["openai", "local", "hf", "replay"], horizontal=True,
                   key="settings_backend", format_func={
                       "openai": "OpenAI-compatible server", "local": "Local model variant",
                       "hf": "Hugging Face folder", "replay": "Replay file"}.get)
with st.form("settings_add_model", clear_on_submit=False):
    cfg: dict = {"backend": backend}
    key = ""
    if backend == "openai":
        c1, c2 = st.columns(2)
        name = c1.text_input("Model name", key="settings_name", placeholder="gpt-4o-mini")
        base_url = c2.text_input("Base URL", key="settings_base_url",
                                 value="https://api.openai.com/v1",
                                 help="vLLM: http://host:8000/v1 · Ollama: http://host:11434/v1")
        key = c1.text_input("API key (kept in this session only, never saved)", type="password",
                            key="settings_key")
        key_env = c2.text_input("…or the environment variable that holds it",
                                key="settings_key_env", value="OPENAI_API_KEY")
    elif backend == "local":
        st.caption("The embedded SmolLM2-135M sampled at another temperature: a second "
                   "'model' that works offline.")
        c1, c2 = st.columns(2)
        name = c1.text_input("Label (optional)", key="settings_name")
        temperature = c2.number_input("Temperature", 0.0, 2.0, 1.2, 0.1,
                                      key="settings_temperature")
    else:
        c1, c2 = st.columns(2)
        what = "Folder of the model" if backend == "hf" else "JSONL file of recorded responses"
        path = c1.text_input(what, key="settings_path")
        name = c2.text_input("Model name (optional; for replay: the records' 'model')",
                             key="settings_name")
    test = st.checkbox("Test it first (one tiny call; a replay file is read)", value=True,
                       key="settings_test_first")
    if st.form_submit_button("Add model", type="primary"):
        error = None
        if backend == "openai":
            if not name.strip():
                error = "Give the model name the server knows (e.g. gpt-4o-mini)."
            cfg.update(name=name.strip(), base_url=base_url.strip(),
                       api_key_env=key_env.strip() or "OPENAI_API_KEY")
        elif backend == "local":
            cfg["temperature"] = float(temperature)
            if name.strip():
                cfg["label"] = name.strip()
        elif backend == "hf":
            if not os.path.isdir(path):
                error = f"No folder at {path!r}."
            cfg.update(path=path, name=name.strip() or None)
        else:
            if not os.path.isfile(path):
                error = f"No file at {path!r}."
            cfg.update(file=path, name=name.strip() or None)
        cfg = {k: v for k, v in cfg.items() if v is not None}
        if not error and model_label(cfg) in {model_label(m) for m in ss["models"]}:
            error = f"A model called {model_label(cfg)!r} is already there: give a label."
        keys = dict(ss["api_keys"])
        if key and not error:
            keys[cfg["api_key_env"]] = key
        check = None
        if not error and test:
            with st.spinner(f"Testing {model_label(cfg)} …"):
                check = connection.check_model(cfg, api_keys=keys, cache_dir=ss["cache_dir"])
            if not check.ok:
                error = check.message + " Not added: fix it, or untick the test to add anyway."
        if error:
            st.error(md_escape(error))
        else:
            if key:
                ss["api_keys"][cfg["api_key_env"]] = key
            ss["models"].append(cfg)
            _select_everywhere(model_label(cfg))
            saved = state.save_models()
            text = f"Added **{md_escape(model_label(cfg))}** and selected it on the audit pages."
            if check is not None:
                text += " " + md_escape(check.message)
            ss["_settings_note"] = ("warning", saved) if saved else ("success", text)
            for k in ("settings_name", "settings_key", "settings_path"):
                ss.pop(k, None)
            st.rerun()

st.subheader("Cache")
st.caption("Every response and embedding is cached on disk, so a repeated or interrupted run "
           "costs nothing twice. Keys are never cached. Recorded runs stay in the History "
           "whatever happens to the cache.")
st.text_input("Cache folder", key="cache_dir")
cache = state.cache()


def _clear_cache() -> None:  # runs before the page is drawn: the counts below are fresh
    c = state.cache()
    n = c.clear()
    st.session_state["_settings_cleared"] = (
        "The damaged cache was removed and an empty one started." if c.repaired
        else f"Removed {n} cached items.")


c1, c2, c3 = st.columns(3)
try:
    n_cached = cache.count()
    c1.metric("Cached items", f"{n_cached:,}")
    c2.metric("Size", f"{cache.volume() / 1e6:.1f} MB")
except CacheError as exc:  # a damaged store: one line; Clear repairs it
    n_cached = None
    st.error(str(exc), icon=":material/error:")
if ss.get("_settings_confirm_clear"):
    what = f"all {n_cached:,} cached" if n_cached is not None else "the damaged cache of"
    st.warning(f"Remove {what} responses and embeddings? Audits will have to ask the models "
               "again (paid calls for a remote model).")
    y, n, _ = st.columns([1, 1, 4])
    if y.button("Yes, clear the cache", key="settings_clear_yes", type="primary"):
        ss["_settings_confirm_clear"] = False
        _clear_cache()
        st.rerun()
    if n.button("Cancel", key="settings_clear_no"):
        ss["_settings_confirm_clear"] = False
        st.rerun()
elif c3.button("Clear the cache…", key="settings_clear", icon=":material/delete:"):
    ss["_settings_confirm_clear"] = True
    st.rerun()
if cleared := ss.pop("_settings_cleared", None):
    st.success(cleared)

from ui import imports  # noqa: E402 - the import block is self-contained, at the end

imports.import_block()
