"""A literal implementation of the papers' Algorithm 1, for tests and benchmarks.

Every permutation re-splits the pooled *embeddings* and recomputes all
similarities and ω from scratch in a Python loop, as the papers' own code does.
It computes exactly the statistic of :func:`dbpa_core.dbpa_test` (same bins,
same splits when given the same subsets), only slowly. Never use it for work.
"""

from __future__ import annotations

import numpy as np

from .measures import (
    DEFAULT_BINS,
    energy_distance,
    histogram_edges,
    jsd_distance,
    ks_2sample,
    wasserstein_1d,
)
from .similarity import cosine_similarity_matrix, normalize_rows


def _omega(xa: np.ndarray, xb: np.ndarray, measure: str, edges: np.ndarray, null: str = "base") -> float:
    sa = cosine_similarity_matrix(xa)
    p0 = sa[np.triu_indices(xa.shape[0], 1)]
    if null == "pooled":
        p0 = np.concatenate([p0, cosine_similarity_matrix(xb)[np.triu_indices(xb.shape[0], 1)]])
    p1 = (normalize_rows(xa) @ normalize_rows(xb).T).ravel()
    p1 = np.clip(p1, -1.0, 1.0)
    if measure == "jsd":
        # values beyond the edges (the whiskers of the pooled similarities) belong to
        # the outer bins; recomputed similarities also differ from the pooled matrix's
        # in the last bits: clip to the edges, as binning once does
        lo, hi = edges[0], edges[-1]
        return jsd_distance(np.clip(p0, lo, hi), np.clip(p1, lo, hi), edges)
    if measure == "wasserstein":
        return wasserstein_1d(p0, p1)
    if measure == "ks":
        return ks_2sample(p0, p1)
    if measure.startswith("energy-"):
        return energy_distance(xa, xb, measure.split("-", 1)[1])
    raise ValueError(f"unknown measure {measure!r}")


def literal_dbpa_test(
    base: np.ndarray,
    perturbed: np.ndarray,
    *,
    measure: str = "jsd",
    subsets: np.ndarray | None = None,
    n_permutations: int = 1000,
    rng: np.random.Generator | int | None = None,
    bins: int = DEFAULT_BINS,
    null: str = "base",
) -> tuple[float, np.ndarray, float]:
    """Returns ``(t_obs, permutation_statistics, p_value)``.

    ``subsets`` (shape (B, k)) fixes the splits; otherwise they are drawn with
    ``rng.permutation`` in a Python loop.
    """
    x = np.asarray(base, float)
    y = np.asarray(perturbed, float)
    pooled = np.vstack([x, y])
    n, k = pooled.shape[0], x.shape[0]
    edges = histogram_edges(cosine_similarity_matrix(pooled), bins)
    t_obs = _omega(x, y, measure, edges, null)
    if subsets is None:
        gen = np.random.default_rng(rng)
        subsets = [gen.permutation(n)[:k] for _ in range(n_permutations)]
    values = []
    for idx in subsets:
        mask = np.zeros(n, bool)
        mask[np.asarray(idx)] = True
        values.append(_omega(pooled[mask], pooled[~mask], measure, edges, null))
    stats = np.asarray(values)
    tol = 1e-12 * max(1.0, abs(t_obs))
    p = (1 + np.count_nonzero(stats >= t_obs - tol)) / (1 + stats.size)
    return t_obs, stats, p
