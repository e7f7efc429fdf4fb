"""The "Why" view on every result page, the Sensitivity page and the import block of
Settings, driven headless with AppTest against a local fake OpenAI server (fast text
similarity, counted model calls)."""

from pathlib import Path

import pandas as pd
import pytest

from tests.fake_openai import FakeOpenAI

from .conftest import errors, plain

pytestmark = pytest.mark.slow
DATA = Path(__file__).resolve().parents[1] / "data"
BASE = "John has these features: age 70"


def table():
    return pd.DataFrame(
        [
            {
                "name": "name-change",
                "prefix": "",
                "prompt": "Ahmed has these features: age 70",
                "role": "control",
            },
            {"name": "comedian", "prefix": "Act as a comedian.", "prompt": "", "role": "target"},
        ]
    )


def fake_models(srv, *names):
    return [{"backend": "openai", "name": n, "base_url": srv.base_url} for n in names]


def landing(make_app, srv, **state):
    at = make_app(
        models=fake_models(srv, "m"), perturbations=table(), w_base_prompt=BASE, w_embedder="rouge1", **state
    )
    at.button(key="landing_run").click().run()
    assert not at.exception, at.exception
    assert not errors(at), errors(at)
    return at


def test_why_tab_on_the_landing_page(make_app):
    with FakeOpenAI(models=("m",)) as srv:
        at = landing(make_app, srv)
        assert any(t.label == "Why" for t in at.tabs)
        at.session_state["landing_tabs"] = "Why"  # tabs draw only the open one: open it
        at.run()
        at.selectbox(key="landing_why_pick").set_value("comedian").run()
        assert not at.exception
        assert any("Why: comedian" in plain(m.value) for m in at.markdown)
        marked = [h.value for h in at.get("html") if "dbpa-why" in h.value and "<div" in h.value]
        assert len(marked) == 2 and any("<mark" in h for h in marked)
        at.radio(key="landing_why_rep").set_value("atypical").run()
        assert not at.exception
        at.toggle(key="landing_why_near_on").set_value(True).run()
        assert not at.exception

        # one click: does the verdict hold? zero model calls
        calls = srv.chat_ok
        at.multiselect(key="landing_why_rob_emb").set_value(["spec", "bleu"]).run()
        at.button(key="landing_why_rob_go").click().run()
        assert not at.exception, at.exception
        assert srv.chat_ok == calls
        verdict = [m.value for m in at.success] + [m.value for m in at.warning]
        # with ROUGE-1 (text) similarity energy-l1 does not apply (it needs vectors): 5 measures
        assert any("comedian" in v and "of 5 measures" in v for v in verdict), verdict

        # the model-written summary: one call, labelled, then cached
        at.button(key="landing_why_sum_go").click().run()
        assert not at.exception, at.exception
        assert srv.chat_ok == calls + 1
        assert any("Model-written summary by m" in m.value for m in at.markdown)
        at.button(key="landing_why_sum_go").click().run()
        assert srv.chat_ok == calls + 1


def test_sensitivity_page_after_an_audit(make_app):
    with FakeOpenAI(models=("m",)) as srv:
        at = landing(make_app, srv)
        calls = srv.chat_ok
        at.switch_page("pages/sensitivity.py").run()
        assert not at.exception, at.exception
        assert at.title[0].value.startswith("Sensitivity")
        source = at.selectbox(key="w_sens_source")
        assert source.value.startswith("Perturbation test: m")
        at.multiselect(key="w_sens_embedders").set_value(["spec", "bleu"]).run()
        assert at.metric[0].value == "0"  # model calls to make
        at.button(key="sensitivity_run").click().run()
        assert not at.exception, at.exception
        assert not errors(at), errors(at)
        assert srv.chat_ok == calls  # zero model calls
        verdicts = next(d.value for d in at.dataframe if "verdict" in d.value.columns)
        assert list(verdicts["perturbation"]) == ["name-change", "comedian"]
        assert len(at.get("download_button")) == 4
        from dbpa_core.history import History  # recorded as a study

        kinds = History().extras([r.id for r in History().list()])
        assert sorted(e["kind"] for e in kinds.values()) == ["audit", "sensitivity"]

        # the prompt-length study samples padded prompts, once
        at.toggle(key="w_sens_do_lengths").set_value(True).run()
        at.text_input(key="w_sens_lengths").set_value("60, 120").run()
        assert at.metric[0].value == str(3 * 10 * 2)
        at.button(key="sensitivity_run").click().run()
        assert not at.exception, at.exception
        assert srv.chat_ok == calls + 60
        assert any(t.label == "Prompt length" for t in at.tabs)


def test_sensitivity_page_bad_input(make_app):
    at = make_app(page="pages/sensitivity.py")  # the demo replay model, no results yet
    assert not at.exception
    assert at.selectbox(key="w_sens_source").value.startswith("The Perturbation test form")
    assert at.toggle(key="w_sens_do_lengths").disabled  # replay: no padded prompts
    at.multiselect(key="w_sens_measures").set_value([]).run()
    at.multiselect(key="w_sens_embedders").set_value([]).run()
    assert any("nothing to vary" in e for e in errors(at))
    assert at.button(key="sensitivity_run").disabled
    at = make_app(page="pages/sensitivity.py", w_base_prompt="  ")
    assert any("the prompt is empty" in e for e in errors(at))


