"""The Settings page, QA review M3, M4 and minors 2, 3, 7, 9: a saved model gets its key
again in a new session (and the key is in no file), two servers keep their own keys, a
re-add is not a dead end, imported responses survive a reload, a connection test gives up
quickly, the cache folder survives a page switch, a new model is selected on every page
that picks models, and opening a spec twice adds no duplicate."""

import os
import socket
from pathlib import Path

import pytest
import yaml

from tests.fake_openai import FakeOpenAI

from .conftest import DEMO, errors, plain, successes, warnings

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
    fields = [
        t
        for t in at.text_input
        if t.key and t.key.startswith("settings_mkey_") and plain(t.label) == f"API key for {label}"
    ]
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
def test_a_saved_model_gets_its_key_again_in_a_new_session(make_app, tmp_path):
    with FakeOpenAI(api_key="sk-good-7731", models=("fake-gpt",)) as srv:
        at = make_app(page=SETTINGS)
        add_openai(at, "fake-gpt", srv.base_url, key="sk-good-7731", env="DBPA_QA_A_KEY")
        assert any("Connected: fake-gpt" in s for s in successes(at)), errors(at)

        fresh = make_app(models=None, page=SETTINGS)  # a reload: a new session
        assert "fake-gpt" in labels(fresh)
        row_button(fresh, "fake-gpt").click().run()
        msg = next(e.value for e in fresh.error if "(401)" in plain(e.value))
        # the advice names a field that is on this page, and shows no literal asterisks
        assert "**" not in plain(msg) and "Open Settings" not in plain(msg)
        assert "key field" in plain(msg)
        key_field(fresh, "fake-gpt").set_value("sk-good-7731").run()
        assert not fresh.exception, fresh.exception
        assert any("kept in this session only" in s for s in successes(fresh))
        row_button(fresh, "fake-gpt").click().run()
        assert any("Connected: fake-gpt" in s for s in successes(fresh)), errors(fresh)
        # an audit uses it: the Perturbation test page gets an answer with that key
        fresh.switch_page("pages/perturbation_test.py").run()
        fresh.session_state["w_landing_model"] = "fake-gpt"
        fresh.session_state["w_embedder"] = "rouge1"
        fresh.session_state["w_samples"] = 2
        fresh.run()
        fresh.button(key="landing_run").click().run()
        assert not fresh.exception, fresh.exception
        assert not errors(fresh), errors(fresh)
    # the key is in no file: not in DBPA_HOME (models.yaml, history), not in the cache
    assert files_holding("sk-good-7731", os.environ["DBPA_HOME"], tmp_path / "cache") == []
    assert "fake-gpt" in Path(os.environ["DBPA_HOME"], "models.yaml").read_text()


def test_two_servers_keep_their_own_keys(make_app):
    with (
        FakeOpenAI(api_key="sk-first", models=("m1",)) as a,
        FakeOpenAI(api_key="sk-second", models=("m2",)) as b,
    ):
        at = make_app(page=SETTINGS)
        # both with the form's pre-filled variable, OPENAI_API_KEY
        add_openai(at, "m1", a.base_url, key="sk-first")
        add_openai(at, "m2", b.base_url, key="sk-second")
        assert {"m1", "m2"} <= set(labels(at))
        for label in ("m1", "m2"):
            row_button(at, label).click().run()
            assert any(f"Connected: {label}" in s for s in successes(at)), (label, errors(at))
        assert "sk-first" in at.session_state["api_keys"].values()
        assert "sk-second" in at.session_state["api_keys"].values()


