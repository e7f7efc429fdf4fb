"""The Simulator fidelity page under AppTest: the sample runs at once with its verdicts,
chart, table, drill-down and downloads; uploads (good, malformed, not UTF-8, real values);
simulating now against the rule-based survey respondent over HTTP (a rerun costs nothing);
names from files are escaped; bad input is a short error, never a traceback."""

import pytest

from tests.survey_model import SurveyModel

from .conftest import errors, plain, warnings

pytestmark = pytest.mark.slow  # whole-page runs, like tests/app/test_pages.py
PAGE = "pages/fidelity.py"


@pytest.fixture
def page(make_app):
    def make(**state):
        return make_app(page=PAGE, **state)

    return make


def successes(at):
    return [plain(s.value) for s in at.success]


def infos(at):
    return [plain(i.value) for i in at.info]


def captions(at):
    return [plain(c.value) for c in at.caption]


CLOSE_BIASED = (
    "sim-close is at least as good as sim-biased on at least 90 % of these questions "
    "(worst case over their confidence sets)"
)


def test_sample_data_runs_at_once(page):
    at = page()
    assert at.title[0].value.startswith("Simulator fidelity")
    assert not errors(at) and not at.exception
    assert CLOSE_BIASED + "; for new questions like these, guaranteed on at least 13 %." in successes(at)
    assert any(
        plain(i.value).startswith("Undecided: these data cannot say which is better on 90 % of questions")
        for i in at.info
    )
    summary = next(d.value for d in at.dataframe if "AUC_cal" in d.value.columns)
    assert list(summary["simulator"]) == ["sim-close", "sim-biased", "sim-flat", "uniform"]
    result = at.session_state["_fid_memo"][1]
    assert summary["AUC_cal"][0] == pytest.approx(result.simulator("sim-close").auc_cal)
    assert len(at.get("plotly_chart")) == 3  # the curves, the plan and one question
    plan = next(d.value for d in at.dataframe if "questions needed" in d.value.columns)
    assert "plug-in share (no guarantee)" in plan.columns and len(plan) == 12
    assert any(plain(m.value).startswith("With 40 questions 2 of 12 pairwise verdicts") for m in at.markdown)
    assert any("Lowest curve: sim-close (AUC_cal" in plain(m.value) for m in at.markdown)
    assert list(summary["k per question"]) == ["k = 300", "k = 300", "probabilities", "k = 300"]
    assert any("Baseline: uniform, drawn like the simulators" in c for c in captions(at))
    at.selectbox(key="w_fid_baseline").set_value("exact").run()
    assert at.session_state["_fid_memo"][1].baseline == "exact"
    assert any("Baseline: the exact uniform distribution" in c for c in captions(at))
    at.selectbox(key="w_fid_baseline").set_value("drawn").run()
    names = [b.proto.label for b in at.get("download_button")]
    assert names == ["Results JSON", "Questions CSV", "Pairs CSV", "Report HTML"]
    # drill-down: another question
    at.selectbox(key="fidelity_question").set_value(39).run()
    qt = next(d.value for d in at.dataframe if "worst case Δ̂" in d.value.columns)
    assert qt["worst case Δ̂"][0] == pytest.approx(result.simulator("sim-close").upper[39])


def test_settings_recompute(page):
    at = page()
    at.selectbox(key="w_fid_loss").set_value("squared").run()
    assert at.session_state["_fid_memo"][1].loss == "squared" and not errors(at)
    at.number_input(key="w_fid_gamma").set_value(0.3).run()
    assert any("γ = 0.3 < ½" in w for w in warnings(at))
    assert not at.session_state["_fid_memo"][1].has_band


def test_upload(page):
    at = page(w_fid_source="Upload a CSV")
    assert any("Upload a CSV, or use the sample data" in e for e in errors(at))
    good = (
        "scenario,option,real,<script>alert(1)</script>,b\n"
        "q1,x,30,20,5\nq1,y,10,5,20\nq2,x,5,2,9\nq2,y,15,8,1\nq3,x,9,9,1\nq3,y,9,9,9\n"
    )
    at.file_uploader(key="fid_upload").set_value(("mine.csv", good.encode(), "text/csv")).run()
    assert not errors(at) and not at.exception
    assert any("3 questions and 2 simulator column(s) read from mine.csv" in c.value for c in at.caption)
    assert any("<script>alert(1)</script>" in s for s in successes(at) + [plain(i.value) for i in at.info])
    assert not any("<script>" in m.value for m in at.markdown)  # never raw HTML
    bad = good.replace("q2,y,15", "q2,y,-15")
    at.file_uploader(key="fid_upload").set_value(("bad.csv", bad.encode(), "text/csv")).run()
    assert any("bad.csv, line 5: negative count -15 in column 'real'" in e for e in errors(at))
    shares = "scenario,option,real,sim\nq1,A,0.6,3\nq1,B,0.4,4\nq2,A,0.7,1\nq2,B,0.3,2\n"
    at.file_uploader(key="fid_upload").set_value(("shares.csv", shares.encode(), "text/csv")).run()
    assert any(
        "shares.csv, lines 2-3: the real answers of scenario 'q1' look like shares" in e
        and "must hold counts" in e
        for e in errors(at)
    )
    at.file_uploader(key="fid_upload").set_value(("bin.csv", b"scenario\n\xff\xfe", "text/csv")).run()
    assert any("bin.csv, line 2: not UTF-8" in e for e in errors(at))
    assert not at.exception


