"""Answer checks on the audit pages: the editor's rows become the spec's checks; the table,
the chart and the exports carry what the audit computed (rates recounted here from the
answers); a recorded run recomputes the same checks from its answers, judges read from the
cache and never asked; the page runs its checks and History shows them again."""

from __future__ import annotations

import csv
import dataclasses
import io
from unittest import mock

import pandas as pd
import pytest

from dbpa_core.audit import run_audit
from dbpa_core.cache import Cache
from dbpa_core.checks import Check, judge_request
from dbpa_core.sampling import backend_identity, sample_key
from dbpa_core.spec import SpecError, parse_spec
from ui import checks_figures, checks_view, export, grid

from .conftest import DEMO, errors, plain

NICE = (
    "John has these features: Age: 70, Sex: male, Total cholesterol: 6.2 mmol/L, "
    "HDL cholesterol: 1.1 mmol/L, Systolic blood pressure: 150 mmHg, Smoker: yes, "
    "Diabetes: no. Provide recommendations on CVD guidelines based on NICE for this person."
)
CHECKS = [
    {"name": "<b>mentions</b> a statin", "contains": ["statin"]},
    {"name": "cites NICE", "regex": r"\bNICE\b"},
    {"name": "refuses", "refusal": True},
    {"name": "length", "words": True},
]
JUDGE = {"backend": "openai", "name": "judge", "base_url": "http://127.0.0.1:9/v1"}


def spec_with(checks):
    return parse_spec(
        {
            "name": "checks",
            "model": {"backend": "replay", "file": DEMO, "label": "demo"},
            "embedder": {"backend": "rouge1"},
            "samples": 10,
            "permutations": 300,
            "seed": 1,
            "base": {"prompt": NICE},
            "checks": checks,
            "perturbations": [
                {"name": "comedian", "prefix": "Act as a comedian."},
                {"name": "child", "prefix": "Act as a child."},
            ],
        }
    )


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return Cache(tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="module")
def result(cache):
    return run_audit(spec_with(CHECKS), cache=cache)


# --------------------------------------------------------------------------- the editor
def test_the_editors_rows_become_the_specs_checks():
    rows = pd.DataFrame(
        [
            {"name": "names both", "kind": "contains", "value": "aspirin, statin ,", "all": True},
            {"name": "", "kind": "regex", "value": r"\bNICE\b", "all": False},
            {"name": None, "kind": None, "value": None, "all": None},  # an empty row
            {"name": "refuses", "kind": "refusal", "value": "", "all": False},
            {"name": "short", "kind": "words", "value": "ignored", "all": False},
        ]
    )
    found = checks_view.entries(rows)
    assert found == [
        {"name": "names both", "contains": ["aspirin", "statin"], "all": True},
        {"name": r"regex: \bNICE\b", "regex": r"\bNICE\b"},
        {"name": "refuses", "refusal": True},
        {"name": "short", "words": True},
    ]
    spec = spec_with(found)
    assert [c.kind for c in spec.checks] == ["contains", "regex", "refusal", "words"]
    assert spec.checks[0].all and spec.checks[0].terms == ("aspirin", "statin")

    bad = pd.DataFrame([{"name": "cites NICE", "kind": "regex", "value": "(NICE", "all": False}])
    with pytest.raises(SpecError, match=r"check 'cites NICE'.*not a valid regular expression"):
        spec_with(checks_view.entries(bad))
    empty = pd.DataFrame([{"name": "x", "kind": "contains", "value": " , ", "all": False}])
    with pytest.raises(SpecError, match="'contains' must be a list"):
        spec_with(checks_view.entries(empty))


