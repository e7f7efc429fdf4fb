"""Issue 12, the instant demo: on first start the landing page shows the recorded result of
its default example at once, labelled as recorded (date, model), without loading a model or
touching the cache; Run samples afresh."""

import pytest

from dbpa_core.backends import local

from .conftest import plain, warnings

pytestmark = pytest.mark.slow


def _label(at):
    return [plain(i.value) for i in at.info if plain(i.value).startswith("**Recorded result**")]


def test_first_start_shows_the_recorded_result_labelled(make_app, monkeypatch):
    monkeypatch.delenv("DBPA_REPLAY_FILE", raising=False)
    loaded = dict(local._LOADED)
    at = make_app(models=None, w_samples=20, w_permutations=2000)  # a fresh session's defaults
    from ui import demo

    rec = demo.load_recording()
    (label,) = _label(at)
    assert f"answered by **{rec.meta['model']}** ({rec.meta['precision']}" in label
    assert f"recorded on {rec.date}" in label and "Run audit" in label and "afresh" in label
    # honest about another CPU: fresh answers differ there; the replay spec reproduces them
    assert "new answers" in label and "dbpa audit examples/replay_personas.yaml" in label
    ((_job, result),) = at.session_state["results"]["landing"].items()
    assert result.spec.samples == 20 and result.spec.model == {"backend": "local"}
    # what `make venv` computes once (python -m ui.demo) is what a fresh session shows
    assert result.spec.to_dict() == demo.default_spec().to_dict()
    assert [p.name for p in result.perturbations][:2] == ["doctor", "nurse"]
    meta = at.session_state["results_meta"]["landing"]
    assert meta["run"].source == "recorded" and meta["recorded"]["recorded"] == rec.date
    assert any("p (raw)" in d.value.columns for d in at.dataframe)  # the results drawn
    assert local._LOADED == loaded  # no model loaded
    assert result.usage["calls"] == 0 and result.usage["recorded_answers"] == 180
    # what is downloaded says it is a recording, not a run made here
    from ui import export

    assert "Recorded result" in export.html_report("Perturbation test", [result], {}, meta["run"])
    assert "recorded" in export.results_csv(result, meta["run"]).splitlines()[1]
    # nothing recorded went to the cache: Run audit would sample all 180 answers
    calls = next(m for m in at.metric if m.label == "Model calls to make")
    assert calls.value == "180"
    assert not at.button(key="landing_run").disabled
    assert not any("Outdated" in w for w in warnings(at))
    # inputs changed: marked outdated, as the recording's
    at.number_input(key="w_samples").set_value(10).run()
    note = next(w for w in warnings(at) if "Outdated:" in w)
    assert f"the recording of {rec.date}" in note and "(k)" in note


def test_other_inputs_get_no_recorded_result(make_app, monkeypatch):
    monkeypatch.delenv("DBPA_REPLAY_FILE", raising=False)
    at = make_app(models=None, w_samples=10)  # k that was not recorded
    assert not _label(at) and "landing" not in at.session_state["results"]
    at = make_app()  # a replay model, not the embedded one
    assert not _label(at) and "landing" not in at.session_state["results"]


def test_a_stopped_run_marks_the_results_below(make_app, monkeypatch):
    """Stop reruns the page without finishing the run: the results still on screen (here
    the recording's) say they are not that run's, and the estimate above Run is current."""
    monkeypatch.delenv("DBPA_REPLAY_FILE", raising=False)
    at = make_app(models=None, w_samples=20, w_permutations=2000)
    at.session_state["_landing_running"] = True  # what a Stop mid-run leaves behind
    at.run()
    assert any("was stopped" in i.value for i in at.info)
    assert any("did not finish" in w and "recording" in w for w in warnings(at)), warnings(at)