def test_real_values_upload_and_bad_bounds(page):
    at = page(w_fid_source="Upload a CSV")
    text = "scenario,real,a\ns1,1,2\ns1,3,2.5\ns2,4,4\ns2,5,1\ns3,2,2\n"
    at.file_uploader(key="fid_upload").set_value(("v.csv", text.encode(), "text/csv")).run()
    assert at.selectbox(key="w_fid_loss").options == [
        "Wasserstein-1 (w1)",
        "squared error of the mean",
        "absolute error of the mean",
    ]
    at.text_input(key="w_fid_bounds").set_value("0, 10").run()
    assert not errors(at) and at.session_state["_fid_memo"][1].bounds == (0.0, 10.0)
    at.text_input(key="w_fid_bounds").set_value("ten").run()
    assert any("Bounds must be two numbers" in e for e in errors(at))
    at.text_input(key="w_fid_bounds").set_value("3, 4").run()
    assert any("do not contain every value" in e for e in errors(at))
    assert not at.exception


def test_simulate_now_against_a_server(make_app):
    with SurveyModel() as srv:
        model = [
            {
                "backend": "openai",
                "name": "survey-model",
                "base_url": srv.base_url,
                "max_retries": 0,
                "label": "survey",
            }
        ]
        at = make_app(models=model, page=PAGE, w_fid_source="Simulate now", w_fid_questions=3, w_fid_k=6)
        assert any("to draw the simulated respondents" in i.value for i in at.info) and not errors(at)
        assert any("18 answers to ask (0 already cached, 18 calls)" in c.value for c in at.caption)
        at.button(key="fidelity_sim_run").click().run()
        assert not at.exception and not errors(at), errors(at)
        assert srv.requests == 18
        # the estimate above the button is counted anew after the run (it offered 18 calls)
        assert any("18 answers to ask (18 already cached, 0 calls)" in c.value for c in at.caption)
        result = at.session_state["_fid_memo"][1]
        assert [s.name for s in result.simulators] == ["survey", "uniform"] and result.m == 3
        unparsed = next(d.value for d in at.dataframe if "unparsed" in d.value.columns)
        assert unparsed["answers"][0] == 18
        assert len(at.get("download_button")) == 6
        at.button(key="fidelity_sim_run").click().run()  # from the cache
        assert srv.requests == 18 and not at.exception
        # recorded in the History once (the cached rerun is the same run), as a simulation
        from dbpa_core.history import History

        [run] = History().list()
        assert History().extras([run.id])[run.id]["kind"] == "fidelity"
        _kind, back = History().result(run.id)
        assert back["simulation"].models == ("survey",)
        at.text_area(key="w_fid_template").set_value("Q: {question}").run()
        assert any("must contain {options}" in e for e in errors(at))
        assert at.button(key="fidelity_sim_run").disabled


def test_unreachable_model_is_a_short_error(make_app):
    with SurveyModel() as srv:
        url = srv.base_url
    at = make_app(
        models=[
            {"backend": "openai", "name": "survey-model", "base_url": url, "max_retries": 0, "timeout": 2}
        ],
        page=PAGE,
        w_fid_source="Simulate now",
        w_fid_questions=2,
        w_fid_k=1,
    )
    at.button(key="fidelity_sim_run").click().run()
    assert not at.exception
    assert errors(at) and not any("Traceback" in e for e in errors(at))


def _survey_app(make_app, srv, **state):
    model = [
        {
            "backend": "openai",
            "name": "survey-model",
            "base_url": srv.base_url,
            "max_retries": 0,
            "label": "survey",
        }
    ]
    return make_app(models=model, page=PAGE, w_fid_source="Simulate now", **state)


