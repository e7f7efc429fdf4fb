"""Sequential sampling: answers drawn in rounds, tests that stay valid however often they look.

With ``sequential_sampling`` in a spec, an audit does not draw all ``samples`` answers of
every arm at once. It draws them in rounds up to the *looks* ``k_1 < k_2 < ... < k_J =
samples`` and, after each round, decides for every test that is still open:

* **reject**: its sequential p-value is already small enough that the correction across
  the family will call it significant whatever the other tests say (``α / m`` for
  Bonferroni, Holm and Benjamini–Hochberg over ``m`` tests; ``α`` without a correction);
* **stop for futility** ("no change above δ"): only when the spec sets ``min_effect`` (δ),
  and an upper confidence bound of the effect above chance is below δ;
* **continue** to the next look (the base arm keeps drawing while any test is open).

The sequential p-value is a weighted Bonferroni over the looks taken,
``p_seq = min_j p_j / w_j`` (weights summing to 1, ``p_j`` the permutation p-value on the
first ``k_j`` answers of each arm). It is a valid p-value whatever the dependence between
the looks (a union bound), and a test that stops early has fewer terms in the minimum,
which can only make ``p_seq`` larger: stopping never costs validity. The methods page
(``docs/methods/dbpa.md``, "Sequential sampling") gives the proof.

This module holds the rules and the bookkeeping; the audit (:mod:`dbpa_core.audit`)
supplies how a round is drawn and how a look is tested (:func:`run_rounds`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .measures import DEFAULT_BINS, get_measure
from .similarity import cosine_similarity_matrix, pairwise_distance_matrix
from .types import DBPAResult, jsonable

FIRST_LOOK = 12  # the default first look: below it a permutation p rarely reaches α/m
LAST_WEIGHT = 0.5  # the default weight of the last look; the others share the rest
CONFIDENCE = 0.95  # the futility bound's confidence (spent over the looks)
PERMUTATION_MARGIN = 10  # B at a look lets p reach a tenth of the look's level
REASONS = ("rejected", "futility", "maximum")


# --------------------------------------------------------------------------- the plan
def default_looks(samples: int, *, first: int = FIRST_LOOK) -> tuple[int, ...]:
    """Looks at ``first`` and ``1.5 * first``, then doubling up to ``samples`` (which is
    always the last look).

    The second look comes soon after the first because that is where a test with no
    change stops for futility: the spread of the estimate shrinks like ``1/k`` with no
    change but only like ``1/sqrt(k)`` at a change of δ, so a few more answers let far
    more null controls show they are below δ (measured in the benchmarks). A last step
    shorter than half the one before is merged into it (``samples = 40`` gives 12, 18, 40,
    not 12, 18, 36, 40). Fewer than ``1.5 * first`` samples give one look: the
    fixed-sample test.

    Examples
    --------
    >>> default_looks(40)
    (12, 18, 40)
    >>> default_looks(80)
    (12, 18, 36, 80)
    >>> default_looks(20)
    (12, 20)
    >>> default_looks(15)
    (15,)
    """
    looks: list[int] = []
    k = first
    while k < samples:
        looks.append(k)
        k = k + first // 2 if len(looks) == 1 else 2 * k
    if looks and samples < 1.5 * looks[-1]:
        looks.pop()
    return (*looks, samples)


def default_weights(n_looks: int) -> tuple[float, ...]:
    """Half the weight on the last look, the other half shared by the earlier ones.

    Examples
    --------
    >>> default_weights(3)
    (0.25, 0.25, 0.5)
    >>> default_weights(1)
    (1.0,)
    """
    if n_looks == 1:
        return (1.0,)
    early = (1.0 - LAST_WEIGHT) / (n_looks - 1)
    return (*([early] * (n_looks - 1)), LAST_WEIGHT)


@dataclass(frozen=True)
class SequentialSampling:
    """The spec's ``sequential_sampling``: empty ``looks``/``weights`` take the defaults
    (:func:`default_looks`, :func:`default_weights`) at the spec's ``samples``."""

    looks: tuple[int, ...] = ()
    weights: tuple[float, ...] = ()
    confidence: float = CONFIDENCE

    def plan(self, samples: int) -> Plan:
        """The looks and weights at a maximum of ``samples`` answers per arm."""
        looks = self.looks or default_looks(samples)
        weights = self.weights or default_weights(len(looks))
        return Plan(tuple(looks), tuple(float(w) for w in weights), self.confidence)

    def to_dict(self) -> dict[str, Any]:
        return {"looks": list(self.looks), "weights": list(self.weights), "confidence": self.confidence}

    @classmethod
    def from_value(cls, value: Any) -> SequentialSampling | None:
        """From ``True``/``False``/``None``, a mapping (as :meth:`to_dict` wrote it) or an
        instance."""
        if value is None or value is False:
            return None
        if value is True:
            return cls()
        if isinstance(value, cls):
            return value
        if isinstance(value, Mapping):
            return cls(
                tuple(int(k) for k in value.get("looks") or ()),
                tuple(float(w) for w in value.get("weights") or ()),
                float(value.get("confidence", CONFIDENCE)),
            )
        raise TypeError(f"`sequential_sampling` must be true, false or a mapping, got {value!r}.")


