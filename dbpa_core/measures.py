"""Effect sizes ω: a registry from name to measure (SPEC §1).

Every measure is evaluated on a *split* of the pooled responses: group A (the
"base" group, ``k`` rows) and its complement B (``m`` rows). The observed
statistic uses A = the real base responses; the permutation engine
(:mod:`dbpa_core.permutation`) passes random or enumerated subsets.

A measure prepares the pooled matrix once (bin indices, row histograms, sorted
pairs, row sums) and returns a compiled function ``stat(subsets) -> T`` where
``subsets`` is an int array of shape (B, k) holding the pooled row indices of
group A for each split. Only re-indexing happens per split.

Registry :data:`MEASURES`:

``jsd`` (default)
    Jensen–Shannon distance (sqrt of the divergence, natural log) between the
    histograms of P0 (within-A similarities, i < j) and P1 (A × B similarities)
    on ``bins`` equal-width bins spanning min..max of all off-diagonal pooled
    similarities (computed once, so the bins do not depend on the split).
``wasserstein``
    1-Wasserstein distance between P0 and P1 as one-dimensional samples.
``ks``
    Two-sample Kolmogorov–Smirnov statistic between P0 and P1.
``energy-cosine``, ``energy-l1``, ``energy-l2``
    Energy distance between the two groups of embeddings,
    ``2 mean d(a, b) - mean d(a, a') - mean d(b, b')`` (means over all ordered
    pairs, i = j included), with d the cosine distance ``1 - cos``, L1 or L2.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numba as nb
import numpy as np

DEFAULT_BINS = 30


# --------------------------------------------------------------------------- kernels
@nb.njit(parallel=True, cache=True)
def _jsd_kernel(subsets, binmat, rowhist, m, xlogx0, xlogx1):
    """JS distance per split. W (within-A histogram) is counted pair by pair into
    two interleaved histograms (breaks the increment dependency chain); the cross
    histogram is ``sum_{i in A} rowhist[i] - 2 W``. With ``xlogx0[w] = p log p``
    for ``p = w / n0`` (and likewise for q), ``JS = H(mid) - (H(p) + H(q)) / 2``
    needs one log per bin. Empty tables mean: compute the logs directly."""
    n_split, k = subsets.shape
    n_bins = rowhist.shape[1]
    inv0 = 1.0 / (k * (k - 1) / 2.0)
    inv1 = 1.0 / (k * m)
    tables = xlogx0.shape[0] > 0
    out = np.empty(n_split)
    for b in nb.prange(n_split):
        w0 = np.zeros(n_bins, np.int64)
        w1 = np.zeros(n_bins, np.int64)
        c = np.zeros(n_bins, np.int64)
        sub = subsets[b]
        for a in range(k):
            i = sub[a]
            row = binmat[i]
            rh = rowhist[i]
            for t in range(n_bins):
                c[t] += rh[t]
            a2 = a + 1
            while a2 + 1 < k:
                w0[row[sub[a2]]] += 1
                w1[row[sub[a2 + 1]]] += 1
                a2 += 2
            if a2 < k:
                w0[row[sub[a2]]] += 1
        js = 0.0
        for t in range(n_bins):
            w = w0[t] + w1[t]
            q = c[t] - 2 * w
            mid = 0.5 * (w * inv0 + q * inv1)
            if mid > 0.0:
                js -= mid * np.log(mid)
            if tables:
                js += 0.5 * (xlogx0[w] + xlogx1[q])
            else:
                if w > 0:
                    js += 0.5 * w * inv0 * np.log(w * inv0)
                if q > 0:
                    js += 0.5 * q * inv1 * np.log(q * inv1)
        out[b] = np.sqrt(js) if js > 0.0 else 0.0
    return out


@nb.njit(parallel=True, cache=True)
def _energy_kernel(subsets, dist, rowsum, total, m):
    n_split, k = subsets.shape
    out = np.empty(n_split)
    for b in nb.prange(n_split):
        s_aa = 0.0
        s_r = 0.0
        for a in range(k):
            i = subsets[b, a]
            s_r += rowsum[i]
            row = dist[i]
            for a2 in range(a + 1, k):
                s_aa += row[subsets[b, a2]]
        s_aa *= 2.0
        s_ab = s_r - s_aa
        s_bb = total - s_aa - 2.0 * s_ab
        e = 2.0 * s_ab / (k * m) - s_aa / (k * k) - s_bb / (m * m)
        out[b] = e if e > 0.0 else 0.0
    return out


@nb.njit(parallel=True, cache=True)
def _cdf_kernel(subsets, n, pair_i, pair_j, gaps, last_of_tie, m, use_ks):
    """Wasserstein (``use_ks`` False) or KS between P0 and P1 in one sweep over the
    pooled off-diagonal pairs sorted by similarity: a within-A pair steps F0, a
    cross pair steps F1. W1 adds ``|F0 - F1|`` times the gap to the next value;
    KS takes the largest ``|F0 - F1|`` after the last member of each tie group."""
    n_split, k = subsets.shape
    inv0 = 1.0 / (k * (k - 1) / 2.0)
    inv1 = 1.0 / (k * m)
    n_pairs = pair_i.shape[0]
    out = np.empty(n_split)
    for b in nb.prange(n_split):
        mask = np.zeros(n, np.bool_)
        for a in range(k):
            mask[subsets[b, a]] = True
        c0 = 0
        c1 = 0
        acc = 0.0
        for t in range(n_pairs):
            x = mask[pair_i[t]]
            y = mask[pair_j[t]]
            if x and y:
                c0 += 1
            elif x or y:
                c1 += 1
            diff = abs(c0 * inv0 - c1 * inv1)
            if use_ks:
                if last_of_tie[t] and diff > acc:
                    acc = diff
            else:
                acc += diff * gaps[t]
        out[b] = acc
    return out


# --------------------------------------------------------------------------- preparation
StatFn = Callable[[np.ndarray], np.ndarray]


def off_diagonal(matrix: np.ndarray) -> np.ndarray:
    """Upper-triangle (i < j) entries of a square matrix, row-major."""
    iu = np.triu_indices(matrix.shape[0], 1)
    return matrix[iu]


def histogram_edges(similarity: np.ndarray, bins: int = DEFAULT_BINS) -> np.ndarray:
    """``bins + 1`` equal-width edges over min..max of the off-diagonal similarities."""
    vals = off_diagonal(similarity)
    lo, hi = float(vals.min()), float(vals.max())
    if hi <= lo:
        hi = lo + 1e-12
    return np.linspace(lo, hi, bins + 1)


def bin_indices(values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Bin of each value for ``np.histogram(values, bins=edges)`` (last bin closed)."""
    n_bins = edges.size - 1
    idx = np.searchsorted(edges, values, side="right") - 1
    return np.clip(idx, 0, n_bins - 1)