def test_changed_input_after_a_simulation_marks_it_outdated(make_app):
    """QA M1: changing k after a simulation crashed the page (TypeError: unhashable type:
    'list', the page's signature was a JSON list); the old results stay, marked outdated
    naming what changed, and setting k back clears the marker."""
    with SurveyModel() as srv:
        at = _survey_app(make_app, srv, w_fid_questions=2, w_fid_k=3)
        at.button(key="fidelity_sim_run").click().run()
        assert not at.exception and not errors(at), errors(at)
        assert not any("Outdated" in w for w in warnings(at))
        at.number_input(key="w_fid_k").set_value(4).run()
        assert not at.exception, at.exception
        assert any("Outdated:" in w and "(k)" in w for w in warnings(at)), warnings(at)
        assert [h.value for h in at.subheader] == ["Results"]  # the old results stay
        at.number_input(key="w_fid_temperature").set_value(0.5).run()
        assert any("(k, temperature)" in w for w in warnings(at)), warnings(at)
        at.number_input(key="w_fid_k").set_value(3).run()
        at.number_input(key="w_fid_temperature").set_value(1.0).run()
        assert not at.exception and not any("Outdated" in w for w in warnings(at))


def test_changed_inputs_of_any_json_never_raise():
    """The runner names changed fields only for an object of jobs; any other JSON (a list,
    as the fidelity page once sent) is 'outdated' without names, never a TypeError."""
    from ui.runner import _changed_inputs

    assert _changed_inputs('[["q1"], [{"a": 1}]]', '[["q1"], [{"a": 2}]]') == ""
    assert _changed_inputs('{"job": {"samples": 3}}', '{"job": {"samples": 4}}') == " (k)"


def test_no_guarantee_below_one_half_and_no_success_style(page):
    """QA M2: with γ < ½ nothing on the page states a guarantee; the verdicts only describe
    these questions, so none is drawn as a success."""
    at = page()
    at.number_input(key="w_fid_gamma").set_value(0.45).run()
    assert not at.exception and not errors(at)
    assert not successes(at)
    text = " ".join(captions(at) + infos(at) + warnings(at))
    assert "with probability ≥" not in text and "guaranteed on at least" not in text
    assert any("No guarantee: with γ = 0.45 < ½" in c for c in captions(at))
    assert any(
        i.startswith(CLOSE_BIASED + "; with γ = 0.45 < ½ that describes these questions only: no guarantee.")
        for i in infos(at)
    )


def test_few_questions_verdicts_are_not_successes(page):
    """QA M3: three questions decide a pair on these questions only: said so, not in green."""
    at = page(w_fid_source="Upload a CSV")
    text = (
        "scenario,option,real,good,bad\nq1,x,60,0.6,0.1\nq1,y,40,0.4,0.9\n"
        "q2,x,20,0.25,0.9\nq2,y,80,0.75,0.1\nq3,x,50,0.5,0.2\nq3,y,50,0.5,0.8\n"
    )
    at.file_uploader(key="fid_upload").set_value(("three.csv", text.encode(), "text/csv")).run()
    assert not at.exception and not errors(at)
    assert not successes(at)
    assert (
        "good is at least as good as bad on at least 90 % of these questions (worst case "
        "over their confidence sets); no guarantee for new questions yet."
    ) in infos(at)
    assert any("No guarantee for new questions yet: with m = 3 questions" in c for c in captions(at))


def test_captions_follow_alpha(page):
    """QA minor 10: the chart's caption followed a hard-coded τ = 0.9, 90 %."""
    at = page()
    at.number_input(key="w_fid_alpha").set_value(0.01).run()
    assert not at.exception and not errors(at)
    cap = next(c for c in captions(at) if c.startswith("Each curve"))
    assert "τ = 0.99, 99 % of questions" in cap and "0.9," not in cap and "90 %" not in cap


def test_simulate_now_with_a_replay_model_is_checked_before_the_run(make_app):
    """QA review 2, minor 7: with the demo recording selected the page offered an enabled
    button and failed after pressing it; the check now comes first and the button is off."""
    # the recording holds a few simulated answers per survey prompt (the manual's example),
    # not 50: asking for more is refused before the run
    at = make_app(page=PAGE, w_fid_source="Simulate now", w_fid_questions=2, w_fid_k=50)
    assert any(
        "holds fewer than 50 recorded answers for 2 of the 2 survey prompts" in e for e in errors(at)
    ), errors(at)
    # the demo lists recordings only: no word of "the embedded local one"; what works instead
    assert any(
        "**Sample data** and **Upload a CSV** sources work here" in e and "embedded" not in e
        for e in errors(at)
    ), errors(at)
    assert at.button(key="fidelity_sim_run").disabled
    assert not any("Press Simulate answers" in i for i in infos(at))  # no invitation to press
    assert not at.exception


