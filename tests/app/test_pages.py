"""Every page driven headless with AppTest: runs with the replay backend (or a local
fake OpenAI server), bad input shows a short error, never a traceback."""

from pathlib import Path

import pandas as pd
import pytest

from dbpa_core.sampling import key_slot
from tests.fake_openai import FakeOpenAI

from .conftest import DEMO, errors, successes, warnings

pytestmark = pytest.mark.slow


def first(at, page):
    return next(iter(at.session_state["results"][page].values()))


def test_landing_runs_the_persona_example(make_app):
    at = make_app()
    assert at.title[0].value.startswith("Does a perturbation change")
    assert not errors(at)
    assert len(at.metric) == 3  # calls, tokens, cost before running
    at.button(key="landing_run").click().run()
    assert not at.exception, at.exception
    assert not errors(at), errors(at)
    result = first(at, "landing")
    assert [p.name for p in result.perturbations][:2] == ["doctor", "nurse"]
    assert len(result.perturbations) == 8
    table = next(d.value for d in at.dataframe if "perturbation" in d.value.columns)
    assert list(table["perturbation"]) == [p.name for p in result.perturbations]
    assert {"ω", "ω above chance", "p (raw)", "p (adjusted)"} <= set(table.columns)
    # comedian and robot move SmolLM2's answers clearly in the recorded data
    by = {p.name: p for p in result.perturbations}
    assert by["robot from the future"].p_value < 0.05
    # rerun from the cache: still no calls, same numbers
    at.button(key="landing_run").click().run()
    again = first(at, "landing")
    assert again.usage["calls"] == 0
    assert [p.p_value for p in again.perturbations] == [p.p_value for p in result.perturbations]


def test_landing_bad_input(make_app):
    at = make_app(w_base_prompt="   ")
    assert any("the prompt is empty" in e for e in errors(at))  # the user's words
    assert not any("base.prompt" in e for e in errors(at))
    assert at.button(key="landing_run").disabled
    at = make_app(perturbations=pd.DataFrame(columns=["name", "prefix", "prompt", "role"]))
    assert any("nothing to compare" in e for e in errors(at))
    at = make_app(w_samples=1)  # k = 1 is named, and Run waits for a valid k
    assert any("between 2 and 500" in e for e in errors(at))
    assert at.button(key="landing_run").disabled


def test_landing_more_samples_than_recorded(make_app):
    # the unnamed replay model answers with every model's records: 20 at T = 0.8 and 20 at
    # T = 1.2 for each persona prompt
    at = make_app(w_samples=45)
    # checked before the run: which prompts lack recordings, and what to do
    msg = next(e for e in errors(at) if "replay file does not hold" in e)
    # the base prompt has 20 more at T = 0.8 (for a same-prompt control): 60 in all
    assert "k = 45" in msg and "lacks 8 prompts" in msg and "40 recorded" in msg
    assert "lower k" in msg
    assert at.button(key="landing_run").disabled


def test_landing_wrong_key(make_app):
    with FakeOpenAI(api_key="sk-right", models=("m",)) as srv:
        at = make_app(
            models=[
                {
                    "backend": "openai",
                    "name": "m",
                    "base_url": srv.base_url,
                    "api_key_env": "DBPA_APP_TEST_KEY",
                }
            ],
            api_keys={"DBPA_APP_TEST_KEY": "sk-wrong"},
            w_embedder="rouge1",
        )
        at.button(key="landing_run").click().run()
    assert not at.exception
    assert any("rejected the API key" in e and "Settings" in e for e in errors(at))


def test_landing_server_down(make_app):
    with FakeOpenAI() as srv:
        url = srv.base_url
    at = make_app(
        models=[{"backend": "openai", "name": "m", "base_url": url, "max_retries": 1}], w_embedder="rouge1"
    )
    at.button(key="landing_run").click().run()
    assert not at.exception
    assert any("Cannot reach" in e for e in errors(at))


def test_persona_explorer(make_app):
    models = [
        {"backend": "replay", "file": DEMO, "label": "demo-a"},
        {"backend": "replay", "file": DEMO, "label": "demo-b"},
    ]
    at = make_app(
        models=models,
        page="pages/persona_explorer.py",
        w_embedder="rouge1",
        w_persona_list=["comedian", "doctor"],
        w_persona_models=["demo-a", "demo-b"],
    )
    assert at.title[0].value == "Persona explorer"
    at.button(key="personas_run").click().run()
    assert not at.exception, at.exception
    assert not errors(at)
    res = at.session_state["results"]["personas"]
    assert set(res) == {"demo-a", "demo-b"}
    assert [p.name for p in res["demo-a"].perturbations] == ["comedian", "doctor"]
    at.selectbox(key="personas_cell_p").set_value("doctor")
    at.selectbox(key="personas_cell_m").set_value("demo-b").run()
    assert not at.exception


def test_persona_explorer_bad_input(make_app):
    at = make_app(page="pages/persona_explorer.py", w_persona_list=[])
    assert any("at least one persona" in e for e in errors(at))
    assert at.button(key="personas_run").disabled


def _roc_table():
    base = "John has these features: Age: 70"
    rows = [
        {"name": "ahmed", "prefix": "", "prompt": base.replace("John", "Ahmed"), "role": "control"},
        {"name": "peter", "prefix": "", "prompt": base.replace("John", "Peter"), "role": "control"},
        {"name": "comedian", "prefix": "", "prompt": "Act as a comedian. " + base, "role": "target"},
    ]
    return base, pd.DataFrame(rows)