def plan_problem(looks: Sequence[int], weights: Sequence[float], samples: int) -> str | None:
    """What is wrong with explicit looks or weights at ``samples``, or None."""
    if looks:
        if any(b <= a for a, b in itertools.pairwise(looks)):
            return f"looks must increase, got {list(looks)}"
        if looks[0] < 2:
            return f"the first look needs at least 2 answers per arm, got {looks[0]}"
        if looks[-1] != samples:
            return f"the last look must be 'samples' ({samples}), got {looks[-1]}"
    if weights:
        n = len(looks) if looks else len(default_looks(samples))
        if len(weights) != n:
            return f"{len(weights)} weights for {n} looks: give one weight per look"
        if any(w < 0 for w in weights) or abs(sum(weights) - 1.0) > 1e-9:
            return f"weights must be >= 0 and sum to 1, got {list(weights)}"
        if weights[-1] <= 0:
            return "the last look's weight must be > 0"
    return None


@dataclass(frozen=True)
class Plan:
    """Looks ``k_1 < ... < k_J``, their weights (summing to 1) and the futility bound's
    confidence."""

    looks: tuple[int, ...]
    weights: tuple[float, ...]
    confidence: float = CONFIDENCE

    def describe(self) -> str:
        """E.g. ``sequential, 3 looks (k = 12, 18, 40), weights 0.25, 0.25, 0.5``."""
        ks = ", ".join(str(k) for k in self.looks)
        ws = ", ".join(f"{w:.3g}" for w in self.weights)
        n = len(self.looks)
        return f"sequential, {n} look{'s' if n > 1 else ''} (k = {ks}), weights {ws}"

    def confidence_at(self, j: int) -> float:
        """The futility bound's confidence at look ``j``: ``1 - (1 - confidence) / (J - 1)``.
        A test can stop for futility only before the last of the J looks, so ``1 -
        confidence`` is shared equally by those J - 1 looks: over all of them together the
        chance of a wrong "no change above δ" is at most ``1 - confidence`` (a union bound,
        as for the p-values)."""
        return 1.0 - (1.0 - self.confidence) / max(1, len(self.looks) - 1)

    def to_dict(self) -> dict[str, Any]:
        return {"looks": list(self.looks), "weights": list(self.weights), "confidence": self.confidence}


def stop_level(alpha: float, correction: str, n_tests: int) -> float:
    """The p_seq at which a test may stop as significant whatever the others do.

    ``α`` without a correction; ``α / m`` for Bonferroni, Holm and Benjamini–Hochberg:
    each of them rejects every p-value at or below ``α / m`` (Holm's first step and BH's
    smallest threshold), so the verdict reached early is the verdict of the final
    correction.
    """
    return alpha if correction == "none" else alpha / max(1, n_tests)


def permutations_at(level: float, weight: float, permutations: int) -> int:
    """B at a look: at least ``permutations``, and enough that the smallest p-value,
    ``1 / (B + 1)``, is a tenth of the look's level ``w_j · level`` or less."""
    if weight <= 0:
        return permutations
    return max(permutations, math.ceil(PERMUTATION_MARGIN / (weight * level)) - 1)