def test_real_values_sigma_defaults_to_the_pooled_sd_as_the_cli(page):
    """QA review 2, minor 3: the page sent σ = 1 while the CLI used the pooled SD, so the
    same file gave two answers; σ is now empty by default (the pooled SD) and shown only
    for w1."""
    import warnings as w

    from dbpa_core.fidelity import run_fidelity
    from dbpa_core.fidelity.data import parse_csv

    text = "scenario,real,a\ns1,1,2\ns1,3,2.5\ns2,4,4\ns2,5,1\ns3,2,2\ns3,6,5\n"
    at = page(w_fid_source="Upload a CSV")
    at.file_uploader(key="fid_upload").set_value(("v.csv", text.encode(), "text/csv")).run()
    assert not errors(at) and not at.exception
    shown = at.session_state["_fid_memo"][1]
    with w.catch_warnings():
        w.simplefilter("ignore")
        cli = run_fidelity(parse_csv(text), loss="w1")
    assert shown.sigma == pytest.approx(cli.sigma)
    assert shown.simulator("a").auc_cal == pytest.approx(cli.simulator("a").auc_cal)
    assert any("pooled" in x for x in warnings(at)), warnings(at)
    at.text_input(key="w_fid_sigma").set_value("2").run()
    assert at.session_state["_fid_memo"][1].sigma == 2.0
    at.text_input(key="w_fid_sigma").set_value("-1").run()
    assert any("σ must be a positive number" in e for e in errors(at))
    at.selectbox(key="w_fid_loss").set_value("squared").run()
    assert not [t for t in at.text_input if t.key == "w_fid_sigma"]  # no σ without w1
    assert not errors(at) and not at.exception


def test_drill_down_shows_each_simulators_sample_size(make_app):
    """QA review 2, minor 9: a 100 % bar resting on one parsed answer looked confident."""
    with SurveyModel() as srv:
        at = _survey_app(make_app, srv, w_fid_questions=2, w_fid_k=3)
        at.button(key="fidelity_sim_run").click().run()
        assert not errors(at), errors(at)
        qt = next(d.value for d in at.dataframe if "worst case Δ̂" in d.value.columns)
        result = at.session_state["_fid_memo"][1]
        n = result.data.simulated["survey"][0].sum()
        # the uniform baseline draws as many answers (rounded) as the simulator parsed
        assert list(qt["answers"]) == [f"n = {n:g}", f"n = {round(n)} (drawn)"]
        fig = at.get("plotly_chart")[1].proto.spec
        assert f"survey (n = {n:g})" in fig


OWN = (
    "scenario,option,real,old-sim,question\n"
    "car,Yes,90,0.5,Do you own a car?\ncar,No,60,0.5,\n"
    "pet,Yes,30,0.5,Do you have a pet?\npet,No,70,0.5,\n"
)


def test_simulate_now_asks_the_questions_of_an_uploaded_csv(make_app):
    """QA review 2: only the sample's questions could be simulated on the page; a survey's
    own CSV with a question column is asked now, compared with its real counts."""
    with SurveyModel() as srv:
        at = _survey_app(make_app, srv, w_fid_k=4, w_fid_qsource="From my CSV")
        assert any("Upload a CSV with a question column" in e for e in errors(at))
        assert at.button(key="fidelity_sim_run").disabled
        bad = "scenario,option,real\ncar,Yes,90\ncar,No,60\npet,Yes,30\npet,No,70\n"
        at.file_uploader(key="fid_sim_upload").set_value(("bad.csv", bad.encode(), "text/csv")).run()
        assert any("scenario 'car' has no question text" in e for e in errors(at)), errors(at)
        assert at.button(key="fidelity_sim_run").disabled
        at.file_uploader(key="fid_sim_upload").set_value(("own.csv", OWN.encode(), "text/csv")).run()
        assert not errors(at), errors(at)
        assert any("2 questions read from own.csv" in c for c in captions(at))
        assert any("8 answers to ask (0 already cached, 8 calls)" in c for c in captions(at))
        at.button(key="fidelity_sim_run").click().run()
        assert not errors(at) and not at.exception, errors(at)
        assert srv.requests == 8
        result = at.session_state["_fid_memo"][1]
        assert result.data.ids == ("car", "pet") and result.data.simulators == ("survey",)
        assert [list(s.real) for s in result.data.scenarios] == [[90, 60], [30, 70]]
        # another file with the same ids is another simulation: the old one is outdated
        other = OWN.replace("Do you own a car?", "Do you drive?")
        at.file_uploader(key="fid_sim_upload").set_value(("o2.csv", other.encode(), "text/csv")).run()
        assert any("Outdated" in w and "(questions)" in w for w in warnings(at)), warnings(at)
        assert not at.exception
