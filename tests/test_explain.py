"""The "Why" view's core: weighted log-odds (against hand-computed values), tokens,
duplicates, typical / atypical answers, highlighting and the model-written summary."""

import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dbpa_core.audit import run_audit
from dbpa_core.cache import Cache
from dbpa_core.explain import (
    explain,
    explain_result,
    find_duplicates,
    highlight,
    log_odds,
    representatives,
    summarize_difference,
    summary_prompt,
    tokenize,
)
from dbpa_core.sampling import Sampler
from dbpa_core.spec import parse_spec

from .fake_openai import FakeOpenAI


def by_term(terms):
    return {t.term: t for t in terms}


def test_log_odds_matches_hand_computation():
    # base:  statin 4, diet 2      (n_B = 6)
    # perturbed: statin 1, joke 5  (n_P = 6)
    # pooled prior: α_diet = 2, α_joke = 5, α_statin = 5, α_0 = 12
    # joke:   δ = log(10/8) − log(5/13) = 0.223144 + 0.955511 = 1.178655
    #         σ² = 1/10 + 1/5 = 0.3             z = 1.178655 / 0.547723 = 2.151920
    # diet:   δ = log(2/16) − log(4/14) = −2.079442 + 1.252763 = −0.826679
    #         σ² = 1/2 + 1/4 = 0.75             z = −0.826679 / 0.866025 = −0.954566
    # statin: δ = log(6/12) − log(9/9) = −0.693147
    #         σ² = 1/6 + 1/9 = 0.277778         z = −0.693147 / 0.527046 = −1.315154
    t = by_term(log_odds({"statin": 4, "diet": 2}, {"statin": 1, "joke": 5}))
    assert t["joke"].delta == pytest.approx(1.178655, abs=1e-6)
    assert t["joke"].variance == pytest.approx(0.3)
    assert t["joke"].z == pytest.approx(2.151920, abs=1e-6)
    assert t["diet"].delta == pytest.approx(-0.826679, abs=1e-6)
    assert t["diet"].z == pytest.approx(-0.954566, abs=1e-6)
    assert t["statin"].delta == pytest.approx(-0.693147, abs=1e-6)
    assert t["statin"].variance == pytest.approx(0.277778, abs=1e-6)
    assert t["statin"].z == pytest.approx(-1.315154, abs=1e-6)
    assert [x.term for x in log_odds({"statin": 4, "diet": 2}, {"statin": 1, "joke": 5})] == [
        "joke",
        "diet",
        "statin",
    ]  # sorted by z, perturbed-typical first


def test_log_odds_uninformative_prior_by_hand():
    # α_w = 0.5 for both terms, α_0 = 1; base a 3, b 1 (n 4); perturbed a 1, b 3 (n 4)
    # a: δ = log(1.5/3.5) − log(3.5/1.5) = 2·log(3/7) = −1.694596; σ² = 1/1.5 + 1/3.5
    t = by_term(log_odds({"a": 3, "b": 1}, {"a": 1, "b": 3}, prior=0.5))
    assert t["a"].delta == pytest.approx(2 * math.log(3 / 7))
    assert t["a"].z == pytest.approx(2 * math.log(3 / 7) / math.sqrt(1 / 1.5 + 1 / 3.5))
    assert t["b"].z == pytest.approx(-t["a"].z)


def test_log_odds_background_prior_and_scale():
    # background counts scale the prior: α_w = 2·count + 0.01
    t = by_term(log_odds({"x": 2}, {"y": 2}, prior={"x": 1, "y": 3}, prior_scale=2.0))
    ax, ay = 2.01, 6.01
    a0 = ax + ay
    dx = math.log(ax / (2 + a0 - ax)) - math.log((2 + ax) / (2 + a0 - 2 - ax))
    assert t["x"].delta == pytest.approx(dx)
    assert t["x"].prior == pytest.approx(ax)


def test_log_odds_swapping_groups_negates_z():
    a, b = Counter("aaabbbccd"), Counter("abddddeee")
    fwd, back = by_term(log_odds(a, b)), by_term(log_odds(b, a))
    for w in fwd:
        assert fwd[w].z == pytest.approx(-back[w].z)


