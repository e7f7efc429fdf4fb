"""Sample-size planning (SPEC §1).

:func:`sample_size` is the normal-approximation rule of thumb
``k ∝ ((z_{1-α/(2M)} + z_{1-β}) / ω)^2``; :func:`power_simulation` estimates
power directly by re-running the DBPA test on data drawn from a pilot run,
which is the better guide.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats

from .measures import get_measure
from .permutation import _as_generator, _check_int, dbpa_test
from .similarity import check_embeddings
from .types import PowerResult


def _prob_iv(value, name: str) -> float:
    if not isinstance(value, (int, float)) or not 0.0 < value < 1.0:
        raise ValueError(f"`{name}` must lie in (0, 1), got {value!r}.")
    return float(value)


def sample_size(effect_size: float, *, n_tests: int = 1, alpha: float = 0.05,
                power: float = 0.8, scale: float = 1.0) -> int:
    """Responses per prompt k for M tests, target ω, level α and power 1-β.

    ``k = ceil(scale * ((z_{1-α/(2M)} + z_{1-β}) / ω)^2)``, at least 2.

    The proportionality constant ``scale`` depends on the measure, the embedder
    and the response length; the default 1 gives an order of magnitude only.
    Calibrate it, or better use :func:`power_simulation` on a pilot run.

    Examples
    --------
    >>> sample_size(0.5, n_tests=8)
    55
    """
    if not isinstance(effect_size, (int, float)) or not effect_size > 0:
        raise ValueError(f"`effect_size` must be > 0, got {effect_size!r}.")
    n_tests = _check_int(n_tests, "n_tests", 1)
    alpha = _prob_iv(alpha, "alpha")
    power = _prob_iv(power, "power")
    if not scale > 0:
        raise ValueError(f"`scale` must be > 0, got {scale!r}.")
    z = stats.norm.ppf(1 - alpha / (2 * n_tests)) + stats.norm.ppf(power)
    return max(2, math.ceil(scale * (z / effect_size) ** 2))


def _draw(group: np.ndarray, size: int, method: str, gen: np.random.Generator) -> np.ndarray:
    if method == "subsample":
        return group[gen.choice(group.shape[0], size=size, replace=False)]
    mean = group.mean(axis=0)
    sd = group.std(axis=0, ddof=1)
    return mean + gen.standard_normal((size, group.shape[1])) * sd


def power_simulation(pilot_base, pilot_perturbed, sample_sizes: Sequence[int], *,
                     n_simulations: int = 200, alpha: float = 0.05, n_tests: int = 1,
                     measure: str = "jsd", n_permutations: int = 499,
                     method: str = "subsample", rng=None) -> PowerResult:
    """Power of the DBPA test at several k, simulated from pilot embeddings.

    For each k, draw ``n_simulations`` data sets of k base and k perturbed
    embeddings from the pilot groups, run the test, and count p <= α/M
    (Bonferroni over ``n_tests`` perturbations).

    Parameters
    ----------
    pilot_base, pilot_perturbed : array_like, shape (k0, d), (m0, d)
        Pilot embeddings.
    sample_sizes : sequence of int
        Candidate k (each >= 2).
    method : {"subsample", "gaussian"}
        ``subsample`` draws real pilot rows without replacement (needs
        k <= pilot size; honest, no model); ``gaussian`` draws from a normal
        with each group's mean and per-dimension spread (extrapolates beyond
        the pilot size; a model assumption).

    Returns
    -------
    PowerResult
        ``power[i]`` for ``sample_sizes[i]`` with a 95 % Wilson interval.

    Notes
    -----
    The simulation takes the pilot's groups as the truth, so the power is that
    of the *observed* pilot difference; a small pilot's noise looks like an
    effect, especially with ``gaussian``. Treat the numbers as a planning aid.
    """
    if method not in ("subsample", "gaussian"):
        raise ValueError(f"`method` must be in {{'subsample', 'gaussian'}}, got {method!r}.")
    get_measure(measure)
    x = check_embeddings(pilot_base, "pilot_base")
    y = check_embeddings(pilot_perturbed, "pilot_perturbed")
    if x.shape[1] != y.shape[1]:
        raise ValueError("`pilot_base` and `pilot_perturbed` have embeddings of different widths.")
    ks = np.asarray([_check_int(int(v) if isinstance(v, np.integer) else v, "sample_sizes", 2)
                     for v in sample_sizes], dtype=int)
    if ks.size == 0:
        raise ValueError("`sample_sizes` is empty.")
    if method == "subsample" and ks.max() > min(x.shape[0], y.shape[0]):
        raise ValueError(
            f"`sample_sizes` goes up to {ks.max()} but the pilot has only "
            f"{min(x.shape[0], y.shape[0])} responses per group; use method='gaussian' "
            "to extrapolate or collect a larger pilot."
        )
    n_simulations = _check_int(n_simulations, "n_simulations", 1)
    alpha = _prob_iv(alpha, "alpha")
    n_tests = _check_int(n_tests, "n_tests", 1)
    gen = _as_generator(rng)
    level = alpha / n_tests
    power = np.empty(ks.size)
    ci = np.empty((ks.size, 2))
    for i, k in enumerate(ks):
        hits = 0
        for _ in range(n_simulations):
            r = dbpa_test(_draw(x, k, method, gen), _draw(y, k, method, gen), measure=measure,
                          n_permutations=n_permutations, rng=gen)
            hits += r.p_value <= level
        power[i] = hits / n_simulations
        lo, hi = stats.binomtest(hits, n_simulations).proportion_ci(0.95, method="wilson")
        ci[i] = lo, hi
    return PowerResult(ks, power, n_simulations, alpha, measure, method, ci)
