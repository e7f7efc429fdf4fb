"""Models (saved in $DBPA_HOME, keys never), keys (kept in this browser session only) and
the cache."""

import hashlib
import os

import streamlit as st

from dbpa_core.backends.base import redact_url
from dbpa_core.cache import CacheError
from dbpa_core.home import models_file
from dbpa_core.keyhosts import env_key_allowed
from dbpa_core.sampling import key_slot
from dbpa_core.spec import model_label
from ui import connection, state, widgets
from ui.widgets import md_escape

widgets.page_setup()
st.title("Settings")
ss = st.session_state

st.subheader("Models")
st.caption(
    "The embedded SmolLM2-135M runs offline with no key. Add any OpenAI-compatible "
    "server (OpenAI, vLLM, Ollama, llama.cpp), a local Hugging Face folder, or a "
    f"replay file of recorded responses. Models are saved in `{models_file()}` and come "
    "back after a reload; API keys never are: type a server's key into its key field "
    "below (kept in this browser session only), or set the environment variable it "
    "names before starting the dashboard — sent only to the OpenAI API and to the servers "
    "allowed where the dashboard runs (`allow_key_hosts` in settings.yaml, "
    "`DBPA_ALLOW_KEY_HOSTS`, `dbpa ui --allow-key-host URL`)."
)
for problem in ss.get("model_problems", []):
    st.warning(md_escape(problem))
note = ss.pop("_settings_note", None)
if note:
    getattr(st, note[0])(note[1])

KEY_HINT = (
    "Type the key into this model's key field (left of Test; kept in this browser "
    "session only, never saved) and press Test again."
)


def _key_status(m: dict) -> str:
    """Where this model's key comes from, in a few words."""
    env = m.get("api_key_env")
    if ss["api_keys"].get(key_slot(m)):
        return "key entered in this session"
    if env and os.environ.get(env):
        if not env_key_allowed(m.get("base_url")):  # the operator did not allow this server
            return f"${env} is set, but not sent to this server: type its key"
        return f"key from ${env}"
    return f"no key yet (${env} is not set)" if env else "no key yet"


def _key_entered(widget: str, slot: str, label: str, row: int) -> None:
    """A model's key field was changed: keep the key in this session (never on disk)."""
    value = (ss.get(widget) or "").strip()
    ss[widget] = ""  # the field never shows a key back; its placeholder says one is held
    if value:
        ss["api_keys"][slot] = value
        ss["_settings_row_note"] = (
            row,
            "success",
            f"Key for **{md_escape(label)}** kept in "
            "this session only (never saved). Press Test to check it.",
        )


for i, m in enumerate(list(ss["models"])):
    label = model_label(m)
    kind = m.get("backend", "local")
    c1, c2, c3, c4 = st.columns([4, 2, 1, 1], vertical_alignment="center")
    desc = {
        "local": "embedded, offline",
        "openai": redact_url(m.get("base_url", "")),
        "hf": m.get("path", ""),
        "replay": m.get("file", ""),
    }[kind]
    line = f"**{md_escape(label)}** · `{kind}` · {md_escape(desc)}"
    if kind == "openai":
        slot = key_slot(m)
        held = bool(ss["api_keys"].get(slot))
        line += f" · {md_escape(_key_status(m))}"
        widget = "settings_mkey_" + hashlib.sha256(f"{i}|{label}|{slot}".encode()).hexdigest()[:12]
        # the label is collapsed: it is only the field's accessible name, so it stays raw
        c2.text_input(
            f"API key for {label}",
            key=widget,
            type="password",
            label_visibility="collapsed",
            placeholder="Key entered: type to replace" if held else "Enter key",
            on_change=_key_entered,
            args=(widget, slot, label, i),
            help="Kept in this browser session only, never saved. Models of the "
            "same server that name the same variable share it.",
        )
    c1.markdown(line)
    if c3.button("Test", key=f"settings_test_{i}", help="One tiny call (a replay file: read it)"):
        with st.spinner(f"Testing {md_escape(model_label(m))} …"):
            check = connection.check_model(m, api_keys=ss["api_keys"], cache_dir=ss["cache_dir"])
        text = check.message + (" " + KEY_HINT if check.problem == "key" else "")
        (st.success if check.ok else st.error)(md_escape(text))
    row_note = ss.get("_settings_row_note")
    if row_note and row_note[0] == i:
        ss.pop("_settings_row_note")
        getattr(st, row_note[1])(row_note[2])
    if len(ss["models"]) > 1 and c4.button("Remove", key=f"settings_rm_{i}"):
        ss["models"].pop(i)
        error = state.save_models()
        if error:
            ss["_settings_note"] = ("warning", md_escape(error))
        st.rerun()