MAX_XLOGX_TABLE = 4_000_000


def _xlogx_table(count: int) -> np.ndarray:
    """``(x / count) log(x / count)`` for x = 0..count (0 at x = 0)."""
    if count > MAX_XLOGX_TABLE:
        return np.empty(0)
    p = np.arange(count + 1) / count
    out = np.zeros(count + 1)
    out[1:] = p[1:] * np.log(p[1:])
    return out


def _prepare_jsd(similarity: np.ndarray, k: int, m: int, bins: int) -> StatFn:
    n = similarity.shape[0]
    edges = histogram_edges(similarity, bins)
    binmat = np.ascontiguousarray(
        bin_indices(similarity, edges).astype(np.uint8 if bins <= 256 else np.int32))
    # per-row histograms of the off-diagonal entries
    offsets = (np.arange(n) * bins)[:, None]
    rowhist = np.bincount((binmat + offsets).ravel(), minlength=n * bins).reshape(n, bins)
    rowhist[np.arange(n), binmat[np.arange(n), np.arange(n)]] -= 1
    xlogx0 = _xlogx_table(k * (k - 1) // 2)
    xlogx1 = _xlogx_table(k * m)
    if xlogx0.size == 0 or xlogx1.size == 0:
        xlogx0 = xlogx1 = np.empty(0)

    def stat(subsets: np.ndarray) -> np.ndarray:
        return _jsd_kernel(subsets, binmat, rowhist, m, xlogx0, xlogx1)

    stat.edges = edges  # type: ignore[attr-defined]
    return stat


def _sorted_pairs(similarity: np.ndarray):
    n = similarity.shape[0]
    ii, jj = np.triu_indices(n, 1)
    vals = similarity[ii, jj]
    order = np.argsort(vals, kind="stable")
    vals = vals[order]
    gaps = np.empty_like(vals)
    gaps[:-1] = np.diff(vals)
    gaps[-1] = 0.0
    last_of_tie = np.ones(vals.size, dtype=np.bool_)
    last_of_tie[:-1] = vals[1:] > vals[:-1]
    return (ii[order].astype(np.int32), jj[order].astype(np.int32), gaps, last_of_tie)


def _prepare_cdf(use_ks: bool):
    def prepare(similarity: np.ndarray, k: int, m: int, bins: int) -> StatFn:
        n = similarity.shape[0]
        pi, pj, gaps, last_of_tie = _sorted_pairs(similarity)

        def stat(subsets: np.ndarray) -> np.ndarray:
            return _cdf_kernel(subsets, n, pi, pj, gaps, last_of_tie, m, use_ks)

        return stat

    return prepare


def _prepare_energy(distance: np.ndarray, k: int, m: int, bins: int) -> StatFn:
    dist = np.ascontiguousarray(distance, dtype=np.float64)
    rowsum = dist.sum(axis=1)
    total = float(rowsum.sum())

    def stat(subsets: np.ndarray) -> np.ndarray:
        return _energy_kernel(subsets, dist, rowsum, total, m)

    return stat


@dataclass(frozen=True)
class Measure:
    """One ω in the registry.

    ``uses`` is ``"similarity"`` when the measure compares the similarity
    samples P0 and P1, or ``"distance"`` when it works on the pooled distance
    matrix of the embeddings (``metric`` names the distance).
    """

    name: str
    uses: str
    metric: str | None
    description: str
    prepare: Callable[[np.ndarray, int, int, int], StatFn]


MEASURES: dict[str, Measure] = {
    "jsd": Measure("jsd", "similarity", None,
                   "Jensen–Shannon distance between the histograms of P0 and P1", _prepare_jsd),
    "wasserstein": Measure("wasserstein", "similarity", None,
                           "1-Wasserstein distance between P0 and P1", _prepare_cdf(False)),
    "ks": Measure("ks", "similarity", None,
                  "Kolmogorov–Smirnov statistic between P0 and P1", _prepare_cdf(True)),
    "energy-cosine": Measure("energy-cosine", "distance", "cosine",
                             "energy distance between the embeddings, cosine distance",
                             _prepare_energy),
    "energy-l1": Measure("energy-l1", "distance", "l1",
                         "energy distance between the embeddings, L1 distance", _prepare_energy),
    "energy-l2": Measure("energy-l2", "distance", "l2",
                         "energy distance between the embeddings, L2 distance", _prepare_energy),
}


def get_measure(name: str) -> Measure:
    """The registered measure called ``name`` (clear error otherwise)."""
    if not isinstance(name, str) or name not in MEASURES:
        raise ValueError(f"`measure` must be in {sorted(MEASURES)}, got {name!r}.")
    return MEASURES[name]


# --------------------------------------------------------------------------- sample-level ω
def jsd_distance(p0, p1, edges) -> float:
    """Jensen–Shannon distance (natural log) between histograms of two samples.

    ``sqrt(½ KL(P‖M) + ½ KL(Q‖M))``, ``M = (P + Q) / 2``, P and Q the
    normalized histograms of ``p0`` and ``p1`` on ``edges``; equals
    ``scipy.spatial.distance.jensenshannon(hist0, hist1)``.
    """
    h0 = np.histogram(np.asarray(p0, float), bins=edges)[0] / len(p0)
    h1 = np.histogram(np.asarray(p1, float), bins=edges)[0] / len(p1)
    mid = 0.5 * (h0 + h1)
    js = 0.0
    for h in (h0, h1):
        nz = h > 0
        js += 0.5 * float(np.sum(h[nz] * np.log(h[nz] / mid[nz])))
    return float(np.sqrt(max(js, 0.0)))


def wasserstein_1d(p0, p1) -> float:
    """1-Wasserstein distance between two 1-D samples (area between their CDFs)."""
    a = np.sort(np.asarray(p0, float))
    b = np.sort(np.asarray(p1, float))
    allv = np.sort(np.concatenate([a, b]))
    gaps = np.diff(allv)
    fa = np.searchsorted(a, allv[:-1], side="right") / a.size
    fb = np.searchsorted(b, allv[:-1], side="right") / b.size
    return float(np.sum(np.abs(fa - fb) * gaps))


def ks_2sample(p0, p1) -> float:
    """Two-sample Kolmogorov–Smirnov statistic ``max |F0 - F1|``."""
    a = np.sort(np.asarray(p0, float))
    b = np.sort(np.asarray(p1, float))
    allv = np.concatenate([a, b])
    fa = np.searchsorted(a, allv, side="right") / a.size
    fb = np.searchsorted(b, allv, side="right") / b.size
    return float(np.max(np.abs(fa - fb)))


def energy_distance(x, y, metric: str = "cosine") -> float:
    """``2 mean d(x, y) - mean d(x, x') - mean d(y, y')`` over all pairs (i = j included)."""
    from .similarity import pairwise_distance_matrix

    x = np.asarray(x, float)
    y = np.asarray(y, float)
    d = pairwise_distance_matrix(np.vstack([x, y]), metric)
    k = x.shape[0]
    e = 2 * d[:k, k:].mean() - d[:k, :k].mean() - d[k:, k:].mean()
    return float(max(e, 0.0))
