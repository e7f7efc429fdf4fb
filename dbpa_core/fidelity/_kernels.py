"""Compiled kernels of the tv pseudo-discrepancies (numba; compiled once, cached on disk).

:func:`support3` is the support function of a KL ball for a weight vector that takes the
values 1, 0 and -1 on three cells of options: by data processing it depends only on the
cells' masses (A, C, B) under p̂ and on which cells hold options at all, so it is a
three-option problem,

    h = sup {x - z : KL((A, C, B) ‖ (x, y, z)) <= r},

and with B = 0 it is the binary-KL upper end ``hi(A, r)`` (the largest u(S) on the ball).
Each value is the Lagrange dual ``D(μ) = μ - e^{-r} Π_i (μ - w_i)^{p_i}`` at the μ found
by safeguarded Newton steps on ``log(μ - w_top)``: weak duality keeps D(μ) at or above the
exact sup for *every* feasible μ, so the value is a certified upper bound, and the search
converges to it (equal to the exact value up to rounding).

The kernels release the GIL, so a large call is split across the machine's cores with
ordinary threads (safe when several callers run at once, unlike numba's own parallel loops).
"""

from __future__ import annotations

import itertools
import math
import os
from concurrent.futures import ThreadPoolExecutor

import numba as nb
import numpy as np
from numpy.typing import ArrayLike


@nb.njit(cache=True, nogil=True)
def _one(a: float, c: float, b: float, ea: float, ec: float, eb: float, r: float) -> float:
    if r <= 0.0:
        return a - b
    m0, m1, m2 = a, c, b
    w0, w1, w2 = 1.0, 0.0, -1.0
    # the largest weight that carries mass (top) and the largest weight of an option with
    # no mass (free: it can take mass without changing the KL)
    if m0 > 0.0:
        top = w0
    elif m1 > 0.0:
        top = w1
    else:
        top = w2
    free = -np.inf
    if ea and m0 <= 0.0:
        free = w0
    elif ec and m1 <= 0.0 and w1 > free:
        free = w1
    elif eb and m2 <= 0.0 and w2 > free:
        free = w2
    g0 = top - w0 if m0 > 0.0 else 0.0
    g1 = top - w1 if m1 > 0.0 else 0.0
    g2 = top - w2 if m2 > 0.0 else 0.0
    ptop = (
        (m0 if g0 == 0.0 and m0 > 0.0 else 0.0)
        + (m1 if g1 == 0.0 and m1 > 0.0 else 0.0)
        + (m2 if g2 == 0.0 and m2 > 0.0 else 0.0)
    )
    t = 0.0
    if ptop < 1.0 - 1e-15:
        # root of g(s) = -r + Σ p log1p(y) + log Σ p / (1 + y), y = gap / e^s (decreasing)
        mean = m0 * w0 + m1 * w1 + m2 * w2
        var = m0 * (w0 - mean) ** 2 + m1 * (w1 - mean) ** 2 + m2 * (w2 - mean) ** 2
        s_lo, s_hi = -80.0, 80.0
        s = 0.5 * math.log(max(var, 1e-300) / max(2.0 * r, 1e-300))
        s = min(max(s, s_lo + 1.0), s_hi - 1.0)
        for _ in range(200):
            t = math.exp(s)
            y0, y1, y2 = g0 / t, g1 / t, g2 / t
            i0, i1, i2 = m0 / (1.0 + y0), m1 / (1.0 + y1), m2 / (1.0 + y2)
            sa = i0 + i1 + i2
            sb = i0 / (1.0 + y0) + i1 / (1.0 + y1) + i2 / (1.0 + y2)
            g = -r + m0 * math.log1p(y0) + m1 * math.log1p(y1) + m2 * math.log1p(y2) + math.log(sa)
            if g > 0.0:
                s_lo = s
            else:
                s_hi = s
            slope = sa - sb / sa
            new = s - g / slope if slope < 0.0 else 0.5 * (s_lo + s_hi)
            if not (s_lo < new < s_hi):
                new = 0.5 * (s_lo + s_hi)
            if abs(new - s) <= 1e-13 or s_hi - s_lo <= 1e-13:
                s = new
                break
            s = new
        t = math.exp(s)
    mu = top + t
    if free > mu:  # a free option takes mass: μ sits at its weight
        lg = -r
        for m, w in ((m0, w0), (m1, w1), (m2, w2)):
            if m > 0.0:
                lg += m * math.log(free - w)
        return free - math.exp(lg)
    if t == 0.0:
        return top
    lg = -r + m0 * math.log1p(g0 / t) + m1 * math.log1p(g1 / t) + m2 * math.log1p(g2 / t)
    return top - t * math.expm1(lg)