st.markdown("**Add a model**")
backend = st.radio(
    "Backend",
    ["openai", "local", "hf", "replay"],
    horizontal=True,
    key="settings_backend",
    format_func={
        "openai": "OpenAI-compatible server",
        "local": "Local model variant",
        "hf": "Hugging Face folder",
        "replay": "Replay file",
    }.get,
)
LABEL_HELP = "The name in the model lists; leave it empty to use the model's name."
if ss.pop("_settings_clear_form", False):  # after an add: set before the widgets exist
    for k in ("settings_name", "settings_key", "settings_path", "settings_label"):
        ss[k] = ""
with st.form("settings_add_model", clear_on_submit=False):
    cfg: dict = {"backend": backend}
    key = ""
    if backend == "openai":
        c1, c2 = st.columns(2)
        name = c1.text_input("Model name", key="settings_name", placeholder="gpt-4o-mini")
        base_url = c2.text_input(
            "Base URL",
            key="settings_base_url",
            value="https://api.openai.com/v1",
            help="vLLM: http://host:8000/v1 · Ollama: http://host:11434/v1",
        )
        key = c1.text_input(
            "API key (kept in this session only, never saved)", type="password", key="settings_key"
        )
        key_env = c2.text_input(
            "…or the environment variable that holds it", key="settings_key_env", value="OPENAI_API_KEY"
        )
        label = c1.text_input("Label (optional)", key="settings_label", help=LABEL_HELP)
    elif backend == "local":
        st.caption(
            "The embedded SmolLM2-135M sampled at another temperature: a second 'model' that works offline."
        )
        c1, c2 = st.columns(2)
        label = c1.text_input("Label (optional)", key="settings_label", help=LABEL_HELP)
        temperature = c2.number_input("Temperature", 0.0, 2.0, 1.2, 0.1, key="settings_temperature")
    else:
        c1, c2 = st.columns(2)
        what = "Folder of the model" if backend == "hf" else "JSONL file of recorded responses"
        path = c1.text_input(what, key="settings_path")
        name = c2.text_input("Model name (optional; for replay: the records' 'model')", key="settings_name")
        label = c1.text_input("Label (optional)", key="settings_label", help=LABEL_HELP)
    test = st.checkbox(
        "Test it first (one tiny call; a replay file is read)", value=True, key="settings_test_first"
    )
    if st.form_submit_button("Add model", type="primary"):
        error = None
        if backend == "openai":
            if not name.strip():
                error = "Give the model name the server knows (e.g. gpt-4o-mini)."
            cfg.update(
                name=name.strip(), base_url=base_url.strip(), api_key_env=key_env.strip() or "OPENAI_API_KEY"
            )
        elif backend == "local":
            cfg["temperature"] = float(temperature)
        elif backend == "hf":
            if not os.path.isdir(path):
                error = f"No folder at {path!r}."
            cfg.update(path=path, name=name.strip() or None)
        else:
            if not os.path.isfile(path):
                error = f"No file at {path!r}."
            cfg.update(file=path, name=name.strip() or None)
        if label.strip():
            cfg["label"] = label.strip()
        cfg = {k: v for k, v in cfg.items() if v is not None}
        # the same model again (same server/file/folder and name): not a second entry, but
        # a way to give it its key in a new session, or to select it
        same = next(
            (
                m
                for m in ss["models"]
                if state.same_model(m, cfg) and cfg.get("label", model_label(m)) == model_label(m)
            ),
            None,
        )
        if not error and same is None and model_label(cfg) in {model_label(m) for m in ss["models"]}:
            error = (
                f"Another model is already called {model_label(cfg)!r}: give this one "
                "another name in the Label field of this form."
            )
        keys = dict(ss["api_keys"])
        slot = key_slot(cfg) if backend == "openai" else None
        if key and not error:
            keys[slot] = key
        check = None
        if not error and test:
            target = same or cfg
            with st.spinner(f"Testing {md_escape(model_label(target))} …"):
                check = connection.check_model(target, api_keys=keys, cache_dir=ss["cache_dir"])
            if not check.ok:
                hint = " Check the API key field of this form." if check.problem == "key" else ""
                error = (
                    check.message
                    + hint
                    + (
                        " Nothing changed."
                        if same
                        else " Not added: fix it, or untick the test to add anyway."
                    )
                )
        if error:
            st.error(md_escape(error))
        else:
            if key:
                ss["api_keys"][slot] = key
            shown = md_escape(model_label(same or cfg))
            if same is not None:
                state.select_everywhere([model_label(same)])
                text = (
                    f"**{shown}** is already in the list"
                    + (": its key is now set for this session (never saved)" if key else "")
                    + "; selected it on the audit pages."
                )
                saved = None
            else:
                ss["models"].append(cfg)
                state.select_everywhere([model_label(cfg)])
                saved = state.save_models()
                text = f"Added **{shown}** and selected it on the audit pages."
            if check is not None:
                text += " " + md_escape(check.message)
            # shown under the form, where the user is looking
            ss["_settings_add_note"] = ("warning", md_escape(saved)) if saved else ("success", text)
            ss["_settings_clear_form"] = True
            st.rerun()