def test_control_vs_target(make_app):
    base, table = _roc_table()
    with FakeOpenAI(models=("m1", "m2")) as srv:
        models = [
            {"backend": "openai", "name": "m1", "base_url": srv.base_url},
            {"backend": "openai", "name": "m2", "base_url": srv.base_url},
        ]
        at = make_app(
            models=models,
            page="pages/control_target.py",
            roc_table=table,
            w_base_prompt=base,
            w_embedder="rouge1",
            w_roc_models=["m1", "m2"],
        )
        at.button(key="roc_run").click().run()
    assert not at.exception, at.exception
    assert not errors(at), errors(at)
    res = at.session_state["results"]["roc"]
    assert set(res) == {"m1", "m2"}
    assert all(r.roc is not None and r.roc.auc == 1.0 for r in res.values())
    assert any("the most targets" in s and "tie" in s for s in successes(at))
    assert any("Control gate passed" in s for s in successes(at))
    gate = next(d.value for d in at.dataframe if "control gate" in d.value.columns)
    assert list(gate["control gate"]) == ["PASS", "PASS"]
    at.select_slider(key="w_roc_fpr").set_value(0.2).run()
    assert not at.exception


def test_control_vs_target_needs_both_roles(make_app):
    _base, table = _roc_table()
    table["role"] = "control"
    at = make_app(page="pages/control_target.py", roc_table=table)
    assert any("one as **target**" in e for e in errors(at))


def test_model_comparison(make_app):
    with FakeOpenAI(models=("ref", "other")) as srv:
        models = [
            {"backend": "openai", "name": "ref", "base_url": srv.base_url},
            {"backend": "openai", "name": "other", "base_url": srv.base_url},
        ]
        at = make_app(models=models, page="pages/model_comparison.py", w_embedder="rouge1")
        at.button(key="models_run").click().run()
    assert not at.exception, at.exception
    assert not errors(at), errors(at)
    res = first(at, "models")
    assert res.base.arm.name == "ref" and [p.name for p in res.perturbations] == ["other"]


def test_model_comparison_with_one_model(make_app):
    at = make_app(models=[{"backend": "local"}], page="pages/model_comparison.py")
    assert any("Only one model" in i.value for i in at.info)
    assert at.button(key="models_run").disabled
    at.button(key="models_add_variants").click().run()
    assert len(at.session_state["models"]) == 3
    assert not at.exception
    # the added models are selected: Run is enabled at once
    assert len(at.multiselect(key="w_models_others").value) == 2
    assert not at.button(key="models_run").disabled


def submit(at):
    next(b for b in at.button if b.label == "Add model").click()
    at.run()


def test_settings_page(make_app, tmp_path):
    import os

    at = make_app(page="pages/settings.py")
    assert at.title[0].value == "Settings"
    at.radio(key="settings_backend").set_value("replay").run()
    at.text_input(key="settings_path").set_value(DEMO)
    at.text_input(key="settings_name").set_value("SmolLM2-135M-Instruct")
    submit(at)
    assert not at.exception
    labels = [m.get("label") or m.get("name") for m in at.session_state["models"]]
    assert "SmolLM2-135M-Instruct" in labels
    # tested (a replay file is read), saved, and selected on the audit pages
    assert any("recorded responses for" in s and "selected it" in s for s in successes(at))
    assert at.session_state["w_landing_model"] == "SmolLM2-135M-Instruct"
    assert "SmolLM2-135M-Instruct" in at.session_state["w_roc_models"]
    saved = (tmp_path.parent / os.environ["DBPA_HOME"]).joinpath("models.yaml").read_text()
    assert "SmolLM2-135M-Instruct" in saved

    with FakeOpenAI(api_key="sk-right", models=("gpt-x",)) as srv:
        at.radio(key="settings_backend").set_value("openai").run()
        at.text_input(key="settings_name").set_value("gpt-x")
        at.text_input(key="settings_base_url").set_value(srv.base_url)
        at.text_input(key="settings_key_env").set_value("DBPA_SETTINGS_TEST_KEY")
        at.text_input(key="settings_key").set_value("sk-wrong")
        submit(at)
        assert any("did not answer the test call" in e and "Not added" in e for e in errors(at))
        assert "gpt-x" not in [m.get("name") for m in at.session_state["models"]]
        assert at.session_state["api_keys"] == {}  # a refused key is not kept
        at.text_input(key="settings_key").set_value("sk-right")
        submit(at)
        assert any("Connected: gpt-x answered" in s for s in successes(at)), errors(at)
    # kept by variable *and server* (two servers cannot replace each other's key)
    assert at.session_state["api_keys"] == {
        key_slot({"api_key_env": "DBPA_SETTINGS_TEST_KEY", "base_url": srv.base_url}): "sk-right"
    }
    assert all("sk-right" not in str(m) for m in at.session_state["models"])
    saved = Path(os.environ["DBPA_HOME"], "models.yaml").read_text()
    assert "gpt-x" in saved and "DBPA_SETTINGS_TEST_KEY" in saved and "sk-right" not in saved

    at.radio(key="settings_backend").set_value("replay").run()
    at.text_input(key="settings_path").set_value("/no/such/file.jsonl")
    submit(at)
    assert any("No file at" in e for e in errors(at))
    at.button(key="settings_clear").click().run()
    assert not any("Removed" in s for s in successes(at))  # asks first
    assert any("Remove all" in w for w in warnings(at))
    at.button(key="settings_clear_no").click().run()
    assert not any("Remove all" in w for w in warnings(at))
    at.button(key="settings_clear").click().run()
    at.button(key="settings_clear_yes").click().run()
    assert any("Removed" in s for s in successes(at))

    # a new session (a reload) starts with the saved models
    fresh = make_app(models=None, page="pages/settings.py")
    labels = [m.get("label") or m.get("name") for m in fresh.session_state["models"]]
    assert "SmolLM2-135M-Instruct" in labels and "gpt-x" in labels
    assert fresh.session_state["api_keys"] == {}