def sequential_p(p_values: Sequence[float], weights: Sequence[float]) -> float:
    """``min_j p_j / w_j`` over the looks taken (at most 1): the weighted Bonferroni
    p-value of the looks, valid whatever their dependence.

    Examples
    --------
    >>> sequential_p([0.02, 0.001], [0.5, 0.5])
    0.002
    """
    terms = [p / w for p, w in zip(p_values, weights, strict=False) if w > 0]
    return float(min(1.0, min(terms))) if terms else 1.0


# --------------------------------------------------------------------------- futility bound
def statistic_matrix(
    embeddings: np.ndarray | None = None, *, similarity: np.ndarray | None = None, measure: str
) -> np.ndarray:
    """The pooled matrix a measure is computed on: distances for the ``energy-*`` measures,
    cosine similarities (or the given ``similarity``, e.g. BLEU) for the others."""
    meas = get_measure(measure)
    if similarity is None:
        if embeddings is None:
            raise ValueError("give `embeddings` or `similarity`.")
        if meas.uses == "distance" and meas.metric is not None:
            return pairwise_distance_matrix(embeddings, meas.metric)
        return cosine_similarity_matrix(embeddings)
    s = np.asarray(similarity, dtype=float)
    if meas.uses != "distance":
        return s
    d = np.maximum(1.0 - s, 0.0)
    if meas.metric == "l2":  # |a - b| = sqrt(2 (1 - cos)) for unit vectors
        d = np.sqrt(2.0 * d)
    np.fill_diagonal(d, 0.0)
    return d


BOUND_SPLITS = 200  # random splits behind the permutation part of the futility bound's variance


def energy_u_statistic(distance: np.ndarray, k: int) -> float:
    """The unbiased (U-statistic) energy distance of the first ``k`` rows against the rest:
    ``2 mean d(a, b) - mean_{a≠a'} d(a, a') - mean_{b≠b'} d(b, b')``.

    The audit's ω (the V-statistic, pairs ``a = a'`` included) minus its chance level is
    this statistic times ``(2k - 2) / (2k - 1)`` when both groups have ``k`` answers.

    Examples
    --------
    >>> d = np.array([[0, 1, 2, 2], [1, 0, 2, 2], [2, 2, 0, 1], [2, 2, 1, 0]], float)
    >>> energy_u_statistic(d, 2)
    2.0
    """
    d = np.asarray(distance, dtype=float)
    m = d.shape[0] - k
    return float(2.0 * d[:k, k:].mean() - d[:k, :k].sum() / (k * (k - 1)) - d[k:, k:].sum() / (m * (m - 1)))


def _energy_first_order_variance(d: np.ndarray, k: int) -> float:
    """Hoeffding's first-order variance of :func:`energy_u_statistic`, estimated by plug-in:
    ``Var(a_i)/k + Var(b_j)/m`` with ``a_i = 2 mean_j d(a_i, b_j) - 2 mean_{i'≠i} d(a_i, a_i')``
    (the answer's own share of the statistic) and ``b_j`` alike."""
    m = d.shape[0] - k
    a = 2.0 * d[:k, k:].mean(axis=1) - 2.0 * d[:k, :k].sum(axis=1) / (k - 1)
    b = 2.0 * d[:k, k:].mean(axis=0) - 2.0 * d[k:, k:].sum(axis=1) / (m - 1)
    return float(a.var(ddof=1) / k + b.var(ddof=1) / m)


def _energy_permutation_variance(d: np.ndarray, k: int, rng: np.random.Generator) -> float:
    """The variance of :func:`energy_u_statistic` over random splits of the pooled answers:
    the statistic's variance when nothing changed (Hoeffding's second-order part)."""
    n = d.shape[0]
    m = n - k
    subsets = np.argsort(rng.random((BOUND_SPLITS, n)), axis=1)[:, :k]
    rowsum = d.sum(axis=1)
    total = float(rowsum.sum())
    member = np.zeros((BOUND_SPLITS, n))
    np.put_along_axis(member, subsets, 1.0, axis=1)  # row b: 1 for the answers in group A
    s_aa = ((member @ d) * member).sum(axis=1)  # the distances within group A, each pair twice
    s_ab = rowsum[subsets].sum(axis=1) - s_aa
    s_bb = total - s_aa - 2.0 * s_ab
    u = 2.0 * s_ab / (k * m) - s_aa / (k * (k - 1)) - s_bb / (m * (m - 1))
    return float(u.var())


