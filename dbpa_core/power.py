"""Planning: how many responses, and what a run can show at all.

:func:`attainable_significance` says before any sampling whether a result can be
significant at the chosen k, m, B and correction (with k = 2 none can);
:func:`sample_size` is the normal-approximation rule of thumb on the effect
*above chance*; :func:`power_simulation` estimates power directly by re-running
the DBPA test on responses drawn from a pilot run, which is the better guide.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from scipy import stats

from ._validate import check_int
from .measures import DEFAULT_BINS, DEFAULT_MEASURE, get_measure
from .multitest import check_method, check_tests, smallest_adjusted_p
from .permutation import (
    MAX_RESPONSES,
    as_generator,
    check_null,
    check_permutations,
    check_sizes,
    dbpa_test,
    permutation_work,
    smallest_p_value,
)
from .similarity import check_embeddings
from .types import Attainability, DBPAResult, PowerResult

if TYPE_CHECKING:
    from .permutation import RngLike


MAX_SIMULATIONS = 10_000  # power_simulation: the Wilson interval is ±0.01 wide by then
MAX_SIMULATION_WORK = 10**11  # pair visits of a whole power simulation: about 15 minutes of one core


class PlanningWarning(UserWarning):
    """A plan was changed or cannot deliver what was asked (e.g. B raised)."""


def _prob_iv(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < value < 1.0:
        raise ValueError(f"`{name}` must lie in (0, 1), got {value!r}.")
    return float(value)


# --------------------------------------------------------------------------- attainability
def _min_adjusted(
    k: int, m: int, n_permutations: int, n_tests: int, correction: str, measure: str, null: str
) -> float:
    p_min = smallest_p_value(k, m, n_permutations=n_permutations, measure=measure, null=null)
    return smallest_adjusted_p(p_min, n_tests, correction)


def attainable_significance(
    k: int,
    m: int | None = None,
    *,
    n_permutations: int,
    n_tests: int = 1,
    correction: str = "holm",
    alpha: float = 0.05,
    measure: str = DEFAULT_MEASURE,
    null: str = "base",
) -> Attainability:
    """Can any result of this plan be significant? Computed before sampling.

    The smallest p-value of one test is ``1 / (B + 1)``, or ``1 / C(k+m, k)``
    (``2 / C(k+m, k)`` for a symmetric statistic with k = m) when the splits
    are few enough to enumerate; the correction over ``n_tests`` perturbations
    then raises it (Bonferroni and Holm to M times it). When that is above α no
    result can be significant, whatever the responses say; when it is above
    .001 (or .01) the stars ``***`` (``**``) are out of reach.

    Parameters
    ----------
    k, m : int
        Responses per group (``m`` defaults to ``k``): each >= 2, ``k + m <= 20_000``
        (the pooled similarity matrix of a test takes ``8 (k + m)²`` bytes).
    n_permutations : int
        B, in [1, 10⁸].
    n_tests : int
        M, the perturbations (or models) corrected together, in [1, 10⁹].
    correction : {"holm", "bonferroni", "bh", "none"}
    alpha : float
    measure, null : str
        As in :func:`dbpa_core.dbpa_test` (they decide whether a split and its
        complement tie).

    Returns
    -------
    Attainability
        ``smallest_p``, ``smallest_adjusted_p``, ``reachable``, ``best_stars``,
        ``message`` (None when every star is in reach) and the smallest ``k`` and
        ``B`` that would make significance reachable.

    Examples
    --------
    >>> attainable_significance(2, n_permutations=2000, n_tests=8).reachable
    False
    >>> attainable_significance(20, n_permutations=2000, n_tests=3).best_stars
    '**'
    """
    k, m = check_sizes(k, k if m is None else m)
    n_permutations = check_permutations(n_permutations)
    n_tests = check_tests(n_tests)
    correction = check_method(correction, "correction")
    alpha = _prob_iv(alpha, "alpha")
    get_measure(measure)
    check_null(null)
    p_min = smallest_p_value(k, m, n_permutations=n_permutations, measure=measure, null=null)
    adj = smallest_adjusted_p(p_min, n_tests, correction)
    # the fewest permutations whose 1 / (B + 1) stays below alpha after the correction
    factor = n_tests if correction in ("bonferroni", "holm") else 1
    min_b = max(1, math.floor(factor / alpha + 1e-9))
    min_k = None
    if adj > alpha:  # the fewest responses per prompt that would do with this B
        for kk in range(2, 200):
            if _min_adjusted(kk, kk, n_permutations, n_tests, correction, measure, null) < alpha:
                min_k = kk
                break
    return Attainability(
        k=k,
        m=m,
        n_permutations=n_permutations,
        n_tests=n_tests,
        correction=correction,
        alpha=alpha,
        smallest_p=p_min,
        smallest_adjusted_p=adj,
        min_samples=min_k,
        min_permutations=min_b,
        exact=p_min > 1.0 / (n_permutations + 1) + 1e-15,
        permutations_for_all_stars=math.floor(1000 * factor),
    )


# --------------------------------------------------------------------------- sample size
def _null_exponent(measure: str, null: str) -> float:
    """How the spread of ω under H0 shrinks with k: ``k^-1`` for the symmetric
    (degenerate) statistics, ``k^-1/2`` for the base-null similarity measures."""
    return 1.0 if (get_measure(measure).symmetric or null == "pooled") else 0.5


def _planned_k(k: float, delta: float) -> int:
    """The planned k, or ValueError when no test could pool that many responses."""
    most = MAX_RESPONSES // 2
    if not k <= most:  # inf and NaN too
        raise ValueError(
            f"`effect_above_chance` = {delta:.3g} would need k = {k:.3g} responses per group, "
            f"more than a test can pool ({most:_} per group: its similarity matrix grows as "
            "n²); plan for a larger effect, the smallest one worth detecting."
        )
    return max(2, math.ceil(k))


def sample_size(
    effect_above_chance: float | None = None,
    *,
    pilot: DBPAResult | None = None,
    n_tests: int = 1,
    alpha: float = 0.05,
    power: float = 0.8,
    scale: float = 1.0,
) -> int:
    """Responses per prompt k to detect an effect *above chance* in M tests.

    ω itself has no fixed zero (chance alone gives ω > 0, more at small k), so
    plan on the effect above chance: ``ω - chance_effect_size``, about 0 when
    nothing changes. ``z = z_{1-α/(2M)} + z_{1-β}``.

    * With a ``pilot`` (a :class:`DBPAResult` of a pilot run, e.g. an audit's
      ``perturbation.test``): the spread ``s0`` of the pilot's permutation
      statistics at its k0 tells how large chance fluctuations are; they shrink
      like ``k^-γ`` (γ = 1 for the energy distances and the pooled null, 1/2
      for jsd, wasserstein and ks with the base null), so
      ``k = k0 (z s0 / δ)^(1/γ)``, δ the effect above chance to detect (default:
      the pilot's own).
    * Without: the rule of thumb ``k = scale (z / δ)^2``; ``scale`` depends on
      the measure, the embedder and the responses (1 gives an order of
      magnitude only).

    Both are normal approximations that ignore how much more ω varies when there
    is an effect, so they are optimistic: on synthetic data the k planned for
    power 0.8 measured 0.5–0.75. Read the result as a lower bound and confirm it
    with :func:`power_simulation` on the pilot's embeddings, which measures power.

    ``n_tests`` lies in [1, 10⁹]; an effect so small that k would exceed 10_000
    responses per group (more than a test can pool) raises ValueError.

    Examples
    --------
    >>> sample_size(0.5, n_tests=8)
    52
    """
    n_tests = check_tests(n_tests)
    alpha = _prob_iv(alpha, "alpha")
    power = _prob_iv(power, "power")
    if effect_above_chance is not None and (
        isinstance(effect_above_chance, bool)
        or not isinstance(effect_above_chance, (int, float))
        or not effect_above_chance > 0
    ):
        raise ValueError(
            f"`effect_above_chance` must be > 0, got {effect_above_chance!r}; "
            "it is ω minus the ω chance gives (`result.effect_above_chance`)."
        )
    z = stats.norm.ppf(1 - alpha / (2 * n_tests)) + stats.norm.ppf(power)
    if pilot is None:
        if effect_above_chance is None:
            raise ValueError("give `effect_above_chance` (the effect to detect) or a `pilot` result.")
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not scale > 0:
            raise ValueError(f"`scale` must be > 0, got {scale!r}.")
        with np.errstate(over="ignore"):  # an inf k is refused by _planned_k
            return _planned_k(scale * (z / effect_above_chance) ** 2, effect_above_chance)
    if not isinstance(pilot, DBPAResult):
        raise TypeError("`pilot` must be a DBPAResult (e.g. `dbpa_test(...)` on pilot embeddings).")
    if pilot.permutation_statistics.size < 20:
        raise ValueError(
            "`pilot` has fewer than 20 permutation statistics; run it with "
            "n_permutations >= 200 and without sequential stopping."
        )
    delta = pilot.effect_above_chance if effect_above_chance is None else effect_above_chance
    if not delta > 0:
        raise ValueError(
            f"the pilot's effect above chance is {delta:.3g}: it shows no effect to plan for. "
            "Give `effect_above_chance`, the smallest effect worth detecting."
        )
    s0 = float(np.std(pilot.permutation_statistics, ddof=1))
    if s0 <= 0:
        raise ValueError("`pilot` has no spread in its permutation statistics (identical responses?).")
    k0 = 2.0 / (1.0 / pilot.k + 1.0 / pilot.m)  # harmonic mean of the group sizes
    gamma = _null_exponent(pilot.measure, pilot.null)
    with np.errstate(over="ignore"):  # an inf k is refused by _planned_k
        return _planned_k(k0 * (z * s0 / delta) ** (1.0 / gamma), delta)


# --------------------------------------------------------------------------- simulation
def _auto_permutations(n_permutations: int | None, level: float) -> int:
    """B for a simulation at level α/M: p can reach it only if ``1 / (B + 1) <= α/M``,
    and the power read is close to the test's own once ``(B + 1) α/M >= 5``."""
    need = math.ceil(5.0 / level) - 1
    if n_permutations is None:
        return max(499, need)
    n_permutations = check_permutations(n_permutations)
    if n_permutations < need:
        if 1.0 / (n_permutations + 1) > level:
            why = (
                f"can never reach α/M = {level:.3g} (its smallest value is "
                f"{1 / (n_permutations + 1):.3g}), so power would read 0"
            )
        else:
            why = (
                f"reaches α/M = {level:.3g} only when almost no permutation beats ω, so "
                "power would read too low"
            )
        warnings.warn(
            f"With B = {n_permutations} permutations the p-value {why}; B raised to {need}.",
            PlanningWarning,
            stacklevel=3,
        )
        return need
    return n_permutations


def power_simulation(
    pilot_base: np.ndarray,
    pilot_perturbed: np.ndarray,
    sample_sizes: Sequence[int],
    *,
    n_simulations: int = 200,
    alpha: float = 0.05,
    n_tests: int = 1,
    measure: str = DEFAULT_MEASURE,
    n_permutations: int | None = None,
    method: str = "subsample",
    null: str = "base",
    rng: RngLike = None,
) -> PowerResult:
    """Power of the DBPA test at several k, simulated from pilot embeddings.

    For each k, draw ``n_simulations`` data sets of k base and k perturbed
    embeddings from the pilot groups (real rows, without replacement), run the
    test, and count p <= α/M (Bonferroni over ``n_tests`` perturbations).

    Parameters
    ----------
    pilot_base, pilot_perturbed : array_like, shape (k0, d), (m0, d)
        Pilot embeddings.
    sample_sizes : sequence of int
        Candidate k, each >= 2 and below the smaller pilot group (drawing the
        whole pilot would return the same data set every time and a confident,
        meaningless interval).
    n_simulations : int, default 200
        Simulated data sets per k, in [1, 10_000] (there the 95 % interval of the
        power is ±0.01 wide); all the simulations together may visit at most 10¹¹
        pairs (:data:`MAX_SIMULATION_WORK`, about 15 minutes of one core).
    n_permutations : int, optional
        B per simulated test, in [1, 10⁸]. Default: enough for p to reach α/M with some
        resolution (at least 499, and ``(B + 1) α / M >= 5``); a given B that
        is smaller is raised, with a :class:`PlanningWarning`.
    method : {"subsample"}
        Rows drawn from the pilot without replacement. (The former
        ``"gaussian"`` method was removed: fitted to a small pilot in 384
        dimensions it took the pilot's noise for an effect and reported power
        1.00 where measured power was 0.15–0.23.)

    Returns
    -------
    PowerResult
        ``power[i]`` for ``sample_sizes[i]`` with a 95 % Wilson interval, the B
        used, and ``notes`` on what limits the numbers.

    Notes
    -----
    The simulation takes the pilot's groups as the truth. Data sets drawn from
    a pilot of k0 rows overlap: above k0 / 2 they share most rows, the
    simulations are not independent, and the interval is too narrow (a note
    says so). Where no p-value can reach α/M at a k (k = 2 or 3, exact tests)
    the power there is 0 by construction (a note says so).
    """
    if method == "gaussian":
        raise ValueError(
            "`method='gaussian'` was removed: fitted to a small pilot it took the pilot's noise "
            "for an effect and reported power 1.00 where measured power was 0.15-0.23. Use "
            "method='subsample' with k below the pilot size, or record a larger pilot."
        )
    if method != "subsample":
        raise ValueError(f"`method` must be in {{'subsample'}}, got {method!r}.")
    get_measure(measure)
    null = check_null(null)
    x = check_embeddings(pilot_base, "pilot_base")
    y = check_embeddings(pilot_perturbed, "pilot_perturbed")
    if x.shape[1] != y.shape[1]:
        raise ValueError("`pilot_base` and `pilot_perturbed` have embeddings of different widths.")
    sizes = [check_int(v, "sample_sizes", 2) for v in sample_sizes]
    if not sizes:
        raise ValueError("`sample_sizes` is empty.")
    pilot_n = min(x.shape[0], y.shape[0])
    if max(sizes) >= pilot_n:
        raise ValueError(
            f"`sample_sizes` goes up to {max(sizes)} but the pilot has only {pilot_n} responses "
            f"per group: subsampling needs k < {pilot_n} (k = {pilot_n} would draw the same data "
            "set every time). Record a larger pilot to plan for larger k."
        )
    ks = np.asarray(sizes, dtype=int)
    n_simulations = check_int(
        n_simulations,
        "n_simulations",
        1,
        MAX_SIMULATIONS,
        "each simulation runs a whole test, and at that count the 95 % interval of the power "
        "is already ±0.01 wide",
    )
    alpha = _prob_iv(alpha, "alpha")
    n_tests = check_tests(n_tests)
    gen = as_generator(rng)
    level = alpha / n_tests
    n_permutations = _auto_permutations(n_permutations, level)
    meas = get_measure(measure)
    work = sum(
        n_simulations * permutation_work(int(k), int(k), n_permutations, meas, DEFAULT_BINS) for k in ks
    )
    if work > MAX_SIMULATION_WORK:
        raise ValueError(
            f"`n_simulations` = {n_simulations:_} tests at k = {', '.join(map(str, ks))} with "
            f"B = {n_permutations:_} would visit {work:.2g} pairs, over the "
            f"{MAX_SIMULATION_WORK:.0e} a simulation may take (about "
            f"{MAX_SIMULATION_WORK / 1e8 / 60:.0f} minutes of one core): lower `n_simulations`, "
            "`n_permutations` or the largest of `sample_sizes`."
        )
    notes: list[str] = []
    for k in ks:
        p_min = smallest_p_value(int(k), int(k), n_permutations=n_permutations, measure=measure, null=null)
        if p_min > level:
            notes.append(
                f"k = {k}: the smallest possible p is {p_min:.3g} > α/M = {level:.3g}, "
                "so power is 0 there by construction."
            )
    big = [int(k) for k in ks if k > pilot_n / 2]
    if big:
        notes.append(
            f"k = {', '.join(map(str, big))}: above half the pilot size ({pilot_n}), "
            "simulated data sets share most of their rows; the power is optimistic and "
            "its interval too narrow."
        )
    for note in notes:
        warnings.warn(note, PlanningWarning, stacklevel=2)
    power = np.empty(ks.size)
    ci = np.empty((ks.size, 2))
    for i, k in enumerate(ks):
        hits = 0
        for _ in range(n_simulations):
            xb = x[gen.choice(x.shape[0], size=k, replace=False)]
            yb = y[gen.choice(y.shape[0], size=k, replace=False)]
            r = dbpa_test(xb, yb, measure=measure, n_permutations=n_permutations, rng=gen, null=null)
            hits += r.p_value <= level
        power[i] = hits / n_simulations
        lo, hi = stats.binomtest(hits, n_simulations).proportion_ci(0.95, method="wilson")
        ci[i] = lo, hi
    return PowerResult(
        ks,
        power,
        n_simulations,
        alpha,
        measure,
        method,
        ci,
        n_permutations=n_permutations,
        n_tests=n_tests,
        null=null,
        notes=tuple(notes),
    )


__all__ = ["PlanningWarning", "attainable_significance", "power_simulation", "sample_size"]
