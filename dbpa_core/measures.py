"""Effect sizes ω: a registry from name to measure (the DBPA method).

Every measure is evaluated on a *split* of the pooled responses: group A (the
"base" group, ``k`` rows) and its complement B (``m`` rows). The observed
statistic uses A = the real base responses; the permutation engine
(:mod:`dbpa_core.permutation`) passes random or enumerated subsets.

A measure prepares the pooled matrix once (bin indices, row histograms, sorted
pairs, row sums) and returns a compiled function ``stat(subsets) -> T`` where
``subsets`` is an int array of shape (B, k) holding the pooled row indices of
group A for each split. Only re-indexing happens per split.

Registry :data:`MEASURES` (the default, :data:`DEFAULT_MEASURE`, was chosen by
measured power on recorded real responses: ``benchmarks/bench_measures.py``):

``energy-l2`` (default)
    Energy distance between the two groups of embeddings,
    ``2 mean d(a, b) - mean d(a, a') - mean d(b, b')`` (means over all ordered
    pairs, i = j included), d the Euclidean distance. Zero exactly when the two
    empirical distributions coincide: a test of whole distributions.
``energy-l1``
    The same with the L1 distance.
``energy-cosine``
    The same with the cosine distance ``1 - cos``. On unit vectors this is
    exactly ``|mean(a/|a|) - mean(b/|b|)|^2``, the squared distance between the
    two mean directions: a test of the *mean* embedding, not of whole
    distributions.
``jsd`` (the papers' measure)
    Jensen–Shannon distance (sqrt of the divergence, natural log) between the
    histograms of P0 (within-A similarities, i < j) and P1 (A × B similarities)
    on ``bins`` equal-width bins. The bins span the box-plot whiskers of all
    off-diagonal pooled similarities (computed once, so they do not depend on
    the split): ``[Q1 - 1.5 IQR, Q3 + 1.5 IQR]`` cut to their min..max, with the
    values beyond them counted in the outer bins. One off-topic response (whose
    similarities to all others are far below the rest) then no longer stretches
    the bins over an empty range.
``wasserstein``
    1-Wasserstein distance between P0 and P1 as one-dimensional samples.
``ks``
    Two-sample Kolmogorov–Smirnov statistic between P0 and P1.

The similarity measures (``jsd``, ``wasserstein``, ``ks``) are asymmetric: P0
comes from group A only, so swapping base and perturbed changes ω and p. With
``null="pooled"`` P0 holds the within-group similarities of *both* groups, which
makes them symmetric. The energy distances are symmetric either way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numba as nb
import numpy as np

DEFAULT_BINS = 30
DEFAULT_MEASURE = "energy-l2"
NULLS = ("base", "pooled")
WHISKER = 1.5  # box-plot whiskers: Q1 - 1.5 IQR .. Q3 + 1.5 IQR


# --------------------------------------------------------------------------- kernels
@nb.njit(parallel=True, cache=True)
def _jsd_kernel(
    subsets: np.ndarray,
    binmat: np.ndarray,
    rowhist: np.ndarray,
    tothist: np.ndarray,
    m: int,
    pooled: bool,
    xlogx0: np.ndarray,
    xlogx1: np.ndarray,
) -> np.ndarray:
    """JS distance per split. W (within-A histogram) is counted pair by pair into
    two interleaved histograms (breaks the increment dependency chain); the cross
    histogram is ``sum_{i in A} rowhist[i] - 2 W``; with ``pooled`` the within-B
    histogram ``tothist - W - cross`` joins P0. With ``xlogx0[w] = p log p`` for
    ``p = w / n0`` (and likewise for q), ``JS = H(mid) - (H(p) + H(q)) / 2``
    needs one log per bin. Empty tables mean: compute the logs directly."""
    n_split, k = subsets.shape
    n_bins = rowhist.shape[1]
    n0 = k * (k - 1) / 2.0
    if pooled:
        n0 += m * (m - 1) / 2.0
    inv0 = 1.0 / n0
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
            if pooled:
                w = tothist[t] - q  # within A plus within B
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
def _energy_kernel(
    subsets: np.ndarray, dist: np.ndarray, rowsum: np.ndarray, total: float, m: int
) -> np.ndarray:
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
def _cdf_kernel(
    subsets: np.ndarray,
    n: int,
    pair_i: np.ndarray,
    pair_j: np.ndarray,
    gaps: np.ndarray,
    m: int,
    pooled: bool,
    use_ks: bool,
) -> np.ndarray:
    """Wasserstein (``use_ks`` False) or KS between P0 and P1 in one sweep over the
    pooled off-diagonal pairs, sorted by similarity once for all splits.

    The sweep keeps ``D = c0 n1 - c1 n0`` (``c0``, ``c1`` the P0 and P1 pairs passed,
    ``n0``, ``n1`` their sizes), an integer held exactly in a float64 (below 2**53 for
    any k + m <= 20,000), so ``F0 - F1 = D / (n0 n1)``. A pair's label
    (``mask[i] + mask[j]``: 2 within A, 1 across, 0 within B) picks its step from a
    4-entry table, branch-free. W1 adds ``|D|`` times the gap to the next value; KS
    takes the largest ``|D|`` where the gap is positive, i.e. after the last member of
    a tie group. Four splits share each sweep: their group masks are packed two bits
    per split into one integer per response, so one pair's two loads serve all four
    and their four independent accumulators keep the core busy.
    """
    n_split, k = subsets.shape
    n0 = k * (k - 1) // 2
    if pooled:
        n0 += m * (m - 1) // 2
    n1 = k * m
    scale = 1.0 / (float(n0) * float(n1))
    n_pairs = pair_i.shape[0]
    out = np.empty(n_split)
    for q in nb.prange((n_split + 3) // 4):
        idx = np.empty(4, np.int64)
        for s in range(4):
            idx[s] = min(4 * q + s, n_split - 1)  # the last group repeats a split
        mask = np.zeros(n, np.int64)
        for s in range(4):
            for a in range(k):
                mask[subsets[idx[s], a]] += 1 << (2 * s)
        step = np.zeros(4, np.float64)
        step[0] = n1 if pooled else 0
        step[1] = -n0
        step[2] = n1
        d0 = d1 = d2 = d3 = 0.0
        a0 = a1 = a2 = a3 = 0.0
        if use_ks:
            for t in range(n_pairs):
                c = mask[pair_i[t]] + mask[pair_j[t]]
                d0 += step[c & 3]
                d1 += step[(c >> 2) & 3]
                d2 += step[(c >> 4) & 3]
                d3 += step[(c >> 6) & 3]
                if gaps[t] > 0.0:
                    a0 = max(a0, abs(d0))
                    a1 = max(a1, abs(d1))
                    a2 = max(a2, abs(d2))
                    a3 = max(a3, abs(d3))
            # the last pair (gap 0) closes the final tie group, where F0 = F1 = 1: D = 0
        else:
            for t in range(n_pairs):
                c = mask[pair_i[t]] + mask[pair_j[t]]
                g = gaps[t]
                d0 += step[c & 3]
                d1 += step[(c >> 2) & 3]
                d2 += step[(c >> 4) & 3]
                d3 += step[(c >> 6) & 3]
                a0 += abs(d0) * g
                a1 += abs(d1) * g
                a2 += abs(d2) * g
                a3 += abs(d3) * g
        out[idx[3]] = a3 * scale
        out[idx[2]] = a2 * scale
        out[idx[1]] = a1 * scale
        out[idx[0]] = a0 * scale
    return out


# --------------------------------------------------------------------------- preparation
StatFn = Callable[[np.ndarray], np.ndarray]


def off_diagonal(matrix: np.ndarray) -> np.ndarray:
    """Upper-triangle (i < j) entries of a square matrix, row-major."""
    iu = np.triu_indices(matrix.shape[0], 1)
    return matrix[iu]


def histogram_range(values: np.ndarray, *, robust: bool = True) -> tuple[float, float]:
    """The span of ``jsd``'s bins over pooled similarities ``values``.

    ``robust`` (default): the box-plot whiskers ``[Q1 - 1.5 IQR, Q3 + 1.5 IQR]``
    cut to ``[min, max]``, or ``[min, max]`` when the IQR is 0 (heavily tied text
    similarities). ``robust=False``: ``[min, max]`` (the papers' choice, which one
    far-away response stretches over an empty range).
    """
    lo, hi = float(values.min()), float(values.max())
    if robust:
        q1, q3 = np.percentile(values, [25.0, 75.0])
        iqr = float(q3 - q1)
        if iqr > 0.0:
            lo = max(lo, float(q1) - WHISKER * iqr)
            hi = min(hi, float(q3) + WHISKER * iqr)
    if hi <= lo:
        hi = lo + 1e-12
    return lo, hi


def histogram_edges(similarity: np.ndarray, bins: int = DEFAULT_BINS, *, robust: bool = True) -> np.ndarray:
    """``bins + 1`` equal-width edges over :func:`histogram_range` of the
    off-diagonal similarities (values beyond them belong to the outer bins)."""
    lo, hi = histogram_range(off_diagonal(similarity), robust=robust)
    return np.linspace(lo, hi, bins + 1)


def bin_indices(values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Bin of each value for ``np.histogram(np.clip(values, edges[0], edges[-1]),
    bins=edges)``: the last bin is closed, values beyond the edges go to the outer bins."""
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


