"""The answer parser on tricky outputs; ER, ASR, RTI and consistency on hand-computed
cases; Wilson intervals against statsmodels."""

import numpy as np
import pytest
from statsmodels.stats.proportion import proportion_confint

from dbpa_core.attacks.answers import parse_answer
from dbpa_core.attacks.metrics import (
    accuracy,
    attack_success_rate,
    error_rate,
    first_change,
    relative_training_index,
    spread,
    wilson_interval,
)
from dbpa_core.attacks.patterns import position_of, word_patterns
from dbpa_core.attacks.text import AttackedText, Change

OPTS = ["cats", "wolves", "mice"]


@pytest.mark.parametrize(
    "text, letter",
    [
        ("B", "B"),
        ("b", "B"),
        ("(B)", "B"),
        ("B.", "B"),
        ("**B**", "B"),
        ("[C]", "C"),
        ("The answer is (B).", "B"),
        ("Answer: B", "B"),
        ("answer: b) wolves", "B"),
        ("**Answer:** C", "C"),
        ("The correct answer is C because mice", "C"),
        ("The answer is A because cats", "A"),
        ("final answer: B", "B"),
        ("(B) wolves", "B"),
        ("B) wolves", "B"),
        ("B: wolves", "B"),
        ("b. wolves", "B"),
        ("Option C", "C"),
        ("I choose option (C).", "C"),
        ("I think (B) is right", "B"),
        ("wolves", "B"),
        ("Wolves, of course.", "B"),
        ("A mouse is afraid of cats.", "A"),
        ("I think B.", "B"),
        ("Answer: (A)\nExplanation: B is wrong", "A"),
        ("I am sure: B", "B"),
        ("D) mice", "C"),  # no option D: the text names C
        # unreadable or ambiguous: never guessed
        ("(A) or (B)", None),
        ("A or B", None),
        ("(B) wolves, not (A)", "B"),
        ("The answer is a mouse", None),
        ("E", None),
        ("(E)", None),
        ("", None),
        ("   ", None),
        ("It could be cats or wolves", None),
        ("I cannot read this text.", None),
        ("The answer is wildcats", None),
    ],
)
def test_parser_on_tricky_outputs(text, letter):
    assert parse_answer(text, OPTS).letter == letter


def test_parser_reads_option_texts():
    nums = ["41", "42", "4", "420"]
    assert parse_answer("42", nums).letter == "B"
    assert parse_answer("The total is 4.", nums).letter == "C"
    assert parse_answer("It is 42.5", ["42", "42.5"]).letter == "B"
    tf = ["True", "False", "Unable to determine"]
    assert parse_answer("It is true.", tf).letter == "A"
    assert parse_answer("The answer is Unable to determine", tf).letter == "C"
    # "it is true that ..." concedes what follows: the claim is false
    assert parse_answer("It is true that it is false", tf).letter == "B"
    assert parse_answer("D) mice", ["a", "b", "c", "mice"]).how == "marker"


@pytest.mark.parametrize(
    "text,letter",
    [
        ("I strongly agree.", "E"),
        ("Neither agree nor disagree", "C"),
        ("I agree", "D"),
        ("Disagree, mostly", "B"),
        ("I would say strongly disagree", "A"),
        # an echo of the question names two options on their own: never read as one of them
        ("How much do you agree or disagree with this?", None),
        ("Agree or disagree? Hard to say.", None),
    ],
)
def test_parser_on_a_likert_scale(text, letter):
    """An option whose text lies inside another's ("agree" in "strongly agree") is not
    named by itself there; named on its own next to another, the answer is ambiguous."""
    likert = ["Strongly disagree", "Disagree", "Neither agree nor disagree", "Agree", "Strongly agree"]
    assert parse_answer(text, likert).letter == letter


def test_wilson_matches_statsmodels():
    for k, n in ((0, 10), (3, 10), (10, 10), (47, 200), (1, 1)):
        lo, hi = wilson_interval(k, n)
        slo, shi = proportion_confint(k, n, alpha=0.05, method="wilson")
        assert lo == pytest.approx(slo, abs=1e-12) and hi == pytest.approx(shi, abs=1e-12)
    assert np.isnan(wilson_interval(0, 0)).all()
    with pytest.raises(ValueError, match="`x` must lie in"):
        wilson_interval(3, 2)


def test_error_rate_counts_unparsed_as_wrong():
    r = error_rate([0, 1, None, 2, 2], [0, 0, 1, 2, 1])
    assert (r.value, r.count, r.n, r.unparsed) == (3 / 5, 3, 5, 1)
    assert r.value_parsed == pytest.approx(2 / 4)
    assert accuracy([0, 1, None, 2, 2], [0, 0, 1, 2, 1]).value == pytest.approx(2 / 5)
    with pytest.raises(ValueError, match="same length"):
        error_rate([0], [0, 1])