# --------------------------------------------------------------------------- table, chart
def test_the_table_counts_what_the_answers_hold(result):
    df = checks_figures.checks_frame({"": result})
    assert len(df) == 4 * 2 and "model" not in df
    base = [t.lower() for t in result.base.texts]
    for arm in ("comedian", "child"):
        texts = [t.lower() for t in result.responses(arm)]
        row = df[(df["check"] == "<b>mentions</b> a statin") & (df["arm"] == arm)].iloc[0]
        x, y = sum("statin" in t for t in base), sum("statin" in t for t in texts)
        before, after = row["base → perturbed"].split(" → ")
        assert before == f"{x}/10 ({10 * x} %)" and after.startswith(f"{y}/10")
        points = 10 * (y - x)
        assert row["difference"] == (
            "0 points" if points == 0 else f"{'−' if points < 0 else '+'}{abs(points)} points"
        )
        length = df[(df["check"] == "length") & (df["arm"] == arm)].iloc[0]
        # words: white-space separated pieces that hold a letter, digit or underscore
        mean = (
            sum(
                sum(any(ch.isalnum() or ch == "_" for ch in w) for w in t.split())
                for t in result.responses(arm)
            )
            / 10
        )
        assert length["base → perturbed"].endswith(f" → {mean:.1f} words (mean, n = 10)")
    got = {(r.check, r.perturbation): r for r in result.checks}
    for row in df.to_dict("records"):
        r = got[(row["check"], row["arm"])]
        assert (row["p (raw)"], row["p (adjusted)"], row[""], row["significant"]) == (
            r.p_value,
            r.p_adjusted,
            r.stars,
            r.significant,
        )
        assert row["graded by"] == "rule"


def test_the_chart_draws_each_difference_with_its_interval(result):
    fig = checks_figures.difference_figure({"": result})
    rates, numbers = fig.data  # two panels: points and words
    rules = [r for r in result.checks if not r.numeric][::-1]  # drawn bottom-up
    assert list(rates.x) == pytest.approx([100 * r.difference for r in rules])
    assert list(rates.error_x.array) == pytest.approx([100 * (r.ci[1] - r.difference) for r in rules])
    assert list(rates.error_x.arrayminus) == pytest.approx([100 * (r.difference - r.ci[0]) for r in rules])
    assert all("&lt;b&gt;" in y for y in rates.y if "mentions" in y)  # names escaped
    lengths = [r for r in result.checks if r.numeric][::-1]
    assert list(numbers.x) == pytest.approx([r.difference for r in lengths])
    colors = list(rates.marker.color)
    assert colors == [checks_figures.ALT_COLOR if r.significant else checks_figures.NS_COLOR for r in rules]
    assert checks_figures.difference_figure({"": dataclasses.replace(result, checks=())}) is None


def test_exports_carry_the_checks(result):
    meta = export.RunMeta()
    rows = list(csv.DictReader(io.StringIO(export.results_csv(result, meta))))
    got = {(r.check, r.perturbation): r for r in result.checks}
    for row in rows:
        r = got[("cites NICE", row["name"])]
        assert float(row["check: cites NICE: base"]) == pytest.approx(r.base)
        assert float(row["check: cites NICE: p_adjusted"]) == pytest.approx(r.p_adjusted)
        assert float(row["check: length: ci_low"]) == pytest.approx(got[("length", row["name"])].ci[0])
    page = export.html_report("t", [result], {}, meta)
    assert "<h3>Answer checks</h3>" in page and "&lt;b&gt;mentions&lt;/b&gt; a statin" in page
    assert "<b>mentions</b>" not in page
    assert "Answer checks: differences with 95 % intervals" in page
    plain_result = dataclasses.replace(result, checks=(), spec=dataclasses.replace(result.spec, checks=()))
    assert "check:" not in export.results_csv(plain_result, meta).splitlines()[0]
    assert "Answer checks" not in export.html_report("t", [plain_result], {}, meta)


# --------------------------------------------------------------------------- recorded runs
def test_a_recorded_run_recomputes_the_same_checks(result, cache):
    again = checks_view.recompute(dataclasses.replace(result, checks=()), cache)
    assert [c.to_dict() for c in again.checks] == [c.to_dict() for c in result.checks]
    assert again.warnings == result.warnings