def _prepare_jsd(
    similarity: np.ndarray, k: int, m: int, bins: int, pooled: bool = False, *, robust: bool = True
) -> StatFn:
    n = similarity.shape[0]
    edges = histogram_edges(similarity, bins, robust=robust)
    binmat = np.ascontiguousarray(
        bin_indices(similarity, edges).astype(np.uint8 if bins <= 256 else np.int32)
    )
    # per-row histograms of the off-diagonal entries
    offsets = (np.arange(n) * bins)[:, None]
    rowhist = np.bincount((binmat + offsets).ravel(), minlength=n * bins).reshape(n, bins)
    rowhist[np.arange(n), binmat[np.arange(n), np.arange(n)]] -= 1
    tothist = rowhist.sum(axis=0) // 2
    n0 = k * (k - 1) // 2 + (m * (m - 1) // 2 if pooled else 0)
    xlogx0 = _xlogx_table(n0)
    xlogx1 = _xlogx_table(k * m)
    if xlogx0.size == 0 or xlogx1.size == 0:
        xlogx0 = xlogx1 = np.empty(0)

    def stat(subsets: np.ndarray) -> np.ndarray:
        return _jsd_kernel(subsets, binmat, rowhist, tothist, m, pooled, xlogx0, xlogx1)

    stat.edges = edges  # type: ignore[attr-defined]
    return stat


