"""Answer-blind rules: how far the options alone give the answer away.

A model that never reads the question can still beat chance when options leak: the right
option is the longest, the roundest number, the one the passage names, never "Unable to
determine". Each rule here picks an option of every item without its answer (options the
rule cannot tell apart share the pick). Over a set of items, its share of right picks
stands beside chance (the mean of 1 / number of options) and a one-sided test of whether it
beats chance: under the hypothesis that the right option is any one of the item's options
with equal probability, an item's hit is 1/t with probability t/n, else 0 (t: the options
tied for the rule's pick), and the p of the sum over items comes from simulating that
placement (up to :data:`EXACT_BELOW` items) or from the normal approximation to the sum
(mean 1/n, variance 1/(t·n) - 1/n² per item). The p-values are Holm-adjusted over the
rules. No model is asked: the check runs on the items alone, before a battery and in its
results.
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..multitest import adjust_pvalues
from .items import LETTERS, NONE_OF_THE_OTHERS, UNDETERMINED, Item, number_parts, roundness

ALL = "all"  # the rows over every data set (as in the battery's tables)
# a rule is reported as a leak when its Holm-adjusted p is below ALPHA and it beats
# chance by at least MARGIN (a share of items); 1 %: one honest item set in a hundred is
# told its options leak
ALPHA = 0.01
MARGIN = 0.05
# up to this many items, p by simulating SIMULATIONS random placements of the answers
EXACT_BELOW = 400
SIMULATIONS = 4000
# the option texts offered most, each a rule "<text> whenever offered"
TEXT_RULES = 5
_CATCH_ALL = {
    NONE_OF_THE_OTHERS.lower(),
    UNDETERMINED.lower(),
    "maybe",
    "neutral",
    "none of the above",
    "cannot be determined",
    "not enough information",
}
_STOP = frozenset(
    """a an the and or but of to in on at by for from with as is are was were be
