"""Reading the verdict: 'detectably' (not 'significantly'), the size in words against stated
anchors, and δ set from the verdict line without a rerun."""

import dataclasses

import numpy as np
import pytest

from ui import verdicts

from .conftest import errors, plain, warnings
from .test_figures import result  # noqa: F401 - the module's fixture (comedian, doctor)


def _with_similarities(p, p0, p1, significant=True):
    test = dataclasses.replace(
        p.test, null_similarities=np.asarray(p0, float), alt_similarities=np.asarray(p1, float)
    )
    return dataclasses.replace(p, test=test, significant=significant)


def test_size_is_cohens_d_of_the_similarities_against_stated_anchors(result):  # noqa: F811
    rng = np.random.default_rng(0)
    p0 = rng.normal(0.6, 0.1, 4000)
    p = result.perturbations[0]
    for shift, word in ((0.0, "very small"), (0.03, "small"), (0.06, "moderate"), (0.1, "large")):
        q = _with_similarities(p, p0, rng.normal(0.6 - shift, 0.1, 4000))
        d = verdicts.size_d(q)
        assert d == pytest.approx(shift / 0.1, abs=0.06)
        assert verdicts.size_word(d) == word
    assert [t for t, _ in verdicts.SIZE_ANCHORS] == [0.8, 0.5, 0.2]  # what the manual states
    assert verdicts.size_word(None) == ""


def test_verdict_says_detectably_and_how_large(result):  # noqa: F811
    rng = np.random.default_rng(1)
    a, b = result.perturbations
    big = _with_similarities(a, rng.normal(0.6, 0.1, 400), rng.normal(0.5, 0.1, 400))
    none = _with_similarities(b, rng.normal(0.6, 0.1, 400), rng.normal(0.6, 0.1, 400), significant=False)
    two = dataclasses.replace(result, perturbations=(big, none))
    s = verdicts.summary_sentence(two)
    assert "significantly" not in s
    assert s.startswith("1 of 2 perturbations change the answers detectably")
    assert "comedian (large)" in s and "doctor" not in s
    one = dataclasses.replace(result, perturbations=(big,))
    s1 = verdicts.summary_sentence(one)
    assert "changes the answers detectably" in s1 and ": a large change (d = " in s1
    # δ: the same result read against a minimum effect, nothing else changes
    with_delta = verdicts.with_min_effect(one, 1e6)
    assert with_delta.perturbations[0].p_value == big.p_value
    assert with_delta.perturbations[0].exceeds_min_effect is False
    assert "0 of 1 exceeds the minimum effect of interest δ = 1e+06" in verdicts.summary_sentence(with_delta)
    assert verdicts.with_min_effect(one, None) is one


@pytest.mark.slow
def test_delta_is_set_from_the_verdict_line_without_a_rerun(make_app):
    at = make_app(w_embedder="rouge1")
    at.button(key="landing_run").click().run()
    assert not at.exception, at.exception
    verdict = next(plain(m.value) for m in at.markdown if "detectably" in plain(m.value))
    assert "perturbations change the answers" in verdict or "None of the" in verdict
    table = next(d.value for d in at.dataframe if "perturbation" in d.value.columns)
    assert "size (d)" in table.columns
    # a word only where the change is detectable; its d either way
    for cell, detectable in zip(table["size (d)"], table["detectable"], strict=True):
        assert (
            cell.split(" (")[0] in ("very small", "small", "moderate", "large")
            if detectable
            else cell.startswith("(")
        )
    before = next(iter(at.session_state["results"]["landing"].values()))
    at.number_input(key="_landing_delta").set_value(0.05).run()
    assert not at.exception, at.exception
    assert not errors(at) and not any("Outdated" in w for w in warnings(at))
    assert at.number_input(key="w_min_effect").value == 0.05  # the sidebar's δ too
    after = next(iter(at.session_state["results"]["landing"].values()))
    assert after.spec.min_effect == 0.05 and after.usage == before.usage  # re-read, not rerun
    assert [p.p_value for p in after.perturbations] == [p.p_value for p in before.perturbations]
    table = next(d.value for d in at.dataframe if "perturbation" in d.value.columns)
    assert "> δ = 0.05" in table.columns


