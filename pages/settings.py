"""Backends, keys (kept in this browser session only) and the cache."""
import os

import streamlit as st

from dbpa_core.backends.base import redact_url
from dbpa_core.cache import CacheError
from dbpa_core.spec import model_label
from ui import state, widgets

widgets.page_setup()
st.title("Settings")

st.subheader("Models")
st.caption("The embedded SmolLM2-135M runs offline with no key. Add any OpenAI-compatible "
           "server (OpenAI, vLLM, Ollama, llama.cpp), a local Hugging Face folder, or a "
           "replay file of recorded responses.")
for i, m in enumerate(list(st.session_state["models"])):
    c1, c2 = st.columns([5, 1])
    desc = {"local": "embedded, offline", "openai": redact_url(m.get("base_url", "")),
            "hf": m.get("path", ""), "replay": m.get("file", "")}[m.get("backend", "local")]
    c1.markdown(f"**{model_label(m)}** · `{m.get('backend', 'local')}` · {desc}")
    if len(st.session_state["models"]) > 1 and c2.button("Remove", key=f"settings_rm_{i}"):
        st.session_state["models"].pop(i)
        st.rerun()

st.markdown("**Add a model**")
backend = st.radio("Backend", ["openai", "local", "hf", "replay"], horizontal=True,
                   key="settings_backend", format_func={
                       "openai": "OpenAI-compatible server", "local": "Local model variant",
                       "hf": "Hugging Face folder", "replay": "Replay file"}.get)
with st.form("settings_add_model", clear_on_submit=True):
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
        if error:
            st.error(error)
        elif model_label(cfg) in {model_label(m) for m in st.session_state["models"]}:
            st.error(f"A model called {model_label(cfg)!r} is already there: give a label.")
        else:
            if key:
                st.session_state["api_keys"][cfg["api_key_env"]] = key
            st.session_state["models"].append(cfg)
            st.success(f"Added {model_label(cfg)}.")
            st.rerun()

st.subheader("Cache")
st.caption("Every response and embedding is cached on disk, so a repeated or interrupted run "
           "costs nothing twice. Keys are never cached.")
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
    c1.metric("Cached items", f"{cache.count():,}")
    c2.metric("Size", f"{cache.volume() / 1e6:.1f} MB")
except CacheError as exc:  # a damaged store: one line; Clear repairs it
    st.error(str(exc), icon=":material/error:")
c3.button("Clear the cache", key="settings_clear", icon=":material/delete:", on_click=_clear_cache)
if cleared := st.session_state.pop("_settings_cleared", None):
    st.success(cleared)

from ui import imports  # noqa: E402 - the import block is self-contained, at the end

imports.import_block()
