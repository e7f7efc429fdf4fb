"""Pseudo-discrepancies: the worst and the best case of a loss over a confidence set.

For a scenario with confidence set ``C`` for the real parameter and simulated estimate
``q``:

* upper  ``Δ̂ = sup_{u in C} L(u, q)``  (the calibrated curve is built from these),
* lower  ``Δ⁻ = inf_{u in C} L(u, q)`` (the lower edge of the tightness band),
* pairwise ``δ̂ = sup_{u in C} [L(u, a) - L(u, b)]`` (simulator a against simulator b).

Losses (:data:`LOSSES`): ``tv`` (total variation ½‖u - q‖₁), ``kl`` (``KL(u ‖ q)``, real
against simulated), ``w1`` (Wasserstein-1 on the options' values, or on real values),
``squared`` and ``absolute`` (error of a scalar: a probability or a mean).

How each is computed
--------------------
==============  ============================  ======================================
set             loss                          method
==============  ============================  ======================================
interval        squared, absolute, kl         closed form: the ends of the interval
                                              (upper, pairwise) or the clipped point
KL ball         tv upper                      closed form: ``max_S [hi(p̂(S), r) - q(S)]``
                                              over option subsets S, hi the binary-KL
                                              upper end (the sup of u(S) over the ball)
KL ball         tv lower                      exact one-dimensional search: the smallest
                                              t whose TV ball around q meets C (the
                                              KL-closest point of a TV ball is known in
                                              closed form up to two thresholds)
KL ball         w1 upper                      exact: ``max_f [h_C(f) - f · q]`` over the
                                              vertices f of the 1-Lipschitz polytope,
                                              h_C the ball's support function (1-D dual)
KL ball         kl pairwise                   exact: ``KL(u‖a) - KL(u‖b)`` is linear in u,
                                              so ``δ̂ = h_C(log(b / a))``
KL ball         tv, w1 pairwise               an upper bound that is exact unless the worst
                                              case puts an option exactly at b's value:
                                              ``max_f min_g [h_C(f - g) + g·b - f·a]`` over
                                              a few candidate g (see :func:`ipm_pairwise`);
                                              beyond 10 options a's certified worst case
                                              minus b's certified best case, capped by
                                              L(a, b) (triangle inequality)
KL ball         kl upper                      general solver: successive linearization
                                              from d + 3 starting points (a convex
                                              function's sup; tested against brute force)
KL ball         kl, w1 lower                  a certified lower bound: the Lagrange dual
                                              (kl: closed-form inner minimum, w1: the
                                              minimax dual over Lipschitz f), with a point
                                              of the set giving the gap; SLSQP
                                              (:func:`minimize_convex`) is kept as a
                                              reference only
W1 ball         w1                            ``W1(P̂, Q̂) ± r`` (exact), pairwise bound
                                              ``min(d_a - d_b + 2r, W1(a, b))``
==============  ============================  ======================================

Upper bounds used in place of a sup never make a verdict too optimistic: a simulator
is declared at least as good as another only when even the bound says so.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Literal, overload

import numpy as np
from numpy.typing import ArrayLike

from .._validate import check_int
from .sets import binary_kl, binary_kl_interval, binary_kl_upper, kl_ball_support, kl_divergence

LOSSES = ("tv", "kl", "w1", "squared", "absolute")
CATEGORICAL_LOSSES = ("tv", "kl", "w1")
SCALAR_LOSSES = ("squared", "absolute")
MAX_SUBSET_OPTIONS = 14  # tv upper enumerates 2^d option subsets up to this d
MAX_PAIRWISE_OPTIONS = 10  # tv / w1 pairwise bounds enumerate 2^d vertices up to this d
_CHUNK = 2_000_000  # elements per vectorized block
_TABLE_ROWS = 250_000  # support-function rows per block of the tv table

Progress = Callable[[int, int], None]
#: from this many support-function values on, the compiled kernels (numba) take over from
#: numpy: loading numba costs about a second once, which small analyses need not pay
KERNEL_FROM = 400_000


def _hi_end(a: np.ndarray, r: np.ndarray, nonempty: ArrayLike, rest: ArrayLike) -> np.ndarray:
    """``hi(a, r)`` elementwise (0 for an empty subset), certified (never below the exact
    end): numpy bisection for a few values, the compiled kernel for many."""
    a = np.clip(np.asarray(a, dtype=float), 0.0, 1.0)
    r = np.broadcast_to(np.asarray(r, dtype=float), a.shape)
    nonempty = np.broadcast_to(nonempty, a.shape)
    if a.size >= KERNEL_FROM // 4:  # bisection in numpy is 64 passes: dearer per value
        from ._kernels import kl_upper_end

        return np.where(nonempty, kl_upper_end(a, r, nonempty, np.broadcast_to(rest, a.shape)), 0.0)
    return np.where(nonempty, binary_kl_upper(a, np.ascontiguousarray(r), outer=True), 0.0)


class SolverError(RuntimeError):
    """The general solver did not reach a feasible point (never silently wrong)."""


def check_loss(loss: object) -> str:
    if not isinstance(loss, str) or loss not in LOSSES:
        raise ValueError(f"`loss` must be one of {', '.join(LOSSES)}; got {loss!r}.")
    return loss


# --------------------------------------------------------------------------- losses


def scalar_loss(u: ArrayLike, q: ArrayLike, loss: str) -> np.ndarray:
    """``L(u, q)`` for scalars: squared or absolute error, or the binary KL(u ‖ q)."""
    u = np.asarray(u, dtype=float)
    q = np.asarray(q, dtype=float)
    if loss == "squared":
        return (u - q) ** 2
    if loss == "absolute":
        return np.abs(u - q)
    if loss == "kl":
        return binary_kl(u, q)
    raise ValueError(f"`loss` {loss!r} is not a loss of a scalar (squared, absolute, kl).")


def _sorted_values(values: ArrayLike | None) -> tuple[np.ndarray, np.ndarray]:
    """The order that sorts the options by value, and the gaps between sorted values."""
    if values is None:
        raise ValueError("the w1 loss needs the options' `values`.")
    v = np.asarray(values, dtype=float)
    order = np.argsort(v, kind="stable")
    return order, np.diff(v[order])


def categorical_loss(u: np.ndarray, q: np.ndarray, loss: str, values: np.ndarray | None = None) -> np.ndarray:
    """Row-wise ``L(u, q)`` for distributions over options: tv, kl (KL(u ‖ q)) or w1
    (on the options' ``values``)."""
    u = np.atleast_2d(np.asarray(u, dtype=float))
    q = np.atleast_2d(np.asarray(q, dtype=float))
    if loss == "tv":
        return 0.5 * np.abs(u - q).sum(axis=1)
    if loss == "kl":
        return kl_divergence(u, q)
    if loss == "w1":
        order, gaps = _sorted_values(values)
        cu = np.cumsum(u[:, order], axis=1)[:, :-1]
        cq = np.cumsum(q[:, order], axis=1)[:, :-1]
        return (np.abs(cu - cq) * gaps).sum(axis=1)
    raise ValueError(f"`loss` {loss!r} is not a loss between distributions (tv, kl, w1).")


# --------------------------------------------------------------------------- intervals


def interval_upper(low: np.ndarray, high: np.ndarray, q: np.ndarray, loss: str) -> np.ndarray:
    """``sup_{u in [low, high]} L(u, q)``: every scalar loss here is convex in u, so the
    sup is at an end of the interval."""
    return np.maximum(scalar_loss(low, q, loss), scalar_loss(high, q, loss))


def interval_lower(low: np.ndarray, high: np.ndarray, q: np.ndarray, loss: str) -> np.ndarray:
    """``inf_{u in [low, high]} L(u, q)``: 0 when q is inside, else at the nearer end."""
    return scalar_loss(np.clip(q, low, high), q, loss)


def interval_pairwise(
    low: np.ndarray, high: np.ndarray, a: np.ndarray, b: np.ndarray, loss: str
) -> np.ndarray:
    """``sup_u [L(u, a) - L(u, b)]``: the difference is linear in u (squared, kl) or
    monotone (absolute), so the sup is at an end of the interval."""
    lo = scalar_loss(low, a, loss) - scalar_loss(low, b, loss)
    hi = scalar_loss(high, a, loss) - scalar_loss(high, b, loss)
    return np.maximum(lo, hi)


# --------------------------------------------------------------------------- vertices


def tv_vertices(d: int) -> np.ndarray:
    """The 2^d indicator vectors of option subsets (rows): TV(u, q) = max_S (u - q)(S)."""
    return np.array(list(itertools.product((0.0, 1.0), repeat=d)))


def tv_argmax(x: np.ndarray) -> np.ndarray:
    """The subset indicator maximizing ``f · x`` (x sums to 0): the options where x > 0."""
    return (x > 0).astype(float)


def w1_vertices(values: ArrayLike) -> np.ndarray:
    """The 2^(d-1) vertices of ``{f : f(v_min) = 0, |f(v) - f(v')| <= |v - v'|}``: in the
    values' order, each step of f is + or - the gap (rows, in the options' order)."""
    order, gaps = _sorted_values(values)
    d = len(order)
    signs = np.array(list(itertools.product((-1.0, 1.0), repeat=d - 1))).reshape(-1, d - 1)
    steps = signs * gaps
    f_sorted = np.concatenate([np.zeros((len(signs), 1)), np.cumsum(steps, axis=1)], axis=1)
    f = np.empty_like(f_sorted)
    f[:, order] = f_sorted
    return f


def w1_argmax(x: np.ndarray, values: ArrayLike | None) -> np.ndarray:
    """The Lipschitz vertex maximizing ``f · x`` for rows x summing to 0 (summation by
    parts: each step of f has the sign opposite to the cumulative sum of x)."""
    order, gaps = _sorted_values(values)
    cum = np.cumsum(x[..., order], axis=-1)[..., :-1]
    steps = np.where(cum > 0, -1.0, 1.0) * gaps
    zeros = np.zeros(cum.shape[:-1] + (1,))
    f_sorted = np.concatenate([zeros, np.cumsum(steps, axis=-1)], axis=-1)
    f = np.empty_like(f_sorted)
    f[..., order] = f_sorted
    return f


# --------------------------------------------------------------------------- TV


def tv_subset_upper(p: np.ndarray, r: np.ndarray) -> np.ndarray:
    """``hi(p̂(S), r)`` for every option subset S (columns in :func:`tv_vertices` order):
    the largest ``u(S)`` on each ball. It does not depend on the simulator, so
    :func:`tv_upper` can reuse it for every simulator of the same scenarios.

    The empty subset's column is 0 (``u(∅) = 0`` for every u: it is *not* ``hi(0, r)``,
    which would put a floor of ``1 - e^{-r}`` under every worst case); a non-empty S with
    ``p̂(S) = 0`` does reach ``hi(0, r) = 1 - e^{-r}`` (mass moved onto options nobody
    chose). Each end is the outer end of the bisection bracket, so it is never below the
    exact ``hi``."""
    p = np.asarray(p, dtype=float)
    r = np.asarray(r, dtype=float)
    m, d = p.shape
    if d > MAX_SUBSET_OPTIONS:
        raise ValueError(
            f"tv over {d} options: the closed form enumerates 2^d option subsets "
            f"and stops at {MAX_SUBSET_OPTIONS} options."
        )
    subsets = tv_vertices(d)
    out = np.empty((m, len(subsets)))
    size = subsets.sum(axis=1)
    step = m if m * len(subsets) >= KERNEL_FROM else max(1, _CHUNK // len(subsets))
    for i in range(0, m, step):
        ps = np.clip(p[i : i + step] @ subsets.T, 0.0, 1.0)
        out[i : i + step] = _hi_end(ps, r[i : i + step, None], size > 0, size < d)
    out[:, 0] = 0.0  # the empty subset: u(∅) = 0 on every ball
    return out


def tv_support(p: np.ndarray, r: np.ndarray, subset_upper: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ball's support function at every subset indicator f and its maximizers
    ``(h (m, 2^d), u^f (m, 2^d, d))``, in closed form from :func:`tv_subset_upper`: ``h_C(f)
    = hi(p̂(S))`` and u^f scales p̂ by ``hi / p̂(S)`` inside S and ``(1 - hi) / (1 - p̂(S))``
    outside (an S nobody chose shares its mass evenly)."""
    p = np.asarray(p, dtype=float)
    subsets = tv_vertices(p.shape[1])
    a = p @ subsets.T  # p̂(S), (m, K)
    hi = subset_upper
    with np.errstate(divide="ignore", invalid="ignore"):
        inside = np.where(a > 0, hi / a, 0.0)
        outside = np.where(a < 1, (1.0 - hi) / (1.0 - a), 0.0)
        even = np.where(a > 0, 0.0, hi / np.maximum(subsets.sum(axis=1), 1.0))
    u = np.where(
        subsets[None] > 0,
        p[:, None, :] * inside[..., None] + even[..., None],
        p[:, None, :] * outside[..., None],
    )
    return hi, u


def tv_upper(
    p: np.ndarray, r: np.ndarray, q: np.ndarray, *, subset_upper: np.ndarray | None = None
) -> np.ndarray:
    """``sup_{KL(p̂ ‖ u) <= r} TV(u, q)`` in closed form, row by row.

    ``TV(u, q) = max_S (u(S) - q(S))`` over option subsets S, and the largest u(S) on the
    ball is the upper end of the binary-KL interval around p̂(S) (data processing: the
    ball's image under the two-cell coarsening is exactly that interval, reached by
    scaling p̂ inside S and outside it). So ``Δ̂ = max_S [hi(p̂(S), r) - q(S)]`` over the
    non-empty subsets (the empty one contributes 0, the full one ``1 - 1 = 0``); the value
    is exact, whatever the number of real answers n >= 1 (``subset_upper``:
    :func:`tv_subset_upper`'s table, when already computed).
    """
    p = np.asarray(p, dtype=float)
    q = np.asarray(q, dtype=float)
    hi = tv_subset_upper(p, r) if subset_upper is None else subset_upper
    return np.maximum((hi - q @ tv_vertices(p.shape[1]).T).max(axis=1), 0.0)


#: subset evaluations that :func:`tv_upper_exact_rows` may spend on rows where the
#: many-option bound is not tight (2^d per row)
EXACT_BUDGET = 4_000_000


def tv_upper_exact_rows(p: np.ndarray, r: np.ndarray, q: np.ndarray) -> np.ndarray:
    """The exact tv worst case by enumerating every non-empty option subset, row by row (for
    the few rows of many options where :func:`tv_upper_bound` leaves a gap)."""
    p = np.asarray(p, dtype=float)
    q = np.asarray(q, dtype=float)
    m, d = p.shape
    out = np.empty(m)
    masks = ((np.arange(1, 2**d)[:, None] >> np.arange(d)) & 1).astype(bool)
    nonempty, rest = masks.any(axis=1), ~masks.all(axis=1)
    for j in range(m):
        hi = _hi_end(masks @ p[j], np.full(len(masks), float(np.asarray(r)[j])), nonempty, rest)
        out[j] = max(float((hi - masks @ q[j]).max()), 0.0)
    return out


def _hi_slope(a: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``d hi / d a`` at ``x = hi(a, r)`` (implicit differentiation of ``KL(a ‖ x) = r``);
    0 where hi has reached 1 (flat there)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        slope = ((np.log1p(-a) - np.log1p(-x)) - (np.log(a) - np.log(x))) * x * (1 - x) / (x - a)
    return np.where((x >= 1.0 - 1e-12) | ~np.isfinite(slope), 0.0, np.maximum(slope, 0.0))


def tv_upper_bound(
    p: np.ndarray, r: np.ndarray, q: np.ndarray, *, tangents: int = 96
) -> tuple[np.ndarray, np.ndarray]:
    """``(upper, lower)`` of ``sup_C TV(u, q)`` without enumerating the 2^d option subsets
    (for many options): ``max_S [hi(p̂(S)) - q(S)]`` over non-empty S.

    *upper*: ``hi`` is concave in ``a = p̂(S)`` (the upper edge of a convex set), so each
    tangent ``hi(a0) + λ (a - a0)`` lies above it, and for that tangent the max over S is
    plain: ``Σ_i (λ p̂_i - q_i)⁺`` (or the best single option when no term is positive).
    The least of these over tangent points (the masses of the threshold sets below, and a
    grid) is a certified upper bound — the fractional relaxation of the subset problem.
    *lower*: the exact values of the threshold sets (options by increasing ``q_i / p̂_i``)
    and of each single option — points of the ball's image, so never above the sup.
    Their difference (the gap) is 0 when a threshold set is the optimum, as it is for most
    rows. ``tangents``: the grid's size, 1 to 10,000 (each tangent is one more pass over every
    row and option, held in memory at once)."""
    why = "each tangent is a pass over every row and option, all held in memory"
    tangents = check_int(tangents, "tangents", 1, 10_000, why)
    p = np.asarray(p, dtype=float)
    q = np.asarray(q, dtype=float)
    r = np.asarray(r, dtype=float)
    m = p.shape[0]
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(p > 0, q / np.where(p > 0, p, 1.0), np.inf)
    order = np.argsort(ratio, axis=1, kind="stable")
    pa = np.cumsum(np.take_along_axis(p, order, axis=1), axis=1)[:, :-1]  # T_1..T_{d-1}
    qa = np.cumsum(np.take_along_axis(q, order, axis=1), axis=1)[:, :-1]
    cand_a = np.concatenate([pa, p], axis=1)  # + single options
    cand_q = np.concatenate([qa, q], axis=1)
    rr = np.broadcast_to(r[:, None], cand_a.shape)
    lower = np.maximum((_hi_end(cand_a, rr, True, True) - cand_q).max(axis=1), 0.0)

    def bound(a0: np.ndarray) -> np.ndarray:  # the tangent at a0: (m, T)
        a0 = np.clip(a0, 1e-12, 1 - 1e-12)
        x0 = _hi_end(a0, r[:, None], True, True)
        lam = _hi_slope(a0, x0)
        c = x0 - lam * a0 + 1e-12  # a hair above: rounding
        terms = lam[..., None] * p[:, None, :] - q[:, None, :]
        pos = np.clip(terms, 0.0, None).sum(axis=2)
        return c + np.where(pos > 0, pos, terms.max(axis=2))

    grid = np.linspace(0.0, 1.0, tangents + 2)[1:-1]
    upper = bound(np.concatenate([pa, np.broadcast_to(grid, (m, grid.size))], axis=1)).min(axis=1)
    upper = np.minimum(upper, 1.0)
    return np.maximum(upper, lower), lower


def _tv_ball_projection(
    p: np.ndarray, q: np.ndarray, t: np.ndarray, srt: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
) -> np.ndarray:
    """The point of ``{u : TV(u, q) <= t}`` closest to p in KL(p ‖ ·), row by row.

    KKT: options with a large p_i / q_i are raised to ``c_up p_i``, those with a small
    ratio lowered to ``c_down p_i`` (options with p_i = 0 first), the rest stay at q_i;
    ``c_up`` and ``c_down`` move mass t each way (two piecewise-linear equations, solved
    exactly on the sorted ratios)."""
    cs, pcum, qcum, zero_q = srt
    m = p.shape[0]
    rows = np.arange(m)
    tt = t[:, None]
    # raise: F(c) = Σ_{c_j < c} (c p_j - q_j); F at breakpoint k uses the items before k
    pcum_prev = np.concatenate([np.zeros((m, 1)), pcum[:, :-1]], axis=1)
    qcum_prev = np.concatenate([np.zeros((m, 1)), qcum[:, :-1]], axis=1)
    with np.errstate(invalid="ignore"):
        f_at = np.where(np.isfinite(cs), cs * pcum_prev - qcum_prev, np.inf)
    k_up = (f_at <= tt).sum(axis=1)  # >= 1: F(c_0) = 0
    p_act = pcum[rows, k_up - 1]
    q_act = qcum[rows, k_up - 1]
    c_up = (t + q_act) / p_act
    # lower: G(c) = Σ_{c_j > c} (q_j - c p_j) (+ all q on options with p = 0)
    q_tot = qcum[:, -1]
    with np.errstate(invalid="ignore"):
        g_at = np.where(np.isfinite(cs), (q_tot[:, None] - qcum) - cs * (1.0 - pcum), -np.inf)
    # smallest k with G(c_k) <= t; the items after k-1 are lowered
    k_dn = np.argmax(g_at <= tt, axis=1)
    any_dn = (g_at <= tt).any(axis=1)
    p_rest = 1.0 - np.where(k_dn > 0, pcum[rows, np.maximum(k_dn - 1, 0)], 0.0)
    q_rest = q_tot - np.where(k_dn > 0, qcum[rows, np.maximum(k_dn - 1, 0)], 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        c_dn = np.where(any_dn & (p_rest > 0), (q_rest - t) / p_rest, np.inf)
    pos = p > 0
    with np.errstate(invalid="ignore"):
        cap = np.where(np.isfinite(c_dn)[:, None], c_dn[:, None] * p, np.inf)
    u = np.where(pos, np.minimum(np.maximum(q, c_up[:, None] * p), cap), 0.0)
    # options with p = 0: emptied when c_down is finite, else lowered by t in proportion
    with np.errstate(divide="ignore", invalid="ignore"):
        keep = np.where(np.isfinite(c_dn), 0.0, np.clip(1.0 - t / zero_q, 0.0, 1.0))
    u = np.where(pos, u, q * keep[:, None])
    return u


@overload
def tv_lower(
    p: np.ndarray, r: np.ndarray, q: np.ndarray, *, iters: int = 44, return_bracket: Literal[False] = False
) -> np.ndarray: ...


@overload
def tv_lower(
    p: np.ndarray, r: np.ndarray, q: np.ndarray, *, iters: int = 44, return_bracket: Literal[True]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...


def tv_lower(
    p: np.ndarray, r: np.ndarray, q: np.ndarray, *, iters: int = 44, return_bracket: bool = False
) -> np.ndarray | tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``inf_{KL(p̂ ‖ u) <= r} TV(u, q)``, exact up to bisection precision, row by row.

    It is the smallest t such that the TV ball of radius t around q meets the KL ball,
    i.e. ``min_{TV(u, q) <= t} KL(p̂ ‖ u) <= r``; that minimum is reached at a point known
    in closed form (:func:`_tv_ball_projection`) and decreases in t, so t is found by
    bisection on ``[0, TV(p̂, q)]``. The value is the bracket's lower end, never above the
    inf (``return_bracket``: also its upper end, a radius whose ball meets the set, and
    the point of the set there).
    """
    p = np.asarray(p, dtype=float)
    q = np.asarray(q, dtype=float)
    r = np.asarray(r, dtype=float)
    m = p.shape[0]
    pos = p > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        c = np.where(pos, q / np.where(pos, p, 1.0), np.inf)
    order = np.argsort(c, axis=1, kind="stable")
    cs = np.take_along_axis(c, order, axis=1)
    pcum = np.cumsum(np.take_along_axis(p, order, axis=1), axis=1)
    qcum = np.cumsum(np.take_along_axis(q, order, axis=1), axis=1)
    zero_q = np.where(~pos, q, 0.0).sum(axis=1)
    srt = (cs, pcum, qcum, zero_q)
    lo = np.zeros(m)
    hi = 0.5 * np.abs(p - q).sum(axis=1)
    inside = kl_divergence(p, q) <= r
    point = p.copy()
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        u = _tv_ball_projection(p, q, mid, srt)
        ok = kl_divergence(p, u) <= r
        hi = np.where(ok, mid, hi)
        lo = np.where(ok, lo, mid)
        if return_bracket:
            point = np.where(ok[:, None], u, point)
    lower = np.where(inside, 0.0, lo)
    if not return_bracket:
        return lower
    upper = np.where(inside, 0.0, np.minimum(hi, 0.5 * np.abs(point - q).sum(axis=1)))
    return np.minimum(lower, upper), upper, np.where(inside[:, None], q, point)


# --------------------------------------------------------------------------- IPM pairwise


def _support_rows(
    p: np.ndarray, w: np.ndarray, r: np.ndarray, *, value_only: bool = False
) -> tuple[np.ndarray, np.ndarray | None]:
    """kl_ball_support on (m, K, d) weights: p (m, d) and r (m,) repeated K times
    (``value_only``: the certified dual values, no maximizers)."""
    m, k, d = w.shape
    value, u = kl_ball_support(
        np.repeat(p, k, axis=0), w.reshape(m * k, d), np.repeat(r, k), value_only=value_only
    )
    return value.reshape(m, k), None if u is None else u.reshape(m, k, d)


def ipm_upper(
    p: np.ndarray, r: np.ndarray, q: np.ndarray, vertices: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``sup_C max_f f · (u - q)`` for a loss that is a max over ``vertices`` f
    (tv, w1): ``max_f [h_C(f) - f · q]``. Returns the values, h_C(f) (m, K) and the
    maximizers u^f (m, K, d) (reused by :func:`ipm_pairwise`)."""
    m = p.shape[0]
    w = np.broadcast_to(vertices, (m,) + vertices.shape)
    h, uf = _support_rows(p, w, r)
    assert uf is not None  # not value_only: the maximizers come with the values
    return (h - q @ vertices.T).max(axis=1), h, uf


def ipm_pairwise(
    p: np.ndarray,
    r: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    vertices: np.ndarray,
    argmax: Callable[[np.ndarray], np.ndarray],
    *,
    support: tuple[np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:
    """An upper bound of ``sup_C [L(u, a) - L(u, b)]`` for ``L(u, q) = max_f f · (u - q)``.

    ``L(u, a) - L(u, b) = max_f min_g [(f - g) · u - f · a + g · b]`` (f, g vertices), so

        δ̂ = max_f sup_u min_g [...] <= max_f min_{g in G(f)} [h_C(f - g) + g · b - f · a]

    for any candidate set G(f). The candidates are g = 0, g = f, the best vertex for
    p̂ - b and the best vertex for u^f - b (u^f maximizing f · u on C). The bound is exact
    when the maximizer's ``u - b`` has no zero coordinate (the inner min over all of the
    polytope is then at one of these vertices); otherwise it is slightly above the sup
    (tests measure how much).

    ``support`` = (h_C(f), u^f) from :func:`ipm_upper` saves recomputing them.
    """
    p = np.asarray(p, dtype=float)
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    m, d = p.shape
    if support is None:
        _, h, uf = ipm_upper(p, r, a, vertices)
    else:
        h, uf = support
    fa = a @ vertices.T  # (m, K)
    best = np.minimum(h - fa, (b - a) @ vertices.T)  # g = 0 and g = f
    out = np.full(m, -np.inf)
    k = len(vertices)
    step = max(1, _CHUNK // (k * d))
    for i in range(0, m, step):
        sl = slice(i, i + step)
        cand = [
            np.broadcast_to(argmax(p[sl] - b[sl])[:, None, :], (len(p[sl]), k, d)),
            argmax(uf[sl] - b[sl][:, None, :]),
        ]
        val = best[sl]
        for g in cand:
            hg, _ = _support_rows(p[sl], vertices[None] - g, r[sl], value_only=True)
            val = np.minimum(val, hg + (g * b[sl][:, None, :]).sum(axis=2) - fa[sl])
        out[sl] = val.max(axis=1)
    return out


MAX_TABLE_OPTIONS = 7  # tv pairwise tabulates the support function over 3^d sign patterns


def tv_support_table(p: np.ndarray, r: np.ndarray) -> np.ndarray:
    """``h_C(w)`` for every w in {-1, 0, 1}^d, row by row: shape (m, 3^d), column
    ``Σ_i (w_i + 1) 3^i``.

    ``h_C`` of a vector that is constant on three cells of options depends only on the
    cells' masses under p̂ (data processing, as in :func:`tv_upper`), so each value is a
    three-option support function; the table serves every tv comparison of these
    scenarios (any pair of simulators) by lookup.
    """
    p = np.asarray(p, dtype=float)
    r = np.asarray(r, dtype=float)
    m, d = p.shape
    w_all = np.array(list(itertools.product((-1.0, 0.0, 1.0), repeat=d)))[:, ::-1]  # i <-> 3^i
    # a support function is positively homogeneous and shifts with constants (u sums to 1):
    # h(v - 1) = h(v) - 1 and h(2v - 1) = 2 h(v) - 1, so the patterns with values in
    # {-1, 0} or {-1, 1} come from those in {0, 1}; only the others are solved
    v = np.array(list(itertools.product((0.0, 1.0), repeat=d)))[:, ::-1]
    c01, cm, cpm = _codes(v), _codes(v - 1.0), _codes(2.0 * v - 1.0)
    derived = np.setdiff1d(np.union1d(cm, cpm), c01)
    solved = np.setdiff1d(np.arange(3**d), derived)
    w = w_all[solved]
    cells = np.stack([w == 1.0, w == 0.0, w == -1.0], axis=1).astype(float)  # (K, 3, d)
    k = len(w)
    full = np.asarray(cells.any(axis=2))  # (K, 3)
    weights = np.where(full, np.array([1.0, 0.0, -1.0]), -3.0)  # empty: never used
    out = np.empty((m, 3**d))
    step = max(1, _TABLE_ROWS // k)  # a block of rows at a time: bounded memory
    for i in range(0, m, step):
        sl = slice(i, i + step)
        ms = np.einsum("md,kcd->mkc", p[sl], cells)  # (rows, K, 3)
        shape = ms.shape[:2]
        if m * k >= KERNEL_FROM:
            from ._kernels import support3

            ea, ec, eb = (np.broadcast_to(full[:, c], shape) for c in range(3))
            out[sl, solved] = support3(
                ms[..., 0], ms[..., 1], ms[..., 2], ea, ec, eb, np.broadcast_to(r[sl, None], shape)
            )
        else:
            rows = shape[0]
            out[sl, solved] = kl_ball_support(
                ms.reshape(rows * k, 3),
                np.broadcast_to(weights, (rows, k, 3)).reshape(rows * k, 3),
                np.repeat(r[sl], k),
                value_only=True,
            )[0].reshape(rows, k)
    base = out[:, c01]
    for codes, scale in ((cm, 1.0), (cpm, 2.0)):
        keep = np.isin(codes, derived)
        out[:, codes[keep]] = scale * base[:, keep] - 1.0
    return out


def _codes(w: np.ndarray) -> np.ndarray:
    d = w.shape[-1]
    return ((w + 1.0) @ (3.0 ** np.arange(d))).astype(int)


def tv_pairwise(
    p: np.ndarray,
    r: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    *,
    support: tuple[np.ndarray, np.ndarray] | None = None,
    table: np.ndarray | None = None,
) -> np.ndarray:
    """The TV pairwise bound (see :func:`ipm_pairwise`); up to :data:`MAX_TABLE_OPTIONS`
    options the support function comes from :func:`tv_support_table` (give ``table`` to
    reuse it across pairs)."""
    p = np.asarray(p, dtype=float)
    d = p.shape[1]
    _check_pairwise_size(d, "tv")
    if d > MAX_TABLE_OPTIONS:
        return ipm_pairwise(p, r, a, b, tv_vertices(d), tv_argmax, support=support)
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    table = tv_support_table(p, r) if table is None else table
    verts = tv_vertices(d)
    if support is None:
        _, h, uf = ipm_upper(p, r, a, verts)
    else:
        h, uf = support
    rows = np.arange(len(p))[:, None]
    fa = a @ verts.T
    best = np.minimum(h - fa, (b - a) @ verts.T)  # g = 0 and g = f
    # subsets as bit masks (bit i: option i): the code of f - g is then
    # Σ 3^i + T[S \ G] - T[G \ S] with T[mask] = Σ_{i in mask} 3^i, and g · b a lookup of
    # b's subset sums, so the candidates cost integer work on (m, K), not floats on (m, K, d)
    pow2 = 1 << np.arange(d)
    masks = (verts @ pow2).astype(np.int64)  # vertex k's mask
    bits = ((np.arange(2**d)[:, None] >> np.arange(d)) & 1).astype(float)
    t3 = (bits @ (3.0 ** np.arange(d))).astype(np.int64)
    c0 = int(t3[-1])
    b_sub = b @ bits.T  # (m, 2^d): b(G)

    def lookup(g_mask: np.ndarray) -> np.ndarray:  # g_mask: (m, 1) or (m, K)
        code = c0 + t3[masks[None, :] & ~g_mask] - t3[g_mask & ~masks[None, :]]
        return table[rows, code] + np.take_along_axis(b_sub, np.broadcast_to(g_mask, code.shape), axis=1)

    g2 = ((p > b).astype(np.int64) @ pow2)[:, None]  # tv_argmax(p - b)
    best = np.minimum(best, lookup(g2) - fa)
    g3 = (uf > b[:, None, :]).astype(np.int64) @ pow2  # tv_argmax(u^f - b)
    best = np.minimum(best, lookup(g3) - fa)
    return best.max(axis=1)


def w1_upper(p: np.ndarray, r: np.ndarray, q: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``sup_C W1(u, q)`` on the options' ``values``: exact over the 2^(d-1) vertices."""
    return ipm_upper(p, r, q, w1_vertices(values))[0]


def w1_upper_bound(
    p: np.ndarray, r: np.ndarray, q: np.ndarray, values: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``(upper, lower)`` of ``sup_C W1(u, q)`` for many options (no vertex enumeration).

    ``W1(u, q) = Σ_k gap_k |U_k - Q_k|`` over the sorted values' cumulative shares; each
    ``U_k`` lies in the binary-KL interval around ``P̂_k`` (data processing), so the sum of
    each term's own worst case is a certified upper bound; the general solver's point of
    the ball gives the lower one."""
    p = np.asarray(p, dtype=float)
    q = np.asarray(q, dtype=float)
    r = np.asarray(r, dtype=float)
    order, gaps = _sorted_values(values)
    cp = np.clip(np.cumsum(p[:, order], axis=1)[:, :-1], 0.0, 1.0)
    cq = np.cumsum(q[:, order], axis=1)[:, :-1]
    rr = np.broadcast_to(r[:, None], cp.shape)
    hi = _hi_end(cp, rr, True, True)
    lo = 1.0 - _hi_end(1.0 - cp, rr, True, True)
    upper = (np.maximum(hi - cq, cq - lo).clip(0.0) * gaps).sum(axis=1)
    lower, _ = maximize_convex(p, r, q, "w1", values=values)
    return np.maximum(upper, lower), lower


def w1_pairwise(
    p: np.ndarray,
    r: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    values: np.ndarray,
    *,
    support: tuple[np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:
    """The W1 pairwise bound (see :func:`ipm_pairwise`)."""
    _check_pairwise_size(len(values), "w1")
    return ipm_pairwise(p, r, a, b, w1_vertices(values), lambda x: w1_argmax(x, values), support=support)


def _check_pairwise_size(d: int, loss: str) -> None:
    if d > MAX_PAIRWISE_OPTIONS:
        raise ValueError(
            f"{loss} comparisons over {d} options: the pairwise bound enumerates "
            f"2^d vertices and stops at {MAX_PAIRWISE_OPTIONS} options."
        )


# --------------------------------------------------------------------------- KL loss


def kl_pairwise(p: np.ndarray, r: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``sup_C [KL(u ‖ a) - KL(u ‖ b)] = h_C(log(b / a))`` (the difference is linear)."""
    with np.errstate(divide="ignore"):
        w = np.log(np.asarray(b, dtype=float)) - np.log(np.asarray(a, dtype=float))
    return kl_ball_support(p, w, r, value_only=True)[0]  # the dual: never below the sup


def maximize_convex(
    p: np.ndarray,
    r: np.ndarray,
    q: np.ndarray,
    loss: str,
    *,
    values: np.ndarray | None = None,
    starts: Sequence[np.ndarray] | None = None,
    iters: int = 200,
    progress: Progress | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The general solver for ``sup_C L(u, q)`` with L convex in u (tv, kl, w1): the sup
    and the point of the set that reaches it, row by row.

    A convex function's sup over a convex set is at an extreme point. Successive
    linearization climbs to one: ``u ← argmax_{u in C} ∇L(u_k) · u`` never decreases L
    (convexity), and each step is the ball's support function. It starts from the
    maximizers of ``e_i · u`` (each option), of ``-log q · u``, ``(p̂ - q) · u`` and
    ``-p̂ · u`` (d + 3 starts) and keeps the best end point. It finds a feasible point,
    so the value is never above the true sup; the tests check it reaches brute force.
    """
    p = np.asarray(p, dtype=float)
    q = np.asarray(q, dtype=float)
    r = np.asarray(r, dtype=float)
    m, d = p.shape
    if starts is None:
        with np.errstate(divide="ignore"):
            starts = [np.broadcast_to(np.eye(d)[i], (m, d)) for i in range(d)] + [
                -np.log(np.maximum(q, 1e-300)),
                p - q,
                -p,
            ]
    best = np.full(m, -np.inf)
    point = p.copy()

    def grad(u: np.ndarray, qq: np.ndarray) -> np.ndarray:
        if loss == "tv":
            return np.sign(u - qq) + 0.0
        if loss == "kl":
            return np.log(np.maximum(u, 1e-300)) - np.log(np.maximum(qq, 1e-300))
        return w1_argmax(u - qq, values)  # a subgradient of W1

    for j, w0 in enumerate(starts):
        _, u = kl_ball_support(p, np.asarray(w0, dtype=float), r)
        val = categorical_loss(u, q, loss, values)
        active = np.ones(m, dtype=bool)
        for _ in range(iters):
            idx = np.flatnonzero(active)
            if idx.size == 0:
                break
            _, nu = kl_ball_support(p[idx], grad(u[idx], q[idx]), r[idx])
            nval = categorical_loss(nu, q[idx], loss, values)
            better = nval > val[idx] + 1e-13
            u[idx[better]] = nu[better]
            val[idx[better]] = nval[better]
            active[idx[~better]] = False
        point = np.where((val > best)[:, None], u, point)
        best = np.maximum(best, val)
        if progress is not None:
            progress(j + 1, len(starts))
    return best, point


def minimize_convex(
    p: np.ndarray,
    r: np.ndarray,
    q: np.ndarray,
    loss: str,
    *,
    values: np.ndarray | None = None,
    progress: Progress | None = None,
) -> np.ndarray:
    """The general convex solver: ``inf_C L(u, q)`` by SLSQP, one scenario at a time.

    Variables u (and, for tv and w1, an epigraph s of the absolute values, so the
    objective is smooth: ``Σ c_k s_k`` with ``s >= ±(M u - v)``); constraints
    ``Σ u = 1``, ``KL(p̂ ‖ u) <= r``, ``u >= 0``. The problem is convex, so SLSQP's
    local minimum is the minimum. Starts at p̂ (inside the ball); 0 when q is inside.
    """
    from scipy.optimize import minimize

    p = np.asarray(p, dtype=float)
    q = np.asarray(q, dtype=float)
    r = np.asarray(r, dtype=float)
    m, d = p.shape
    out = np.empty(m)
    if loss == "tv":
        M, v_of, c = np.eye(d), (lambda qq: qq), np.full(d, 0.5)
    elif loss == "w1":
        order, gaps = _sorted_values(values)
        M = np.zeros((d - 1, d))
        for k in range(d - 1):
            M[k, order[: k + 1]] = 1.0
        v_of, c = (lambda qq: M @ qq), gaps
    else:
        M = None
    for j in range(m):
        pj, qj, rj = p[j], q[j], float(r[j])
        if kl_divergence(pj[None], qj[None])[0] <= rj:
            out[j] = 0.0
            continue
        pos = pj > 0
        # each u_i lies in the binary-KL interval around p_i (data processing); bounding it
        # there keeps SLSQP away from the KL constraint's pole at u_i = 0
        lb, ub = binary_kl_interval(pj, rj)
        lb = np.where(pos, np.maximum(lb, 1e-12), 0.0)

        def kl_con(x: np.ndarray, pj: np.ndarray = pj, pos: np.ndarray = pos, rj: float = rj) -> float:
            u = x[:d]
            return rj - float(np.sum(pj[pos] * np.log(pj[pos] / np.maximum(u[pos], 1e-300))))

        def kl_jac(x: np.ndarray, pj: np.ndarray = pj, pos: np.ndarray = pos) -> np.ndarray:
            g = np.zeros_like(x)
            g[:d] = np.where(pos, pj / np.maximum(x[:d], 1e-300), 0.0)
            return g

        fun: Callable[[np.ndarray], float]
        jac: Callable[[np.ndarray], np.ndarray]
        if M is None:  # kl: KL(u ‖ q), smooth

            def kl_fun(x: np.ndarray, qj: np.ndarray = qj) -> float:
                u = np.maximum(x[:d], 1e-300)
                return float(np.sum(np.where(x[:d] > 0, x[:d] * np.log(u / qj), 0.0)))

            def kl_grad(x: np.ndarray, qj: np.ndarray = qj) -> np.ndarray:
                return np.log(np.maximum(x[:d], 1e-300) / qj) + 1.0

            fun, jac = kl_fun, kl_grad
            x0 = pj.copy()
            cons = [
                {"type": "eq", "fun": lambda x: float(x[:d].sum() - 1.0), "jac": lambda x: np.ones(d)},
                {"type": "ineq", "fun": kl_con, "jac": kl_jac},
            ]
            bounds = list(zip(lb, ub, strict=True))
        else:
            v = v_of(qj)
            k = len(c)

            def lp_fun(x: np.ndarray, c: np.ndarray = c) -> float:
                return float(c @ x[d:])

            def lp_grad(x: np.ndarray, c: np.ndarray = c) -> np.ndarray:
                return np.concatenate([np.zeros(d), c])

            fun, jac = lp_fun, lp_grad
            A = np.hstack([M, -np.eye(k)])
            B = np.hstack([-M, -np.eye(k)])
            cons = [
                {
                    "type": "eq",
                    "fun": lambda x: float(x[:d].sum() - 1.0),
                    "jac": lambda x, k=k: np.concatenate([np.ones(d), np.zeros(k)]),
                },
                {"type": "ineq", "fun": kl_con, "jac": kl_jac},
                {"type": "ineq", "fun": lambda x, A=A, v=v: -(A @ x - v), "jac": lambda x, A=A: -A},
                {"type": "ineq", "fun": lambda x, B=B, v=v: -(B @ x + v), "jac": lambda x, B=B: -B},
            ]
            x0 = np.concatenate([pj, np.abs(M @ pj - v)])
            bounds = list(zip(lb, ub, strict=True)) + [(0.0, None)] * k
        res = minimize(
            fun,
            x0,
            jac=jac,
            constraints=cons,
            bounds=bounds,
            method="SLSQP",
            options={"ftol": 1e-12, "maxiter": 500},
        )
        u = np.clip(res.x[:d], 0.0, None)
        u = u / u.sum()
        if kl_divergence(pj[None], u[None])[0] > rj * (1 + 1e-6) + 1e-12:
            raise SolverError(
                f"the convex solver ended outside the confidence set of scenario "
                f"{j + 1} ({res.message}); please report this data."
            )
        # report the loss at the solver's point, but never above the start's value
        val = float(categorical_loss(u[None], qj[None], loss, values)[0])
        out[j] = max(0.0, min(val, float(categorical_loss(pj[None], qj[None], loss, values)[0])))
        if progress is not None and (j + 1) % 10 == 0:
            progress(j + 1, m)
    if progress is not None:
        progress(m, m)
    return out


def kl_upper(p: np.ndarray, r: np.ndarray, q: np.ndarray, *, progress: Progress | None = None) -> np.ndarray:
    """``sup_C KL(u ‖ q)``: the certified upper bound of :func:`kl_upper_bound`."""
    return kl_upper_bound(p, r, q)[0]


def _kl_term_max(
    lo: np.ndarray,
    hi: np.ndarray,
    q: np.ndarray,
    p: np.ndarray,
    lam: np.ndarray,
    nu: np.ndarray,
    iters: int = 40,
) -> tuple[np.ndarray, np.ndarray]:
    """``max over x in [lo, hi] of φ(x) = x log(x/q) + λ p log(x/p) - ν x`` and its argmax,
    elementwise. φ is concave on (0, λp) and convex beyond, so the max is at an end or at
    the one stationary point of the concave part (found by bisection on φ')."""

    def phi(x: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            a = np.where(x > 0, x * (np.log(np.where(x > 0, x, 1.0)) - np.log(q)), 0.0)
            b = np.where(
                p > 0, lam * p * (np.log(np.where(p > 0, x, 1.0)) - np.log(np.where(p > 0, p, 1.0))), 0.0
            )
        return a + b - nu * x

    def dphi(x: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore"):
            return np.log(x) - np.log(q) + 1.0 + lam * p / x - nu

    best_x = np.where(phi(lo) >= phi(hi), lo, hi)
    best = np.maximum(phi(lo), phi(hi))
    right = np.minimum(hi, lam * p)
    inner = (lo > 0) & (right > lo)
    a, b = lo.copy(), np.where(inner, right, lo)
    with np.errstate(invalid="ignore"):
        inner &= (dphi(np.where(inner, a, 1.0)) > 0) & (dphi(np.where(inner, b, 1.0)) < 0)
    for _ in range(iters):
        mid = 0.5 * (a + b)
        up = dphi(np.where(inner, mid, 1.0)) > 0
        a = np.where(inner & up, mid, a)
        b = np.where(inner & ~up, mid, b)
    x = 0.5 * (a + b)
    v = np.where(inner, phi(np.where(inner, x, lo)), -np.inf)
    return np.maximum(best, v), np.where(v > best, x, best_x)


def kl_upper_bound(
    p: np.ndarray, r: np.ndarray, q: np.ndarray, *, iters: int = 26
) -> tuple[np.ndarray, np.ndarray]:
    """``(upper, lower)`` of ``sup_C KL(u ‖ q)``.

    *upper* — Lagrange duality, twice: on C each ``u_i`` lies in the binary-KL interval
    ``[lo_i, hi_i]`` around p̂_i, and for any λ >= 0 and ν

        sup_C KL(u ‖ q) <= λ r + ν + Σ_i max_{x in [lo_i, hi_i]} [x log(x / q_i)
                                                   + λ p̂_i log(x / p̂_i) - ν x]

    (the penalty ``λ (r - KL(p̂ ‖ u))`` is >= 0 on C, and ``ν (1 - Σ u)`` = 0). Each term is
    a one-dimensional maximum; ν is set by bisection (the sum's slope in ν is
    ``1 - Σ x_i*``) and λ near the multiplier of the solver's point (its KKT conditions),
    where the bound is least. Every (λ, ν) gives a valid bound.
    *lower* — the general solver's point of the ball (:func:`maximize_convex`). Their
    difference is the gap reported with the value.
    """
    p = np.asarray(p, dtype=float)
    q = np.asarray(q, dtype=float)
    r = np.asarray(r, dtype=float)
    m = p.shape[0]
    lo, hi = binary_kl_interval(p, np.broadcast_to(r[:, None], p.shape))
    lo = np.where(p > 0, np.maximum(lo, 1e-300), 0.0)
    lower, u = maximize_convex(p, r, q, "kl")
    with np.errstate(divide="ignore"):
        base_lo = (np.log(np.maximum(lo, 1e-300)) - np.log(q) + 1.0).min(axis=1) - 1.0
        base_hi = (np.log(np.maximum(hi, 1e-300)) - np.log(q) + 1.0).max(axis=1) + 1.0

    def dual(lam: np.ndarray) -> np.ndarray:  # min over ν of the bound at λ (any ν is valid)
        lam = lam[:, None]
        a = base_lo
        b = np.minimum(base_hi + (lam * p / np.maximum(lo, 1e-300)).max(axis=1), 1e300)
        for _ in range(iters):
            nu = 0.5 * (a + b)
            _, x = _kl_term_max(lo, hi, q, p, lam, nu[:, None], iters=24)
            up = x.sum(axis=1) > 1.0  # slope < 0: raise ν
            a = np.where(up, nu, a)
            b = np.where(up, b, nu)
        out = np.full(m, np.inf)
        for nu in (a, b):
            val, _ = _kl_term_max(lo, hi, q, p, lam, nu[:, None], iters=30)
            out = np.minimum(out, lam[:, 0] * r + nu + val.sum(axis=1))
        return out

    # the multiplier λ of the solver's point (its KKT conditions, log(u/q) + 1 + λ p / u = ν
    # on the options with p̂ > 0, fitted by least squares) is where the dual is least when
    # that point is the global maximum; a few multiples of it cover the rest
    pos = (p > 0) & (u > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        y = np.where(pos, np.log(np.where(pos, u, 1.0) / q) + 1.0, 0.0)
        x = np.where(pos, p / np.where(pos, u, 1.0), 0.0)
    k = pos.sum(axis=1)
    mx, my = x.sum(axis=1) / np.maximum(k, 1), y.sum(axis=1) / np.maximum(k, 1)
    sxx = (np.where(pos, x - mx[:, None], 0.0) ** 2).sum(axis=1)
    sxy = (np.where(pos, (x - mx[:, None]) * (y - my[:, None]), 0.0)).sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        lam0 = np.where(sxx > 1e-300, np.clip(-sxy / sxx, 0.0, None), 0.0)
    upper = dual(np.zeros(m))
    for f in (1.0, 0.6, 1.7):
        upper = np.minimum(upper, dual(lam0 * f))
    return np.maximum(upper, lower), lower


# --------------------------------------------------------------------------- certified best cases
#
# The lower edge of the band must never be above the exact infimum. A solver's point of the
# ball gives a value *above* it, so each best case below is a Lagrange dual value (below the
# infimum for every choice of the multipliers, by weak duality), and a point of the ball
# gives the other end: their difference is the gap reported with the lower edge.

#: rounding slack subtracted from every dual value (the one-dimensional minima are computed
#: to about 1e-15 relative; this keeps the bound on the safe side of them)
_ROUNDING = 1e-12


def _feasible_toward(p: np.ndarray, u: np.ndarray, r: np.ndarray, iters: int = 40) -> np.ndarray:
    """The point ``p + t (u - p)`` with the largest t in [0, 1] inside the ball
    ``KL(p ‖ ·) <= r`` (the ball is convex and holds p, so bisection on t is exact)."""
    lo = np.zeros(p.shape[0])
    hi = np.ones(p.shape[0])
    ok = kl_divergence(p, u) <= r
    lo[ok] = 1.0
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        inside = kl_divergence(p, p + mid[:, None] * (u - p)) <= r
        lo = np.where(inside & ~ok, mid, lo)
        hi = np.where(inside | ok, hi, mid)
    return p + lo[:, None] * (u - p)


def _kl_lagrangian(
    p: np.ndarray, q: np.ndarray, lam: np.ndarray, nu: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``min over u >= 0`` of ``KL(u ‖ q) + λ Σ p̂ log(p̂ / u) - ν (Σ u - 1)`` (without the
    ``- λ r``), and its minimizer: separable, each coordinate in closed form through the
    Wright omega function (``x = λ p̂ / ω(log(λ p̂) - ν + 1 - log q)``; ``x = q e^{ν - 1}``
    where p̂ = 0)."""
    from scipy.special import wrightomega

    pos = p > 0
    lam_c = lam[:, None]
    nu_c = nu[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        lp = np.log(np.where(pos, lam_c * p, 1.0))
        om = wrightomega(lp - nu_c + 1.0 - np.log(q))
        x = np.where(pos, np.exp(lp) / om, q * np.exp(nu_c - 1.0))
        logx = np.where(pos, lp - np.log(om), np.log(q) + nu_c - 1.0)
        term = x * (logx - np.log(q)) - nu_c * x
        term = term + np.where(pos, lam_c * p * (np.log(np.where(pos, p, 1.0)) - logx), 0.0)
    # the sum's magnitude before cancellation: its rounding error is a tiny share of it
    scale = np.abs(term).sum(axis=1) + np.abs(nu)
    return term.sum(axis=1) + nu, x, scale


def _kl_nu(p: np.ndarray, q: np.ndarray, lam: np.ndarray, iters: int = 16) -> np.ndarray:
    """ν with ``Σ x(λ, ν) = 1`` (the best ν for this λ), by Newton steps on log Σ x (any ν
    gives a valid bound; this one gives the best)."""
    pos = p > 0
    # start where x = p̂ would be stationary on average (ν is about -λ when λ is large)
    with np.errstate(divide="ignore", invalid="ignore"):
        nu = np.where(pos, p * (np.log(np.where(pos, p, 1.0)) - np.log(q) + 1.0), 0.0).sum(axis=1)
    nu = nu - lam
    for _ in range(iters):
        _, x, _ = _kl_lagrangian(p, q, lam, nu)
        s = x.sum(axis=1)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            ds = (x * x / (x + np.where(pos, lam[:, None] * p, 0.0))).sum(axis=1)
            step = np.log(s) * s / ds
        nu = nu - np.where(np.isfinite(step), np.clip(step, -50.0, 50.0), 0.0)
    return nu


def kl_lower_bound(
    p: np.ndarray, r: np.ndarray, q: np.ndarray, *, iters: int = 36
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(lower, upper, point)`` of ``inf_{KL(p̂ ‖ u) <= r} KL(u ‖ q)``, row by row.

    *lower* — weak duality: for every λ >= 0 and ν,

        inf_C KL(u ‖ q) >= min_{u >= 0} [KL(u ‖ q) + λ (KL(p̂ ‖ u) - r) - ν (Σ u - 1)]

    and the right side is separable, each coordinate's minimum in closed form
    (:func:`_kl_lagrangian`). ν is set so the minimizer sums to 1 and λ by bisection on
    the dual's slope ``KL(p̂ ‖ x) - r`` (it is concave in λ), where the bound is tightest.
    *upper* — the dual's minimizer pulled toward p̂ until it lies in the ball: a point of
    the set, so never below the infimum; *point* is that point (q when q is in the ball).
    Both bounds are 0 (exact) when q is in the ball.
    """
    p = np.asarray(p, dtype=float)
    q = np.asarray(q, dtype=float)
    r = np.asarray(r, dtype=float)
    m = p.shape[0]
    inside = kl_divergence(p, q) <= r
    a = np.full(m, -25.0)
    b = np.full(m, 25.0)
    best = np.zeros(m)
    slack = np.zeros(m)
    point = p.copy()
    for k in range(iters + 2):
        if k < iters:
            s = 0.5 * (a + b)
        else:  # finish at both ends of the bracket
            s = a if k == iters else b
        lam = np.exp(s)
        nu = _kl_nu(p, q, lam)
        val, x, scale = _kl_lagrangian(p, q, lam, nu)
        val = val - lam * r
        scale = scale + lam * r
        # each coordinate's minimum comes from the Wright omega function (relative error
        # ~1e-15); 1e-12 of the terms' magnitude keeps the bound below the exact dual value
        val = val - _ROUNDING * (1.0 + scale)
        better = np.isfinite(val) & (val > best)
        best = np.where(better, val, best)
        slack = np.where(better, _ROUNDING * (1.0 + scale), slack)
        xs = x / x.sum(axis=1, keepdims=True)
        point = np.where(better[:, None], xs, point)
        if k < iters:
            far = kl_divergence(p, xs) > r  # slope > 0: a larger λ
            a = np.where(far, s, a)
            b = np.where(far, b, s)
    lower = np.maximum(best, 0.0)
    feas = _feasible_toward(p, point, r)
    at_feas, at_p = kl_divergence(feas, q), kl_divergence(p, q)
    upper = np.minimum(at_feas, at_p)
    feas = np.where((at_feas <= at_p)[:, None], feas, p)
    lower = np.where(inside, 0.0, np.minimum(lower, upper))
    upper = np.where(inside, 0.0, upper)
    return lower, upper, np.where(inside[:, None], q, feas)


def w1_lower_bound(
    p: np.ndarray,
    r: np.ndarray,
    q: np.ndarray,
    values: np.ndarray,
    *,
    iters: int = 150,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(lower, upper, point)`` of ``inf_{KL(p̂ ‖ u) <= r} W1(u, q)`` on the options' ``values``.

    ``W1(u, q) = max_f f · (u - q)`` over the 1-Lipschitz f, so by the minimax theorem
    ``inf_C W1 = max_f [inf_C f · u - f · q] = max_f [-h_C(-f) - f · q]``: *every*
    Lipschitz f gives a lower bound once h_C is the certified (dual) support value. f is
    found by projected gradient ascent on its steps between sorted values (a box: each
    step within ± the gap; the gradient is ``Q_k - U_k`` at the ball's point ``U``
    minimizing f · u), with a step size that grows while the bound improves and halves
    when it does not. *upper* — W1 at the points met on the way (points of the set), and
    at p̂; *point* the point of the set where W1 was least (q when q is in the ball). Both
    bounds are 0 when q is in the ball."""
    p = np.asarray(p, dtype=float)
    q = np.asarray(q, dtype=float)
    r = np.asarray(r, dtype=float)
    m = p.shape[0]
    order, gaps = _sorted_values(values)
    cq = np.cumsum(q[:, order], axis=1)[:, :-1]
    inside = kl_divergence(p, q) <= r

    def f_of(steps: np.ndarray) -> np.ndarray:
        f_sorted = np.concatenate([np.zeros((m, 1)), np.cumsum(steps, axis=1)], axis=1)
        f = np.empty_like(f_sorted)
        f[:, order] = f_sorted
        return f

    def evaluate(steps: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        f = f_of(steps)
        _, u = kl_ball_support(p, -f, r)
        cu = np.cumsum(u[:, order], axis=1)[:, :-1]
        return (f * (u - q)).sum(axis=1), cq - cu, (np.abs(cu - cq) * gaps).sum(axis=1), u

    steps = -np.sign(np.cumsum(p[:, order], axis=1)[:, :-1] - cq) * gaps * 0.5
    val, grad, upper, point = evaluate(steps)
    at_p = categorical_loss(p, q, "w1", values)
    point = np.where((at_p < upper)[:, None], p, point)
    upper = np.minimum(upper, at_p)
    best_steps, best = steps, val
    eta = np.full(m, 1.0 / max(float(gaps.max()), 1e-12))
    for _ in range(iters):
        trial = np.clip(best_steps + eta[:, None] * grad * gaps, -gaps, gaps)
        tval, tgrad, tup, tu = evaluate(trial)
        point = np.where((tup < upper)[:, None], tu, point)
        upper = np.minimum(upper, tup)
        ok = tval > best
        best = np.where(ok, tval, best)
        best_steps = np.where(ok[:, None], trial, best_steps)
        grad = np.where(ok[:, None], tgrad, grad)
        eta = np.where(ok, eta * 1.5, eta * 0.4)
        if np.all(upper - best <= 1e-10):
            break
    f = f_of(best_steps)
    h = kl_ball_support(p, -f, r, value_only=True)[0]  # certified: never below the sup
    dual = -h - (f * q).sum(axis=1)
    lower = np.clip(dual - _ROUNDING * (1.0 + np.abs(dual)), 0.0, None)
    lower = np.where(inside, 0.0, np.minimum(lower, upper))
    upper = np.where(inside, 0.0, upper)
    return lower, upper, np.where(inside[:, None], q, point)


# --------------------------------------------------------------------------- W1 on real values


def w1_distance(x: ArrayLike, y: ArrayLike) -> float:
    """``W1`` between the empirical distributions of samples x and y (exact)."""
    x = np.sort(np.asarray(x, dtype=float))
    y = np.sort(np.asarray(y, dtype=float))
    allv = np.sort(np.concatenate([x, y]))
    deltas = np.diff(allv)
    fx = np.searchsorted(x, allv[:-1], side="right") / len(x)
    fy = np.searchsorted(y, allv[:-1], side="right") / len(y)
    return float(np.sum(np.abs(fx - fy) * deltas))


def w1_to_uniform(x: ArrayLike, low: float, high: float) -> float:
    """``W1`` between the empirical distribution of x and the uniform on [low, high]
    (exact: the integral of |F̂ - F_U| is summed piece by piece)."""
    x = np.sort(np.asarray(x, dtype=float))
    n = len(x)
    pts = np.unique(np.concatenate([[low, high], np.clip(x, low, high)]))
    total = 0.0
    # below low and above high only F̂ - 0 or 1 - F̂ counts
    total += float(np.sum(np.clip(low - x, 0.0, None))) / n
    total += float(np.sum(np.clip(x - high, 0.0, None))) / n
    span = high - low
    for a0, b0 in itertools.pairwise(pts):
        if b0 <= a0:
            continue
        c = np.searchsorted(x, a0, side="right") / n  # F̂ on (a0, b0)
        # ∫ |c - (t - low)/span| dt over [a0, b0]: linear in t, crossing at t* = low + c span
        fa, fb = (a0 - low) / span - c, (b0 - low) / span - c
        if fa * fb >= 0:
            total += abs(fa + fb) / 2 * (b0 - a0)
        else:
            ts = low + c * span
            total += abs(fa) / 2 * (ts - a0) + abs(fb) / 2 * (b0 - ts)
    return total


def w1ball_upper(dist: np.ndarray, r: np.ndarray) -> np.ndarray:
    """``sup_{W1(P̂, Q) <= r} W1(Q, Q̂) = W1(P̂, Q̂) + r`` (moving a little mass far away)."""
    return np.asarray(dist, dtype=float) + np.asarray(r, dtype=float)


def w1ball_lower(dist: np.ndarray, r: np.ndarray) -> np.ndarray:
    """``inf_{W1(P̂, Q) <= r} W1(Q, Q̂) = max(W1(P̂, Q̂) - r, 0)`` (mixtures of P̂ and Q̂)."""
    return np.maximum(np.asarray(dist, dtype=float) - np.asarray(r, dtype=float), 0.0)


def w1ball_pairwise(dist_a: np.ndarray, dist_b: np.ndarray, dist_ab: np.ndarray, r: np.ndarray) -> np.ndarray:
    """An upper bound of ``sup_{W1(P̂, Q) <= r} [W1(Q, a) - W1(Q, b)]``:
    ``min(W1(P̂, a) - W1(P̂, b) + 2 r, W1(a, b))`` (triangle inequality, twice)."""
    return np.minimum(np.asarray(dist_a) - np.asarray(dist_b) + 2 * np.asarray(r), np.asarray(dist_ab))


__all__ = [
    "CATEGORICAL_LOSSES",
    "LOSSES",
    "MAX_PAIRWISE_OPTIONS",
    "MAX_SUBSET_OPTIONS",
    "SCALAR_LOSSES",
    "SolverError",
    "categorical_loss",
    "check_loss",
    "interval_lower",
    "interval_pairwise",
    "interval_upper",
    "ipm_pairwise",
    "ipm_upper",
    "kl_lower_bound",
    "kl_pairwise",
    "kl_upper",
    "maximize_convex",
    "minimize_convex",
    "scalar_loss",
    "tv_argmax",
    "tv_lower",
    "tv_pairwise",
    "tv_subset_upper",
    "tv_support_table",
    "tv_upper",
    "tv_vertices",
    "w1_argmax",
    "w1_distance",
    "w1_lower_bound",
    "w1_pairwise",
    "w1_to_uniform",
    "w1_upper",
    "w1_vertices",
    "w1ball_lower",
    "w1ball_pairwise",
    "w1ball_upper",
]