def bootstrap_variance(
    matrix: np.ndarray,
    k: int,
    *,
    measure: str,
    bins: int = DEFAULT_BINS,
    null: str = "base",
    rng: int | np.random.Generator = 0,
    resamples: int = BOUND_SPLITS,
) -> float:
    """The within-arm bootstrap variance of ω for a similarity measure (``jsd``,
    ``wasserstein``, ``ks``): each arm's answers resampled with replacement (``k`` base,
    the rest perturbed), ω recomputed on the resampled answers' similarity matrix (an
    answer drawn twice is similar to its copy at 1, as two identical answers are), and the
    variance of the ``resamples`` values.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> z = rng.normal(size=(20, 4))
    >>> s = statistic_matrix(z / np.linalg.norm(z, axis=1, keepdims=True), measure="wasserstein")
    >>> 0 < bootstrap_variance(s, 10, measure="wasserstein") < 0.1
    True
    """
    meas = get_measure(measure)
    gen = np.random.default_rng(rng)
    n = matrix.shape[0]
    m = n - k
    first = np.arange(k, dtype=np.int32)[None, :]
    values = np.empty(resamples)
    for r in range(resamples):
        rows = np.concatenate([gen.integers(0, k, k), k + gen.integers(0, m, m)])
        sub = np.ascontiguousarray(matrix[np.ix_(rows, rows)])
        values[r] = meas.prepare(sub, k, m, bins, null == "pooled")(first)[0]
    return float(values.var(ddof=1))


def effect_upper_bound(
    matrix: np.ndarray,
    k: int,
    *,
    measure: str,
    effect_above_chance: float,
    confidence: float,
    null: str = "base",
    bins: int = DEFAULT_BINS,
    rng: int | np.random.Generator = 0,
) -> float:
    """Upper confidence bound of the change, for the futility stop: ``estimate + z_conf · SE``
    with ``SE² = V₁ + V₂``, the two parts of the statistic's variance (Hoeffding's
    decomposition).

    * ``V₁``, the first-order part (each answer's own share of the statistic, zero when
      nothing changed): for the ``energy-*`` measures by plug-in from the Hoeffding
      projection of the U-statistic (:func:`energy_u_statistic`); for the others, which are
      not U-statistics, by the within-arm bootstrap (:func:`bootstrap_variance`), which
      estimates the variance of ω from each arm's own sampling. (Arvesen's two-sample
      jackknife, used before, is unreliable for these non-smooth statistics: for
      ``wasserstein`` it came out smallest exactly in the samples whose estimate was low,
      and the bound covered the effect in 89.7 % of them at a stated 95 %.)
    * ``V₂``, the second-order part (all that is left when nothing changed), estimated by
      the variance of the statistic over :data:`BOUND_SPLITS` random splits of the pooled
      answers: the permutation distribution is the statistic's distribution under no change.

    For the ``energy-*`` measures the estimate is the unbiased energy distance (the effect
    above chance times ``(2k - 1) / (2k - 2)``): the bound is one for the energy distance
    between the two models of answers, which the effect above chance estimates from below.
    For the other measures it is ``effect_above_chance``. Each part errs on the large side
    (the plug-in ``V₁`` carries the noise of its own means, which near no change is about
    ``V₂`` again), which keeps the bound honest where it matters: when the change is as
    large as δ, a bound below δ stays rarer than ``1 - confidence`` (measured on recorded
    answers in the benchmarks, where the jackknife alone was not). For the similarity
    measures ``V₂`` is added to the bootstrap's variance for the same reason: the bootstrap
    is unreliable for a statistic whose first-order part vanishes (near no change), and the
    split variance is exactly that case's variance.

    Parameters
    ----------
    matrix : array, shape (k + m, k + m)
        The pooled matrix of :func:`statistic_matrix`, the base answers first.
    k : int
        The number of base answers (at least 3, and at least 3 perturbed).
    rng : int or Generator
        Seeds the random splits (the bound is reproducible).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> z = rng.normal(size=(20, 4))
    >>> d = statistic_matrix(z / np.linalg.norm(z, axis=1, keepdims=True), measure="energy-l2")
    >>> 0 < effect_upper_bound(d, 10, measure="energy-l2", effect_above_chance=0.0, confidence=0.95) < 1
    True
    """
    from scipy.stats import norm

    meas = get_measure(measure)
    n = matrix.shape[0]
    m = n - k
    if min(k, m) < 3:
        return math.inf  # too few answers to say how far ω could be off
    gen = np.random.default_rng(rng)
    if meas.uses == "distance":  # the energy distances: exact U-statistic parts
        d = np.asarray(matrix, dtype=float)
        estimate = energy_u_statistic(d, k)
        var = _energy_first_order_variance(d, k) + _energy_permutation_variance(d, k, gen)
    else:
        estimate = effect_above_chance
        var = bootstrap_variance(matrix, k, measure=measure, bins=bins, null=null, rng=gen)
        stat = meas.prepare(np.ascontiguousarray(matrix), k, m, bins, null == "pooled")
        splits = np.argsort(gen.random((BOUND_SPLITS, n)), axis=1)[:, :k].astype(np.int32)
        var += float(np.var(stat(np.sort(splits, axis=1))))
    return float(estimate + norm.ppf(confidence) * math.sqrt(max(var, 0.0)))


