"""Plan before you run: how many questions a study needs for a guarantee and for verdicts.

From a finished analysis (the loaded data, or a pilot):

* the **guaranteed level** ``1 - α - ε(α, m, η)/√m`` as a function of the number of
  questions m (it depends on m, α and η only);
* for each ordered pair (A, B), the **chance that "A is at least as good as B" is decided**
  with m questions drawn like these: resampling m of the loaded questions with
  replacement, the verdict holds when ``Û_m(1 - α/2) <= 0``, i.e. when at most
  ``m - ⌈(1 - α/2) m⌉`` of the drawn δ̂_j are above 0. The number above 0 is
  Binomial(m, s), s the share of the loaded questions with δ̂_j > 0, so the chance is that
  binomial's distribution function — the resampling's exact probability, no Monte Carlo;
* the **questions needed**: the smallest m at which that chance reaches
  :data:`REACHABLE` (80 %), or None when it never does (s >= α/2: more questions like
  these will not decide it; more real answers per question, or more simulated ones,
  shrink the worst cases instead);
* the **plug-in share**, the share of questions where A's loss at the estimate p̂ is not
  above B's: a description with **no guarantee** (it ignores the sampling noise of p̂).

Examples
--------
>>> import warnings
>>> from dbpa_core.fidelity import run_fidelity, sample_data
>>> with warnings.catch_warnings():
...     warnings.simplefilter("ignore")
...     plan = plan_study(run_fidelity(sample_data(), band=False))
>>> plan.pair("sim-close", "uniform").chance[2000] > 0.99
True
>>> plan.pair("sim-biased", "sim-close").needed is None
True
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..fmt import table
from . import curve as cv

if TYPE_CHECKING:
    from .analysis import FidelityResult


if TYPE_CHECKING:
    pass

M_GRID = (100, 200, 500, 1000, 2000)
REACHABLE = 0.8
_SEARCH = tuple(sorted({int(round(x, -1)) for x in np.geomspace(20, 100_000, 160)} | set(M_GRID)))


@dataclass(frozen=True)
class PairPlan:
    """``first`` at least as good as ``second``: the share s of loaded questions with
    δ̂_j > 0, the chance the verdict is decided at each m of :data:`M_GRID`, the questions
    needed for an 80 % chance (None: never) and the plug-in share (no guarantee)."""

    first: str
    second: str
    share_above: float
    chance: dict[int, float]
    needed: int | None
    plugin_share: float | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "first": self.first,
            "second": self.second,
            "share_above_0": self.share_above,
            "chance_decided": {str(k): v for k, v in self.chance.items()},
            "questions_needed": self.needed,
            "plugin_share_no_guarantee": self.plugin_share,
        }


@dataclass(frozen=True)
class FidelityPlan:
    """The plan of one analysis (see the module docstring)."""

    m: int
    alpha: float
    eta: float
    levels: dict[int, float]
    guarantee_from: int | None
    pairs: tuple[PairPlan, ...]

    def pair(self, first: str, second: str) -> PairPlan:
        for p in self.pairs:
            if (p.first, p.second) == (first, second):
                return p
        raise KeyError((first, second))

    def reachable_now(self) -> list[PairPlan]:
        return [p for p in self.pairs if chance_at(p.share_above, self.m, self.alpha) >= REACHABLE]

    def sentence(self) -> str:
        """The plan in one or two plain sentences."""
        a = f"α = {self.alpha:g}"
        g = (
            f" The guarantee for new questions needs m ≥ {self.guarantee_from:,}."
            if self.guarantee_from is not None and self.guarantee_from > self.m
            else ""
        )
        if not self.pairs:
            return (
                g.strip()
                or f"With {self.m} questions the guarantee holds; add simulators to plan comparisons."
            )
        now = self.reachable_now()
        head = (
            f"With {self.m} questions {len(now)} of {len(self.pairs)} pairwise verdicts "
            f"(each pair both ways) are reachable at {a}"
            if now
            else f"With {self.m} questions no pairwise verdict is reachable at {a}"
        )
        head += f" (decided in at least {100 * REACHABLE:.0f} % of resamples of the questions)"
        later = sorted(
            (p for p in self.pairs if p.needed is not None and p not in now), key=lambda p: p.needed or 0
        )  # all set (filtered above)
        if later:
            shown = "; ".join(
                f"about {p.needed:,} for {p.first} at least as good as {p.second}" for p in later[:3]
            )
            head += f"; with more questions like these: {shown}"
        never = [p for p in self.pairs if p.needed is None]
        if never and len(never) == len(self.pairs):
            head += (
                "; more questions like these decide none: the worst cases need more real "
                "answers per question (or more simulated ones)"
            )
        return head.replace(" ;", ";") + "." + g

    def to_dict(self) -> dict[str, Any]:
        return {
            "m": self.m,
            "alpha": self.alpha,
            "eta": self.eta,
            "reachable": REACHABLE,
            "guaranteed_level": {str(k): v for k, v in self.levels.items()},
            "guarantee_from_m": self.guarantee_from,
            "sentence": self.sentence(),
            "pairs": [p.to_dict() for p in self.pairs],
        }

    def text(self) -> str:
        """The terminal table: the guaranteed level by m, then each pair's chances."""
        ms = list(self.levels)
        levels = table(
            [("guaranteed level", *[f"{self.levels[m]:.2f}" for m in ms])],
            ("questions m", *[f"{m:,}" for m in ms]),
            align="l" + "r" * len(ms),
        )
        rows = [
            (
                f"{p.first} ≥ {p.second}",
                *[f"{p.chance[m]:.0%}" for m in M_GRID],
                f"{p.needed:,}" if p.needed else "never",
                "" if p.plugin_share is None else f"{p.plugin_share:.2f}",
            )
            for p in self.pairs
        ]
        chances = table(
            rows,
            ("chance decided", *[f"{m:,}" for m in M_GRID], "needed", "plug-in share (no guarantee)"),
            align="l" + "r" * (len(M_GRID) + 1) + "l",
        )
        return "\n".join([self.sentence(), "", levels, "", chances])


