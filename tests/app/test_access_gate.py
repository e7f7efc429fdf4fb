"""Issue 32 in the dashboard: with an access token set, no page renders before the session
shows it (in the link once, or typed); a visitor from another machine gets nothing when no
token is set; a model added on the Settings page with a new server gets no key from the
environment (a canary key never reaches the fake server) unless the operator allows that
server on the machine or a key is typed into the session; a reload after Stop shows the
stopped run's form and says it was stopped."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from tests.fake_openai import FakeOpenAI

from .conftest import APP, ROOT, errors, plain
from .test_settings_models import SETTINGS, add_openai, labels, submit

pytestmark = pytest.mark.slow

TOKEN = "tok-3b9d7e1c44"
CANARY = "sk-canary-91f2a7"


def gate_only(at) -> None:
    """Only the gate is on screen: its form, no page, no sidebar links."""
    assert not at.exception, at.exception
    assert at.text_input(key="access_token_field") is not None
    assert [s.value for s in at.subheader] == ["Access token needed"]
    assert not at.text_area and not at.sidebar.text_input  # no form, no sidebar settings
    assert not [b for b in at.button if b.label == "Run audit"]
    assert "Does a perturbation" not in " ".join(t.value for t in at.title)


def opened(at) -> None:
    assert not at.exception, at.exception
    assert any("Does a perturbation" in t.value for t in at.title), [t.value for t in at.title]


@pytest.fixture
def token(monkeypatch):
    monkeypatch.setenv("DBPA_UI_TOKEN", TOKEN)
    return TOKEN


def test_no_page_renders_without_the_token(token):
    at = AppTest.from_file(APP, default_timeout=120).run()
    gate_only(at)
    at.text_input(key="access_token_field").set_value("not-it")
    next(b for b in at.button if b.label == "Open the dashboard").click().run()
    gate_only(at)
    assert "That is not the access token." in errors(at)
    at.text_input(key="access_token_field").set_value(TOKEN)
    next(b for b in at.button if b.label == "Open the dashboard").click().run()
    opened(at)
    at.run()  # the session keeps it
    opened(at)


@pytest.mark.parametrize("page", ["pages/settings.py", "pages/history.py", "pages/perturbation_test.py"])
def test_a_page_opened_on_its_own_is_gated_too(token, page):
    gate_only(AppTest.from_file(str(ROOT / page), default_timeout=120).run())


def test_the_token_in_the_link_opens_the_app_once(token):
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["token"] = "wrong"
    at.run()
    gate_only(at)
    assert "That link's token is not this dashboard's." in errors(at)
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["token"] = TOKEN
    at.run()
    opened(at)
    assert "token" not in at.query_params  # taken out of the address bar


def test_the_token_may_be_set_in_the_settings_file(tmp_path):
    from dbpa_core.home import settings_file

    settings_file().parent.mkdir(parents=True, exist_ok=True)
    settings_file().write_text("ui_token: from-the-settings-file\n")
    at = AppTest.from_file(APP, default_timeout=120).run()
    gate_only(at)
    at.text_input(key="access_token_field").set_value("from-the-settings-file")
    next(b for b in at.button if b.label == "Open the dashboard").click().run()
    opened(at)


def test_without_a_token_a_visitor_from_another_machine_gets_nothing(monkeypatch):
    import streamlit.runtime.context as context

    monkeypatch.setattr(context.ContextProxy, "ip_address", property(lambda self: "10.1.2.3"))
    at = AppTest.from_file(APP, default_timeout=120).run()
    assert not at.exception, at.exception
    assert any("serves only the machine it runs on" in e for e in errors(at))
    assert not at.title and not at.button


# --------------------------------------------------------------------------- keys
def test_a_new_server_added_on_settings_gets_no_environment_key(make_app, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    with FakeOpenAI(models=("fake-gpt",)) as srv:
        at = make_app(page=SETTINGS)
        # tested first (the form's default): refused in one line, not added
        add_openai(at, "fake-gpt", srv.base_url, env="OPENAI_API_KEY")
        said = " ".join(errors(at))
        assert "The key in $OPENAI_API_KEY is not sent to http://127.0.0.1:" in said, said
        assert "fake-gpt" not in labels(at)
        # added without the test, then audited: the run stops with the same line
        at.text_input(key="settings_name").set_value("fake-gpt")
        at.text_input(key="settings_base_url").set_value(srv.base_url)
        at.checkbox(key="settings_test_first").uncheck()
        submit(at)
        assert "fake-gpt" in labels(at)
        row = [m.value for m in at.markdown if "fake-gpt" in plain(m.value)]
        assert any("not sent to this server" in plain(r) for r in row), row
        at.switch_page("pages/perturbation_test.py").run()
        at.session_state["w_landing_model"] = "fake-gpt"
        at.session_state["w_embedder"] = "rouge1"
        at.session_state["w_samples"] = 2
        at.run()
        at.button(key="landing_run").click().run()
        assert not at.exception, at.exception
        assert any("is not sent to" in e for e in errors(at)), errors(at)
        assert not any(CANARY in h for h in srv.auth_headers)
        # a key typed into the session goes to the server it was typed for
        at.switch_page(SETTINGS).run()
        add_openai(at, "fake-gpt", srv.base_url, key="sk-typed-here", env="OPENAI_API_KEY")
        assert not any("is not sent to" in e for e in errors(at)), errors(at)
        assert any("sk-typed-here" in h for h in srv.auth_headers)
        assert not any(CANARY in h for h in srv.auth_headers)


def test_a_server_the_operator_allowed_gets_the_environment_key(make_app, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    with FakeOpenAI(models=("fake-gpt",)) as srv:
        monkeypatch.setenv("DBPA_ALLOW_KEY_HOSTS", srv.base_url)
        at = make_app(page=SETTINGS)
        add_openai(at, "fake-gpt", srv.base_url, env="OPENAI_API_KEY")
        assert not errors(at), errors(at)
        assert any(CANARY in h for h in srv.auth_headers)


# --------------------------------------------------------------------------- stop, reload
def test_a_reload_after_stop_keeps_the_stopped_run(make_app, monkeypatch):
    from dbpa_core.sampling import RunCancelled
    from ui import runner

    at = make_app()
    at.session_state["w_samples"] = 37
    at.run()

    def stopped(*args, **kwargs):
        raise RunCancelled("Stopped: every response received so far is cached.")

    original = runner.run_audit
    monkeypatch.setattr(runner, "run_audit", stopped)
    at.button(key="landing_run").click().run()
    assert not at.exception, at.exception
    assert Path(os.environ["DBPA_HOME"], runner.UNFINISHED_FILE).is_file()

    fresh = AppTest.from_file(APP, default_timeout=120)  # a reload: a new session
    fresh.session_state["models"] = at.session_state["models"]
    fresh.run()
    assert not fresh.exception, fresh.exception
    assert fresh.session_state["w_samples"] == 37  # k as the stopped run had it
    assert any("The last run was stopped" in plain(i.value) for i in fresh.info), [
        i.value for i in fresh.info
    ]

    # a run that finishes clears it: the next reload shows that run's form
    monkeypatch.setattr(runner, "run_audit", original)
    fresh.session_state["w_samples"] = 5
    fresh.session_state["w_permutations"] = 200
    fresh.run()
    fresh.button(key="landing_run").click().run()
    assert not fresh.exception, fresh.exception
    assert not errors(fresh), errors(fresh)
    assert not Path(os.environ["DBPA_HOME"], runner.UNFINISHED_FILE).exists()