def test_response_viewer_pairs_each_answer_with_its_nearest_base_answer():
    from types import SimpleNamespace

    from ui.widgets import nearest_pairs

    base = SimpleNamespace(texts=("a", "b", "c"), embeddings=np.eye(3))
    other = SimpleNamespace(texts=("x", "y"), embeddings=np.array([[0.1, 0.2, 1.0], [1.0, 0.3, 0.0]]))
    pairs = nearest_pairs(base, other)
    assert [j for j, _ in pairs] == [2, 0]
    assert pairs[0][1] == pytest.approx(1 / np.sqrt(1.05))
    # without embeddings (BLEU/ROUGE): the base answer sharing most words
    base = SimpleNamespace(texts=("statins lower risk", "see your doctor soon", "eat well"), embeddings=None)
    other = SimpleNamespace(texts=("please see a doctor", "Statins lower the risk"), embeddings=None)
    assert [j for j, _ in nearest_pairs(base, other)] == [1, 0]


@pytest.mark.slow
def test_responses_tab_shows_the_nearest_pair(make_app):
    at = make_app(w_embedder="rouge1")
    at.button(key="landing_run").click().run()
    at.session_state["landing_tabs"] = "Responses"
    at.run()
    assert not at.exception, at.exception
    from ui.widgets import nearest_pairs

    res = next(iter(at.session_state["results"]["landing"].values()))
    arm = next(a for a in res.arms if a.arm.name == at.selectbox(key="landing_viewer_arm").value)
    at.number_input(key="landing_viewer_idx").set_value(3).run()
    j = nearest_pairs(res.base, arm)[2][0]
    assert any(
        "Answer #3 of" in plain(c.value) and f"beside base answer #{j + 1}," in plain(c.value)
        for c in at.caption
    )


@pytest.mark.slow
def test_control_vs_target_default_shows_a_passing_control_and_failures_in_red(make_app):
    """The default example asks the base prompt again as a control: it draws answers of its
    own and passes (green); the controls that change the answers fail (red)."""
    from ui import presets, views

    at = make_app(page="pages/control_target.py", w_samples=20, w_permutations=2000)
    at.button(key="roc_run").click().run()
    assert not at.exception, at.exception
    assert not errors(at) or all("Control gate failed" in e for e in errors(at))
    res = next(iter(at.session_state["results"]["roc"].values()))
    same = next(p for p in res.perturbations if p.name == presets.SAME_PROMPT)
    assert same.role == "control" and not same.significant and same.effect_size > 0
    assert same.test.p_value < 1.0  # its own answers, not the base's
    each = next(d.value for d in at.dataframe if "outcome" in d.value.columns)
    row = each.set_index("perturbation").loc[presets.SAME_PROMPT]
    assert row["outcome"] == "passes"
    for p in res.perturbations:
        assert (
            each.set_index("perturbation").loc[p.name, "outcome"]
            == {
                ("control", False): "passes",
                ("control", True): "fails: changed",
                ("target", True): "detected",
                ("target", False): "not detected",
            }[(p.role, p.significant)]
        )
    assert "#FDE2E1" in views._status_colour("fails: changed")  # red
    assert "#DCF5E3" in views._status_colour("passes")  # green
    if any(p.significant for p in res.perturbations if p.role == "control"):
        assert any("Control gate failed" in e for e in errors(at))  # st.error: red


@pytest.mark.slow
def test_the_heat_map_cell_opens_inside_its_fragment(make_app):
    """The heat map and the opened cell are a fragment (a click reruns only them; the
    click's speed is measured by benchmarks/bench_heatmap_click.py): changing the cell
    still opens its histograms, answers and Why view."""
    at = make_app(page="pages/persona_explorer.py", w_embedder="rouge1")
    at.button(key="personas_run").click().run()
    assert not at.exception, at.exception
    persona = at.selectbox(key="personas_cell_p").options[-1]
    at.selectbox(key="personas_cell_p").set_value(persona).run()
    assert not at.exception, at.exception
    assert any(f"Why: {persona}" in plain(m.value) for m in at.markdown)
    assert any(f"Answer #1 of {persona} beside" in plain(c.value) for c in at.caption)
    assert any("Table and downloads" in e.label for e in at.expander)