def test_why_view_on_the_other_result_pages(make_app):
    with FakeOpenAI(models=("m1", "m2")) as srv:
        base_state = dict(w_base_prompt=BASE, w_embedder="rouge1", w_samples=6)
        at = make_app(
            models=fake_models(srv, "m1"),
            page="pages/persona_explorer.py",
            w_persona_list=["comedian", "child"],
            **base_state,
        )
        at.button(key="personas_run").click().run()
        assert not at.exception, at.exception
        assert any("Why: comedian" in plain(m.value) for m in at.markdown)
        at.selectbox(key="personas_cell_p").set_value("child").run()
        assert any("Why: child" in plain(m.value) for m in at.markdown)

        at = make_app(models=fake_models(srv, "m1", "m2"), page="pages/model_comparison.py", **base_state)
        at.button(key="models_run").click().run()
        assert not at.exception, at.exception
        assert any("Why: m2" in plain(m.value) for m in at.markdown)

        t = table()
        t.loc[1, "prompt"], t.loc[1, "prefix"] = "Act as a comedian. " + BASE, ""
        at = make_app(
            models=fake_models(srv, "m1"), page="pages/control_target.py", roc_table=t, **base_state
        )
        at.button(key="roc_run").click().run()
        assert not at.exception, at.exception  # drawn inside an expander: no nesting error
        assert any("Why: name-change" in plain(m.value) for m in at.markdown)


def test_settings_imports_a_promptfoo_file_as_a_replay_model(make_app, tmp_path, monkeypatch):
    monkeypatch.setenv("DBPA_HOME", str(tmp_path / "home"))
    at = make_app(page="pages/settings.py")
    at.file_uploader(key="settings_import_file").set_value(
        ("promptfoo_repeat.json", (DATA / "promptfoo_repeat.json").read_bytes(), "application/json")
    )
    at.run()
    at.button(key="settings_import_go").click().run()
    assert not at.exception, at.exception
    added = [m for m in at.session_state["models"] if m.get("label") == "promptfoo_repeat (imported)"]
    assert len(added) == 1 and added[0]["name"] == "openai:gpt-4o-mini"
    assert Path(added[0]["file"]).is_file()
    assert str(tmp_path / "home" / "imports") in added[0]["file"]
    assert any("Imported 7 responses" in s.value for s in at.success)
    assert any("line 369" in w.value and "429" in w.value for w in at.warning)
    assert any("dropped 1 response" in i.value for i in at.info)


def test_settings_import_errors(make_app, tmp_path, monkeypatch):
    monkeypatch.setenv("DBPA_HOME", str(tmp_path / "home"))
    at = make_app(page="pages/settings.py")
    at.file_uploader(key="settings_import_file").set_value(
        ("responses.csv", (DATA / "responses.csv").read_bytes(), "text/csv")
    )
    at.run()
    at.button(key="settings_import_go").click().run()
    assert not at.exception
    assert any("looks like a CSV table" in e and "prompt and response columns" in e for e in errors(at))
    at.selectbox(key="settings_import_fmt").set_value("openai-batch").run()
    at.file_uploader(key="settings_import_file").set_value(
        ("out.jsonl", (DATA / "openai_batch_output.jsonl").read_bytes(), "application/jsonl")
    )
    at.run()
    at.button(key="settings_import_go").click().run()
    assert any("holds no prompts" in e and "the requests file" in e for e in errors(at))
    n = len(at.session_state["models"])
    assert n == 1


def test_why_view_shows_a_markdown_name_literally(make_app):
    """A name with markdown, a link and a directive is text in the Why heading, caption and
    the verdict check (issue 11: names are shown literally everywhere)."""
    name = "`code` [link](http://x) :red[red] **b**"
    perts = pd.DataFrame([{"name": name, "prefix": "Act as a comedian.", "prompt": "", "role": "target"}])
    with FakeOpenAI(models=("m",)) as srv:
        at = make_app(
            models=fake_models(srv, "m"), perturbations=perts, w_base_prompt=BASE, w_embedder="rouge1"
        )
        at.button(key="landing_run").click().run()
        at.session_state["landing_tabs"] = "Why"
        at.run()
        assert not at.exception, at.exception
        heads = [m.value for m in at.markdown if "Why:" in m.value]
        assert heads and all(plain(h) == f"#### Why: {name}" for h in heads), heads
        caps = [c.value for c in at.caption if c.value.startswith("The test says")]
        assert caps and name in plain(caps[0]) and "](http" not in caps[0].replace("\\]", "")
        at.multiselect(key="landing_why_rob_emb").set_value(["spec"]).run()
        at.button(key="landing_why_rob_go").click().run()
        said = [m.value for m in at.success] + [m.value for m in at.warning]
        assert any(f"**{name}**" in plain(v) for v in said), said
        assert all("[link](http://x)" not in v for v in said)


def test_verdict_check_on_the_recorded_first_start_result_calls_no_model(make_app, monkeypatch):
    """The recorded result's answers are not in the cache: the check must run on them, not
    sample the 180 answers again."""
    import dbpa_core.sampling as sampling
    from dbpa_core.backends import local

    monkeypatch.delenv("DBPA_REPLAY_FILE", raising=False)

    def no_backend(*a, **kw):
        raise AssertionError("a model was asked")

    monkeypatch.setattr(sampling, "make_backend", no_backend)
    loaded = dict(local._LOADED)
    at = make_app(models=None, w_samples=20, w_permutations=2000)
    assert at.session_state["results_meta"]["landing"]["run"].source == "recorded"
    at.session_state["landing_tabs"] = "Why"
    at.run()
    at.button(key="landing_why_rob_go").click().run()
    assert not at.exception, at.exception
    assert not errors(at), errors(at)
    verdict = [m.value for m in at.success] + [m.value for m in at.warning]
    assert any("of 6 measures" in v for v in verdict), verdict
    assert any("No model calls: the test reused the audit's 180 answers" in c.value for c in at.caption)
    assert local._LOADED == loaded