def test_log_odds_min_count_and_empty():
    assert log_odds({}, {}) == []
    terms = log_odds({"a": 1, "b": 5}, {"b": 5}, min_count=2)
    assert [t.term for t in terms] == ["b"]


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        ({"prior": "flat"}, ValueError, "`prior` must be 'pooled'"),
        ({"prior": 0}, ValueError, "must be > 0"),
        ({"prior": [1]}, TypeError, "`prior` must be"),
        ({"prior_scale": -1}, ValueError, "`prior_scale` must be > 0"),
        ({"min_count": 0}, ValueError, "`min_count` must be"),
    ],
)
def test_log_odds_bad_arguments(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        log_odds({"a": 1}, {"b": 1}, **kwargs)


def test_tokenize_stop_words_bigrams_and_clauses():
    toks = tokenize("Take the statin, and lower your blood pressure. Do not smoke!")
    assert "the" not in toks and "and" not in toks
    assert "blood pressure" in toks and "statin" in toks
    assert "not smoke" in toks  # negation is not a stop word
    assert "statin lower" not in toks  # no phrase across a comma
    assert tokenize("Cholesterol 6.2 mmol/L; John's risk") == [
        "cholesterol",
        "6.2",
        "mmol",
        "john",
        "risk",
        "cholesterol 6.2",
        "6.2 mmol",
        "john risk",
    ]
    assert "blood pressure" not in tokenize("blood pressure", bigrams=False)


def test_explain_finds_the_words_that_moved():
    base = [f"Offer atorvastatin 20 mg and check blood pressure. Note {i}." for i in range(10)]
    pert = [f"Why did the statin cross the road? A joke for John {i}." for i in range(10)]
    ex = explain(base, pert)
    top_p = [t.term for t in ex.terms_for("perturbed", 8)]
    top_b = [t.term for t in ex.terms_for("base", 8)]
    assert "joke" in top_p
    # "atorvastatin" is always said as "offer atorvastatin": the phrase stands for it
    assert "offer atorvastatin" in top_b and "atorvastatin" not in top_b
    assert all(t.z > 0 for t in ex.terms_for("perturbed")) and all(t.z < 0 for t in ex.terms_for("base"))
    # dedupe: "blood" and "pressure" are covered by "blood pressure"
    assert "blood pressure" in [t.term for t in ex.terms_for("base")]
    assert "blood" not in [t.term for t in ex.terms_for("base")]
    assert "blood" in [t.term for t in ex.terms_for("base", dedupe=False)]
    d = ex.to_dict(n=3)
    assert len(d["terms"]["perturbed"]) == 3 and d["n_base"] == 10
    with pytest.raises(ValueError, match="`side` must be"):
        ex.terms_for("left")
    with pytest.raises(ValueError, match="non-empty list"):
        explain([], pert)


def test_duplicates_exact_and_near():
    texts = ["Take statins.", "Walk daily.", "Take statins. ", "Take statins.", "Walk daily, please."]
    d = find_duplicates(texts)
    assert (d.n_answers, d.n_distinct, d.n_repeated) == (5, 3, 2)
    g = d.groups[0]
    assert g.count == 3 and g.indices == (0, 2, 3) and g.exact and g.text == "Take statins."
    near = find_duplicates(
        ["take statins every day now", "take statins every day now please", "walk"], near=0.7
    )
    assert near.n_distinct == 2 and not near.groups[0].exact and near.groups[0].count == 2
    assert find_duplicates(["a", "b"]).groups == ()
    with pytest.raises(ValueError, match="`near` must lie in"):
        find_duplicates(texts, near=1.5)


def test_duplicate_counts_are_exact():
    d = find_duplicates(["x", "y", "x", "x", "z"])
    assert (d.n_distinct, d.n_repeated) == (3, 2)
    assert d.to_dict()["groups"] == [{"text": "x", "count": 3, "indices": [0, 2, 3], "exact": True}]


def test_representatives_by_embedding():
    emb = np.array([[1.0, 0.0], [0.9, 0.1], [1.0, 0.05], [0.0, 1.0]])
    typical, atypical = representatives(["a", "b", "c", "d"], emb)
    assert atypical.index == 3
    # centroid of the unit rows ∝ (0.93, 0.36): row 1 (0.994, 0.110) is nearest
    assert typical.index == 1 and typical.similarity > atypical.similarity
    # without embeddings, bag-of-words vectors decide
    t2, a2 = representatives(["statin statin", "statin diet", "statin", "joke joke joke"])
    assert t2.index in (0, 1, 2)
    assert a2.index == 3 and a2.text == "joke joke joke"
    with pytest.raises(ValueError, match="one row per text"):
        representatives(["a", "b"], np.ones((3, 2)))


def test_highlight_marks_words_absent_from_the_other_answer():
    segs = highlight(
        "Offer atorvastatin and check blood pressure.",
        "Offer a joke and check blood pressure.",
        terms=["blood pressure"],
    )
    kinds = {s: k for s, k in segs if s.strip()}
    assert kinds["atorvastatin"] == "only"
    assert kinds["Offer"] == "" and kinds["and"] == ""
    assert kinds["blood"] == kinds["pressure"] == "term"
    # against a whole group: only words no answer of it uses
    group = ["Offer a joke.", "Check atorvastatin doses."]
    kinds = {s: k for s, k in highlight("Offer atorvastatin and a statin.", group) if s.strip()}
    assert kinds["atorvastatin"] == "" and kinds["statin"] == "only"


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=200), st.text(max_size=80))
def test_highlight_keeps_the_text(text, other):
    segs = highlight(text, other, terms=["a b"])
    assert "".join(s for s, _ in segs) == text