it its this that these those which what who whom whose where when why how not no yes do does
did has have had can could will would should may might""".split()
)

Scores = Sequence[float] | None  # one per option, higher = picked; None: the rule cannot tell


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[^\W_]+", text.lower()) if len(w) > 2 and w not in _STOP}


# an item's numbers, likeness of options and places in the passage serve several rules:
# each is worked out once per item
@functools.lru_cache(maxsize=8192)
def _numbers(item: Item) -> tuple[tuple[float, int], ...] | None:
    """Each option's value and roundness (whole units of its last decimal), or None
    unless every option is a plain number."""
    out = []
    for o in item.options:
        p = number_parts(o.strip())
        if p is None:
            return None
        value, decimals = p[2], p[3]
        out.append((value, roundness(round(abs(value) * 10**decimals)) or 10**12))
    return tuple(out)


def _bigrams(text: str) -> Counter:
    t = text.lower()
    return Counter(t[i : i + 2] for i in range(len(t) - 1))


@functools.lru_cache(maxsize=8192)
def _alike(item: Item) -> tuple[float, ...]:
    grams = [_bigrams(o) for o in item.options]
    out = []
    for i, g in enumerate(grams):
        sims = [
            2 * sum((g & h).values()) / max(1, sum(g.values()) + sum(h.values()))
            for j, h in enumerate(grams)
            if j != i
        ]
        out.append(sum(sims) / max(1, len(sims)))
    return tuple(out)


@functools.lru_cache(maxsize=8192)
def _places(item: Item) -> tuple[tuple[int, ...], ...] | None:
    """Where the passage names each option as a whole (case ignored), or None without a
    passage."""
    if not item.passage.strip():
        return None
    text = item.passage.lower()
    return tuple(
        tuple(m.start() for m in re.finditer(rf"(?<!\w){re.escape(o.strip().lower())}(?!\w)", text))
        if o.strip()
        else ()
        for o in item.options
    )


def _by_place(item: Item, how: str) -> Scores:
    at = _places(item)
    if at is None:
        return None
    if how == "count":
        return [float(len(a)) for a in at]
    if how == "named":
        return [1.0 if a else 0.0 for a in at]
    if how == "unnamed":
        return [0.0 if a else 1.0 for a in at]
    if how == "first":
        return [-float(a[0]) if a else -1e12 for a in at]
    return [float(a[-1]) if a else -1.0 for a in at]  # last


def _by_value(item: Item, how: str) -> Scores:
    nums = _numbers(item)
    if nums is None:
        return None
    values = [v for v, _ in nums]
    if how == "largest":
        return values
    if how == "smallest":
        return [-v for v in values]
    if how == "roundest":
        return [float(r) for _, r in nums]
    order = sorted(range(len(values)), key=lambda i: values[i])
    mid = (len(values) - 1) / 2
    return [-abs(order.index(i) - mid) for i in range(len(values))]


def _no_catch_all(item: Item) -> Scores:
    flags = [o.strip().lower() in _CATCH_ALL for o in item.options]
    return [-1.0 if f else 0.0 for f in flags] if any(flags) else None


# (name, what it does) -> scores of an item's options
RULES: tuple[tuple[str, str, Callable[[Item], Scores]], ...] = (
    ("longest", "the longest option", lambda it: [float(len(o)) for o in it.options]),
    ("shortest", "the shortest option", lambda it: [-float(len(o)) for o in it.options]),
    ("passage", "the option the passage names most often", lambda it: _by_place(it, "count")),
    ("passage_named", "an option the passage names", lambda it: _by_place(it, "named")),
    ("passage_unnamed", "an option the passage does not name", lambda it: _by_place(it, "unnamed")),
    ("passage_first", "the option the passage names first", lambda it: _by_place(it, "first")),
    ("passage_last", "the option the passage names last", lambda it: _by_place(it, "last")),
    (
        "question_words",
        "the option sharing most words with the question",
        lambda it: [float(len(_words(o) & _words(it.question))) for o in it.options],
    ),
    ("most_alike", "the option most like the others (letters in common)", _alike),
    ("least_alike", "the option least like the others", lambda it: [-s for s in _alike(it)]),
    ("roundest", "the roundest number", lambda it: _by_value(it, "roundest")),
    ("middle", "the middle number", lambda it: _by_value(it, "middle")),
    ("largest", "the largest number", lambda it: _by_value(it, "largest")),
    ("smallest", "the smallest number", lambda it: _by_value(it, "smallest")),
    ("no_catch_all", 'never "None of the others" nor "Unable to determine"', _no_catch_all),
)


@dataclass(frozen=True)
class LeakRow:
    """One answer-blind rule over one data set's items (or all of them)."""

    rule: str
    label: str
    dataset: str
    n: int  # items
    share: float  # right picks / n (ties shared)
    chance: float  # mean of 1 / number of options
    p_value: float  # one-sided: the rule beats chance
    p_adjusted: float  # Holm over the rules of this data set
    leaks: bool  # p_adjusted < ALPHA and share - chance >= MARGIN

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "label": self.label,
            "dataset": self.dataset,
            "n": self.n,
            "share": self.share,
            "chance": self.chance,
            "above_chance": self.share - self.chance,
            "p_value": self.p_value,
            "p_adjusted": self.p_adjusted,
            "leaks": self.leaks,
        }


def _always(k: int) -> Callable[[Item], Scores]:
    return lambda it: [1.0 if j == k else 0.0 for j in range(len(it.options))]


def _always_text(text: str) -> Callable[[Item], Scores]:
    return lambda it: [1.0 if o.strip().lower() == text else 0.0 for o in it.options]


def _rules(items: Sequence[Item]) -> list[tuple[str, str, Callable[[Item], Scores]]]:
    """The content rules, the option offered most often across ``items`` (a value the
    options favour), "always <letter>" for each letter some item has and "<text> whenever
    it is offered" for the texts offered most (bAbI's counts: the same five words in every
    item, the answer "two" half the time)."""
    width = max((len(it.options) for it in items), default=0)
    offered = Counter(o.strip().lower() for it in items for o in it.options)

    def often(it: Item) -> Scores:
        return [float(offered[o.strip().lower()]) for o in it.options]

    common = [t for t, k in offered.most_common(TEXT_RULES) if k >= max(2, len(items) / 5)]
    return [
        *RULES,
        ("most_offered", "the option offered most often across the items", often),
        *((f"always_{x}", f"always {x}", _always(k)) for k, x in enumerate(LETTERS[: min(width, 8)])),
        *((f"text:{t}", f'"{t}" whenever offered', _always_text(t)) for t in common),
    ]


