"""Answer-blind rules: a rule that picks the right option more often than chance, without
the question, is found and reported; honest options are not; the test is the one the
method page states (hand computations)."""

import math
import random

import pytest

from dbpa_core.attacks.items import UNDETERMINED, Item, make_options
from dbpa_core.attacks.leaks import ALL, leak_notes, option_leaks
from dbpa_core.attacks.sample import sample_items


def _item(
    i: int, options, answer: int, passage: str = "", question: str = "Which one?", dataset: str = "d"
) -> Item:
    return Item(str(i), question, tuple(options), answer, passage, "", dataset, "")


def _row(rows, rule, dataset=ALL):
    return next(r for r in rows if r.rule == rule and r.dataset == dataset)


def test_the_share_and_p_value_by_hand():
    """Four items of two options, the right one always the longer: 4 hits, which random
    placement gives with probability 1/16 (simulated for so few items). 500 such items
    with the longer right in 280: chance expects 250, each hit has variance 1/2 - 1/4, so
    z = 30 / sqrt(125) (the normal tail, for many items)."""
    items = [
        _item(i, ["a long right one", "short"][:: 1 if i % 2 else -1], 0 if i % 2 else 1) for i in range(4)
    ]
    row = _row(option_leaks(items), "longest")
    assert row.share == 1.0 and row.chance == 0.5 and row.n == 4
    assert row.p_value == pytest.approx(1 / 16, abs=0.01)
    assert _row(option_leaks(items), "shortest").share == 0.0
    many = [_item(i, ["a long one", "short"], 0 if i < 280 else 1) for i in range(500)]
    row = _row(option_leaks(many), "longest")
    assert row.share == 0.56 and row.p_value == pytest.approx(
        0.5 * math.erfc(30 / math.sqrt(125) / math.sqrt(2))
    )


def test_ties_share_the_pick_and_say_nothing():
    """Options of one length: "the longest" is a random guess, right 1/n of the time on
    average, and never reported."""
    items = [_item(i, ["aa", "bb", "cc", "dd"], i % 4) for i in range(40)]
    row = _row(option_leaks(items), "longest")
    assert row.share == pytest.approx(0.25) and row.p_value == 1.0 and not row.leaks


def test_a_leaking_construction_is_reported_and_named():
    rnd = random.Random(1)
    items = []
    for i in range(60):  # the right number is always the middle one
        mid = rnd.randint(20, 80)
        opts = [str(mid + d) for d in (-10, -5, 0, 5, 10)]
        rnd.shuffle(opts)
        items.append(_item(i, opts, opts.index(str(mid))))
    rows = option_leaks(items)
    assert _row(rows, "middle").leaks and _row(rows, "middle").share == 1.0
    notes = leak_notes(rows)
    assert len(notes) == 1 and "the middle number is right in 100% of 60 items" in notes[0]


def test_the_option_the_passage_names_is_caught():
    rooms = ["kitchen", "garden", "office", "hallway", "cellar"]
    items = []
    for i in range(50):
        opts = rooms[:]
        random.Random(i).shuffle(opts)
        items.append(_item(i, opts, opts.index(rooms[i % 5]), passage=f"Mary went to the {rooms[i % 5]}."))
    row = _row(option_leaks(items), "passage")
    assert row.share == 1.0 and row.leaks


def test_a_never_right_catch_all_is_caught():
    """CREAK's labels are true or false: "Unable to determine" is an option never right,
    so "never pick it" scores 50 % where three options promise 33 %."""
    items = []
    for i in range(300):
        opts, idx, _ = make_options(random.Random(i).random() < 0.5, kind="boolean")
        items.append(_item(i, opts, idx))
    assert UNDETERMINED in items[0].options
    row = _row(option_leaks(items), "no_catch_all")
    assert row.share == pytest.approx(0.5) and row.chance == pytest.approx(1 / 3) and row.leaks


