"""The one permutation engine (SPEC §1, the papers' Algorithm 1).

Under H0 the pooled responses are exchangeable. The pooled similarity (or
distance) matrix is computed once; every permutation only re-indexes it: a
random subset I of k of the k + m pooled indices becomes the "base" group.

Random subsets come from a counter-based generator: split ``b`` is drawn from
its own SplitMix64 stream seeded by ``(seed, b)``, so the same ``rng`` gives the
same splits — and the same p-value — whatever the thread count or batch size.
"""
from __future__ import annotations

import contextlib
import functools
import itertools
import math
import warnings
from collections.abc import Callable, Iterator

import numba as nb
import numpy as np

from .measures import DEFAULT_BINS, Measure, get_measure, histogram_edges, off_diagonal
from .similarity import check_embeddings, cosine_similarity_matrix, pairwise_distance_matrix
from .types import DBPAResult

MAX_EXACT_SPLITS = 1_000_000


class DBPAWarning(UserWarning):
    """A test ran but its answer carries no information (e.g. identical responses)."""


# --------------------------------------------------------------------------- random splits
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


@nb.njit(cache=True, inline="always")
def _splitmix_next(state):
    state = state + _GOLDEN
    z = state
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return state, z ^ (z >> np.uint64(31))


@nb.njit(parallel=True, cache=True)
def _random_subsets(n, k, seed, start, count):
    """Rows start..start+count-1 of the reproducible stream of k-subsets of range(n).

    A partial Fisher–Yates shuffle picks the subset; it is written out in
    increasing order, which makes the kernels' row gathers monotone (faster).
    """
    out = np.empty((count, k), np.int32)
    scale = 1.0 / 9007199254740992.0  # 2**-53
    for r in nb.prange(count):
        # a fresh stream per split index: mix (seed, index) once, then draw
        state, _ = _splitmix_next(seed ^ (np.uint64(start + r) * _MIX2))
        perm = np.arange(n)
        chosen = np.zeros(n, np.bool_)
        for a in range(k):
            state, z = _splitmix_next(state)
            u = np.float64(z >> np.uint64(11)) * scale
            j = a + np.int64(u * (n - a))
            tmp = perm[a]
            perm[a] = perm[j]
            perm[j] = tmp
            chosen[perm[a]] = True
        a = 0
        for i in range(n):
            if chosen[i]:
                out[r, a] = i
                a += 1
    return out


def random_subsets(n: int, k: int, count: int, *, seed: int, start: int = 0) -> np.ndarray:
    """``count`` random k-subsets of ``range(n)`` (rows of an int32 array, each row
    increasing), reproducible from ``seed``; row ``b`` depends only on
    ``(seed, start + b)``, so neither the thread count nor the batch size matters."""
    return _random_subsets(n, k, np.uint64(seed), start, count)


def _exact_subsets(n: int, k: int) -> np.ndarray:
    return np.fromiter(
        itertools.chain.from_iterable(itertools.combinations(range(n), k)),
        dtype=np.int32,
        count=math.comb(n, k) * k,
    ).reshape(-1, k)


@functools.cache
def _threadpool_controller():
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


@contextlib.contextmanager
def single_threaded_blas() -> Iterator[None]:
    """Pin BLAS to one thread while the compiled kernels run.

    OpenBLAS worker threads spin-wait after a call and then compete with the
    kernels' own threads for the cores (measured: 2x slower on 2 cores).
    """
    with _threadpool_controller().limit(limits=1, user_api="blas"):
        yield


# --------------------------------------------------------------------------- input validation
def _as_generator(rng) -> np.random.Generator:
    if isinstance(rng, (bool, np.bool_)):
        raise TypeError("`rng` must be None, an int seed or a numpy.random.Generator, got bool.")
    if rng is None or isinstance(rng, (int, np.integer)):
        if rng is not None and rng < 0:
            raise ValueError(f"`rng` seed must be non-negative, got {rng}.")
        return np.random.default_rng(rng)
    if isinstance(rng, np.random.Generator):
        return rng
    raise TypeError("`rng` must be None, an int seed or a numpy.random.Generator.")


def _check_int(value, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"`{name}` must be an integer, got {type(value).__name__}.")
    if value < minimum:
        raise ValueError(f"`{name}` must be >= {minimum}, got {value}.")
    return int(value)


def _engine_iv(n_permutations, rng, sequential, batch, bins):
    n_permutations = _check_int(n_permutations, "n_permutations", 1)
    if sequential is not None:
        sequential = _check_int(sequential, "sequential", 1)
    if batch is not None:
        batch = _check_int(batch, "batch", 1)
    bins = _check_int(bins, "bins", 2)
    return n_permutations, _as_generator(rng), sequential, batch, bins


def _group_sizes_iv(k: int, m: int) -> None:
    if k < 2:
        raise ValueError(f"`base` needs at least 2 responses, got {k}.")
    if m < 2:
        raise ValueError(f"`perturbed` needs at least 2 responses, got {m}.")


