"""Issue 8 on the dashboard: sidebar controls for δ and the null variant, warnings
above the Run button, effect above chance and '> δ' in the results table."""

import pandas as pd
import pytest

from dbpa_core import DEFAULT_MEASURE
from ui import presets

from .conftest import errors

pytestmark = pytest.mark.slow


def warnings_shown(at) -> list[str]:
    return [w.value for w in at.warning]


def test_sidebar_has_the_new_controls_and_default_measure(make_app):
    at = make_app(w_embedder="rouge1")
    assert at.selectbox(key="w_measure").value == DEFAULT_MEASURE
    assert at.selectbox(key="w_measure").options[0] == DEFAULT_MEASURE
    assert at.selectbox(key="w_null").value == "base"
    assert at.number_input(key="w_min_effect").value == 0.0
    assert not errors(at)


def test_warning_above_run_when_nothing_can_be_significant(make_app):
    at = make_app(w_samples=2, w_embedder="rouge1")
    shown = warnings_shown(at)
    assert any("no result can be significant" in w and "k = 2" in w for w in shown), shown
    assert not at.button(key="landing_run").disabled  # a warning, not a block
    at = make_app(w_samples=20, w_permutations=5000, w_embedder="rouge1", w_correction="bh")
    assert not any("significant" in w for w in warnings_shown(at))
    # B = 500 and Holm over 8 personas: only '*' is in reach, a quiet note, not a warning
    at = make_app(w_embedder="rouge1")
    assert not warnings_shown(at)
    assert any("at most '*'" in c.value for c in at.caption)


def test_warning_for_a_perturbation_equal_to_the_base(make_app):
    rows = pd.DataFrame(
        [
            {"name": "copy", "prefix": "", "prompt": presets.NICE_PROMPT, "role": ""},
            {"name": "child", "prefix": "Act as a child.", "prompt": "", "role": ""},
        ],
        columns=presets.COLUMNS,
    )
    at = make_app(perturbations=rows, w_embedder="rouge1")
    assert any("'copy' has the same prompt as the base" in w for w in warnings_shown(at))


def test_results_table_shows_above_chance_and_min_effect(make_app):
    at = make_app(w_embedder="rouge1", w_min_effect=0.01, w_null="pooled")
    at.button(key="landing_run").click().run()
    assert not at.exception, at.exception
    assert not errors(at), errors(at)
    result = next(iter(at.session_state["results"]["landing"].values()))
    assert result.spec.null == "pooled" and result.spec.min_effect == 0.01
    table = next(d.value for d in at.dataframe if "perturbation" in d.value.columns)
    assert {"ω above chance", "ω", "chance ω", "detectable", "> δ = 0.01"} <= set(table.columns)
    by = {p.name: p for p in result.perturbations}
    row = table.set_index("perturbation").loc["child"]
    assert row["> δ = 0.01"] == by["child"].exceeds_min_effect
    assert row["ω above chance"] == pytest.approx(by["child"].effect_above_chance, abs=1e-4)


def test_model_comparison_says_when_the_test_is_asymmetric(make_app):
    from tests.fake_openai import FakeOpenAI

    with FakeOpenAI(models=("ref", "other")) as srv:
        models = [
            {"backend": "openai", "name": "ref", "base_url": srv.base_url},
            {"backend": "openai", "name": "other", "base_url": srv.base_url},
        ]
        at = make_app(models=models, page="pages/model_comparison.py", w_embedder="rouge1", w_measure="jsd")
        at.button(key="models_run").click().run()
        assert not at.exception, at.exception
        captions = " ".join(c.value for c in at.caption)
        assert "comparison is asymmetric" in captions and "both groups" in captions
        at.selectbox(key="w_null").set_value("pooled").run()
        at.button(key="models_run").click().run()
    captions = " ".join(c.value for c in at.caption)
    assert "asymmetric" not in captions