if add_note := ss.pop("_settings_add_note", None):
    getattr(st, add_note[0])(add_note[1])

st.subheader("Cache")
st.caption(
    "Every response and embedding is cached on disk, so a repeated or interrupted run "
    "costs nothing twice. Keys are never cached. Recorded runs stay in the History "
    "whatever happens to the cache."
)


def _cache_dir_typed() -> None:
    """The cache folder field changed: use it if it can be used, else say why in one line
    and keep (and show again) the folder in use."""
    problem = state.use_cache_dir(ss.get("settings_cache_dir", ""))
    ss["settings_cache_dir"] = ss["cache_dir"]
    ss["_settings_cache_note"] = (
        ("error", md_escape(problem))
        if problem
        else ("success", f"The cache is now {md_escape(ss['cache_dir'])}.")
    )


# not a w_ key, so Streamlit drops it on a page switch: it starts again from the folder in use
if "settings_cache_dir" not in ss:
    ss["settings_cache_dir"] = ss["cache_dir"]
st.text_input(
    "Cache folder",
    key="settings_cache_dir",
    on_change=_cache_dir_typed,
    help="Created if need be. Each folder is its own cache.",
)
if cache_note := ss.pop("_settings_cache_note", None):
    getattr(st, cache_note[0])(cache_note[1])
cache = state.cache()
if cache.url:  # DBPA_CACHE_URL: the samples live in a database the team shares
    st.info(
        f"The cached responses and embeddings are in the database "
        f"`{cache.where.replace('`', '')}` (DBPA_CACHE_URL), shared by every machine that names "
        "it; the folder keeps the converted local models.",
        icon=":material/database:",
    )


def _clear_cache() -> None:  # runs before the page is drawn: the counts below are fresh
    c = state.cache()
    n = c.clear()
    st.session_state["_settings_cleared"] = (
        "The damaged cache was removed and an empty one started."
        if c.repaired
        else f"Removed {n} cached items."
    )


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
    st.warning(
        f"Remove {what} responses and embeddings? Audits will have to ask the models "
        "again (paid calls for a remote model)."
    )
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