def test_judges_are_read_from_the_cache_never_asked(result, tmp_path):
    judge = Check(
        "recommends a statin",
        "judge",
        judge_model=JUDGE,
        question="Does the answer recommend a statin? Answer yes or no.",
    )
    spec = dataclasses.replace(result.spec, checks=(*result.spec.checks, judge))
    recorded = dataclasses.replace(result, spec=spec, checks=())
    empty = Cache(tmp_path / "empty")
    # replies not cached: the judge is left out (the server at port 9 is never asked)
    # and the other checks are corrected among themselves, as the run without it did
    partial = checks_view.recompute(recorded, empty)
    assert [c.to_dict() for c in partial.checks] == [c.to_dict() for c in result.checks]
    assert any("'recommends a statin' are not shown" in w for w in partial.warnings)
    # replies cached: yes for every answer with a statin
    store = Cache(tmp_path / "judged")
    answers = [t for a in (result.base, *result.arms) for t in a.texts]
    for t in set(answers):
        key = sample_key(backend_identity(JUDGE), judge_request(judge, t, spec.seed))
        store.set(key, {"text": "Yes." if "statin" in t.lower() else "No."})
    full = checks_view.recompute(recorded, store)
    by = {(c.check, c.perturbation): c for c in full.checks}
    for arm in ("comedian", "child"):
        rule, graded = by[("<b>mentions</b> a statin", arm)], by[("recommends a statin", arm)]
        assert (graded.base_count, graded.count) == (rule.base_count, rule.count)
        assert graded.model_graded and not rule.model_graded
    assert len(full.checks) == 10 and not any("not shown" in w for w in full.warnings)
    columns = checks_view.outcome_columns(spec.checks, answers, empty, spec.seed)
    assert set(columns["recommends a statin"]) == {None}
    columns = checks_view.outcome_columns(spec.checks, answers, store, spec.seed)
    assert columns["recommends a statin"] == columns["<b>mentions</b> a statin"]
    answers = grid.answers_frame({"": full}, store)  # the grid reads the same replies
    assert answers["recommends a statin (model-graded)"].equals(answers["<b>mentions</b> a statin"])
    frame = checks_figures.checks_frame({"": full})
    assert set(frame.loc[frame["check"] == "recommends a statin", "graded by"]) == {"model-graded"}


# --------------------------------------------------------------------------- the pages
def checks_table(at) -> pd.DataFrame:
    """The checks table on screen (a styled table carries no key in AppTest)."""
    return next(d.value for d in at.dataframe if "graded by" in d.value.columns)


def test_the_page_runs_its_checks_and_history_shows_them_again(make_app):
    table = pd.DataFrame(
        [
            {"name": "mentions a statin", "kind": "contains", "value": "statin", "all": False},
            {"name": "length", "kind": "words", "value": "", "all": False},
        ]
    )
    at = make_app(checks_table=table, w_embedder="rouge1")
    assert any("Answer checks (2)" in e.label for e in at.expander)
    at.button(key="landing_run").click().run()
    assert not at.exception, at.exception
    assert not errors(at), errors(at)
    result = next(iter(at.session_state["results"]["landing"].values()))
    assert [c.name for c in result.spec.checks] == ["mentions a statin", "length"]
    live = checks_table(at)
    assert len(live) == 2 * len(result.perturbations) == len(result.checks)
    assert any(
        "check × arm comparisons" in plain(m.value) or "No answer check" in plain(m.value)
        for m in at.markdown
    )
    assert "Answers" in [t.label for t in at.tabs]

    at.switch_page("pages/history.py").run()
    assert not at.exception, at.exception
    shown = checks_table(at)
    pd.testing.assert_frame_equal(shown, live)
    assert "Answers" in [t.label for t in at.tabs]  # the grid in History's run view
    at.session_state[f"hist_{at.session_state['hist_open']}_tabs"] = "Answers"
    at.run()
    grid_table = next(d.value for d in at.dataframe if "answer" in d.value.columns)
    assert len(grid_table) == 10 * (1 + len(result.perturbations))
    assert {"mentions a statin", "length"} <= set(grid_table.columns)

    # a bad check is one line before Run, and Run is off
    at.switch_page("pages/perturbation_test.py").run()
    at.session_state["checks_table"] = pd.DataFrame(
        [{"name": "cites", "kind": "regex", "value": "(NICE", "all": False}]
    )
    at.run()
    assert any("not a valid regular expression" in e for e in errors(at))
    assert at.button(key="landing_run").disabled


def test_opening_a_spec_fills_the_editor():
    """What specfile.apply_spec does with an opened spec's checks: the rules go into the
    editor, and a judge too, with its model as the editor's judge model (one judge model
    for the editor: judges of two models are named in a note instead)."""
    from dbpa_core.spec import model_label

    judge = Check("graded", "judge", judge_model=JUDGE, question="Yes?")
    spec = spec_with(CHECKS[:2])
    spec = dataclasses.replace(spec, checks=(*spec.checks, judge))
    state: dict = {}
    with mock.patch.object(checks_view.st, "session_state", state):
        notes = checks_view.apply_checks(spec)
    table = state[checks_view.TABLE]
    assert list(table["name"]) == ["<b>mentions</b> a statin", "cites NICE", "graded"]
    assert list(table["value"]) == ["statin", r"\bNICE\b", "Yes?"]
    assert state[checks_view.JUDGE_MODEL] == model_label(JUDGE) and not notes
    assert checks_view.entries(table, judge_model=JUDGE) == [
        {"name": "<b>mentions</b> a statin", "contains": ["statin"]},
        {"name": "cites NICE", "regex": r"\bNICE\b"},
        {"name": "graded", "judge": {"question": "Yes?", "model": dict(JUDGE)}},
    ]
    other = Check("other", "judge", judge_model={**JUDGE, "name": "another"}, question="No?")
    spec = dataclasses.replace(spec, checks=(*spec.checks, other))
    with mock.patch.object(checks_view.st, "session_state", {}):
        notes = checks_view.apply_checks(spec)
    assert len(notes) == 1 and "'graded', 'other'" in notes[0] and "more than one model" in notes[0]