def _p_value(hits: float, t: np.ndarray, n: np.ndarray, rng: np.random.Generator) -> float:
    """One-sided p of ``hits`` or more right picks when each item's answer is any of its
    ``n`` options with equal probability (``t``: per item, the options tied for the pick).
    Up to :data:`EXACT_BELOW` items, by simulating that placement :data:`SIMULATIONS`
    times (a normal tail is too thin for a few items or rules that apply to few of them);
    beyond, by the normal approximation."""
    if len(t) <= EXACT_BELOW:
        draws = (rng.random((SIMULATIONS, len(t))) < t / n) / t
        return float((np.sum(draws.sum(axis=1) >= hits - 1e-9) + 1) / (SIMULATIONS + 1))
    var = float(np.sum(1 / (t * n) - 1 / n**2))
    z = (hits - float(np.sum(1 / n))) / math.sqrt(var) if var > 1e-12 else 0.0
    return 0.5 * math.erfc(z / math.sqrt(2))


def _rows(items: Sequence[Item], dataset: str) -> list[LeakRow]:
    rules = _rules(items)
    rng = np.random.default_rng(0)  # the same items get the same p-values
    n = np.array([len(it.options) for it in items], float)
    chance = sum(1 / len(it.options) for it in items) / len(items)  # summed as the hits are
    stats = []
    for _, _, score in rules:
        hits = 0.0
        ties = []
        for it in items:
            s = score(it)
            best = max(s) if s else 0.0
            tied = list(range(len(it.options))) if s is None else [j for j, v in enumerate(s) if v == best]
            hits += (it.answer in tied) / len(tied)
            ties.append(len(tied))
        stats.append((hits / len(items), _p_value(hits, np.array(ties, float), n, rng)))
    adjusted = [float(q) for q in adjust_pvalues(np.array([p for _, p in stats]), "holm")]
    return [
        LeakRow(name, label, dataset, len(items), share, chance, p, q, q < ALPHA and share - chance >= MARGIN)
        for (name, label, _), (share, p), q in zip(rules, stats, adjusted, strict=True)
    ]


def option_leaks(items: Sequence[Item]) -> list[LeakRow]:
    """Every rule over all ``items`` (dataset ``ALL``) and, with more than one data set,
    over each data set's."""
    if not items:
        return []
    out = _rows(items, ALL)
    datasets = list(dict.fromkeys(it.dataset for it in items))
    if len(datasets) > 1:
        for ds in datasets:
            out += _rows([it for it in items if it.dataset == ds], ds)
    return out


def strongest_first(rows: Sequence[LeakRow]) -> list[LeakRow]:
    """The rows over all items first, then each data set's, the rule that beats chance
    most first within each."""
    return sorted(rows, key=lambda r: (r.dataset != ALL, -(r.share - r.chance)))


def strongest(rows: Sequence[LeakRow]) -> LeakRow | None:
    """The rule that beats chance most over all items (None without rows)."""
    return next(iter(strongest_first(rows)), None)


def leak_notes(rows: Sequence[LeakRow]) -> list[str]:
    """One sentence per data set whose options give answers away (over all items when
    there is one data set): its strongest leaking rule and how many others leak."""
    per_set = [r for r in rows if r.dataset != ALL]
    out = []
    for ds in dict.fromkeys(r.dataset for r in per_set or rows):
        leaking = strongest_first([r for r in per_set or rows if r.dataset == ds and r.leaks])
        if not leaking:
            continue
        r = leaking[0]
        more = f" ({len(leaking) - 1} more rules beat chance)" if len(leaking) > 1 else ""
        out.append(
            f"the options give answers away{f' in {ds}' if per_set else ''}: "
            f"{r.label} is right in {r.share:.0%} of {r.n} items, where chance is "
            f"{r.chance:.0%} (Holm-adjusted p = {r.p_adjusted:.2g}){more}; a model can "
            "score there without reading (see the answer-blind rules)."
        )
    return out


__all__ = [
    "ALPHA",
    "MARGIN",
    "RULES",
    "LeakRow",
    "leak_notes",
    "option_leaks",
    "strongest",
    "strongest_first",
]