# --------------------------------------------------------------------------- one test's record
@dataclass(frozen=True)
class Look:
    """One look of one test: ``k`` answers per arm, its permutation p-value, the
    sequential p-value so far, the effect above chance and (with δ) its upper bound."""

    k: int
    p_value: float
    p_sequential: float
    effect_above_chance: float
    upper_bound: float | None = None
    n_permutations: int = 0

    def to_dict(self) -> dict[str, Any]:
        return jsonable(self.__dict__)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Look:
        up = d.get("upper_bound")
        return cls(
            int(d["k"]),
            float(d["p_value"]),
            float(d["p_sequential"]),
            float(d["effect_above_chance"]),
            None if up is None else float(up),
            int(d.get("n_permutations", 0)),
        )


@dataclass(frozen=True)
class SequentialRecord:
    """How a sequential test went: its plan, its looks, where and why it stopped."""

    plan: Plan
    looks: tuple[Look, ...]
    reason: str  # one of REASONS
    level: float  # the stop level (α/m or α)
    min_effect: float | None = None

    @property
    def stopped_at(self) -> int:
        """The answers per arm the test used (the k of its last look)."""
        return self.looks[-1].k

    @property
    def p_value(self) -> float:
        return self.looks[-1].p_sequential

    @property
    def statement(self) -> str:
        """One sentence: the design, where the test stopped and why."""
        last = self.looks[-1]
        if self.reason == "rejected":
            why = f"p_seq = {last.p_sequential:.3g} <= {self.level:.3g}"
        elif self.reason == "futility":
            conf = self.plan.confidence_at(len(self.looks) - 1)
            why = (
                f"no change above δ = {self.min_effect:g}: the effect above chance is at most "
                f"{last.upper_bound:.3g} ({conf:.2%} upper bound)"
            )
        else:
            why = "it reached the maximum"
        return f"{self.plan.describe()}; stopped at k = {last.k} because {why}"

    def to_dict(self) -> dict[str, Any]:
        return jsonable(
            {
                "plan": self.plan.to_dict(),
                "stopped_at": self.stopped_at,
                "reason": self.reason,
                "level": self.level,
                "p_sequential": self.p_value,
                "statement": self.statement,
                "looks": [lk.to_dict() for lk in self.looks],
                "min_effect": self.min_effect,
            }
        )

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SequentialRecord:
        """Back from :meth:`to_dict` (e.g. a run read from the history)."""
        plan = d["plan"]
        delta = d.get("min_effect")
        return cls(
            Plan(
                tuple(int(k) for k in plan["looks"]),
                tuple(float(w) for w in plan["weights"]),
                float(plan.get("confidence", CONFIDENCE)),
            ),
            tuple(Look.from_dict(lk) for lk in d["looks"]),
            str(d["reason"]),
            float(d["level"]),
            None if delta is None else float(delta),
        )