def _spec(server, samples=6):
    return parse_spec(
        f"""
model: {{backend: openai, name: fake-model, base_url: "{server.base_url}"}}
embedder: {{backend: openai, name: fake-embed, base_url: "{server.base_url}"}}
samples: {samples}
permutations: 200
base: {{prompt: "John has these features: age 70"}}
perturbations:
  - {{name: comedian, prompt: "Act as a comedian. John has these features: age 70"}}
""",
        source="t.yaml",
    )


def test_explain_result_and_model_written_summary(tmp_path):
    cache = Cache(tmp_path / "cache")
    with FakeOpenAI(models=("fake-model", "fake-embed")) as srv:
        result = run_audit(_spec(srv), cache=cache)
        ex = explain_result(result, "comedian")
        assert ex.n_base == ex.n_perturbed == 6
        # the fake comedian speaks from another vocabulary
        funny = {"banana", "joke", "clown", "pie", "laugh", "silly", "honk", "pun", "circus"}
        assert any(t.term.split()[0] in funny for t in ex.terms_for("perturbed", 3))
        assert ex.typical["base"].text in result.base.texts
        with pytest.raises(KeyError, match="No perturbation"):
            explain_result(result, "pirate")

        before = srv.chat_ok
        model = result.spec.model
        s1 = summarize_difference(
            Sampler(cache), model, result.base.texts, result.arms[0].texts, name="comedian"
        )
        assert srv.chat_ok == before + 1 and not s1.cached and s1.text
        assert s1.model == "fake-model" and "[A1]" in s1.prompt and "comedian" in s1.prompt
        s2 = summarize_difference(
            Sampler(cache), model, result.base.texts, result.arms[0].texts, name="comedian"
        )
        assert srv.chat_ok == before + 1 and s2.cached and s2.text == s1.text  # from the cache


def test_summary_prompt_is_deterministic_and_bounded():
    base = ["A" * 2000, "short", "short"]
    p = summary_prompt(base, ["x"], name="pirate", n_examples=2, max_chars=100)
    assert p == summary_prompt(base, ["x"], name="pirate", n_examples=2, max_chars=100)
    assert "[A2] short" in p and "[A3]" not in p and "pirate" in p  # duplicates shown once
    assert len(p) < 1200
    with pytest.raises(ValueError, match="`n_examples` must be >= 1"):
        summary_prompt(base, ["x"], n_examples=0)
