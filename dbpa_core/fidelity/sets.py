"""Confidence sets for the real answer distribution of a scenario (Iyengar, Lin & Wang, 2025).

Each set holds the real parameter with probability at least ``gamma`` (the *coverage*;
default ½). The radii are the paper's, written with the miscoverage ``1 - gamma`` so that
the coverage is ``gamma`` for every ``gamma`` (at the default ½ they are the paper's
formulas exactly)::

    Bernoulli       {u in [0, 1]  : KL(p̂ ‖ u) <= log(2 / (1 - γ)) / n}
    categorical     {u in simplex : KL(p̂ ‖ u) <= (d - 1) / n · log(2 (d - 1) / (1 - γ))}
    bounded mean    {u : |u - p̂| <= (b - a) · sqrt(log(2 / (1 - γ)) / (2 n))}
    W1 (σ-sub-Gaussian real values)
                    {Q : W1(P̂, Q) <= 512 σ / sqrt(n) + σ · sqrt(256 e / n · log(1 / (1 - γ)))}

(the paper writes ``log(2/γ)`` in the first three, which equals ``log(2/(1-γ))`` at γ = ½;
for other γ only the form used here covers the real parameter with probability γ, as the
coverage test in ``tests/test_fidelity_sets.py`` checks.)

Everything is vectorized over scenarios: ``p`` has one row per scenario. The
building blocks of the pseudo-discrepancies live here too: the binary-KL interval
(:func:`binary_kl_interval`) and the support function of a KL ball
(:func:`kl_ball_support`), ``sup {w · u : KL(p̂ ‖ u) <= r}``, found by a one-dimensional
dual search.

Examples
--------
>>> import numpy as np
>>> r = kl_radius_categorical(500, 5, gamma=0.5)
>>> round(float(r), 5)
0.02218
>>> lo, hi = binary_kl_interval(np.array([0.3]), np.array([0.01]))
>>> bool(lo[0] < 0.3 < hi[0])
True
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, overload

import numpy as np
from numpy.typing import ArrayLike

from .._validate import check_level

# --------------------------------------------------------------------------- radii


def _n_array(n: ArrayLike, name: str = "n") -> np.ndarray:
    arr = np.asarray(n, dtype=float)
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError(f"`{name}` (the number of real answers) must be positive and finite.")
    return arr


def kl_radius_bernoulli(n: ArrayLike, *, gamma: float = 0.5) -> np.ndarray:
    """``log(2 / (1 - γ)) / n``: the KL radius of the Bernoulli set with coverage γ."""
    g = check_level(gamma, "gamma")
    return np.log(2.0 / (1.0 - g)) / _n_array(n)


def kl_radius_categorical(n: ArrayLike, d: ArrayLike, *, gamma: float = 0.5) -> np.ndarray:
    """``(d - 1) / n · log(2 (d - 1) / (1 - γ))``: the KL radius of the categorical set.

    ``d`` is the number of options (>= 2); with ``d = 2`` it is the Bernoulli radius.
    """
    g = check_level(gamma, "gamma")
    d = np.asarray(d, dtype=float)
    if np.any(d < 2):
        raise ValueError("`d` (the number of options) must be at least 2.")
    return (d - 1.0) / _n_array(n) * np.log(2.0 * (d - 1.0) / (1.0 - g))


def hoeffding_halfwidth(n: ArrayLike, *, low: float, high: float, gamma: float = 0.5) -> np.ndarray:
    """``(b - a) · sqrt(log(2 / (1 - γ)) / (2 n))``: the half-width of the bounded-mean set."""
    g = check_level(gamma, "gamma")
    if not (math.isfinite(low) and math.isfinite(high) and high > low):
        raise ValueError(f"`bounds` must be two finite numbers a < b, got ({low!r}, {high!r}).")
    return (high - low) * np.sqrt(np.log(2.0 / (1.0 - g)) / (2.0 * _n_array(n)))


def w1_radius(n: ArrayLike, *, sigma: float, gamma: float = 0.5) -> np.ndarray:
    """``512 σ / sqrt(n) + σ · sqrt(256 e / n · log(1 / (1 - γ)))``: the W1-ball radius.

    The constants are the paper's (a worst-case concentration bound for σ-sub-Gaussian
    data); they make the radius large unless n is very large.
    """
    g = check_level(gamma, "gamma")
    if not (isinstance(sigma, (int, float)) and math.isfinite(sigma) and sigma > 0):
        raise ValueError(
            f"`sigma` (the sub-Gaussian scale of the real values) must be a positive number, got {sigma!r}."
        )
    nn = _n_array(n)
    return 512.0 * sigma / np.sqrt(nn) + sigma * np.sqrt(256.0 * math.e / nn * np.log(1.0 / (1.0 - g)))


# --------------------------------------------------------------------------- KL helpers


def kl_divergence(p: ArrayLike, u: ArrayLike) -> np.ndarray:
    """Row-wise ``KL(p ‖ u) = Σ p_i log(p_i / u_i)`` (0 log 0 = 0; +inf where u_i = 0 < p_i)."""
    p = np.asarray(p, dtype=float)
    u = np.asarray(u, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, p * (np.log(np.where(p > 0, p, 1.0)) - np.log(u)), 0.0)
    return terms.sum(axis=-1)


def binary_kl(p: ArrayLike, x: ArrayLike) -> np.ndarray:
    """``KL(Bernoulli(p) ‖ Bernoulli(x))``, elementwise (0 log 0 = 0)."""
    p = np.asarray(p, dtype=float)
    x = np.asarray(x, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where(p > 0, p * (np.log(np.where(p > 0, p, 1.0)) - np.log(x)), 0.0)
        b = np.where(p < 1, (1 - p) * (np.log(np.where(p < 1, 1 - p, 1.0)) - np.log1p(-x)), 0.0)
    return a + b


def binary_kl_upper(p: np.ndarray, r: np.ndarray, iters: int = 64, *, outer: bool = False) -> np.ndarray:
    """The largest x >= p with KL(p ‖ x) <= r (bisection; 64 halvings of [p, 1]).

    The bisection keeps a bracket ``lo <= x* <= hi`` a few ulps wide; ``outer=False`` gives
    ``lo`` (a point of the set), ``outer=True`` gives ``hi`` (never below x*: what an upper
    bound of a sup needs)."""
    lo = p.copy()
    hi = np.ones_like(p)
    done = binary_kl(p, np.nextafter(1.0, 0.0)) <= r  # only p = 1 reaches 1 exactly
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        ok = binary_kl(p, mid) <= r
        lo = np.where(ok, mid, lo)
        hi = np.where(ok, hi, mid)
    return np.where(done | (p >= 1.0), 1.0, hi if outer else lo)


def binary_kl_interval(p: ArrayLike, r: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """``{x in [0, 1] : KL(p ‖ x) <= r}`` as ``(low, high)``, elementwise.

    ``KL(p ‖ x)`` is convex in x and 0 at x = p, so the set is an interval around p; its
    ends are found by bisection to machine precision. ``p`` and ``r`` broadcast.
    """
    p, r = np.broadcast_arrays(np.asarray(p, dtype=float), np.asarray(r, dtype=float))
    p = np.clip(p, 0.0, 1.0)
    high = binary_kl_upper(p, r)
    low = 1.0 - binary_kl_upper(1.0 - p, r)
    return low, high


@overload
def kl_ball_support(
    p: np.ndarray, w: np.ndarray, r: np.ndarray, *, value_only: Literal[False] = ...
) -> tuple[np.ndarray, np.ndarray]: ...
@overload
def kl_ball_support(
    p: np.ndarray, w: np.ndarray, r: np.ndarray, *, value_only: bool
) -> tuple[np.ndarray, np.ndarray | None]: ...
def kl_ball_support(
    p: np.ndarray, w: np.ndarray, r: np.ndarray, *, value_only: bool = False
) -> tuple[np.ndarray, np.ndarray | None]:
    """``sup {w · u : u in simplex, KL(p ‖ u) <= r}`` and a maximizer, row by row.

    Parameters
    ----------
    p : array (N, d)
        Centres (rows sum to 1; zeros allowed).
    w : array (N, d)
        Weights (finite).
    r : array (N,)
        Radii (>= 0).

    Returns
    -------
    value : array (N,)
    u : array (N, d) or None
        A maximizer (rows sum to 1, ``KL(p ‖ u) <= r``); None with ``value_only``.

    With ``value_only`` the value is the dual objective at the μ found (below), which
    weak duality keeps at or above the exact sup however the search ends: a certified
    upper bound, and faster (no maximizer is built). Without it, the value is ``w · u`` at
    the feasible maximizer (at or below the sup by rounding only).

    Notes
    -----
    Lagrange duality gives ``u_i = λ p_i / (μ - w_i)`` and
    ``value = min over μ >= μ0 of  μ - e^{-r} Π_i (μ - w_i)^{p_i}``, a convex function of
    the one scalar μ (μ0: the largest weight with p_i > 0, or of an option with p_i = 0,
    which can take mass without changing the KL). Its minimum solves
    ``-r + Σ p_i log(μ - w_i) + log Σ p_i / (μ - w_i) = 0`` (decreasing in μ), found here by
    safeguarded Newton steps on ``log(μ - w_max)``.
    """
    p = np.asarray(p, dtype=float)
    w = np.asarray(w, dtype=float)
    r = np.broadcast_to(np.asarray(r, dtype=float), p.shape[:1]).copy()
    n = p.shape[0]
    pos = p > 0
    neg_inf = -np.inf
    w_pos_max = np.where(pos, w, neg_inf).max(axis=1)
    free = ~pos
    w_free_max = np.where(free, w, neg_inf).max(axis=1)
    scale = np.maximum(1e-12, np.where(pos, np.abs(w - w_pos_max[:, None]), 0.0).max(axis=1))
    gap = np.where(pos, w_pos_max[:, None] - w, 0.0)  # >= 0 on positive cells
    p_top = np.where(pos & (gap <= 1e-15 * scale[:, None]), p, 0.0).sum(axis=1)

    def g_and_slope(
        s: np.ndarray, gp: np.ndarray, pp: np.ndarray, rr: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        # with y_i = gap_i / t (x_i = t (1 + y_i)) the log t terms cancel exactly, so g keeps
        # its precision when r is tiny and t huge; arrays are (d, rows): sums over the short
        # option axis are then adds of whole rows
        y = gp / np.exp(s)
        inv = pp / (1.0 + y)
        a = inv.sum(axis=0)  # t Σ p / x
        b = (inv / (1.0 + y)).sum(axis=0)  # t² Σ p / x²
        g = -rr + (pp * np.log1p(y)).sum(axis=0) + np.log1p(-(inv * y).sum(axis=0))
        slope = a - b / a  # dg / d log t <= 0
        return g, slope

    has_root = (p_top < 1.0 - 1e-12) & (r > 0)
    # bracket in s = log(t), t = μ - w_max; start near the small-radius approximation
    # t ~ sqrt(var / (2 r)), then Newton steps, bisecting whenever a step leaves the bracket
    mean = (p * w).sum(axis=1)
    var = np.maximum((p * (w - mean[:, None]) ** 2).sum(axis=1), 1e-300)
    s = np.zeros(n)
    idx = np.flatnonzero(has_root)
    s_lo = np.log(scale[idx]) - 60.0
    s_hi = np.log(scale[idx]) + 60.0
    cur = np.clip(0.5 * np.log(var[idx] / np.maximum(2 * r[idx], 1e-300)), s_lo + 1, s_hi - 1)
    gp = np.ascontiguousarray(gap[idx].T)
    pp = np.ascontiguousarray(p[idx].T)
    rr = r[idx]
    # a root below the bracket (r so large that t underflows): the limit t -> 0, i.e. the
    # bracket's end, is within ~1e-26 of the sup and normalizes to a feasible point
    g_lo, _ = g_and_slope(s_lo, gp, pp, rr)
    low_root = ~(g_lo > 0)
    s[idx[low_root]] = s_lo[low_root]
    keep = ~low_root
    idx, cur, s_lo, s_hi = idx[keep], cur[keep], s_lo[keep], s_hi[keep]
    gp, pp, rr = gp[:, keep], pp[:, keep], rr[keep]
    for _ in range(200):
        if idx.size == 0:
            break
        g, slope = g_and_slope(cur, gp, pp, rr)
        s_lo = np.where(g > 0, cur, s_lo)
        s_hi = np.where(g > 0, s_hi, cur)
        with np.errstate(divide="ignore", invalid="ignore"):
            new = cur - g / slope
        bad = ~np.isfinite(new) | (new <= s_lo) | (new >= s_hi)
        new = np.where(bad, 0.5 * (s_lo + s_hi), new)
        done = (np.abs(new - cur) <= 1e-12) | (s_hi - s_lo <= 1e-12)
        s[idx] = new
        keep = ~done
        idx, cur, s_lo, s_hi = idx[keep], new[keep], s_lo[keep], s_hi[keep]
        gp, pp, rr = gp[:, keep], pp[:, keep], rr[keep]
    t = np.where(has_root, np.exp(s), 0.0)
    mu = w_pos_max + t
    at_free = np.isfinite(w_free_max) & (w_free_max > mu) & (r > 0)  # r = 0: the ball is {p̂}
    mu = np.where(at_free, w_free_max, mu)
    if value_only:
        return _dual_value(p, w, r, pos, gap, t, mu, at_free, w_pos_max), None
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        # at the root: u_i = λ p_i / (μ - w_i), λ = e^{-r} Π (μ - w_i)^{p_i}, written with
        # y = gap / t so that a huge t (tiny r) loses nothing to rounding
        y = gap / t[:, None]
        lam = np.exp(-r + np.where(pos, p * np.log1p(y), 0.0).sum(axis=1))
        u_root = np.where(pos, lam[:, None] * p / (1.0 + y), 0.0)
        x = mu[:, None] - w  # rows where a free option takes mass
        lam_f = np.exp(-r + np.where(pos, p * np.log(np.where(pos, x, 1.0)), 0.0).sum(axis=1))
        u_free = np.where(pos, lam_f[:, None] * p / x, 0.0)
    u = np.where(at_free[:, None], u_free, u_root)
    degenerate = (t == 0) & ~at_free  # all mass of p on the top weight(s), or r = 0
    u = np.where(degenerate[:, None], p, u)
    # rows where a free option takes mass (μ at its weight): give it the rest
    free_pick = np.where(free & (w >= w_free_max[:, None]), 1.0, 0.0)
    free_pick = free_pick / np.maximum(free_pick.sum(axis=1, keepdims=True), 1.0)
    rest = np.clip(1.0 - u.sum(axis=1), 0.0, None)
    u = np.where(at_free[:, None], u + rest[:, None] * free_pick, u)
    u = u / u.sum(axis=1, keepdims=True)
    value = (u * w).sum(axis=1)
    return value, u


def _dual_value(
    p: np.ndarray,
    w: np.ndarray,
    r: np.ndarray,
    pos: np.ndarray,
    gap: np.ndarray,
    t: np.ndarray,
    mu: np.ndarray,
    at_free: np.ndarray,
    w_pos_max: np.ndarray,
) -> np.ndarray:
    """``D(μ) = μ - e^{-r} Π_i (μ - w_i)^{p_i}`` at the μ found: >= the sup for any
    feasible μ (weak duality). Written with y = gap / t and expm1 so that a huge t (tiny r)
    keeps its precision."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        y = gap / np.where(t > 0, t, 1.0)[:, None]
        g0 = -r + np.where(pos, p * np.log1p(y), 0.0).sum(axis=1)
        root = w_pos_max - t * np.expm1(g0)
        x = mu[:, None] - w
        free = mu - np.exp(-r + np.where(pos, p * np.log(np.where(pos, x, 1.0)), 0.0).sum(axis=1))
    value = np.where(at_free, free, np.where(t > 0, root, w_pos_max))
    point = r <= 0  # the ball is p̂ itself
    return np.where(point & ~at_free, (p * np.where(pos, w, 0.0)).sum(axis=1), value)