def test_per_data_set_rows_and_notes():
    leaky = [_item(i, ["right answer here", "no", "nah"], 0, dataset="leaky") for i in range(40)]
    fair = [_item(100 + i, ["aaa", "bbb", "ccc"], i % 3, dataset="fair") for i in range(40)]
    rows = option_leaks(leaky + fair)
    assert {r.dataset for r in rows} == {ALL, "leaky", "fair"}
    assert _row(rows, "longest", "leaky").leaks and not _row(rows, "longest", "fair").leaks
    notes = leak_notes(rows)
    assert len(notes) == 1 and " in leaky:" in notes[0]


def test_honest_items_leak_nothing():
    """The project's own sample items and random options: no rule beats chance."""
    assert not leak_notes(option_leaks(sample_items(300)))
    rnd = random.Random(4)
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota"]
    items = [
        _item(i, rnd.sample(words, 5), rnd.randrange(5), passage=" ".join(rnd.sample(words, 4)))
        for i in range(500)
    ]
    assert not leak_notes(option_leaks(items))


def test_no_items_no_rows():
    assert option_leaks([]) == [] and leak_notes([]) == []


def test_the_last_named_and_the_most_offered_are_caught():
    """bAbI's "Where is Mary?": the room the passage names last; options of made-up
    numbers: the value offered most often across the items."""
    rooms = ["kitchen", "garden", "office", "hallway", "cellar"]
    items = []
    for i in range(60):
        order = rooms[i % 5 :] + rooms[: i % 5]
        passage = " ".join(f"Mary went to the {r}." for r in order[:3])
        items.append(_item(i, rooms, rooms.index(order[2]), passage=passage))
    rows = option_leaks(items)
    assert _row(rows, "passage_last").share == 1.0 and _row(rows, "passage_last").leaks
    assert _row(rows, "passage").share == pytest.approx(1 / 3)
    # "42" is right in every item and offered in every one; each distractor once
    favoured = [
        _item(i, [str(100 + i), str(200 + i), "42", str(300 + i), str(400 + i)], 2) for i in range(80)
    ]
    row = _row(option_leaks(favoured), "most_offered")
    assert row.share == 1.0 and row.leaks


def test_bAbIs_plural_and_counts_are_caught():
    """bAbI's deduction writes the feared animal in the plural ("afraid of wolves") and
    answers in the singular: "an option the passage does not name" beats chance; a closed
    set of counts offered whole every time, "two" the answer half the time: "two"
    whenever offered."""
    animals = ["mouse", "cat", "wolf", "sheep"]
    plural = {"mouse": "mice", "cat": "cats", "wolf": "wolves", "sheep": "sheep"}
    items = []
    rnd = random.Random(2)
    for i in range(200):  # "sheep", named as it is, is afraid of cats and never feared
        answer = rnd.choice(animals[:3])
        passage = f"Cats are afraid of {plural[answer]}. Sheep are afraid of cats."
        items.append(_item(i, animals, animals.index(answer), passage=passage))
    assert _row(option_leaks(items), "passage_unnamed").leaks
    counts = ["none", "one", "two", "three", "four"]
    items = [_item(i, counts, 2 if i % 2 else rnd.randrange(5)) for i in range(200)]
    row = next(r for r in option_leaks(items) if r.rule == "text:two")
    assert row.label == '"two" whenever offered' and row.leaks and row.share > 0.5


def test_few_items_raise_few_false_alarms():
    """Honest options, answers placed at random: in sets of 30 items no more than about
    one set in a hundred is told its options leak."""
    rnd = random.Random(9)
    words = [
        "alpha",
        "beta",
        "gamma",
        "delta",
        "epsilon",
        "zeta",
        "eta",
        "theta",
        "iota",
        "kappa",
        "lambda",
        "mu",
    ]
    alarms = 0
    for _ in range(100):
        items = []
        for i in range(30):
            opts = rnd.sample(words, rnd.choice([3, 4, 5]))
            items.append(
                _item(
                    i,
                    opts,
                    rnd.randrange(len(opts)),
                    passage=" ".join(rnd.sample(words, 3)),
                    question=" ".join(rnd.sample(words, 2)),
                )
            )
        alarms += bool(leak_notes(option_leaks(items)))
    assert alarms <= 3, alarms