# --------------------------------------------------------------------------- engine
def _p_value(stats: np.ndarray, t_obs: float, *, exact: bool) -> float:
    tol = 1e-12 * max(1.0, abs(t_obs))
    hits = int(np.count_nonzero(stats >= t_obs - tol))
    if exact:
        return hits / stats.size
    return (1 + hits) / (1 + stats.size)


def run_permutations(stat: Callable[[np.ndarray], np.ndarray], n: int, k: int, *,
                     n_permutations: int, rng: np.random.Generator,
                     sequential: int | None = None, batch: int | None = None):
    """Observed statistic, permutation statistics and p-value for a prepared measure.

    Returns ``(t_obs, stats, p_value, exact, stopped_early)``.
    """
    t_obs = float(stat(np.arange(k, dtype=np.int32)[None, :])[0])
    n_splits = math.comb(n, k)
    if n_splits <= min(n_permutations, MAX_EXACT_SPLITS):
        stats = stat(_exact_subsets(n, k))
        return t_obs, stats, _p_value(stats, t_obs, exact=True), True, False

    seed = int(rng.integers(0, 2**63 - 1))
    tol = 1e-12 * max(1.0, abs(t_obs))
    size = batch or (min(n_permutations, 1024) if sequential else n_permutations)
    chunks: list[np.ndarray] = []
    done = hits = 0
    while done < n_permutations:
        count = min(size, n_permutations - done)
        part = stat(random_subsets(n, k, count, seed=seed, start=done))
        if sequential is not None:
            exceed = part >= t_obs - tol
            if hits + int(exceed.sum()) >= sequential:
                # Besag–Clifford: stop at the l-th permutation where the h-th exceedance falls
                cut = int(np.nonzero(exceed)[0][sequential - hits - 1]) + 1
                chunks.append(part[:cut])
                stats = np.concatenate(chunks)
                return t_obs, stats, sequential / stats.size, False, True
            hits += int(exceed.sum())
        chunks.append(part)
        done += count
    stats = np.concatenate(chunks) if len(chunks) > 1 else chunks[0]
    return t_obs, stats, _p_value(stats, t_obs, exact=False), False, False


def _all_identical(matrix: np.ndarray) -> bool:
    """Every pairwise similarity (or distance) is the same: no split can differ."""
    vals = off_diagonal(matrix)
    return float(vals.max() - vals.min()) <= 1e-9 * max(1.0, float(np.abs(vals).max()))


def _test_on_matrices(similarity: np.ndarray, distance: np.ndarray | None, k: int,
                      measure: Measure, *, n_permutations, rng, sequential, batch,
                      bins) -> DBPAResult:
    n = similarity.shape[0]
    m = n - k
    p0 = off_diagonal(similarity[:k, :k])
    p1 = similarity[:k, k:].ravel().copy()
    used = distance if measure.uses == "distance" else similarity
    if _all_identical(used):
        warnings.warn(
            "All responses are identical (every pairwise similarity is equal): ω = 0 and "
            "p = 1, and the test carries no information. Sample with temperature > 0 and "
            "do not reuse cached copies of one draw.",
            DBPAWarning, stacklevel=3,
        )
        edges = histogram_edges(similarity, bins) if measure.name == "jsd" else None
        return DBPAResult(0.0, 1.0, p0, p1, np.zeros(0), measure.name, k, m, 0,
                          bin_edges=edges)
    stat = measure.prepare(used, k, m, bins)
    edges = getattr(stat, "edges", None)
    t_obs, stats, p, exact, stopped = run_permutations(
        stat, n, k, n_permutations=n_permutations, rng=rng, sequential=sequential, batch=batch)
    return DBPAResult(
        effect_size=t_obs, p_value=float(p), null_similarities=p0, alt_similarities=p1,
        permutation_statistics=stats, measure=measure.name, k=k, m=m,
        n_permutations=int(stats.size), exact=exact, stopped_early=stopped, bin_edges=edges,
        chance_effect_size=float(stats.mean()),
    )