# --------------------------------------------------------------------------- set objects


@dataclass(frozen=True)
class IntervalSet:
    """A scalar set per scenario: the real parameter lies in ``[low_j, high_j]``.

    ``kind`` is ``"bernoulli"`` (a probability, binary-KL interval) or ``"mean"``
    (a bounded mean, Hoeffding interval); ``center`` is the estimate p̂_j.
    """

    center: np.ndarray
    low: np.ndarray
    high: np.ndarray
    kind: str
    gamma: float

    def contains(self, u: ArrayLike) -> np.ndarray:
        u = np.asarray(u, dtype=float)
        return (u >= self.low - 1e-12) & (u <= self.high + 1e-12)


@dataclass(frozen=True)
class KLBall:
    """``{u in simplex : KL(p̂_j ‖ u) <= r_j}`` per scenario (rows of ``center``)."""

    center: np.ndarray
    radius: np.ndarray
    gamma: float

    def contains(self, u: ArrayLike) -> np.ndarray:
        u = np.asarray(u, dtype=float)
        return kl_divergence(self.center, u) <= self.radius + 1e-12


@dataclass(frozen=True)
class W1Ball:
    """``{Q : W1(P̂_j, Q) <= r_j}`` per scenario; ``samples[j]`` are the real values."""

    samples: tuple[np.ndarray, ...]
    radius: np.ndarray
    gamma: float


