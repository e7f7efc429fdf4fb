"""``run_fidelity(data)``: every simulator's calibrated quantile curve, the uniform
baseline, the tightness band and every pairwise comparison, as one result.

The result carries what the charts and the reports need (each scenario's upper and lower
pseudo-discrepancy per simulator, each pair's δ̂), so pages never recompute statistics;
``to_dict`` / ``write`` give ``fidelity.json``, ``fidelity.csv``, ``comparisons.csv`` and
``report.html``.

Examples
--------
>>> from dbpa_core.fidelity import from_arrays, run_fidelity
>>> data = from_arrays([[60, 40], [20, 80], [50, 50]],
...                    {"good": [[0.6, 0.4], [0.25, 0.75], [0.5, 0.5]],
...                     "bad": [[0.1, 0.9], [0.9, 0.1], [0.2, 0.8]]})
>>> r = run_fidelity(data, loss="tv")
>>> [s.name for s in r.simulators]
['good', 'bad', 'uniform']
>>> r.comparison("good", "bad").verdict
'first'
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
import os
import time
import warnings as _warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike

from .._validate import big_number, check_level
from ..fmt import fmt_pct, table
from . import curve as cv
from . import discrepancy as dz
from .data import UNIFORM, FidelityData, FidelityDataError
from .dataset import row_sums
from .report import report_html
from .sets import (
    binary_kl_interval,
    hoeffding_halfwidth,
    kl_radius_bernoulli,
    kl_radius_categorical,
    w1_radius,
)

if TYPE_CHECKING:
    from .plan import FidelityPlan


CVAR_ALPHA = 0.1
BAND_GRID = 201


class FidelityWarning(UserWarning):
    """Something the user should know about a fidelity analysis (also in ``warnings``)."""


@dataclass(frozen=True)
class UnseenSet:
    """``{u : L(u, center) <= radius}``: where the real answers of an unseen scenario lie.

    ``center`` is the simulator's answer there (a distribution over options, or a scalar
    such as a mean for squared / absolute); for scalar losses :attr:`interval` gives the set
    as an interval."""

    center: np.ndarray
    radius: float
    loss: str
    values: np.ndarray | None = None

    @property
    def interval(self) -> tuple[float, float] | None:
        if self.loss == "absolute":
            h = self.radius
        elif self.loss == "squared":
            h = math.sqrt(self.radius)
        else:
            return None
        c = float(self.center)
        return (c - h, c + h)

    def contains(self, u: float | np.ndarray) -> bool:
        if self.loss in ("absolute", "squared"):
            return bool(dz.scalar_loss(float(u), float(self.center), self.loss) <= self.radius + 1e-12)
        return bool(
            dz.categorical_loss(np.asarray(u, dtype=float)[None], self.center[None], self.loss, self.values)[
                0
            ]
            <= self.radius + 1e-12
        )


@dataclass(frozen=True)
class SimulatorCurve:
    """One simulator's pseudo-discrepancies and calibrated curve.

    Attributes
    ----------
    name : str
    kind : str
        ``counts``, ``probabilities``, ``values`` or ``uniform``.
    upper : array (m,)
        Δ̂_j, the worst case of the loss over scenario j's confidence set.
    lower : array (m,) or None
        Δ⁻_j, the best case (the band's lower edge; None without a band).
    plugin : array (m,) or None
        ``L(p̂_j, q̂_j)``, the loss at the estimate (a description: no guarantee).
    gap : array (m,) or None
        Where Δ̂_j is a certified upper bound rather than the exact sup: how far it can be
        above the sup (the bound minus a point of the set); None when every value is exact.
    lower_gap : array (m,) or None
        Where Δ⁻_j is a certified lower bound rather than the exact inf (a Lagrange dual
        value): how far it can be below the inf (a point of the set minus the bound); None
        when every lower value is exact.
    alpha : float
        The level of the guarantee quantile V̂_m(1 - α/2).
    """

    name: str
    kind: str
    upper: np.ndarray
    lower: np.ndarray | None
    alpha: float = 0.1
    plugin: np.ndarray | None = None
    gap: np.ndarray | None = None
    lower_gap: np.ndarray | None = None

    @property
    def method(self) -> str:
        """``exact`` when every Δ̂_j is the exact sup (closed form, enumeration, or a
        certified bound within 1e-9 of a point of the set), else ``bound``: each Δ̂_j is a
        certified upper bound, at most :attr:`largest_gap` above the sup."""
        return "exact" if self.gap is None or self.largest_gap <= 1e-9 else "bound"

    @property
    def largest_gap(self) -> float:
        return 0.0 if self.gap is None else float(np.max(self.gap))

    @property
    def method_text(self) -> str:
        return "exact" if self.method == "exact" else f"bound (gap ≤ {self.largest_gap:.2g})"

    @property
    def lower_method(self) -> str | None:
        """The band's lower edge: ``exact`` (closed form, or a certified bound within 1e-9
        of a point of the set), ``bound`` (each Δ⁻_j a certified lower bound, at most
        :attr:`largest_lower_gap` below the inf) or None without a band."""
        if self.lower is None:
            return None
        return "exact" if self.largest_lower_gap <= 1e-9 else "bound"

    @property
    def largest_lower_gap(self) -> float:
        return 0.0 if self.lower_gap is None else float(np.max(self.lower_gap))

    @property
    def lower_method_text(self) -> str:
        if self.lower_method is None:
            return "-"
        return "exact" if self.lower_method == "exact" else f"bound (gap ≤ {self.largest_lower_gap:.2g})"

    def quantile(self, beta: float | np.ndarray) -> float | np.ndarray:
        """``V̂_m(β)`` of the upper pseudo-discrepancies."""
        return cv.quantile(self.upper, beta)

    def calibrated(self, tau: float | np.ndarray) -> float | np.ndarray:
        """``V̂_cal(τ) = V̂_m((1 + τ) / 2)``."""
        return cv.calibrated(self.upper, tau)

    @property
    def auc_cal(self) -> float:
        return cv.auc_cal(self.upper)

    def cvar(self, alpha: float = CVAR_ALPHA) -> float:
        return cv.cvar(self.upper, alpha)

    @property
    def guarantee_quantile(self) -> float:
        """``V̂_m(1 - α/2)``: a new scenario's discrepancy stays below it on at least a
        ``1 - α - ε/√m`` share (with probability 1 - η); also the radius of the confidence
        set for an unseen scenario, ``{u : L(u, q̂) <= V̂_m(1 - α/2)}``."""
        return float(cv.quantile(self.upper, 1 - self.alpha / 2))

    def unseen_set(self, q: ArrayLike, loss: str, values: ArrayLike | None = None) -> UnseenSet:
        """The confidence set for the real answers of a new scenario in which this simulator
        answers ``q``: ``{u : L(u, q) <= V̂_m(1 - α/2)}`` (the paper's comparison). It holds them with
        probability at least ``1 - α - ε/√m`` (with probability 1 - η over the data)."""
        return UnseenSet(
            np.asarray(q, dtype=float),
            self.guarantee_quantile,
            loss,
            None if values is None else np.asarray(values, dtype=float),
        )

    def band(
        self, gamma: float, tau: float | np.ndarray
    ) -> tuple[float | np.ndarray, float | np.ndarray] | None:
        """``(V̂⁻_m(γ τ), V̂_m(γ + (1 - γ) τ))`` (None without lower values)."""
        if self.lower is None:
            return None
        return cv.band(self.lower, self.upper, gamma, tau)

    def to_dict(self, ids: Sequence[str], gamma: float) -> dict[str, Any]:
        tau, value = cv.steps(self.upper)
        out: dict[str, Any] = {
            "name": self.name,
            "kind": self.kind,
            "discrepancies": {i: float(v) for i, v in zip(ids, self.upper, strict=True)},
            "auc_cal": self.auc_cal,
            "cvar_10": self.cvar(CVAR_ALPHA),
            "quantile_guarantee": self.guarantee_quantile,
            "worst_case": {"method": self.method, "largest_gap": self.largest_gap},
            "curve": {
                "tau": tau.tolist(),
                "value": value.tolist(),
                "reading": "V_cal(tau) = value[k] for tau in (tau[k-1], tau[k]]",
            },
            "lower": None,
            "band": None,
        }
        if self.lower is not None:
            grid = np.linspace(0.0, 1.0, BAND_GRID)
            lo, hi = cv.band(self.lower, self.upper, gamma, grid)
            out["lower"] = {i: float(v) for i, v in zip(ids, self.lower, strict=True)}
            out["best_case"] = {"method": self.lower_method, "largest_gap": self.largest_lower_gap}
            out["band"] = {
                "tau": grid.tolist(),
                "lower": np.asarray(lo).tolist(),
                "upper": np.asarray(hi).tolist(),
            }
        return out


@dataclass(frozen=True)
class Comparison:
    """Simulator ``first`` against ``second``: ``deltas[j] = δ̂_j = sup_{u in C_j}
    [L(u, q̂¹_j) - L(u, q̂²_j)]`` and the reverse; ``u_hat = Û_m(1 - α/2)``.

    ``exact`` is False when δ̂ is the conservative bound (tv and w1 on options: never below
    the sup, so a verdict is never too optimistic); ``gap`` and ``gap_reverse`` then say
    per scenario how far it can be above the sup (the bound minus the difference at a
    point of the set; None when not measured). ``level`` is the guaranteed share of new
    scenarios, ``1 - α - ε/√m`` (None when unknown, as for a comparison built by hand), and
    ``gamma`` the sets' coverage: below ½ a verdict only describes these scenarios.
    """

    first: str
    second: str
    alpha: float
    deltas: np.ndarray
    reverse: np.ndarray
    exact: bool = True
    level: float | None = None
    gamma: float = 0.5
    gap: np.ndarray | None = None
    gap_reverse: np.ndarray | None = None

    @property
    def largest_gap(self) -> float | None:
        """The largest gap of δ̂ in either direction (0 when exact; None when unmeasured)."""
        if self.exact:
            return 0.0
        if self.gap is None or self.gap_reverse is None:
            return None
        return float(max(np.max(self.gap, initial=0.0), np.max(self.gap_reverse, initial=0.0)))

    @property
    def method(self) -> str:
        """``exact``, or ``bound`` (a certified upper bound of each scenario's δ̂)."""
        return (
            "exact" if self.exact or (self.largest_gap is not None and self.largest_gap <= 1e-9) else "bound"
        )

    @property
    def u_hat(self) -> float:
        return float(cv.quantile(self.deltas, 1 - self.alpha / 2))

    @property
    def u_hat_reverse(self) -> float:
        return float(cv.quantile(self.reverse, 1 - self.alpha / 2))

    @property
    def verdict(self) -> str:
        """``first``: first at least as good as second on >= 1 - α of scenarios;
        ``second``: the reverse; ``both``: each is; ``neither``: the data cannot say."""
        a, b = self.u_hat <= 0, self.u_hat_reverse <= 0
        return {
            (True, True): "both",
            (True, False): "first",
            (False, True): "second",
            (False, False): "neither",
        }[(a, b)]

    @property
    def guaranteed(self) -> bool:
        """True when the verdict carries a guarantee for new scenarios: a decided pair,
        γ >= ½ and a guaranteed share ``1 - α - ε/√m`` above 0."""
        return self.verdict != "neither" and self.gamma >= 0.5 and self.level is not None and self.level > 0

    def reversed(self) -> Comparison:
        """The same comparison with ``first`` and ``second`` swapped."""
        return replace(
            self,
            first=self.second,
            second=self.first,
            deltas=self.reverse,
            reverse=self.deltas,
            gap=self.gap_reverse,
            gap_reverse=self.gap,
        )

    def _reach(self, noun: str) -> str:
        """What the verdict promises beyond these scenarios."""
        if self.gamma < 0.5:
            return f"; with γ = {self.gamma:g} < ½ that describes these {noun} only: no guarantee"
        if self.level is None:
            return ""
        if self.level <= 0:
            return f"; no guarantee for new {noun} yet"
        return f"; for new {noun} like these, guaranteed on at least {_floor_pct(self.level)}"

    def sentence(self, noun: str = "questions") -> str:
        """The verdict in one plain sentence, with what it guarantees (see :attr:`guaranteed`)."""
        share = fmt_pct(1 - self.alpha)
        v = self.verdict
        where = f"on at least {share} of these {noun} (worst case over their confidence sets)"
        if v in ("first", "second"):
            a, b = (self.first, self.second) if v == "first" else (self.second, self.first)
            return f"{a} is at least as good as {b} {where}{self._reach(noun)}."
        if v == "both":
            return (
                f"{self.first} and {self.second}: each is at least as good as the other "
                f"{where}{self._reach(noun)}."
            )
        return (
            f"Undecided between {self.first} and {self.second}: these data cannot say which "
            f"is better on {share} of {noun} (neither is shown to be at least as good as the "
            "other; not that they are equal)."
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "first": self.first,
            "second": self.second,
            "alpha": self.alpha,
            "u_hat": self.u_hat,
            "u_hat_reverse": self.u_hat_reverse,
            "verdict": self.verdict,
            "sentence": self.sentence(),
            "guaranteed": self.guaranteed,
            "exact": self.exact,
            "method": self.method,
            "largest_gap": self.largest_gap,
        }


def _floor_pct(x: float) -> str:
    """A guaranteed share as a whole percentage, rounded down (never more than is promised)."""
    return f"{math.floor(100 * x + 1e-9):d} %"


@dataclass(frozen=True)
class FidelityResult:
    """Everything one analysis found (see the module docstring)."""

    data: FidelityData
    loss: str
    gamma: float
    eta: float
    alpha: float
    set_name: str
    radius: np.ndarray
    simulators: tuple[SimulatorCurve, ...]
    comparisons: tuple[Comparison, ...]
    sigma: float | None = None
    bounds: tuple[float, float] | None = None
    warnings: tuple[str, ...] = ()
    seconds: float = 0.0
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    baseline: str = "exact"
    seed: int = 0

    @property
    def baseline_k(self) -> np.ndarray | None:
        """The uniform baseline's answers per question (None: the exact 1/d)."""
        return self.sample_sizes(UNIFORM)

    def baseline_text(self) -> str:
        """What the uniform baseline is, in one sentence (the page, the CLI and the report
        say it)."""
        k = self.baseline_k
        if k is None:
            return (
                "Baseline: the exact uniform distribution (1/d for each of d options), with "
                "no sampling noise; a simulator's own k answers carry some, so against it "
                "the baseline looks slightly better than a fair one."
            )
        ks = f"k = {k.min()}" if k.min() == k.max() else f"k = {k.min()}–{k.max()}"
        what = (
            "picked uniformly at random among the options"
            if self.data.kind == "categorical"
            else "drawn uniformly at random from the values' range"
        )
        return (
            f"Baseline: uniform, drawn like the simulators — {ks} answers per question "
            f"{what} (seed {self.seed}), as many as the simulators drew, so it carries the "
            "same sampling noise."
        )

    def sample_sizes(self, name: str) -> np.ndarray | None:
        """Simulator ``name``'s answers per question (None when it gave probabilities, or
        is the exact uniform)."""
        memo = self.__dict__.setdefault("_sizes", {})  # computed once per simulator
        if name not in memo:
            memo[name] = self._sample_sizes(name)
        return memo[name]

    def _sample_sizes(self, name: str) -> np.ndarray | None:
        if name == UNIFORM:
            b = self.data.baseline
            if b is None:
                return None
            if self.data.kind == "categorical":
                return np.round(row_sums(b)).astype(int)
            return np.array([np.size(c) for c in b])
        kind = self.data.sim_kinds.get(name)
        if kind == "counts":
            return row_sums(self.data.simulated[name])
        if kind == "values":
            return np.array([float(np.size(a)) for a in self.data.simulated[name]])
        return None

    def sample_size_summary(self, name: str) -> str:
        """'k = 300' (or a range), 'probabilities' or 'exact 1/d'."""
        k = self.sample_sizes(name)
        if k is None:
            return "exact 1/d" if name == UNIFORM else "probabilities"
        return f"k = {k.min():g}" if k.min() == k.max() else f"k = {k.min():g}–{k.max():g}"

    def n_summary(self) -> str:
        """The real answers per question, 'n = 400–1000'."""
        n = np.array([s.n for s in self.data.scenarios])
        return f"n = {n.min():g}" if n.min() == n.max() else f"n = {n.min():g}–{n.max():g}"

    @property
    def m(self) -> int:
        return self.data.m

    @property
    def epsilon(self) -> float:
        return cv.epsilon(self.alpha, self.m, self.eta)

    @property
    def guaranteed_level(self) -> float | None:
        """``1 - α - ε/√m``: the guaranteed share of new scenarios below V̂_m(1 - α/2) (with
        probability 1 - η); it can be <= 0 for few scenarios (no guarantee yet). None when
        γ < ½: the calibrated curve V̂_m((1 + τ)/2) then has no guarantee at all."""
        if self.gamma < 0.5:
            return None
        return cv.guaranteed_level(self.alpha, self.m, self.eta)

    @property
    def guarantee_status(self) -> str:
        """``holds`` (a share above 0), ``vacuous`` (few scenarios) or ``none`` (γ < ½)."""
        level = self.guaranteed_level
        return "none" if level is None else "holds" if level > 0 else "vacuous"

    def guarantee_text(self, noun: str = "questions") -> str:
        """The guarantee in one plain sentence, or why there is none (the page, the CLI and
        the report all say this)."""
        one = noun[:-1] if noun.endswith("s") else noun
        level, status = self.guaranteed_level, self.guarantee_status
        if status == "none":
            return (
                f"No guarantee: with γ = {self.gamma:g} < ½ each {one}'s confidence set holds "
                "the real answers less than half the time, so the curves and verdicts only "
                f"describe these {noun} (a guarantee needs γ ≥ ½)."
            )
        if status == "vacuous":
            return (
                f"No guarantee for new {noun} yet: with m = {self.m} {noun}, "
                f"1 − α − ε/√m = {level:.2f} (ε = {self.epsilon:.2f}); the curves and verdicts "
                f"describe these {noun} only (a guarantee needs a few hundred)."
            )
        return (
            f"Guarantee: with probability ≥ {1 - self.eta:g}, a new {one} like these is "
            f"below the curve at τ = {1 - self.alpha:g} (V̂_m(1 − α/2)) with probability ≥ "
            f"{level:.2f} (1 − α − ε/√m, ε = {self.epsilon:.2f}, m = {self.m})."
        )

    def plan(self) -> FidelityPlan:
        """How many questions a guarantee and each pairwise verdict need
        (:func:`~dbpa_core.fidelity.plan.plan_study`; computed once)."""
        from .plan import plan_study

        if "_plan" not in self.__dict__:
            object.__setattr__(self, "_plan", plan_study(self))
        return self.__dict__["_plan"]

    def ranking(self) -> list[SimulatorCurve]:
        """Every curve, the uniform one included, by AUC_cal (lowest first; ties keep the
        data's order)."""
        return sorted(self.simulators, key=lambda s: s.auc_cal)

    def ranking_sentence(self) -> str:
        """Which curve is lowest — by AUC_cal, the quantity it names — and the ranking of
        all of them, the uniform baseline included (a description of these questions, not
        a test: the verdicts say what is shown)."""
        order = self.ranking()
        if len(order) == 1:
            return "Only the uniform baseline: add simulator columns, or simulate now."
        best = order[0]
        chain = f"{best.name} {best.auc_cal:.3f}"
        for a, b in itertools.pairwise(order):
            chain += f" {'=' if b.auc_cal == a.auc_cal else '<'} {b.name} {b.auc_cal:.3f}"
        if best.name == UNIFORM:
            head = (
                f"Lowest curve: the uniform baseline (AUC_cal {best.auc_cal:.3f}); no "
                "simulator's curve is below it"
            )
        else:
            below = [
                s.name for s in order if s.name != UNIFORM and s.auc_cal < self.simulator(UNIFORM).auc_cal
            ]
            head = (
                f"Lowest curve: {best.name} (AUC_cal {best.auc_cal:.3f}); "
                f"{len(below)} of {len(order) - 1} simulator(s) below the uniform baseline"
            )
        return (
            f"{head}. Ranking by AUC_cal (lower is better): {chain} — a description of "
            "these questions, not a test (no guarantee); the verdicts say what is shown."
        )

    @property
    def comparison_note(self) -> str | None:
        """What to know about the comparisons' δ̂ (None when they are exact)."""
        if all(c.exact for c in self.comparisons):
            return None
        return (
            f"Comparisons under {self.loss} use a bound on each scenario's delta that is never "
            "below the exact supremum: a verdict that one simulator is at least as good is "
            "safe; a borderline one may be missed." + self._comparison_gap_text()
        )

    def _comparison_gap_text(self) -> str:
        gaps = [c.largest_gap for c in self.comparisons if c.largest_gap is not None]
        if not gaps:
            return ""
        return (
            f" The bound is at most {max(gaps):.2g} above the difference reached at a "
            "point of the set, on every question."
        )

    @property
    def has_band(self) -> bool:
        return all(s.lower is not None for s in self.simulators)

    def simulator(self, name: str) -> SimulatorCurve:
        for s in self.simulators:
            if s.name == name:
                return s
        raise KeyError(name)

    def comparison(self, first: str, second: str) -> Comparison:
        for c in self.comparisons:
            if (c.first, c.second) == (first, second):
                return c
            if (c.first, c.second) == (second, first):
                return c.reversed()
        raise KeyError((first, second))

    # ------------------------------------------------------------------ serialising
    def to_dict(self) -> dict[str, Any]:
        """The whole result as strict-JSON data (NaN and infinities as None)."""
        return _finite(self._raw_dict())

    def _raw_dict(self) -> dict[str, Any]:
        from .. import __version__

        ids = list(self.data.ids)
        return {
            "tool": "dbpa",
            "tool_version": __version__,
            "created_at": self.created_at.isoformat(timespec="seconds"),
            "source": self.data.source,
            "kind": self.data.kind,
            "m": self.m,
            "settings": {
                "loss": self.loss,
                "gamma": self.gamma,
                "eta": self.eta,
                "alpha": self.alpha,
                "cvar_alpha": CVAR_ALPHA,
                "set": self.set_name,
                "sigma": self.sigma,
                "bounds": list(self.bounds) if self.bounds else None,
                "baseline": {
                    "kind": self.baseline,
                    "k": None if self.baseline_k is None else self.baseline_k.tolist(),
                    "seed": self.seed,
                },
            },
            "baseline": self.baseline_text(),
            "real_answers": self.n_summary(),
            "guarantee": {
                "alpha": self.alpha,
                "eta": self.eta,
                "gamma": self.gamma,
                "epsilon": self.epsilon,
                "level": self.guaranteed_level,
                "status": self.guarantee_status,
                "reason": (None if self.guarantee_status == "holds" else self.guarantee_text()),
                "statement": self.guarantee_text(),
                "reading": "with probability >= 1 - eta, a new scenario's discrepancy "
                "is <= quantile_guarantee with probability >= level; "
                "status 'vacuous': level <= 0 (too few scenarios); 'none': "
                "gamma < 1/2, so level is null",
            },
            "simulators": [
                {**s.to_dict(ids, self.gamma), "answers_per_question": self.sample_size_summary(s.name)}
                for s in self.simulators
            ],
            "comparisons": [c.to_dict() for c in self.comparisons],
            "comparison_note": self.comparison_note,
            "plan": self.plan().to_dict() if self.comparisons else None,
            "scenarios": [
                {"id": s.id, "n": s.n, "options": list(s.options), "radius": float(r)}
                for s, r in zip(self.data.scenarios, self.radius, strict=True)
            ],
            "warnings": list(self.warnings),
            "seconds": self.seconds,
        }

    def to_json(self) -> str:
        raw = self._raw_dict()
        try:  # nearly always finite: skip the walk through it
            return _json_text(raw)
        except ValueError:
            return _json_text(_finite(raw))

    def to_csv(self) -> str:
        """One row per scenario: id, n, options, the set's radius, each simulator's upper
        (and lower) pseudo-discrepancy, then the settings (loss, gamma, eta, alpha), so the
        file on its own says what its numbers are."""
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        head = ["scenario", "n_real", "options", "radius"]
        for s in self.simulators:
            head.append(f"{s.name}")
            if s.lower is not None:
                head.append(f"{s.name} lower")
        w.writerow(head + ["loss", "gamma", "eta", "alpha"])
        cols = []  # plain floats: formatted faster than numpy's
        for s in self.simulators:
            cols.append(s.upper.tolist())
            if s.lower is not None:
                cols.append(s.lower.tolist())
        radius = np.asarray(self.radius, dtype=float).tolist()
        tail = [self.loss, _g(self.gamma), _g(self.eta), _g(self.alpha)]
        for j, sc in enumerate(self.data.scenarios):
            w.writerow([sc.id, _g(sc.n), len(sc.options), _g(radius[j]), *(_g(c[j]) for c in cols), *tail])
        return buf.getvalue()

    def comparisons_csv(self) -> str:
        """One row per scenario and pair: δ̂ of first against second."""
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["scenario", "first", "second", "delta", "delta_reverse"])
        for c in self.comparisons:
            for sid, a, b in zip(self.data.ids, c.deltas, c.reverse, strict=True):
                w.writerow([sid, c.first, c.second, _g(a), _g(b)])
        return buf.getvalue()

    def summary_text(self) -> str:
        """The terminal summary: one line per simulator, then each pair's verdict."""
        band = self.has_band
        head = ("simulator", "AUC_cal", "CVaR_10", "V(1-a/2)", "kind", "answers", "worst case") + (
            ("best case",) if band else ()
        )
        rows = [
            (
                s.name,
                f"{s.auc_cal:.4f}",
                f"{s.cvar():.4f}",
                f"{s.guarantee_quantile:.4f}",
                s.kind,
                self.sample_size_summary(s.name),
                s.method_text,
            )
            + ((s.lower_method_text,) if band else ())
            for s in self.simulators
        ]
        lines = [
            f"{self.m} questions ({self.n_summary()} real answers each), loss {self.loss}, "
            f"{self.set_name} sets with coverage γ = {self.gamma:g}, η = {self.eta:g}, "
            f"α = {self.alpha:g}",
            "",
            table(rows, head),
            "",
            self.ranking_sentence(),
            self.baseline_text(),
            self.guarantee_text(),
            "Planning: " + self.plan().sentence(),
        ]
        if self.comparisons:
            lines.append("")
            head2 = ("first", "second", "U(1-a/2)", "reverse", "verdict")
            rows2 = [
                (c.first, c.second, f"{c.u_hat:+.4f}", f"{c.u_hat_reverse:+.4f}", c.sentence())
                for c in self.comparisons
            ]
            lines.append(table(rows2, head2, free_last=True))
            if self.comparison_note:
                lines.append(f"({self.comparison_note})")
        return "\n".join(lines)

    def write(self, out_dir: str | os.PathLike, *, report: str | None = None) -> list[str]:
        """fidelity.json, fidelity.csv, comparisons.csv and report.html (atomically)."""
        from ..outputs import write_files

        return write_files(
            out_dir,
            {
                "fidelity.json": self.to_json(),
                "fidelity.csv": self.to_csv(),
                "comparisons.csv": self.comparisons_csv(),
                "report.html": report if report is not None else report_html(self),
            },
        )


def _json_text(obj: Any, depth: int = 0, *, open_levels: int = 3) -> str:
    """JSON indented like ``indent=2`` for the first ``open_levels`` levels of objects, each
    deeper value on one line: per-scenario maps stay readable one per line, and they are
    written by the C encoder (``indent`` makes json fall back to its pure-Python encoder,
    the slowest step of a large analysis)."""
    if not isinstance(obj, dict) or depth >= open_levels or not obj:
        return json.dumps(obj, ensure_ascii=False, allow_nan=False)
    pad = "  " * (depth + 1)
    items = [
        f"{pad}{json.dumps(str(k), ensure_ascii=False)}: {_json_text(v, depth + 1, open_levels=open_levels)}"
        for k, v in obj.items()
    ]
    return "{\n" + ",\n".join(items) + "\n" + "  " * depth + "}"


def _g(x: float) -> str:
    return f"{float(x):.10g}"


def _finite(value: Any) -> Any:
    """NaN / inf -> None so that fidelity.json is strict JSON (plain floats, the bulk of
    a large result, are checked inline: ``v - v`` is 0 only for a finite v)."""
    if isinstance(value, float):
        return value if value - value == 0 else None
    if isinstance(value, dict):
        return {k: v if type(v) is float and v - v == 0 else _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [v if type(v) is float and v - v == 0 else _finite(v) for v in value]
    return value


# --------------------------------------------------------------------------- running

ProgressFn = Callable[[Any], None]


BASELINES = ("drawn", "exact")


MAX_BASELINE_K = 10**9  # answers per question of the drawn uniform baseline


def _iv_baseline(baseline: object, baseline_k: object, seed: object) -> None:
    if baseline not in BASELINES:
        raise ValueError(f"`baseline` must be one of {', '.join(BASELINES)}; got {baseline!r}.")
    if baseline_k is not None and (
        isinstance(baseline_k, bool) or not isinstance(baseline_k, (int, np.integer)) or baseline_k < 1
    ):
        raise ValueError(f"`baseline_k` must be a whole number >= 1, got {baseline_k!r}.")
    if baseline_k is not None and baseline_k > MAX_BASELINE_K:
        raise ValueError(
            f"`baseline_k` must be <= {MAX_BASELINE_K:_}, got {big_number(baseline_k)}: the drawn "
            "baseline counts its answers in 64-bit integers, and that many answers per question "
            "carry no sampling noise left to match; use baseline='exact' for the noise-free 1/d."
        )
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"`seed` must be a whole number, got {seed!r}.")
    if seed < 0:
        raise ValueError(f"`seed` must be >= 0 (numpy's seeds are non-negative), got {seed}.")


def _baseline(
    data: FidelityData,
    loss: str,
    baseline: str,
    baseline_k: int | np.ndarray | None,
    seed: int,
    notes: list[str],
) -> FidelityData:
    """The data with the uniform baseline drawn like the simulators (or not, saying why)."""
    if baseline == "exact":
        return replace(data, baseline=None)
    k = data.answers_per_question() if baseline_k is None else baseline_k
    if k is None:
        notes.append(
            (
                "The simulators give probabilities, not answers, so the uniform baseline"
                if data.simulators
                else "There is no simulator to match, so the uniform baseline"
            )
            + " is the exact 1/d (give the baseline's k to "
            "draw it)."
        )
        return replace(data, baseline=None)
    if loss == "kl" and data.kind == "categorical":
        notes.append(
            "Under kl a drawn uniform baseline can leave an option with no answer, "
            "where KL is infinite: the baseline is the exact 1/d."
        )
        return replace(data, baseline=None)
    return data.with_drawn_baseline(k, seed=seed)


def _iv(
    data: FidelityData,
    loss: str,
    gamma: float,
    eta: float,
    alpha: float,
    sigma: float | None,
    bounds: Sequence[float] | None,
) -> tuple[str, float, float, float, tuple[float, float] | None]:
    if not isinstance(data, FidelityData):
        raise TypeError(
            f"`data` must be FidelityData (see load_csv, from_arrays), got {type(data).__name__}."
        )
    loss = dz.check_loss(loss)
    gamma = check_level(gamma, "gamma")
    eta = check_level(eta, "eta")
    alpha = check_level(alpha, "alpha")
    if data.m < 2:
        raise ValueError(f"`data` must hold at least 2 scenarios (m >= 2), got {data.m}.")
    if data.kind == "values" and loss in ("tv", "kl"):
        raise ValueError(
            f"`loss` {loss!r} compares distributions over options; these data hold "
            "real values (no option column): use w1, squared or absolute."
        )
    if sigma is not None and not (
        isinstance(sigma, (int, float)) and not isinstance(sigma, bool) and math.isfinite(sigma) and sigma > 0
    ):
        raise ValueError(f"`sigma` must be a positive number, got {sigma!r}.")
    checked: tuple[float, float] | None = None
    if bounds is not None:
        try:
            a, b = (float(x) for x in bounds)
        except (TypeError, ValueError):
            raise ValueError(f"`bounds` must be two numbers (a, b), got {bounds!r}.") from None
        if not (math.isfinite(a) and math.isfinite(b) and a < b):
            raise ValueError(f"`bounds` must be two finite numbers a < b, got {bounds!r}.")
        checked = (a, b)
    return loss, gamma, eta, alpha, checked


#: fewer real answers than this make a question's confidence set nearly the whole simplex
FEW_ANSWERS = 10


def run_fidelity(
    data: FidelityData,
    *,
    loss: str = "tv",
    gamma: float = 0.5,
    eta: float = 0.05,
    alpha: float = 0.1,
    sigma: float | None = None,
    bounds: Sequence[float] | None = None,
    band: bool = True,
    baseline: str = "drawn",
    baseline_k: int | None = None,
    seed: int = 0,
    progress: ProgressFn | None = None,
) -> FidelityResult:
    """Calibrated quantile curves of every simulator in ``data`` and of the uniform one.

    Parameters
    ----------
    data : FidelityData
        From :func:`~dbpa_core.fidelity.data.load_csv`, ``from_arrays``, the simulation
        runner, ...
    loss : {"tv", "kl", "w1", "squared", "absolute"}
        ``L(u, q)``; tv, kl and w1 compare distributions over options (w1 on the options'
        values), squared and absolute the mean answer (a probability for two options).
        Real-valued data: w1 (with a W1-ball set) or squared / absolute (the mean).
    gamma : float in (0, 1)
        Coverage of each scenario's confidence set (½ in the paper). The calibrated curve
        V̂_m((1+τ)/2) needs γ >= ½; so does the tightness band.
    eta : float in (0, 1)
        The guarantee holds with probability 1 - η over the data.
    alpha : float in (0, 1)
        Level of the guarantee quantile V̂_m(1 - α/2) and of the comparisons (0.1: "on at
        least 90 % of questions").
    sigma : float, optional
        Sub-Gaussian scale of real values (w1 on values); default: their pooled standard
        deviation, with a warning.
    bounds : (a, b), optional
        Range of real values (squared / absolute on values, and the uniform simulator);
        default: the range of all values in the data, with a warning.
    band : bool
        Compute the lower pseudo-discrepancies (the band; needs γ >= ½).
    baseline : {"drawn", "exact"}
        The uniform simulator: ``drawn`` (default) answers like the simulators — k answers
        per question picked uniformly at random, k the simulators' own (the mean of the
        count columns' totals per question), so it carries the same sampling noise;
        ``exact`` is the noise-free 1/d. Without count columns (probabilities only) or
        under kl the exact one is used, with a note.
    baseline_k : int, optional
        The drawn baseline's answers per question, in place of the simulators' k; in
        [1, 10⁹].
    seed : int
        Seed of the drawn baseline (``np.random.default_rng(seed)``), >= 0.
    progress : callable, optional
        Called with :class:`~dbpa_core.sampling.Progress` objects (stage ``analysis``).

    Returns
    -------
    FidelityResult

    Raises
    ------
    ValueError, TypeError
        Bad arguments (the message names the argument), a loss that does not fit the
        data, KL against a simulator that gives an option probability 0.
    """
    from ..sampling import Progress

    t0 = time.perf_counter()
    loss, gamma, eta, alpha, bounds = _iv(data, loss, gamma, eta, alpha, sigma, bounds)
    _iv_baseline(baseline, baseline_k, seed)
    notes: list[str] = list(data.notes)
    data = _baseline(data, loss, baseline, baseline_k, seed, notes)
    unused = [
        n
        for n, v, used in (
            ("σ", sigma, data.kind == "values" and loss == "w1"),
            ("bounds", bounds, data.kind == "values"),
        )
        if v is not None and not used
    ]
    if unused:
        notes.append(
            f"{' and '.join(unused)} given but not used: "
            + (
                "the data are answers over options (bounds and σ apply to real values)."
                if data.kind == "categorical"
                else f"σ applies to loss w1, not {loss}."
            )
        )
    if gamma < 0.5:
        notes.append(
            f"γ = {gamma:g} < ½: each confidence set covers the real distribution "
            "less than half the time, so the calibrated curve V̂_m((1 + τ)/2) carries no "
            "guarantee (it needs γ ≥ ½) and the verdicts only describe these "
            "questions; no tightness band is drawn."
        )
        band = False
    few = [s for s in data.scenarios if s.n < FEW_ANSWERS]
    if few:
        shown = ", ".join(f"{s.id}: n = {s.n:g}" for s in few[:5]) + (", …" if len(few) > 5 else "")
        notes.append(
            f"{len(few)} of {data.m} questions have fewer than {FEW_ANSWERS} real answers "
            f"({shown}): their confidence sets hold nearly every answer distribution, so "
            "their worst cases sit near the largest possible loss whatever the simulator "
            "says. Questions with more respondents tell simulators apart."
        )
    names = [*data.simulators, UNIFORM]
    kinds = {**data.sim_kinds, UNIFORM: "uniform"}
    n_pairs = len(names) * (len(names) - 1) // 2
    total = len(names) * (2 if band else 1) + n_pairs
    done = [0]

    def tick(detail: str) -> None:
        done[0] += 1
        if progress is not None:
            progress(Progress("analysis", done[0], total, detail))

    if progress is not None:
        progress(Progress("analysis", 0, total, "confidence sets"))
    engine = _engine(data, loss, gamma, sigma, bounds, notes)
    uppers = {}
    for name in names:
        uppers[name] = engine.upper(name)
        tick(f"{name}: worst cases")
    lowers = {}
    if band:
        for name in names:
            lowers[name] = engine.lower(name)
            tick(f"{name}: best cases (band)")
    gaps = getattr(engine, "gaps", {})
    lower_gaps = getattr(engine, "lower_gaps", {})
    curves = tuple(
        SimulatorCurve(
            nm,
            kinds[nm],
            uppers[nm],
            lowers.get(nm),
            alpha,
            engine.plugin(nm),
            gaps.get(nm),
            lower_gaps.get(nm),
        )
        for nm in names
    )
    level = cv.guaranteed_level(alpha, data.m, eta)
    comps = []
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            d_ab, exact = engine.pairwise(a, b)
            d_ba, _ = engine.pairwise(b, a)
            pair_gaps = getattr(engine, "pair_gaps", {})
            comps.append(
                Comparison(
                    a,
                    b,
                    alpha,
                    d_ab,
                    d_ba,
                    exact,
                    level=level,
                    gamma=gamma,
                    gap=pair_gaps.get((a, b)),
                    gap_reverse=pair_gaps.get((b, a)),
                )
            )
            tick(f"{a} vs {b}")
    if gamma >= 0.5 and level <= 0:
        notes.append(
            f"With m = {data.m} questions the finite-sample guarantee is vacuous "
            f"(1 − α − ε/√m = {level:.2f}): the curves and verdicts describe these "
            "questions but promise nothing about new ones; it needs a few hundred "
            "questions."
        )
    for msg in notes[len(data.notes) :]:
        _warnings.warn(msg, FidelityWarning, stacklevel=2)
    return FidelityResult(
        data,
        loss,
        gamma,
        eta,
        alpha,
        engine.set_name,
        engine.radius,
        curves,
        tuple(comps),
        engine.sigma,
        engine.bounds,
        tuple(notes),
        round(time.perf_counter() - t0, 4),
        baseline="exact" if data.baseline is None else "drawn",
        seed=int(seed),
    )


# --------------------------------------------------------------------------- engines


class _Categorical:
    """KL balls over options (tv, kl, w1), vectorized per group of scenarios that share
    the number of options (and, for w1, the options' values)."""

    def __init__(self, data: FidelityData, loss: str, gamma: float) -> None:
        self.data, self.loss = data, loss
        self.set_name = "categorical KL"
        self.sigma, self.bounds = None, None
        groups: dict[tuple, list[int]] = {}
        for j, s in enumerate(data.scenarios):
            key = (len(s.options),) + (tuple(s.option_values()) if loss == "w1" else ())
            groups.setdefault(key, []).append(j)
        self.groups = list(groups.items())
        self.p = data.real_probabilities()
        n = np.array([s.real.sum() for s in data.scenarios])
        d = np.array([len(s.options) for s in data.scenarios])
        self.radius = kl_radius_categorical(n, d, gamma=gamma)
        self._q: dict[str, list[np.ndarray]] = {}
        # the support functions, the subsets' upper ends and the tables, by options' key
        self._support: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
        self._subsets: dict[tuple, np.ndarray] = {}
        self._tables: dict[tuple, np.ndarray] = {}
        self.gaps: dict[str, np.ndarray | None] = {}
        self.lower_gaps: dict[str, np.ndarray | None] = {}
        self.pair_gaps: dict[tuple[str, str], np.ndarray | None] = {}
        self._upper: dict[str, np.ndarray] = {}
        self._lower: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._stacks: dict[tuple, np.ndarray] = {}
        if loss == "kl":
            for name in data.simulators:
                for s, q in zip(data.scenarios, self.q(name), strict=True):
                    zero = [o for o, x in zip(s.options, q, strict=True) if x <= 0]
                    if zero:
                        raise ValueError(
                            f"loss 'kl' is infinite here: simulator {name!r} gives option "
                            f"{zero[0]!r} of scenario {s.id!r} probability 0 (KL(u ‖ q) is "
                            "infinite wherever the real answers can fall on such an option). "
                            "Use loss 'tv', or smoothed probabilities."
                        )

    def q(self, name: str) -> list[np.ndarray]:
        if name not in self._q:
            self._q[name] = self.data.probabilities(name)
        return self._q[name]

    def _stack(self, idx: Sequence[int], arrays: Sequence[np.ndarray]) -> np.ndarray:
        return np.vstack([arrays[j] for j in idx])

    def _real(self, idx: Sequence[int]) -> np.ndarray:
        """p̂ of a group of scenarios, stacked once (rows in ``idx`` order)."""
        key = ("real", idx[0], len(idx))
        if key not in self._stacks:
            self._stacks[key] = self._stack(idx, self.p)
        return self._stacks[key]

    def _sim(self, name: str, idx: Sequence[int]) -> np.ndarray:
        key = (name, idx[0], len(idx))
        if key not in self._stacks:
            self._stacks[key] = self._stack(idx, self.q(name))
        return self._stacks[key]

    def _vertices(self, key: tuple) -> np.ndarray:
        d = key[0]
        return dz.tv_vertices(d) if self.loss == "tv" else dz.w1_vertices(np.array(key[1:]))

    def upper(self, name: str) -> np.ndarray:
        """Δ̂ per scenario: exact (tv up to 14 options, and beyond where the rows the bound
        leaves loose can be enumerated; w1 up to 11) or a certified upper bound whose gap to a
        point of the set is kept in ``self.gaps[name]``."""
        if name in self._upper:
            return self._upper[name]
        out = np.empty(self.data.m)
        gap = np.zeros(self.data.m)
        for key, idx in self.groups:
            p, q, r = self._real(idx), self._sim(name, idx), self.radius[idx]
            if self.loss == "tv" and key[0] <= dz.MAX_SUBSET_OPTIONS:
                out[idx] = dz.tv_upper(p, r, q, subset_upper=self._subsets_of(key, idx))
            elif self.loss == "w1" and key[0] <= dz.MAX_PAIRWISE_OPTIONS + 1:
                h, _ = self._support_of(key, idx)
                out[idx] = (h - q @ self._vertices(key).T).max(axis=1)
            else:
                if self.loss == "tv":
                    up, lo = dz.tv_upper_bound(p, r, q)
                    loose = np.flatnonzero(up - lo > 1e-9)  # enumerate them while affordable
                    if 0 < loose.size * 2 ** key[0] <= dz.EXACT_BUDGET:
                        up[loose] = lo[loose] = dz.tv_upper_exact_rows(p[loose], r[loose], q[loose])
                elif self.loss == "w1":
                    up, lo = dz.w1_upper_bound(p, r, q, np.array(key[1:]))
                else:
                    up, lo = dz.kl_upper_bound(p, r, q)
                out[idx], gap[idx] = up, up - lo
        self.gaps[name] = gap if gap.max() > 0 else None
        self._upper[name] = out
        return out

    def plugin(self, name: str) -> np.ndarray:
        out = np.empty(self.data.m)
        for key, idx in self.groups:
            vals = np.array(key[1:]) if self.loss == "w1" else None
            out[idx] = dz.categorical_loss(self._real(idx), self._sim(name, idx), self.loss, vals)
        return out

    def _subsets_of(self, key: tuple, idx: Sequence[int]) -> np.ndarray:
        if key not in self._subsets:
            self._subsets[key] = dz.tv_subset_upper(self._real(idx), self.radius[idx])
        return self._subsets[key]

    def _support_of(self, key: tuple, idx: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        if key not in self._support:
            p, r = self._real(idx), self.radius[idx]
            if self.loss == "tv" and key[0] <= dz.MAX_SUBSET_OPTIONS:
                self._support[key] = dz.tv_support(p, r, self._subsets_of(key, idx))
            else:
                _, h, uf = dz.ipm_upper(p, r, np.zeros_like(p), self._vertices(key))
                self._support[key] = (h, uf)
        return self._support[key]

    def _table_of(self, key: tuple, idx: Sequence[int]) -> np.ndarray:
        if key not in self._tables:
            self._tables[key] = dz.tv_support_table(self._real(idx), self.radius[idx])
        return self._tables[key]

    def lower(self, name: str) -> np.ndarray:
        """Δ⁻ per scenario, never above the inf: tv by its exact one-dimensional search (the
        lower end of the bracket), kl and w1 by a Lagrange dual (a certified lower bound,
        its gap to a point of the set kept in ``self.lower_gaps[name]``)."""
        return self._best_case(name)[0]

    def _best_case(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """(Δ⁻ per scenario, the point of each set where the loss is least found on the way)."""
        if name in self._lower:
            return self._lower[name]
        out = np.empty(self.data.m)
        gap = np.zeros(self.data.m)
        points = np.empty((self.data.m, max(len(s.options) for s in self.data.scenarios)))
        for key, idx in self.groups:
            p, q, r = self._real(idx), self._sim(name, idx), self.radius[idx]
            if self.loss == "tv":
                lo, up, u = dz.tv_lower(p, r, q, return_bracket=True)
            elif self.loss == "kl":
                lo, up, u = dz.kl_lower_bound(p, r, q)
            else:
                lo, up, u = dz.w1_lower_bound(p, r, q, np.array(key[1:]))
            out[idx], gap[idx] = lo, np.maximum(up - lo, 0.0)
            points[np.asarray(idx)[:, None], np.arange(key[0])] = u
        self.lower_gaps[name] = gap if gap.max() > 0 else None
        self._lower[name] = (out, points)
        return self._lower[name]

    def _worst_point(self, key: tuple, idx: Sequence[int], q: np.ndarray) -> np.ndarray:
        """The maximizer of the loss over each set among the vertices' support points."""
        h, uf = self._support_of(key, idx)
        best = (h - q @ self._vertices(key).T).argmax(axis=1)
        return uf[np.arange(len(idx)), best]

    def _pair_gap(self, key: tuple, idx: Sequence[int], a: str, b: str, bound: np.ndarray) -> np.ndarray:
        """How far each δ̂ can be above the sup: the bound minus ``L(u, a) - L(u, b)`` at the
        best of a few points of the set (p̂, a's worst case, b's best case)."""
        vals = np.array(key[1:]) if self.loss == "w1" else None
        qa, qb = self._sim(a, idx), self._sim(b, idx)
        cands = [self._real(idx), self._best_case(b)[1][np.asarray(idx), : key[0]]]
        if key[0] <= dz.MAX_PAIRWISE_OPTIONS:
            cands.append(self._worst_point(key, idx, qa))
        reached = np.max(
            [
                dz.categorical_loss(u, qa, self.loss, vals) - dz.categorical_loss(u, qb, self.loss, vals)
                for u in cands
            ],
            axis=0,
        )
        return np.maximum(bound - reached, 0.0)

    def pairwise(self, a: str, b: str) -> tuple[np.ndarray, bool]:
        """δ̂ per scenario: exact for kl; for tv and w1 a certified upper bound (the vertex
        bound up to 10 options; beyond, a's worst case minus b's certified best case), its
        gap to a point of the set kept in ``self.pair_gaps[(a, b)]``."""
        out = np.empty(self.data.m)
        gap = np.zeros(self.data.m)
        exact = self.loss == "kl"
        for key, idx in self.groups:
            p, r = self._real(idx), self.radius[idx]
            qa, qb = self._sim(a, idx), self._sim(b, idx)
            if self.loss == "kl":
                out[idx] = dz.kl_pairwise(p, r, qa, qb)
            elif key[0] <= dz.MAX_PAIRWISE_OPTIONS:
                support = self._support_of(key, idx)
                if self.loss == "tv":
                    table = self._table_of(key, idx) if key[0] <= dz.MAX_TABLE_OPTIONS else None
                    out[idx] = dz.tv_pairwise(p, r, qa, qb, support=support, table=table)
                else:
                    out[idx] = dz.w1_pairwise(p, r, qa, qb, np.array(key[1:]), support=support)
            else:  # worst case of a minus best case of b, and L(a, b) (triangle inequality)
                vals = np.array(key[1:]) if self.loss == "w1" else None
                out[idx] = np.minimum(
                    self.upper_of(a, idx) - self.lower_of(b, idx),
                    dz.categorical_loss(qa, qb, self.loss, vals),
                )
            if not exact:
                gap[idx] = self._pair_gap(key, idx, a, b, out[idx])
        if not exact:
            self.pair_gaps[(a, b)] = gap
        return out, exact

    def upper_of(self, name: str, idx: Sequence[int]) -> np.ndarray:
        return self.upper(name)[idx]

    def lower_of(self, name: str, idx: Sequence[int]) -> np.ndarray:
        return self.lower(name)[idx]


class _Scalar:
    """Interval sets for a scalar outcome (squared, absolute): Bernoulli KL intervals for
    two options, Hoeffding intervals of the mean otherwise (and for real values).
    Vectorized over the scenarios that share their options' values."""

    def __init__(
        self,
        data: FidelityData,
        loss: str,
        gamma: float,
        bounds: tuple[float, float] | None,
        notes: list[str],
    ) -> None:
        self.data, self.loss = data, loss
        self.sigma = None
        m = data.m
        self.center = np.empty(m)
        self.low = np.empty(m)
        self.high = np.empty(m)
        self.radius = np.empty(m)
        kinds = set()
        if data.kind == "values":
            self.bounds: tuple[float, float] | None = _value_bounds(data, bounds, notes)
            a, b = self.bounds
            mean = np.array([float(np.mean(s.real)) for s in data.scenarios])
            h = hoeffding_halfwidth(
                np.array([s.real.size for s in data.scenarios]), low=a, high=b, gamma=gamma
            )
            self.center[:], self.low[:], self.high[:], self.radius[:] = (
                mean,
                np.maximum(mean - h, a),
                np.minimum(mean + h, b),
                h,
            )
            kinds.add("Hoeffding mean")
            self.groups = []
        else:
            self.bounds = None
            groups: dict[tuple, list[int]] = {}
            for j, s in enumerate(data.scenarios):
                groups.setdefault(tuple(s.option_values()), []).append(j)
            self.groups = [(np.array(v), np.array(idx)) for v, idx in groups.items()]
            for v, idx in self.groups:
                c = np.vstack([data.scenarios[j].real for j in idx])
                n = c.sum(axis=1)
                p = c / n[:, None]
                mean = p @ v
                if len(v) == 2:
                    rad = kl_radius_bernoulli(n, gamma=gamma)
                    lo, hi = binary_kl_interval(p[:, 1], rad)
                    ends = np.sort(np.stack([v[0] + (v[1] - v[0]) * lo, v[0] + (v[1] - v[0]) * hi]), axis=0)
                    kinds.add("Bernoulli KL")
                else:
                    rad = hoeffding_halfwidth(n, low=float(v.min()), high=float(v.max()), gamma=gamma)
                    ends = np.stack([np.maximum(mean - rad, v.min()), np.minimum(mean + rad, v.max())])
                    kinds.add("Hoeffding mean")
                self.center[idx], self.low[idx], self.high[idx] = mean, ends[0], ends[1]
                self.radius[idx] = rad
        self.set_name = " / ".join(sorted(kinds))
        self._q: dict[str, np.ndarray] = {}

    def q(self, name: str) -> np.ndarray:
        if name in self._q:
            return self._q[name]
        d = self.data
        if d.kind == "values":
            if name == UNIFORM:
                assert self.bounds is not None  # values always have bounds
                a, b = self.bounds
                if d.baseline is not None:
                    out = np.array([a + (b - a) * float(np.mean(u)) for u in d.baseline])
                else:
                    out = np.full(d.m, 0.5 * (a + b))
            else:
                out = np.array([float(np.mean(v)) for v in d.simulated[name]])
        else:
            probs = d.probabilities(name)
            out = np.empty(d.m)
            for v, idx in self.groups:
                out[idx] = np.vstack([probs[j] for j in idx]) @ v
        self._q[name] = out
        return out

    def plugin(self, name: str) -> np.ndarray:
        return dz.scalar_loss(self.center, self.q(name), self.loss)

    def upper(self, name: str) -> np.ndarray:
        return dz.interval_upper(self.low, self.high, self.q(name), self.loss)

    def lower(self, name: str) -> np.ndarray:
        return dz.interval_lower(self.low, self.high, self.q(name), self.loss)

    def pairwise(self, a: str, b: str) -> tuple[np.ndarray, bool]:
        return dz.interval_pairwise(self.low, self.high, self.q(a), self.q(b), self.loss), True


class _W1Values:
    """W1 balls around each scenario's real values."""

    def __init__(
        self,
        data: FidelityData,
        gamma: float,
        sigma: float | None,
        bounds: tuple[float, float] | None,
        notes: list[str],
    ) -> None:
        self.data = data
        self.set_name = "W1 ball"
        if sigma is None:
            pooled = np.concatenate([s.real - s.real.mean() for s in data.scenarios])
            sigma = float(np.sqrt(np.mean(pooled**2))) if pooled.size > 1 else 1.0
            sigma = sigma if sigma > 0 else 1.0
            notes.append(
                f"σ was not given: used the real values' pooled standard deviation "
                f"{sigma:.4g} as their sub-Gaussian scale (give σ for a guarantee)."
            )
        self.sigma = float(sigma)
        self.bounds = _value_bounds(data, bounds, notes)
        self.radius = w1_radius([s.real.size for s in data.scenarios], sigma=self.sigma, gamma=gamma)
        self._dist: dict[str, np.ndarray] = {}

    def drawn(self, name: str, j: int) -> np.ndarray:
        """Simulator ``name``'s values in scenario j (the drawn baseline scaled to the bounds)."""
        if name == UNIFORM:
            a, b = self.bounds
            assert self.data.baseline is not None  # without drawn ones callers use w1_to_uniform
            return a + (b - a) * self.data.baseline[j]
        return self.data.simulated[name][j]

    def dist(self, name: str) -> np.ndarray:
        if name not in self._dist:
            a, b = self.bounds
            if name == UNIFORM and self.data.baseline is None:
                d = [dz.w1_to_uniform(s.real, a, b) for s in self.data.scenarios]
            else:
                d = [dz.w1_distance(s.real, self.drawn(name, j)) for j, s in enumerate(self.data.scenarios)]
            self._dist[name] = np.array(d)
        return self._dist[name]

    def plugin(self, name: str) -> np.ndarray:
        return self.dist(name)

    def upper(self, name: str) -> np.ndarray:
        return dz.w1ball_upper(self.dist(name), self.radius)

    def lower(self, name: str) -> np.ndarray:
        return dz.w1ball_lower(self.dist(name), self.radius)

    def pairwise(self, a: str, b: str) -> tuple[np.ndarray, bool]:
        lo, hi = self.bounds

        def between(x: str, y: str, s: int) -> float:
            if self.data.baseline is None and UNIFORM in (x, y):
                return dz.w1_to_uniform(self.drawn(y if x == UNIFORM else x, s), lo, hi)
            return dz.w1_distance(self.drawn(x, s), self.drawn(y, s))

        ab = np.array([between(a, b, s) for s in range(self.data.m)])
        return dz.w1ball_pairwise(self.dist(a), self.dist(b), ab, self.radius), False


def _value_bounds(
    data: FidelityData, bounds: tuple[float, float] | None, notes: list[str]
) -> tuple[float, float]:
    if bounds is not None:
        a, b = bounds
        allv = np.concatenate(
            [s.real for s in data.scenarios] + [v for vs in data.simulated.values() for v in vs]
        )
        if allv.min() < a or allv.max() > b:
            raise FidelityDataError(
                f"`bounds` ({a:g}, {b:g}) do not contain every value in the "
                f"data (from {allv.min():g} to {allv.max():g})."
            )
        return float(a), float(b)
    allv = np.concatenate(
        [s.real for s in data.scenarios] + [v for vs in data.simulated.values() for v in vs]
    )
    a, b = float(allv.min()), float(allv.max())
    if b <= a:
        b = a + 1.0
    notes.append(
        f"bounds were not given: used the range of the values in the data, [{a:g}, "
        f"{b:g}] (give bounds for a guarantee)."
    )
    return a, b


def _engine(
    data: FidelityData,
    loss: str,
    gamma: float,
    sigma: float | None,
    bounds: tuple[float, float] | None,
    notes: list[str],
) -> _Scalar | _W1Values | _Categorical:
    if loss in ("squared", "absolute"):
        return _Scalar(data, loss, gamma, bounds, notes)
    if data.kind == "values":
        return _W1Values(data, gamma, sigma, bounds, notes)
    return _Categorical(data, loss, gamma)


__all__ = [
    "CVAR_ALPHA",
    "Comparison",
    "FidelityResult",
    "FidelityWarning",
    "SimulatorCurve",
    "UnseenSet",
    "run_fidelity",
]