def test_attack_success_rate_by_hand():
    clean = [0, 1, None, None, 2, 2]
    attacked = [0, 2, None, 1, None, 2]
    r = attack_success_rate(clean, attacked)
    # changed: item 2 (1 -> 2), item 4 (None -> 1), item 5 (2 -> None)
    assert (r.value, r.count, r.unparsed) == (3 / 6, 3, 2)
    assert r.value_parsed == pytest.approx(1 / 3)  # items 1, 2, 6 have both answers read
    assert attack_success_rate([1, 1], [1, 1]).value == 0.0


def test_rti_by_hand():
    # item 1 changes at 0.3, item 2 never, item 3 at 0.1 -> mean 0.4667
    r1 = first_change([0.1, 0.2, 0.3, 0.4], [1, 1, 2, 1], clean=1)
    r2 = first_change([0.1, 0.2], [0, 0], clean=0)
    r3 = first_change([0.2, 0.1], [None, None], clean=2)
    assert (r1, r2, r3) == (0.3, 1.0, 0.1)
    res = relative_training_index([r1, r2, r3])
    assert res.rti == pytest.approx((0.3 + 1.0 + 0.1) / 3) and res.n == 3
    sd = np.std([0.3, 1.0, 0.1], ddof=1)
    from scipy import stats

    half = stats.t.ppf(0.975, 2) * sd / np.sqrt(3)
    assert res.low == pytest.approx(max(0, res.rti - half)) and res.high == pytest.approx(
        min(1, res.rti + half)
    )
    assert relative_training_index([1.0, 1.0]).rti == 1.0
    assert np.isnan(relative_training_index([]).rti)
    with pytest.raises(ValueError, match=r"every r_x in `values` must lie in \[0, 1\]"):
        relative_training_index([0.5, 1.5])


def test_spread_is_the_population_std():
    assert spread([0.5, 1 / 6, 0.5, 0.5, 0.5, 0.5]) == pytest.approx(np.std([0.5, 1 / 6, 0.5, 0.5, 0.5, 0.5]))
    assert spread([0.7]) == 0.0 and np.isnan(spread([]))


def test_positions_and_word_patterns_by_hand():
    assert [position_of(i, 9) for i in range(9)] == ["head"] * 3 + ["middle"] * 3 + ["tail"] * 3
    assert position_of(0, 1) == "head"
    with pytest.raises(ValueError, match="`word` must lie in"):
        position_of(3, 3)

    def att(words, n, level="char"):
        ch = tuple(Change(w, "repeat", "x", "xx", 0, 1, 0, 2) for w in words)
        return AttackedText("t", "t", level, 0.5, ch, n)

    tags = {"t": [("NOUN", "nsubj"), ("VERB", "ROOT"), ("NOUN", "dobj")]}
    # success 1 attacks words 0 and 2 (weight 1/2 each); success 2 attacks word 1 (weight 1);
    # a failure attacks word 0 (counts only in the base shares)
    rows = word_patterns([(att([0, 2], 3), True), (att([1], 3), True), (att([0], 3), False)], tags)
    got = {(r.level, r.feature, r.value): r for r in rows}
    assert got[("all", "position", "head")].weight == pytest.approx(0.5)
    assert got[("all", "position", "middle")].weight == pytest.approx(1.0)
    assert got[("all", "position", "tail")].share == pytest.approx(0.25)
    assert got[("all", "position", "head")].base_share == pytest.approx(1.5 / 3)
    assert got[("all", "pos", "NOUN")].share == pytest.approx(0.5)
    assert got[("all", "pos", "VERB")].lift == pytest.approx(0.5 / (1 / 3))
    assert got[("char", "dep", "ROOT")].successes == 2


def test_rti_reports_the_items_never_changed():
    """r_x = 1.0 is both "changed at rho = 1.0" and "never changed": the share of the
    latter is reported beside the mean, which keeps the paper's 1.0 for them."""
    res = relative_training_index([1.0, 1.0, 0.3, 1.0], changed=[True, False, True, False])
    assert res.rti == pytest.approx(3.3 / 4)
    assert res.never_changed == 2 and res.never_changed_share == 0.5
    assert res.to_dict()["never_changed_share"] == 0.5
    assert np.isnan(relative_training_index([1.0]).never_changed_share)  # not known
    with pytest.raises(ValueError, match=r"never changed has r_x = 1\.0"):
        relative_training_index([0.4], changed=[False])
    with pytest.raises(ValueError, match="one entry per value"):
        relative_training_index([0.4, 1.0], changed=[True])
