"""A sample data set the project makes itself, from templates, so the battery runs offline.

Four small data sets in the spirit of the papers' benchmarks (no text is copied from
them): bAbI-style **deduction** ("Sheep are afraid of wolves. Gertrude is a sheep.
What is Gertrude afraid of?") and **induction** ("Lily is a swan. Lily is white. Greg
is a swan. What colour is Greg?"), **true/false** questions about where people and things
are, and **arithmetic** word problems. Every item has a passage of 4 to 11 sentences, so
that attacks on the head, middle and tail of a passage can be told apart. Their options
leak nothing: the five options of a deduction or induction item are the five animals or
colours its passage names, a true/false claim is true, false or undetermined a third of
the time each, and an arithmetic item's distractors are other sums its stories can have.

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
NAMES = (
    "Gertrude",
    "Winona",
    "Emily",
    "Jessica",
    "Bernhard",
    "Greg",
    "Lily",
    "Brian",
    "Julius",
    "Mary",
    "John",
    "Sandra",
    "Daniel",
    "Fred",
    "Bill",
    "Anna",
    "Tom",
    "Sara",
)
ANIMALS = (
    ("sheep", "sheep"),
    ("cat", "cats"),
    ("mouse", "mice"),
    ("wolf", "wolves"),
    ("dog", "dogs"),
    ("fox", "foxes"),
    ("swan", "swans"),
    ("frog", "frogs"),
    ("lion", "lions"),
    ("rhino", "rhinos"),
)
COLOURS = ("white", "green", "grey", "yellow", "black", "brown", "red")
PLACES = ("kitchen", "garden", "office", "bathroom", "hallway", "bedroom", "cellar")
THINGS = ("apple", "football", "book", "key", "milk", "umbrella")
GOODS = (
    ("apples", "buys"),
    ("marbles", "finds"),
    ("stamps", "gets"),
    ("cookies", "bakes"),
    ("pencils", "buys"),
)


def _deduction(rnd: random.Random, i: int) -> Item:
    # five kinds, each afraid of another and each feared once: no kind is named more
    # often than another, and the five are the options
    animals = rnd.sample(ANIMALS, 5)
    fears = {a[0]: animals[(j + 1) % 5][1] for j, a in enumerate(animals)}
    rules = [f"{a[1].capitalize()} are afraid of {fears[a[0]]}." for a in animals]
    who = rnd.sample(NAMES, 2)
    kinds = rnd.sample(animals, 2)
    facts = [f"{who[0]} is a {kinds[0][0]}.", f"{who[1]} is a {kinds[1][0]}."]
    story = rules + facts
    rnd.shuffle(story)
    # the options are the five kinds the passage names (with others, the one named
    # would be the answer)
    opts = [a[1] for a in animals]
    rnd.shuffle(opts)
    return Item(
        f"deduction-{i}",
        f"What is {who[0]} afraid of?",
        tuple(opts),
        opts.index(fears[kinds[0][0]]),
        " ".join(story),
        DEFAULT_INSTRUCTION,
        "deduction",
        "word",
    )


def _induction(rnd: random.Random, i: int) -> Item:
    # five animals of five colours: every option is a colour the passage names once
    kinds = rnd.sample(ANIMALS, 5)
    colours = rnd.sample(COLOURS, 5)
    who = rnd.sample(NAMES, 6)
    story = []
    for name, (kind, _), colour in zip(who[:5], kinds, colours, strict=True):
        story += [f"{name} is a {kind}.", f"{name} is {colour}."]
    j = rnd.randrange(5)
    story.append(f"{who[5]} is a {kinds[j][0]}.")
    opts = list(colours)
    rnd.shuffle(opts)
    return Item(
        f"induction-{i}",
        f"What colour is {who[5]}?",
        tuple(opts),
        opts.index(colours[j]),
        " ".join(story),
        DEFAULT_INSTRUCTION,
        "induction",
        "word",
    )


def _true_false(rnd: random.Random, i: int) -> Item:
    people = rnd.sample(NAMES, 3)
    places = rnd.sample(PLACES, 4)
    thing = rnd.choice(THINGS)
    story = [
        f"{people[0]} went to the {places[0]}.",
        f"{people[1]} moved to the {places[1]}.",
        f"{people[0]} picked up the {thing}.",
        f"{people[2]} travelled to the {places[2]}.",
        f"{people[0]} journeyed to the {places[3]}.",
    ]
    # true, false or (a thing the story never mentions) undetermined, a third each: each
    # option is right as often
    u = rnd.random()
    where = places[3] if u < 1 / 3 else rnd.choice(places[:3])
    if u >= 2 / 3:
        thing = rnd.choice([t for t in THINGS if t != thing])
        story[2] = f"{people[0]} picked up the {rnd.choice([t for t in THINGS if t != thing])}."
    opts, idx, kind = make_options(u < 1 / 3, kind="boolean")
    idx = 2 if u >= 2 / 3 else idx
    return Item(
        f"true-false-{i}",
        f"True or false: the {thing} is in the {where}.",
        opts,
        idx,
        " ".join(story),
        DEFAULT_INSTRUCTION,
        "true/false",
        kind,
    )


# every answer an arithmetic story can have, once per way to get it (a + b - c)
_SUMS = tuple(str(a + b - c) for a in range(3, 13) for b in range(2, 10) for c in range(1, 6))


def _arithmetic(rnd: random.Random, i: int) -> Item:
    name, friend = rnd.sample(NAMES, 2)
    goods, verb = rnd.choice(GOODS)
    a, b, c = rnd.randint(3, 12), rnd.randint(2, 9), rnd.randint(1, 5)
    story = [
        f"{name} has {a} {goods}.",
        f"In the morning {name} {verb} {b} more {goods}.",
        f"Then {name} gives {c} {goods} to {friend}.",
        f"{friend} already had some {goods} at home.",
    ]
    # the distractors are other answers these stories can have, as often as they have
    # them (made-up numbers around the answer: "the option offered most often" was right
    # in 27 % of items)
    opts, idx, kind = make_options(
        str(a + b - c), kind="number", seed=i, item_id=f"arithmetic-{i}", vocabulary=_SUMS
    )
    return Item(
        f"arithmetic-{i}",
        f"How many {goods} does {name} have now?",
        opts,
        idx,
        " ".join(story),
        DEFAULT_INSTRUCTION,
        "arithmetic",
        kind,
    )


_MAKERS = {
    "deduction": _deduction,
    "induction": _induction,
    "true/false": _true_false,
    "arithmetic": _arithmetic,
}


def sample_items(n_per_set: int = 3, *, seed: int = 0, datasets: tuple[str, ...] = DATASETS) -> list[Item]:
    """``n_per_set`` items of each of ``datasets``, the same for the same seed."""
    if isinstance(n_per_set, bool) or not isinstance(n_per_set, int) or n_per_set < 1:
        raise ValueError(f"`n_per_set` must be a whole number >= 1, got {n_per_set!r}.")
    unknown = [d for d in datasets if d not in _MAKERS]
    if unknown:
        raise ValueError(
            f"unknown sample data set(s) {', '.join(unknown)}; choose from {', '.join(DATASETS)}."
        )
    out = []
    for d in datasets:
        rnd = random.Random(f"{seed}\x1f{d}")
        out += [_MAKERS[d](rnd, i + 1) for i in range(n_per_set)]
    return out


__all__ = ["DATASETS", "sample_items"]