def bernoulli_set(successes: float, n: int, *, gamma: float = 0.5) -> IntervalSet:
    """The Bernoulli KL set: p̂ = successes / n, interval ``{u : KL(p̂ ‖ u) <= log(2/(1-γ))/n}``."""
    n = _n_array(n)
    p = np.asarray(successes, dtype=float) / n
    low, high = binary_kl_interval(p, kl_radius_bernoulli(n, gamma=gamma))
    return IntervalSet(p, low, high, "bernoulli", float(gamma))


def categorical_set(counts: ArrayLike, *, gamma: float = 0.5) -> KLBall:
    """The categorical KL set of rows of ``counts`` (one row per scenario, d options)."""
    c = np.asarray(counts, dtype=float)
    n = c.sum(axis=1)
    return KLBall(c / n[:, None], kl_radius_categorical(n, c.shape[1], gamma=gamma), float(gamma))


def mean_set(mean: float, n: int, *, low: float, high: float, gamma: float = 0.5) -> IntervalSet:
    """The bounded-mean (Hoeffding) set ``[p̂ - h, p̂ + h]`` clipped to ``[low, high]``."""
    m = np.asarray(mean, dtype=float)
    h = hoeffding_halfwidth(n, low=low, high=high, gamma=gamma)
    return IntervalSet(m, np.maximum(m - h, low), np.minimum(m + h, high), "mean", float(gamma))


def w1_set(samples: Iterable[ArrayLike], *, sigma: float, gamma: float = 0.5) -> W1Ball:
    """The W1 ball around each scenario's empirical distribution of real values."""
    s = tuple(np.asarray(x, dtype=float) for x in samples)
    return W1Ball(s, w1_radius([len(x) for x in s], sigma=sigma, gamma=gamma), float(gamma))


__all__ = [
    "IntervalSet",
    "KLBall",
    "W1Ball",
    "bernoulli_set",
    "binary_kl",
    "binary_kl_interval",
    "categorical_set",
    "hoeffding_halfwidth",
    "kl_ball_support",
    "kl_divergence",
    "kl_radius_bernoulli",
    "kl_radius_categorical",
    "mean_set",
    "w1_radius",
    "w1_set",
]