@nb.njit(cache=True, nogil=True)
def _many(
    a: np.ndarray,
    c: np.ndarray,
    b: np.ndarray,
    ea: np.ndarray,
    ec: np.ndarray,
    eb: np.ndarray,
    r: np.ndarray,
    out: np.ndarray,
) -> None:
    for i in range(a.size):
        out[i] = _one(a[i], c[i], b[i], ea[i], ec[i], eb[i], r[i])


SPLIT_FROM = 50_000  # values per thread at least: below that one thread does it all


def support3(
    a: np.ndarray, c: np.ndarray, b: np.ndarray, ea: np.ndarray, ec: np.ndarray, eb: np.ndarray, r: np.ndarray
) -> np.ndarray:
    """``sup {x - z : KL((a, c, b) ‖ (x, y, z)) <= r}`` elementwise (arrays of one shape):
    masses a, c, b of the cells weighted 1, 0, -1 (summing to 1), ``ea, ec, eb`` whether
    each cell holds an option (a cell with no option cannot take mass), radius r.
    A certified upper bound, equal to the exact value up to rounding."""
    arrays = [np.ascontiguousarray(np.ravel(x), dtype=float) for x in (a, c, b, r)]
    flags = [np.ascontiguousarray(np.ravel(x), dtype=np.bool_) for x in (ea, ec, eb)]
    out = np.empty(arrays[0].size)
    workers = min(os.cpu_count() or 1, 8, out.size // SPLIT_FROM)
    a_, c_, b_, r_ = arrays
    ea_, ec_, eb_ = flags

    def part(lo: int, hi: int) -> None:
        _many(a_[lo:hi], c_[lo:hi], b_[lo:hi], ea_[lo:hi], ec_[lo:hi], eb_[lo:hi], r_[lo:hi], out[lo:hi])

    if workers <= 1:
        part(0, out.size)
        return out.reshape(np.shape(a))
    bounds = np.linspace(0, out.size, workers + 1).astype(int)
    with ThreadPoolExecutor(workers) as pool:
        for f in [pool.submit(part, lo, hi) for lo, hi in itertools.pairwise(bounds)]:
            f.result()
    return out.reshape(np.shape(a))


def kl_upper_end(
    a: ArrayLike, r: ArrayLike, nonempty: np.ndarray | None = None, rest: np.ndarray | None = None
) -> np.ndarray:
    """``hi(a, r)``: the largest x with binary ``KL(a ‖ x) <= r`` (a certified upper bound,
    exact up to rounding); ``nonempty`` / ``rest`` say whether the subset and its complement
    hold options (default: both)."""
    a = np.clip(np.asarray(a, dtype=float), 0.0, 1.0)
    r = np.broadcast_to(np.asarray(r, dtype=float), a.shape)
    ones = np.ones(a.shape, dtype=bool)
    return np.minimum(
        support3(
            a,
            1.0 - a,
            np.zeros(a.shape),
            ones if nonempty is None else nonempty,
            ones if rest is None else rest,
            np.zeros(a.shape, dtype=bool),
            r,
        ),
        1.0,
    )


__all__ = ["kl_upper_end", "support3"]
