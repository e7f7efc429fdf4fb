"""Multiple-testing control for many perturbations of one base prompt (the DBPA method).

Adjusted p-values follow R's ``p.adjust``: ``bonferroni``, ``holm`` and
``bh`` (Benjamini–Hochberg). ``none`` leaves them as they are.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from ._validate import check_int, check_level, real_array
from .types import MultipleTestingResult

METHODS = ("none", "bonferroni", "holm", "bh")
MAX_TESTS = 10**9  # M: beyond it no p-value of at most 1e8 permutations survives Bonferroni


def check_tests(n_tests: object, name: str = "n_tests") -> int:
    """M, the tests corrected together, in [1, :data:`MAX_TESTS`]: every test of a family
    samples its own answers, so a larger family cannot be run, and with M > 10⁸ no
    p-value of the largest permutation count (1 / (B + 1) >= 1e-8) survives Bonferroni."""
    return check_int(
        n_tests,
        name,
        1,
        MAX_TESTS,
        "every test of the family samples its own answers, and beyond it no p-value of "
        "at most 1e8 permutations survives the correction",
    )


def check_pvalues(pvalues: object, name: str = "pvalues") -> np.ndarray:
    """``pvalues`` as a 1-D float array of numbers in [0, 1], or an error naming ``name``."""
    p = real_array(pvalues, name, "a 1-D sequence of numbers")
    if p.ndim == 0:
        p = p[None]
    if p.ndim != 1:
        raise ValueError(f"`{name}` must be 1-D, got shape {p.shape}.")
    if np.any(np.isnan(p)):
        raise ValueError(f"`{name}` contains NaN.")
    if np.any((p < 0) | (p > 1)):
        bad = float(p[(p < 0) | (p > 1)][0])
        raise ValueError(f"`{name}` must lie in [0, 1], got {bad!r}.")
    return p


def check_method(method: str, name: str = "method") -> str:
    """``method`` normalised (aliases such as ``fdr_bh``); errors name the argument
    ``name`` (``correction`` where the caller calls it so)."""
    if method is not None and not isinstance(method, str):
        raise TypeError(f"`{name}` must be one of {set(METHODS)} (a string), got {type(method).__name__}.")
    aliases = {"fdr_bh": "bh", "benjamini-hochberg": "bh", "BH": "bh", None: "none"}
    method = aliases.get(method, method)
    if method not in METHODS:
        raise ValueError(f"`{name}` must be in {set(METHODS)}, got {method!r}.")
    return method


def adjust_pvalues(pvalues: ArrayLike, method: str = "holm") -> np.ndarray:
    """Adjusted p-values for a family of M tests.

    Parameters
    ----------
    pvalues : array_like, shape (M,)
        Raw p-values in [0, 1].
    method : {"bonferroni", "holm", "bh", "none"}
        ``bonferroni``: ``min(1, M p_i)``; ``holm``: step-down, ``max_{j<=i}
        (M - j + 1) p_(j)``; ``bh``: step-up, ``min_{j>=i} M p_(j) / j``.

    Returns
    -------
    ndarray, shape (M,)
        Adjusted p-values in the input order, each >= the raw one, <= 1.

    Examples
    --------
    >>> adjust_pvalues([0.01, 0.04, 0.03], method="holm")
    array([0.03, 0.06, 0.06])
    """
    method = check_method(method)
    p = check_pvalues(pvalues)
    n = p.size
    if n == 0 or method == "none":
        return p.copy()
    if method == "bonferroni":
        return np.minimum(p * n, 1.0)
    order = np.argsort(p, kind="stable")
    ps = p[order]
    if method == "holm":
        adj = np.maximum.accumulate(ps * (n - np.arange(n)))
    else:  # bh
        adj = np.minimum.accumulate((ps * n / np.arange(1, n + 1))[::-1])[::-1]
    out = np.empty(n)
    out[order] = np.minimum(adj, 1.0)
    return out


def smallest_adjusted_p(p_min: float, n_tests: int, method: str = "holm") -> float:
    """The smallest adjusted p-value a family of ``n_tests`` tests can reach when no
    raw p-value can fall below ``p_min`` (e.g. ``1 / (B + 1)``).

    Bonferroni and Holm adjust the smallest raw p to ``M p``; Benjamini–Hochberg
    gives ``p_min`` itself when every test reaches it (``M p / M``); ``none`` leaves it.
    Known before any sampling, so a run that can never be significant is flagged
    before it is paid for. ``n_tests`` lies in [1, 10⁹] (:data:`MAX_TESTS`).

    Examples
    --------
    >>> round(smallest_adjusted_p(1 / 2001, 3, "holm"), 5)   # no *** with B = 2000
    0.0015
    """
    method = check_method(method)
    if not 0.0 <= p_min <= 1.0:
        raise ValueError(f"`p_min` must lie in [0, 1], got {p_min!r}.")
    n_tests = check_tests(n_tests)
    if method in ("bonferroni", "holm"):
        return min(1.0, p_min * int(n_tests))
    return float(p_min)


def significance_stars(p: ArrayLike) -> str | list[str]:
    """``***`` p < .001, ``**`` p < .01, ``*`` p < .05, else ``""`` (scalar or sequence).

    ``p`` must be numbers in [0, 1]: text (``"0.01"``), booleans and None raise
    TypeError, NaN and values outside [0, 1] raise ValueError (a p-value that is
    not one must never read as "not significant").

    Examples
    --------
    >>> significance_stars([0.0004, 0.03, 0.2])
    ['***', '*', '']
    """
    arr = check_pvalues(p, "p")
    stars = ["***" if v < 0.001 else "**" if v < 0.01 else "*" if v < 0.05 else "" for v in arr]
    return stars[0] if np.ndim(p) == 0 else stars


def multiple_testing(
    pvalues: ArrayLike, method: str = "holm", *, alpha: float = 0.05
) -> MultipleTestingResult:
    """Adjusted p-values, rejections at ``alpha`` (``p_adjusted <= alpha``) and stars."""
    alpha = check_level(alpha, "alpha")
    method = check_method(method)
    p = check_pvalues(pvalues)
    adj = adjust_pvalues(p, method)
    return MultipleTestingResult(p, adj, adj <= alpha, tuple(significance_stars(adj)), method, float(alpha))