def dbpa_test(base, perturbed, *, measure: str = "jsd", n_permutations: int = 10_000,
              rng=None, sequential: int | None = None, batch: int | None = None,
              bins: int = DEFAULT_BINS) -> DBPAResult:
    """Distribution-based perturbation test on two groups of response embeddings.

    P0 holds the cosine similarities among the base responses (i < j), P1 those
    between base and perturbed responses; ω = ``measure`` compares them (or, for
    ``energy-*``, compares the embeddings directly). The p-value comes from
    permuting the pooled responses (never the similarity values).

    Parameters
    ----------
    base : array_like, shape (k, d)
        Embeddings of k >= 2 responses to the base prompt, one row per response.
    perturbed : array_like, shape (m, d)
        Embeddings of m >= 2 responses to the perturbed prompt (or another model).
    measure : str, default "jsd"
        A name in :data:`dbpa_core.MEASURES`.
    n_permutations : int, default 10000
        B, the number of random splits. When C(k+m, k) <= B every split is
        enumerated and the test is exact.
    rng : None, int or numpy.random.Generator
        Seed of the splits; the same seed gives the same p-value on any machine.
    sequential : int, optional
        h for Besag–Clifford sequential stopping: stop once h permutation
        statistics reach T_obs and report ``p = h / l``. Saves time when the
        effect is clearly absent; ``None`` (default) runs all B permutations.
    batch : int, optional
        Number of splits evaluated per kernel call (memory bound); does not
        change the result.
    bins : int, default 30
        Histogram bins for ``jsd``.

    Returns
    -------
    DBPAResult
        ``effect_size`` (ω), ``p_value``, ``null_similarities`` (P0),
        ``alt_similarities`` (P1), ``permutation_statistics`` (the T_b).

    Notes
    -----
    ``p = (1 + #{b : T_b >= T_obs}) / (1 + B)`` with a tie tolerance of
    ``1e-12 * max(1, |T_obs|)``: never 0. A small p says the perturbed answers
    differ from the base answers more than the base answers differ among
    themselves; a large p says the sample cannot tell — not that nothing changed.

    Examples
    --------
    >>> rng = np.random.default_rng(1)
    >>> base = rng.normal(size=(20, 8)) + 3
    >>> perturbed = rng.normal(size=(20, 8)) + 3
    >>> r = dbpa_test(base, perturbed, n_permutations=999, rng=0)
    >>> r.p_value > 0.05
    True
    """
    meas = get_measure(measure)
    n_permutations, gen, sequential, batch, bins = _engine_iv(
        n_permutations, rng, sequential, batch, bins)
    x = check_embeddings(base, "base")
    y = check_embeddings(perturbed, "perturbed")
    _group_sizes_iv(x.shape[0], y.shape[0])
    if x.shape[1] != y.shape[1]:
        raise ValueError(
            f"`base` and `perturbed` have embeddings of different widths "
            f"({x.shape[1]} vs {y.shape[1]}); embed both with the same model."
        )
    pooled = np.vstack([x, y])
    with single_threaded_blas():
        similarity = cosine_similarity_matrix(pooled)
        distance = (pairwise_distance_matrix(pooled, meas.metric)
                    if meas.uses == "distance" else None)
        return _test_on_matrices(similarity, distance, x.shape[0], meas,
                                 n_permutations=n_permutations, rng=gen,
                                 sequential=sequential, batch=batch, bins=bins)


def dbpa_test_similarity(similarity, k: int, *, measure: str = "jsd",
                         n_permutations: int = 10_000, rng=None,
                         sequential: int | None = None, batch: int | None = None,
                         bins: int = DEFAULT_BINS) -> DBPAResult:
    """DBPA test on a precomputed pooled similarity matrix (e.g. BLEU or ROUGE).

    Parameters
    ----------
    similarity : array_like, shape (k + m, k + m)
        Symmetric similarities of the pooled responses: the first ``k`` rows are
        the base responses, the rest the perturbed ones. See
        :func:`dbpa_core.similarity.text_similarity_matrix`.
    k : int
        Number of base responses.
    measure : str
        ``jsd``, ``wasserstein``, ``ks``, or ``energy-cosine`` (which then uses
        ``d = 1 - S``). ``energy-l1``/``energy-l2`` need embeddings.

    Other parameters are those of :func:`dbpa_test`.
    """
    meas = get_measure(measure)
    if meas.uses == "distance" and meas.metric != "cosine":
        raise ValueError(
            f"`measure` {measure!r} needs embeddings; with a similarity matrix use "
            "'jsd', 'wasserstein', 'ks' or 'energy-cosine'."
        )
    n_permutations, gen, sequential, batch, bins = _engine_iv(
        n_permutations, rng, sequential, batch, bins)
    from ._validate import real_array

    s = real_array(similarity, "similarity", "a square array of numbers")
    if s.ndim != 2 or s.shape[0] != s.shape[1]:
        raise ValueError(f"`similarity` must be a square matrix, got shape {s.shape}.")
    if not np.all(np.isfinite(s)):
        raise ValueError("`similarity` contains NaN or infinite values.")
    if not np.allclose(s, s.T, atol=1e-9):
        raise ValueError("`similarity` must be symmetric (S[i, j] == S[j, i]).")
    k = _check_int(k, "k", 0)
    n = s.shape[0]
    if k > n:
        raise ValueError(f"`k` ({k}) is larger than the {n} x {n} `similarity` matrix; k counts "
                         f"its base responses and must leave 2 perturbed ones: at most {n - 2}.")
    _group_sizes_iv(k, n - k)
    distance = np.maximum(1.0 - s, 0.0) if meas.uses == "distance" else None
    if distance is not None:
        np.fill_diagonal(distance, 0.0)
    with single_threaded_blas():
        return _test_on_matrices(s, distance, k, meas, n_permutations=n_permutations,
                                 rng=gen, sequential=sequential, batch=batch, bins=bins)