def _threshold(m: int, alpha: float) -> int:
    """The most δ̂_j above 0 that still give Û_m(1 - α/2) <= 0."""
    return m - math.ceil(round((1 - alpha / 2) * m, 9))


def _binom_cdf(k: int, m: int, s: float) -> float:
    """P(Binomial(m, s) <= k), summed in log space (no scipy.stats: a plain `dbpa fidelity`
    need not load it)."""
    if k < 0:
        return 0.0
    if k >= m or s <= 0.0:
        return 1.0
    if s >= 1.0:
        return 0.0
    i = np.arange(1, k + 1)
    log_c = np.concatenate([[0.0], np.cumsum(np.log(m - i + 1.0) - np.log(i))])
    j = np.arange(k + 1)
    terms = log_c + j * math.log(s) + (m - j) * math.log1p(-s)
    top = terms.max()
    return float(min(1.0, math.exp(top) * np.exp(terms - top).sum()))


def chance_at(share: float, m: int, alpha: float) -> float:
    """P(Binomial(m, share) <= m - ⌈(1 - α/2) m⌉): the chance that a verdict is decided with
    m questions drawn (with replacement) from questions whose share ``share`` has δ̂ > 0."""
    return _binom_cdf(_threshold(m, alpha), m, share)


def _chances(share: float, ms: Iterable[int], alpha: float) -> np.ndarray:
    return np.array([chance_at(share, int(m), alpha) for m in ms])


MAX_PLAN_M = 1_000_000  # questions a plan may consider: its binomial sums hold m terms


def _grid_iv(grid: object) -> tuple[int, ...]:
    """``grid`` as whole numbers of questions in [1, :data:`MAX_PLAN_M`], or a ValueError
    naming the bad one."""
    from .._validate import check_int

    if isinstance(grid, (str, bytes)) or not hasattr(grid, "__iter__"):
        raise TypeError(
            f"`grid` must be a sequence of whole numbers of questions, got {type(grid).__name__}."
        )
    out = tuple(
        check_int(
            m,
            "grid",
            1,
            MAX_PLAN_M,
            "the chance of a verdict at m questions sums m binomial terms (8 bytes each), and "
            "no survey asks more",
        )
        for m in grid
    )
    if not out:
        raise ValueError("`grid` is empty: give the numbers of questions to plan for.")
    return out


def plan_study(result: FidelityResult, *, grid: Sequence[int] = M_GRID) -> FidelityPlan:
    """The plan of a finished analysis (:func:`~dbpa_core.fidelity.run_fidelity`).

    ``grid``: the numbers of questions m to show the chance of a verdict at, each a whole
    number in [1, 10⁶] (:data:`MAX_PLAN_M`)."""
    grid = _grid_iv(grid)
    alpha, eta = result.alpha, result.eta
    level_ms = sorted({*grid, 50, 5000, 10000, result.m} - {1})
    levels = {m: cv.guaranteed_level(alpha, m, eta) for m in level_ms if m >= 2}
    guarantee_from = (
        next((m for m in range(2, 1_000_000) if cv.guaranteed_level(alpha, m, eta) > 0), None)
        if result.gamma >= 0.5
        else None
    )
    pairs = []
    for c in result.comparisons:
        for first, second, deltas in ((c.first, c.second, c.deltas), (c.second, c.first, c.reverse)):
            s = float(np.mean(np.asarray(deltas) > 0))
            chance = {m: chance_at(s, m, alpha) for m in grid}
            ok = _chances(s, _SEARCH, alpha) >= REACHABLE
            needed = _SEARCH[int(np.argmax(ok))] if ok.any() else None
            pa, pb = result.simulator(first).plugin, result.simulator(second).plugin
            plug = None if pa is None or pb is None else float(np.mean(pa <= pb + 1e-12))
            pairs.append(PairPlan(first, second, s, chance, needed, plug))
    return FidelityPlan(result.m, alpha, eta, levels, guarantee_from, tuple(pairs))


__all__ = ["M_GRID", "REACHABLE", "FidelityPlan", "PairPlan", "chance_at", "plan_study"]
