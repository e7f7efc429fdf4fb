"""Consistency attacks: synonymous instructions and shuffled options.

A consistent model gives the same accuracy whatever the wording of the instruction
(:data:`INSTRUCTIONS`, the five of Ye et al., plus the user's own, each once;
the item's own instruction is the clean baseline, not a variant) and whatever the order of the
options (:func:`option_orders`, :func:`reorder`); the spread (standard deviation) of
its accuracies measures how much its answers hang on either.

Examples
--------
>>> from dbpa_core.attacks.items import Item
>>> item = Item("q", "Where is Mary?", ("home", "park", "office"), answer=1)
>>> moved = reorder(item, (2, 0, 1))
>>> moved.options, moved.answer_letter
(('office', 'home', 'park'), 'C')
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Sequence
from typing import Any

from .items import Item

# the paper's five synonymous instructions (the first is no instruction at all)
INSTRUCTIONS = (
    "",
    "Complete the description with an appropriate ending:",
    "You must choose the best answer from the following choices marked (A), (B), (C), (D) or (E).",
    "To answer the following question according to the following information.",
    "Next, I will ask you a series of questions given a description, and you will have to "
    "choose one of several candidate options that you think is correct.",
)
INSTRUCTION_NAMES = ("none", "complete", "choose-best", "according-to", "series")


def with_instruction(item: Item, instruction: str) -> Item:
    """``item`` with its instruction ``t`` replaced."""
    if not isinstance(instruction, str):
        raise TypeError(f"`instruction` must be text, got {type(instruction).__name__}.")
    return item.replace(instruction=instruction)


def reorder(item: Item, order: Sequence[int]) -> Item:
    """``item`` with its options in ``order`` (``order[j]`` = old index of the new j-th
    option); the answer follows its option."""
    n = len(item.options)
    if sorted(order) != list(range(n)):
        raise ValueError(f"`order` must be a permutation of 0..{n - 1}, got {list(order)!r}.")
    return item.replace(options=tuple(item.options[i] for i in order), answer=list(order).index(item.answer))


def shuffle_options(item: Item, rng: Any = None) -> tuple[Item, tuple[int, ...]]:
    """``item`` with its options in a random order (seeded), and that order."""
    rnd = rng if isinstance(rng, random.Random) else random.Random(rng)
    order = list(range(len(item.options)))
    rnd.shuffle(order)
    return reorder(item, order), tuple(order)


def option_orders(n_options: int, n_orders: int, *, seed: Any = 0) -> list[tuple[int, ...]]:
    """``n_orders`` distinct option orders, the original order first.

    When ``n_orders`` reaches ``n_options!`` every order is returned once. The others
    are drawn at random (seeded), so each item can get its own.
    """
    if n_options < 1:
        raise ValueError(f"`n_options` must be >= 1, got {n_options}.")
    if n_orders < 1:
        raise ValueError(f"`n_orders` must be >= 1, got {n_orders}.")
    identity = tuple(range(n_options))
    total = math.factorial(n_options)
    if n_orders >= total:
        return [identity] + [p for p in itertools.permutations(range(n_options)) if p != identity]
    rnd = random.Random(seed)
    out = [identity]
    seen = {identity}
    while len(out) < n_orders:
        p = list(range(n_options))
        rnd.shuffle(p)
        t = tuple(p)
        if t not in seen:
            seen.add(t)
            out.append(t)
    return out


__all__ = [
    "INSTRUCTIONS",
    "INSTRUCTION_NAMES",
    "option_orders",
    "reorder",
    "shuffle_options",
    "with_instruction",
]