def _sorted_pairs(similarity: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Row, column and gap to the next value of every off-diagonal pair, by value.

    Index arrays are uint16 when they fit (halves the sweep's memory traffic).
    """
    n = similarity.shape[0]
    ii, jj = np.triu_indices(n, 1)
    vals = similarity[ii, jj]
    order = np.argsort(vals, kind="stable")
    vals = vals[order]
    gaps = np.empty_like(vals)
    gaps[:-1] = np.diff(vals)
    gaps[-1] = 0.0
    itype = np.uint16 if n <= np.iinfo(np.uint16).max else np.int32
    return ii[order].astype(itype), jj[order].astype(itype), np.ascontiguousarray(gaps)


def _prepare_cdf(use_ks: bool) -> Callable[..., StatFn]:
    def prepare(similarity: np.ndarray, k: int, m: int, bins: int, pooled: bool = False) -> StatFn:
        n = similarity.shape[0]
        pi, pj, gaps = _sorted_pairs(similarity)

        def stat(subsets: np.ndarray) -> np.ndarray:
            return _cdf_kernel(subsets, n, pi, pj, gaps, m, pooled, use_ks)

        return stat

    return prepare


def _prepare_energy(distance: np.ndarray, k: int, m: int, bins: int, pooled: bool = False) -> StatFn:
    # symmetric in the two groups already: ``pooled`` changes nothing
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
    matrix of the embeddings (``metric`` names the distance). ``symmetric``:
    swapping the two groups leaves ω unchanged whatever the null variant.
    ``prepare(matrix, k, m, bins, pooled)`` returns the compiled statistic.
    """

    name: str
    uses: str
    metric: str | None
    description: str
    prepare: Callable[..., StatFn]
    symmetric: bool = False


MEASURES: dict[str, Measure] = {
    "energy-l2": Measure(
        "energy-l2",
        "distance",
        "l2",
        "energy distance between the embeddings, Euclidean distance",
        _prepare_energy,
        True,
    ),
    "energy-l1": Measure(
        "energy-l1",
        "distance",
        "l1",
        "energy distance between the embeddings, L1 distance",
        _prepare_energy,
        True,
    ),
    "energy-cosine": Measure(
        "energy-cosine",
        "distance",
        "cosine",
        "squared distance between the mean unit embeddings (energy distance with the cosine distance)",
        _prepare_energy,
        True,
    ),
    "jsd": Measure(
        "jsd",
        "similarity",
        None,
        "Jensen–Shannon distance between the histograms of P0 and P1 (the papers')",
        _prepare_jsd,
    ),
    "wasserstein": Measure(
        "wasserstein", "similarity", None, "1-Wasserstein distance between P0 and P1", _prepare_cdf(False)
    ),
    "ks": Measure(
        "ks", "similarity", None, "Kolmogorov–Smirnov statistic between P0 and P1", _prepare_cdf(True)
    ),
}


def get_measure(name: str) -> Measure:
    """The registered measure called ``name`` (clear error otherwise)."""
    if not isinstance(name, str) or name not in MEASURES:
        raise ValueError(f"`measure` must be in {sorted(MEASURES)}, got {name!r}.")
    return MEASURES[name]


# --------------------------------------------------------------------------- sample-level ω
def jsd_distance(p0: np.ndarray, p1: np.ndarray, edges: np.ndarray) -> float:
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


def wasserstein_1d(p0: np.ndarray, p1: np.ndarray) -> float:
    """1-Wasserstein distance between two 1-D samples (area between their CDFs)."""
    a = np.sort(np.asarray(p0, float))
    b = np.sort(np.asarray(p1, float))
    allv = np.sort(np.concatenate([a, b]))
    gaps = np.diff(allv)
    fa = np.searchsorted(a, allv[:-1], side="right") / a.size
    fb = np.searchsorted(b, allv[:-1], side="right") / b.size
    return float(np.sum(np.abs(fa - fb) * gaps))


def ks_2sample(p0: np.ndarray, p1: np.ndarray) -> float:
    """Two-sample Kolmogorov–Smirnov statistic ``max |F0 - F1|``."""
    a = np.sort(np.asarray(p0, float))
    b = np.sort(np.asarray(p1, float))
    allv = np.concatenate([a, b])
    fa = np.searchsorted(a, allv, side="right") / a.size
    fb = np.searchsorted(b, allv, side="right") / b.size
    return float(np.max(np.abs(fa - fb)))


def energy_distance(x: np.ndarray, y: np.ndarray, metric: str = "cosine") -> float:
    """``2 mean d(x, y) - mean d(x, x') - mean d(y, y')`` over all pairs (i = j included)."""
    from .similarity import pairwise_distance_matrix

    x = np.asarray(x, float)
    y = np.asarray(y, float)
    d = pairwise_distance_matrix(np.vstack([x, y]), metric)
    k = x.shape[0]
    e = 2 * d[:k, k:].mean() - d[:k, :k].mean() - d[k:, k:].mean()
    return float(max(e, 0.0))