def test_readding_a_model_is_not_a_dead_end(make_app):
    with (
        FakeOpenAI(api_key="sk-good", models=("fake-gpt",)) as srv,
        FakeOpenAI(api_key="sk-other", models=("fake-gpt",)) as other,
    ):
        at = make_app(page=SETTINGS)
        add_openai(at, "fake-gpt", srv.base_url, key="sk-good", env="DBPA_QA_A_KEY")
        fresh = make_app(models=None, page=SETTINGS)  # reload: no key any more
        n = len(fresh.session_state["models"])
        # the same model again, with its key: its key is set, no second entry, no error
        add_openai(fresh, "fake-gpt", srv.base_url, key="sk-good", env="DBPA_QA_A_KEY")
        assert not errors(fresh), errors(fresh)
        assert len(fresh.session_state["models"]) == n
        assert any("already in the list" in s and "key" in s for s in successes(fresh))
        row_button(fresh, "fake-gpt").click().run()
        assert any("Connected: fake-gpt" in s for s in successes(fresh)), errors(fresh)
        # the same name on another server: the form has a Label field, and says so
        add_openai(fresh, "fake-gpt", other.base_url, key="sk-other", env="DBPA_QA_B_KEY")
        msg = next(e for e in errors(fresh) if "already" in e)
        assert "Label" in msg
        assert fresh.text_input(key="settings_label") is not None
        add_openai(
            fresh, "fake-gpt", other.base_url, key="sk-other", env="DBPA_QA_B_KEY", label="fake-gpt (other)"
        )
        assert not errors(fresh), errors(fresh)
        assert {"fake-gpt", "fake-gpt (other)"} <= set(labels(fresh))
        for label in ("fake-gpt", "fake-gpt (other)"):
            row_button(fresh, label).click().run()
            assert any(f"Connected: {label}" in s for s in successes(fresh)), errors(fresh)


# --------------------------------------------------------------------------- M4: imports
def test_imported_responses_survive_a_reload_and_are_selected(make_app, tmp_path):
    rows = ["q,a"] + [f"{q},answer {i} to {q}" for q in ("hello", "bye") for i in range(4)]
    at = make_app(page=SETTINGS)
    at.text_input(key="settings_import_label").set_value("imported **md**")
    at.text_input(key="settings_import_pcol").set_value("q")
    at.text_input(key="settings_import_rcol").set_value("a")
    at.file_uploader(key="settings_import_file").upload(
        "answers.csv", "\n".join(rows).encode(), "text/csv"
    ).run()
    at.button(key="settings_import_go").click().run()
    assert not at.exception, at.exception
    raw = next(s.value for s in at.success if "Imported 8 responses" in plain(s.value))
    assert "imported \\*\\*md\\*\\*" in raw  # the label is shown literally
    label = "imported **md**"
    assert label in labels(at)
    ss = at.session_state
    assert ss["w_landing_model"] == label and ss["w_bat_model"] == label
    assert label in ss["w_roc_models"] and label in ss["w_persona_models"]
    model = next(m for m in ss["models"] if m.get("label") == label)
    assert Path(model["file"]).is_relative_to(os.environ["DBPA_HOME"])

    fresh = make_app(models=None, page=SETTINGS)  # a reload
    assert label in labels(fresh), fresh.session_state["model_problems"]
    assert not fresh.session_state["model_problems"]

    # the name field is cleared after an import; importing again under the same name
    # replaces that model and says so
    assert not at.text_input(key="settings_import_label").value
    at.text_input(key="settings_import_label").set_value(label)
    at.text_input(key="settings_import_pcol").set_value("q")
    at.text_input(key="settings_import_rcol").set_value("a")
    at.file_uploader(key="settings_import_file").upload(
        "more.csv", "\n".join(rows[:5]).encode(), "text/csv"
    ).run()
    at.button(key="settings_import_go").click().run()
    said = next(plain(s.value) for s in at.success if "Imported 4 responses" in plain(s.value))
    assert f"replaced the model(s) of the same name: {label}" in said
    assert labels(at).count(label) == 1


# --------------------------------------------------------------------------- minor 2
def test_a_connection_test_of_a_refused_port_gives_up_quickly(make_app):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends
    at = make_app(
        page=SETTINGS,
        models=[
            {"backend": "local"},
            {"backend": "openai", "name": "gone", "base_url": f"http://127.0.0.1:{port}/v1"},
        ],
    )
    row_button(at, "gone").click().run()
    assert not at.exception
    # tried once: no retry, no back-off wait (max_retries 0)
    assert any("Cannot reach" in e and "after 1 try (connection refused)" in e for e in errors(at)), errors(
        at
    )


