"""ER, ASR, RTI and consistency, each with its uncertainty.

* ``ER`` (error rate, lower is better): the share of items answered wrongly. An
  unparsed answer is not a right answer, so it counts as an error; ``unparsed`` says
  how many there were (and :attr:`Rate.value_parsed` gives the rate over parsed ones).
* ``ASR`` (attack success rate): the share of items whose answer changed under the
  attack. "No readable answer" is an answer of its own: clean B -> unparsed is a
  change, unparsed -> unparsed is not.
* ``RTI`` (relative training index): for each item, ρ is raised from 0.1 in steps of
  0.1 until the answer changes; ``r_x`` is that ρ (1.0 if it never changes) and
  ``RTI = mean r_x``. A high RTI means the model answers even from a destroyed passage:
  the data set is probably memorized. Since r_x = 1.0 both for "changed at ρ = 1.0" and
  "never changed", the share of items never changed is reported beside it.
* consistency: the spread (population standard deviation) of accuracy over
  instructions or over option orders.

Rates carry a Wilson score interval (95 % by default); RTI a t interval of the mean.

Examples
--------
>>> r = error_rate([0, 1, None, 0], [0, 0, 0, 0])
>>> r.value, r.count, r.unparsed
(0.5, 2, 1)
>>> attack_success_rate([0, 1, None, None], [0, 2, None, 1]).value
0.5
>>> first_change([0.1, 0.2, 0.3], [1, 1, 2], clean=1)
0.3
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from ..intervals import wilson_interval

Answer = int | None


@dataclass(frozen=True)
class Rate:
    """A share ``count / n`` with its Wilson interval ``[low, high]``.

    ``unparsed`` counts the answers no option could be read from; ``value_parsed`` is
    the share among the others (NaN when none was parsed).
    """

    value: float
    low: float
    high: float
    n: int
    count: int
    unparsed: int = 0
    value_parsed: float = float("nan")

    def to_dict(self, name: str = "value") -> dict[str, Any]:
        """``{name, name_low, name_high, name_parsed_only, n, count, unparsed}``."""
        return {
            name: self.value,
            f"{name}_low": self.low,
            f"{name}_high": self.high,
            f"{name}_parsed_only": self.value_parsed,
            "n": self.n,
            "count": self.count,
            "unparsed": self.unparsed,
        }


def _rate(count: int, n: int, unparsed: int, count_parsed: int, n_parsed: int, confidence: float) -> Rate:
    lo, hi = wilson_interval(count, n, confidence=confidence)
    value = count / n if n else float("nan")
    vp = count_parsed / n_parsed if n_parsed else float("nan")
    return Rate(value, lo, hi, n, count, unparsed, vp)


def _check_pair(a: Sequence, b: Sequence, names: tuple[str, str]) -> None:
    if len(a) != len(b):
        raise ValueError(
            f"`{names[0]}` and `{names[1]}` must have the same length; got {len(a)} and {len(b)}."
        )


def error_rate(predicted: Sequence[Answer], gold: Sequence[int], *, confidence: float = 0.95) -> Rate:
    """ER: the share of items whose predicted option is not the gold one (unparsed
    answers, ``None``, count as errors)."""
    _check_pair(predicted, gold, ("predicted", "gold"))
    wrong = sum(p != g for p, g in zip(predicted, gold, strict=True))
    unparsed = sum(p is None for p in predicted)
    return _rate(wrong, len(gold), unparsed, wrong - unparsed, len(gold) - unparsed, confidence)


def accuracy(predicted: Sequence[Answer], gold: Sequence[int], *, confidence: float = 0.95) -> Rate:
    """1 − ER, with the same interval mirrored."""
    _check_pair(predicted, gold, ("predicted", "gold"))
    right = sum(p == g for p, g in zip(predicted, gold, strict=True))
    unparsed = sum(p is None for p in predicted)
    return _rate(right, len(gold), unparsed, right, len(gold) - unparsed, confidence)


def attack_success_rate(
    clean: Sequence[Answer], attacked: Sequence[Answer], *, confidence: float = 0.95
) -> Rate:
    """ASR: the share of items whose answer changed (``None`` is an answer of its own);
    ``unparsed`` counts the attacked answers that could not be read, ``value_parsed``
    the share among items with both answers read."""
    _check_pair(clean, attacked, ("clean", "attacked"))
    changed = sum(c != a for c, a in zip(clean, attacked, strict=True))
    both = [(c, a) for c, a in zip(clean, attacked, strict=True) if c is not None and a is not None]
    unparsed = sum(a is None for a in attacked)
    return _rate(changed, len(clean), unparsed, sum(c != a for c, a in both), len(both), confidence)


def first_change(rhos: Sequence[float], answers: Sequence[Answer], *, clean: Answer) -> float:
    """``r_x``: the first ρ (in increasing order) whose answer differs from the clean
    answer, or 1.0 when none does."""
    _check_pair(rhos, answers, ("rhos", "answers"))
    for rho, a in sorted(zip(rhos, answers, strict=True), key=lambda t: t[0]):
        if a != clean:
            return float(rho)
    return 1.0


@dataclass(frozen=True)
class RTIResult:
    """``rti`` = mean of ``values`` (the r_x) with a t interval; ``n`` items.

    ``never_changed`` counts the items whose answer changed at no ρ (their r_x is the
    paper's 1.0, the same as an answer that changed only at ρ = 1.0); ``None`` when not
    known.
    """

    rti: float
    low: float
    high: float
    n: int
    values: tuple[float, ...]
    never_changed: int | None = None

    @property
    def never_changed_share(self) -> float:
        """The share of items whose answer never changed (NaN when not known)."""
        if self.never_changed is None or not self.n:
            return float("nan")
        return self.never_changed / self.n

    def to_dict(self) -> dict[str, Any]:
        return {
            "rti": self.rti,
            "rti_low": self.low,
            "rti_high": self.high,
            "n": self.n,
            "never_changed": self.never_changed,
            "never_changed_share": self.never_changed_share,
        }


def relative_training_index(
    values: Sequence[float], *, changed: Sequence[bool] | None = None, confidence: float = 0.95
) -> RTIResult:
    """RTI = mean of the per-item r_x (each in [0, 1]), with a t interval clipped to
    [0, 1] (NaN bounds for fewer than 2 items). ``changed[i]`` says whether item i's
    answer changed at some ρ; given, the result counts the items that never changed."""
    x = np.asarray(values, dtype=float)
    if x.ndim != 1:
        raise ValueError("`values` must be one-dimensional.")
    if x.size and (np.any(~np.isfinite(x)) or np.any(x < 0) or np.any(x > 1)):
        raise ValueError("every r_x in `values` must lie in [0, 1].")
    never = None
    if changed is not None:
        if len(changed) != x.size:
            raise ValueError(
                f"`changed` must have one entry per value; got {len(changed)} for {x.size} values."
            )
        if any(not c and v != 1.0 for c, v in zip(changed, x.tolist(), strict=True)):
            raise ValueError("an item that never changed has r_x = 1.0.")
        never = sum(not c for c in changed)
    if x.size == 0:
        return RTIResult(float("nan"), float("nan"), float("nan"), 0, (), never)
    m = float(x.mean())
    if x.size < 2:
        return RTIResult(m, float("nan"), float("nan"), 1, tuple(x.tolist()), never)
    se = float(x.std(ddof=1)) / math.sqrt(x.size)
    t = float(stats.t.ppf(0.5 + confidence / 2, x.size - 1))
    return RTIResult(m, max(0.0, m - t * se), min(1.0, m + t * se), int(x.size), tuple(x.tolist()), never)


def spread(accuracies: Sequence[float]) -> float:
    """The population standard deviation of accuracies (0 for one; NaN for none)."""
    x = np.asarray([a for a in accuracies if a == a], dtype=float)
    return float(x.std(ddof=0)) if x.size else float("nan")


__all__ = [
    "RTIResult",
    "Rate",
    "accuracy",
    "attack_success_rate",
    "error_rate",
    "first_change",
    "relative_training_index",
    "spread",
    "wilson_interval",
]
