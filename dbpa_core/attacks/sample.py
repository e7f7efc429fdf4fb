"""A sample data set the project makes itself, from templates, so the battery runs offline.

Four small data sets in the spirit of the papers' benchmarks (no text is copied from
them): bAbI-style **deduction** ("Sheep are afraid of wolves. Gertrude is a sheep.
What is Gertrude afraid of?") and **induction** ("Lily is a swan. Lily is white. Greg
is a swan. What colour is Greg?"), **true/false** questions about where people and things
are, and **arithmetic** word problems. Every item has a passage of 4 to 7 sentences, so
that attacks on the head, middle and tail of a passage can be told apart.

Examples
--------
>>> items = sample_items(2, seed=0)
>>> sorted({it.dataset for it in items})
['arithmetic', 'deduction', 'induction', 'true/false']
>>> len(items)
8
"""
from __future__ import annotations

import random

from .items import DEFAULT_INSTRUCTION, Item, make_options

DATASETS = ("deduction", "induction", "true/false", "arithmetic")
NAMES = ("Gertrude", "Winona", "Emily", "Jessica", "Bernhard", "Greg", "Lily", "Brian", "Julius",
         "Mary", "John", "Sandra", "Daniel", "Fred", "Bill", "Anna", "Tom", "Sara")
ANIMALS = (("sheep", "sheep"), ("cat", "cats"), ("mouse", "mice"), ("wolf", "wolves"),
           ("dog", "dogs"), ("fox", "foxes"), ("swan", "swans"), ("frog", "frogs"),
           ("lion", "lions"), ("rhino", "rhinos"))
COLOURS = ("white", "green", "grey", "yellow", "black", "brown", "red")
PLACES = ("kitchen", "garden", "office", "bathroom", "hallway", "bedroom", "cellar")
THINGS = ("apple", "football", "book", "key", "milk", "umbrella")
GOODS = (("apples", "buys"), ("marbles", "finds"), ("stamps", "gets"), ("cookies", "bakes"),
         ("pencils", "buys"))


def _deduction(rnd: random.Random, i: int) -> Item:
    animals = rnd.sample(ANIMALS, 4)
    fears = {a[0]: rnd.choice([b for b in animals if b != a])[1] for a in animals}
    rules = [f"{a[1].capitalize()} are afraid of {fears[a[0]]}." for a in animals]
    who = rnd.sample(NAMES, 2)
    kinds = rnd.sample(animals, 2)
    facts = [f"{who[0]} is a {kinds[0][0]}.", f"{who[1]} is a {kinds[1][0]}."]
    story = rules + facts
    rnd.shuffle(story)
    answer = fears[kinds[0][0]]
    vocab = sorted({a[1] for a in ANIMALS})
    passage = " ".join(story)
    opts, idx, kind = make_options(answer, kind="word", seed=i, vocabulary=vocab,
                                   item_id=f"deduction-{i}")
    return Item(f"deduction-{i}", f"What is {who[0]} afraid of?", opts, idx, passage,
                DEFAULT_INSTRUCTION, "deduction", kind)


def _induction(rnd: random.Random, i: int) -> Item:
    kinds = rnd.sample(ANIMALS, 3)
    colours = rnd.sample(COLOURS, 3)
    who = rnd.sample(NAMES, 4)
    story = []
    for name, (kind, _), colour in zip(who[:3], kinds, colours, strict=True):
        story += [f"{name} is a {kind}.", f"{name} is {colour}."]
    j = rnd.randrange(3)
    story.append(f"{who[3]} is a {kinds[j][0]}.")
    opts, idx, kind = make_options(colours[j], kind="word", seed=i, vocabulary=COLOURS,
                                   item_id=f"induction-{i}")
    return Item(f"induction-{i}", f"What colour is {who[3]}?", opts, idx, " ".join(story),
                DEFAULT_INSTRUCTION, "induction", kind)


def _true_false(rnd: random.Random, i: int) -> Item:
    people = rnd.sample(NAMES, 3)
    places = rnd.sample(PLACES, 4)
    thing = rnd.choice(THINGS)
    story = [f"{people[0]} went to the {places[0]}.", f"{people[1]} moved to the {places[1]}.",
             f"{people[0]} picked up the {thing}.", f"{people[2]} travelled to the {places[2]}.",
             f"{people[0]} journeyed to the {places[3]}."]
    truth = rnd.random() < 0.5
    where = places[3] if truth else rnd.choice(places[:3])
    opts, idx, kind = make_options(truth, kind="boolean")
    return Item(f"true-false-{i}", f"True or false: the {thing} is in the {where}.", opts, idx,
                " ".join(story), DEFAULT_INSTRUCTION, "true/false", kind)


def _arithmetic(rnd: random.Random, i: int) -> Item:
    name, friend = rnd.sample(NAMES, 2)
    goods, verb = rnd.choice(GOODS)
    a, b, c = rnd.randint(3, 12), rnd.randint(2, 9), rnd.randint(1, 5)
    story = [f"{name} has {a} {goods}.", f"In the morning {name} {verb} {b} more {goods}.",
             f"Then {name} gives {c} {goods} to {friend}.",
             f"{friend} already had some {goods} at home."]
    opts, idx, kind = make_options(str(a + b - c), kind="number", seed=i,
                                   item_id=f"arithmetic-{i}")
    return Item(f"arithmetic-{i}", f"How many {goods} does {name} have now?", opts, idx,
                " ".join(story), DEFAULT_INSTRUCTION, "arithmetic", kind)


_MAKERS = {"deduction": _deduction, "induction": _induction, "true/false": _true_false,
           "arithmetic": _arithmetic}


def sample_items(n_per_set: int = 3, *, seed: int = 0,
                 datasets: tuple[str, ...] = DATASETS) -> list[Item]:
    """``n_per_set`` items of each of ``datasets``, the same for the same seed."""
    if isinstance(n_per_set, bool) or not isinstance(n_per_set, int) or n_per_set < 1:
        raise ValueError(f"`n_per_set` must be a whole number >= 1, got {n_per_set!r}.")
    unknown = [d for d in datasets if d not in _MAKERS]
    if unknown:
        raise ValueError(f"unknown sample data set(s) {', '.join(unknown)}; choose from "
                         f"{', '.join(DATASETS)}.")
    out = []
    for d in datasets:
        rnd = random.Random(f"{seed}\x1f{d}")
        out += [_MAKERS[d](rnd, i + 1) for i in range(n_per_set)]
    return out


__all__ = ["DATASETS", "sample_items"]