TWO_CHECKS = pd.DataFrame(
    [
        {"name": "mentions a statin", "kind": "contains", "value": "statin", "all": False},
        {"name": "length", "kind": "words", "value": "", "all": False},
    ]
)


def test_several_models_and_a_model_comparison_show_their_checks(make_app):
    from tests.fake_openai import FakeOpenAI

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
        checks_table=TWO_CHECKS,
    )
    at.button(key="personas_run").click().run()
    assert not at.exception, at.exception
    table = checks_table(at)
    assert len(table) == 2 * 2 * 2 and set(table["model"]) == {"demo-a", "demo-b"}
    assert set(table["arm"]) == {"comedian", "doctor"}
    assert "Answers" in [t.label for t in at.tabs]
    grid_table = next(d.value for d in at.dataframe if "answer" in d.value.columns)
    assert set(grid_table["model"]) == {"demo-a", "demo-b"} and len(grid_table) == 2 * 3 * 10

    with FakeOpenAI(models=("ref", "other")) as srv:
        models = [
            {"backend": "openai", "name": "ref", "base_url": srv.base_url},
            {"backend": "openai", "name": "other", "base_url": srv.base_url},
        ]
        at = make_app(
            models=models, page="pages/model_comparison.py", w_embedder="rouge1", checks_table=TWO_CHECKS
        )
        at.button(key="models_run").click().run()
    assert not at.exception, at.exception
    result = next(iter(at.session_state["results"]["models"].values()))
    table = checks_table(at)
    assert list(table["arm"]) == ["other", "other"] == [c.perturbation for c in result.checks]
    grid_table = next(d.value for d in at.dataframe if "answer" in d.value.columns)
    assert list(dict.fromkeys(grid_table["role"])) == ["reference", ""]
    assert list(dict.fromkeys(grid_table["arm"])) == ["ref", "other"]
    assert "model" not in grid_table  # each arm is a model: no second column for it


def test_a_row_added_in_the_editor_goes_into_the_spec(make_app):
    at = make_app(w_embedder="rouge1")
    assert any("Answer checks: what changed" in e.label for e in at.expander)
    at.session_state["landing_checks_editor_0"] = {
        "edited_rows": {},
        "deleted_rows": [],
        "added_rows": [{"name": "cites NICE", "kind": "regex", "value": r"\bNICE\b"}],
    }
    at.run()
    assert not at.exception, at.exception
    assert checks_view.entries(at.session_state["checks_table"]) == [
        {"name": "cites NICE", "regex": r"\bNICE\b"}
    ]
    at.run()  # the editor is drawn anew from the table
    assert any("Answer checks (1)" in e.label for e in at.expander)
    assert not errors(at)
    assert not at.button(key="landing_run").disabled


def test_control_vs_target_shows_the_checks_of_each_model(make_app):
    from tests.fake_openai import FakeOpenAI

    from .test_pages import _roc_table

    base, table = _roc_table()
    with FakeOpenAI(models=("m1", "m2")) as srv:
        models = [{"backend": "openai", "name": n, "base_url": srv.base_url} for n in ("m1", "m2")]
        at = make_app(
            models=models,
            page="pages/control_target.py",
            roc_table=table,
            w_base_prompt=base,
            w_embedder="rouge1",
            w_roc_models=["m1", "m2"],
            checks_table=TWO_CHECKS,
        )
        at.button(key="roc_run").click().run()
    assert not at.exception, at.exception
    shown = checks_table(at)
    assert len(shown) == 2 * 3 * 2 and set(shown["model"]) == {"m1", "m2"}
    assert set(shown["arm"]) == {"ahmed", "peter", "comedian"}
    assert "Answers" in [t.label for t in at.tabs]