# --------------------------------------------------------------------------- the rounds
TestAt = Callable[[int, int, int, float | None], tuple[DBPAResult, float | None]]


@dataclass
class _Open:
    looks: list[Look] = field(default_factory=list)
    result: DBPAResult | None = None
    reason: str = ""


def run_rounds(
    plan: Plan,
    n_tests: int,
    *,
    level: float,
    min_effect: float | None,
    permutations: int,
    draw: Callable[[int, list[int]], None],
    test: TestAt,
    on_round: Callable[[int, list[int]], None] | None = None,
) -> tuple[list[DBPAResult], list[SequentialRecord]]:
    """Draw answers in rounds and decide after each round, for every open test.

    Parameters
    ----------
    plan : Plan
        The looks and weights.
    n_tests : int
        The tests (arms tested against the base), numbered ``0 .. n_tests - 1``.
    level : float
        :func:`stop_level`: a test stops as significant once its p_seq is at or below it.
    min_effect : float or None
        δ; None: no futility stop (a test runs to the maximum unless it rejects).
    permutations : int
        The spec's B; a look uses :func:`permutations_at` of it.
    draw : callable
        ``draw(k, open_tests)`` brings the base and the open tests' arms to ``k`` answers.
    test : callable
        ``test(i, k, B, confidence)`` tests arm ``i`` on the first ``k`` answers with B
        permutations; returns the result and, when ``confidence`` is given, the upper
        bound of the effect above chance at that confidence (else None).
    on_round : callable, optional
        Called after each round with the look's index and the tests still open.

    Returns
    -------
    (results, records)
        Per test, the result of its last look and its :class:`SequentialRecord`.
    """
    state = [_Open() for _ in range(n_tests)]
    open_tests = list(range(n_tests))
    for j, (k, w) in enumerate(zip(plan.looks, plan.weights, strict=True)):
        if not open_tests:
            break
        draw(k, list(open_tests))
        last = j == len(plan.looks) - 1
        b = permutations_at(level, w, permutations)
        conf = plan.confidence_at(j) if min_effect is not None and not last else None
        still = []
        for i in open_tests:
            r, upper = test(i, k, b, conf)
            s = state[i]
            prev = s.looks[-1].p_sequential if s.looks else 1.0
            p_seq = min(prev, sequential_p([r.p_value], [w]) if w > 0 else 1.0)
            s.looks.append(Look(k, r.p_value, p_seq, r.effect_above_chance, upper, r.n_permutations))
            s.result = r
            if p_seq <= level:
                s.reason = "rejected"
            elif upper is not None and min_effect is not None and upper < min_effect:
                s.reason = "futility"
            elif last:
                s.reason = "maximum"
            else:
                still.append(i)
        open_tests = still
        if on_round is not None:
            on_round(j, list(open_tests))
    results: list[DBPAResult] = []
    records: list[SequentialRecord] = []
    for s in state:
        assert s.result is not None  # every test takes the first look
        results.append(s.result)
        records.append(SequentialRecord(plan, tuple(s.looks), s.reason, level, min_effect))
    return results, records


def calls_range(plan: Plan, n_tests: int) -> tuple[int, int]:
    """Answers drawn per audit at best (every test stops at the first look) and at worst
    (every test runs to the last), base arm included."""
    return (1 + n_tests) * plan.looks[0], (1 + n_tests) * plan.looks[-1]


__all__ = [
    "CONFIDENCE",
    "Look",
    "Plan",
    "SequentialRecord",
    "SequentialSampling",
    "bootstrap_variance",
    "calls_range",
    "default_looks",
    "default_weights",
    "effect_upper_bound",
    "energy_u_statistic",
    "permutations_at",
    "plan_problem",
    "run_rounds",
    "sequential_p",
    "statistic_matrix",
    "stop_level",
]