def test_a_connection_test_of_a_silent_server_has_a_short_deadline():
    from ui.connection import check_model

    with FakeOpenAI(models=("m",), fault="slow", slow_seconds=4) as srv:
        check = check_model({"backend": "openai", "name": "m", "base_url": srv.base_url}, timeout=1.0)
    assert not check.ok and check.problem == "server"
    # the deadline that ended it is the test's 1 s, tried once (not the spec's 60 s, retried)
    assert "timed out" in check.message and "within 1.0 s, 1 try" in check.message, check.message
    assert "test again" in check.message and "spec" not in check.message


# --------------------------------------------------------------------------- minor 3
def test_the_cache_folder_survives_a_page_switch(make_app, tmp_path):
    at = make_app(page=SETTINGS)
    new = str(tmp_path / "other-cache")
    at.text_input(key="settings_cache_dir").set_value(new).run()
    assert at.session_state["cache_dir"] == new
    at.switch_page("pages/perturbation_test.py").run()
    at.switch_page(SETTINGS).run()
    assert not at.exception, at.exception
    assert at.text_input(key="settings_cache_dir").value == new
    assert at.session_state["cache_dir"] == new
    # an unusable folder, or none, is refused in one line; the last good one stays
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    at.text_input(key="settings_cache_dir").set_value(str(blocker / "sub")).run()
    assert at.session_state["cache_dir"] == new
    assert any("a-file" in e and new in e for e in errors(at)), errors(at)
    at.text_input(key="settings_cache_dir").set_value("  ").run()
    assert at.session_state["cache_dir"] == new
    assert any("empty" in e for e in errors(at) + warnings(at))


# --------------------------------------------------------------------------- minor 7
def test_a_new_model_is_selected_on_every_page_that_picks_models(make_app):
    at = make_app(page=SETTINGS)
    at.radio(key="settings_backend").set_value("replay").run()
    at.text_input(key="settings_path").set_value(DEMO)
    at.text_input(key="settings_name").set_value("SmolLM2-135M-Instruct")
    submit(at)
    new = "SmolLM2-135M-Instruct"
    assert new in labels(at)
    at.switch_page("pages/robustness.py").run()
    assert not at.exception, at.exception
    assert at.selectbox(key="w_bat_model").value == new
    at.switch_page("pages/fidelity.py").run()
    assert not at.exception, at.exception
    assert new in at.session_state["w_fid_models"]


# --------------------------------------------------------------------------- minor 9
def test_opening_a_spec_twice_adds_no_duplicate(make_app):
    at = make_app()
    saved = Path(os.environ["DBPA_HOME"], "models.yaml")

    def open_spec(model, name):
        doc = {
            "name": name,
            "model": model,
            "base": {"prompt": "Hi"},
            "perturbations": [{"name": "x", "prefix": "Be brief."}],
        }
        at.file_uploader(key="landing_spec_up").upload(
            f"{name}.yaml", yaml.safe_dump(doc).encode(), "x"
        ).run()
        assert not at.exception, at.exception
        return [plain(n.value) for n in [*at.success, *at.warning] if "Opened" in plain(n.value)]

    # the same model as the one in the list (no label in the spec): reused, nothing saved
    notes = open_spec({"backend": "replay", "file": DEMO}, "same")
    assert labels(at) == ["demo"] and at.session_state["w_landing_model"] == "demo"
    assert not any("added" in n.lower() for n in notes), notes
    assert not saved.exists()
    # a new model: added once, and the note says so
    new = {"backend": "replay", "file": DEMO, "name": "SmolLM2-135M-Instruct"}
    notes = open_spec(new, "new")
    assert labels(at) == ["demo", "SmolLM2-135M-Instruct"]
    assert any("SmolLM2-135M-Instruct" in n and "saved models" in n for n in notes), notes
    notes = open_spec(new, "again")
    assert labels(at) == ["demo", "SmolLM2-135M-Instruct"]
    assert not any("saved models" in n for n in notes), notes
    assert at.session_state["w_landing_model"] == "SmolLM2-135M-Instruct"
    assert len(yaml.safe_load(saved.read_text())["models"]) == 2
