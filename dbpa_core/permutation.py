"""The one permutation engine (the papers' Algorithm 1).

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
from typing import Any

import numba as nb
import numpy as np
from numpy.typing import ArrayLike

from ._validate import MAX_EXACT_SPLITS, MAX_WORK, check_int, pair_visits, size_words
from .cores import free_cores
from .measures import (
    DEFAULT_BINS,
    DEFAULT_MEASURE,
    NULLS,
    Measure,
    get_measure,
    histogram_edges,
    off_diagonal,
)
from .similarity import MAX_ROWS, check_embeddings, cosine_similarity_matrix, pairwise_distance_matrix
from .types import DBPAResult

#: what an ``rng`` argument may be: None (fresh entropy), a non-negative int seed, or a
#: numpy Generator (used as it is)
RngLike = int | np.integer | np.random.Generator | None

MAX_PERMUTATIONS = 100_000_000  # B: the result keeps B statistics (8 bytes each, 800 MB here)
MAX_BINS = 10_000  # jsd: every permutation fills and sums histograms of this many counts
MAX_RESPONSES = MAX_ROWS  # k + m: the pooled similarity matrix takes 8 n² bytes (3.2 GB here)
MAX_BATCH_BYTES = 32 * 2**20  # split indices held at once (int32): bounds memory at any k and B
SEQUENTIAL_FIRST_BATCH = 64  # sequential stopping starts this small and doubles
PARALLEL_MIN_WORK = 1_000_000  # pair visits per kernel call below which one thread is faster


class DBPAWarning(UserWarning):
    """A test ran but its answer carries no information (e.g. identical responses)."""


# --------------------------------------------------------------------------- random splits
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


@nb.njit(cache=True, inline="always")
def _splitmix_next(state: np.uint64) -> tuple[np.uint64, np.uint64]:
    state = state + _GOLDEN
    z = state
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return state, z ^ (z >> np.uint64(31))


@nb.njit(parallel=True, cache=True)
def _random_subsets(n: int, k: int, seed: np.uint64, start: int, count: int) -> np.ndarray:
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
    """All C(n, k) k-subsets of range(n), lexicographic (small n only)."""
    return np.concatenate(list(_exact_batches(n, k, math.comb(n, k))))


def _exact_batches(n: int, k: int, size: int) -> Iterator[np.ndarray]:
    """The k-subsets of range(n) in lexicographic order, ``size`` rows at a time."""
    combos = itertools.combinations(range(n), k)
    while True:
        flat = np.fromiter(itertools.chain.from_iterable(itertools.islice(combos, size)), dtype=np.int32)
        if flat.size == 0:
            return
        yield flat.reshape(-1, k)


def max_batch(k: int, batch: int | None = None) -> int:
    """Splits evaluated per kernel call: ``batch`` (or all), capped so that their
    indices take at most :data:`MAX_BATCH_BYTES`. The result never depends on it."""
    cap = max(1, MAX_BATCH_BYTES // (4 * max(1, k)))
    return min(batch, cap) if batch else cap


@functools.cache
def _threadpool_controller() -> Any:
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


#: numba's thread pool (one per core this process may use, or NUMBA_NUM_THREADS)
MOST_THREADS = nb.get_num_threads()


def kernel_threads(work: float) -> int:
    """The numba threads for a kernel call of ``work`` pair visits: one for a small call
    (about a millisecond of work or less: starting a parallel region costs more than it
    saves there), else one per core that no other work holds now (:func:`free_cores`).

    A parallel region ends when its slowest thread does, and a thread sharing its core with
    other work runs at half speed or less while the others spin waiting for it; one thread
    per free core leaves that core to the other work. Results do not depend on the thread
    count."""
    if work < PARALLEL_MIN_WORK:
        return 1
    most = MOST_THREADS
    free = free_cores(samples=1)
    return most if free is None else max(1, min(free, most))


@contextlib.contextmanager
def _threads_for(work: float) -> Iterator[None]:
    """Run the kernel calls inside on :func:`kernel_threads` numba threads."""
    threads = kernel_threads(work)
    before = nb.get_num_threads()
    if threads == before:
        yield
        return
    nb.set_num_threads(threads)
    try:
        yield
    finally:
        nb.set_num_threads(before)


# --------------------------------------------------------------------------- input validation
def as_generator(rng: object) -> np.random.Generator:
    if isinstance(rng, (bool, np.bool_)):
        raise TypeError("`rng` must be None, an int seed or a numpy.random.Generator, got bool.")
    if rng is None or isinstance(rng, (int, np.integer)):
        if rng is not None and rng < 0:
            raise ValueError(f"`rng` seed must be non-negative, got {rng}.")
        return np.random.default_rng(rng)
    if isinstance(rng, np.random.Generator):
        return rng
    raise TypeError("`rng` must be None, an int seed or a numpy.random.Generator.")


def check_permutations(n_permutations: object) -> int:
    """B in [1, MAX_PERMUTATIONS]: every permutation statistic is kept in the result, so
    a larger B would not fit in memory (p-values below 1e-8 need no more splits)."""
    return check_int(
        n_permutations,
        "n_permutations",
        1,
        MAX_PERMUTATIONS,
        "the result keeps every permutation statistic (8 bytes each, "
        f"{size_words(8 * MAX_PERMUTATIONS)} at the bound), and p-values below 1e-8 need no more",
    )


def _bins_iv(bins: object) -> int:
    """``bins`` in [2, MAX_BINS]: the jsd kernel fills and sums histograms of ``bins``
    counts in every permutation, so its time and memory grow with ``bins``."""
    if isinstance(bins, (int, np.integer)) and not isinstance(bins, bool) and bins > MAX_BINS:
        why = (
            "every permutation fills three histograms of `bins` counts and sums them bin by "
            f"bin ({size_words(24 * min(bins, 10**30))} per thread and {min(bins, 10**30):.2g} steps "
            "per permutation at this value); with more bins than similarity pairs most bins "
            "stay empty and the histogram shows nothing more"
        )
        return check_int(bins, "bins", 2, MAX_BINS, why)
    return check_int(bins, "bins", 2)


def _engine_iv(
    n_permutations: object, rng: object, sequential: object, batch: object, bins: object
) -> tuple[int, np.random.Generator, int | None, int | None, int]:
    n_permutations = check_permutations(n_permutations)
    if sequential is not None:
        # any h >= 1; an h above B never stops early (all B permutations run)
        sequential = check_int(sequential, "sequential", 1)
    if batch is not None:
        # any batch >= 1: it is lowered to the MAX_BATCH_BYTES cap (max_batch), so it
        # never sets the memory
        batch = check_int(batch, "batch", 1)
    bins = _bins_iv(bins)
    return n_permutations, as_generator(rng), sequential, batch, bins


def _group_sizes_iv(k: int, m: int) -> None:
    if k < 2:
        raise ValueError(f"`base` needs at least 2 responses, got {k}.")
    if m < 2:
        raise ValueError(f"`perturbed` needs at least 2 responses, got {m}.")
    if k + m > MAX_RESPONSES:
        n = k + m
        raise ValueError(
            f"`base` and `perturbed` hold {k:_} + {m:_} responses; together they must be <= "
            f"{MAX_RESPONSES:_}: the pooled similarity matrix takes 8 n² bytes "
            f"({size_words(8.0 * n * n)} here, twice that for an energy measure)."
        )


def check_sizes(k: object, m: object) -> tuple[int, int]:
    """k and m of a planned test: each >= 2, k + m <= MAX_RESPONSES (the memory of the
    pooled similarity matrix); refused before ``C(k + m, k)`` is computed."""
    k = check_int(k, "k", 2, MAX_RESPONSES - 2, "a test pools at most that many responses")
    m = check_int(m, "m", 2, MAX_RESPONSES - 2, "a test pools at most that many responses")
    if k + m > MAX_RESPONSES:
        n = k + m
        raise ValueError(
            f"`k` + `m` must be <= {MAX_RESPONSES:_}, got {n:_}: the pooled similarity matrix "
            f"takes 8 n² bytes ({size_words(8.0 * n * n)} here)."
        )
    return k, m


def permutation_work(k: int, m: int, n_permutations: int, measure: Measure, bins: int) -> int:
    """Steps one test takes, counted in pair visits, known before any work
    (:func:`dbpa_core._validate.pair_visits`; ``bins`` counts for ``jsd`` only)."""
    return pair_visits(k, m, n_permutations, bins if measure.name == "jsd" else 0)


def _work_iv(k: int, m: int, n_permutations: int, measure: Measure, bins: int) -> None:
    """Refuses a test whose work (:func:`permutation_work`) is over MAX_WORK."""
    work = permutation_work(k, m, n_permutations, measure, bins)
    if work > MAX_WORK:
        n = k + m
        per_split = n * n // 2 + (bins if measure.name == "jsd" else 0)
        most = max(1, MAX_WORK // per_split - 1)
        raise ValueError(
            f"`n_permutations` must be <= {most:_} for {k} + {m} responses with {measure.name}, "
            f"got {n_permutations:_}: each permutation visits up to {per_split:_} pairs"
            f"{' and bins' if measure.name == 'jsd' else ''}, {work:.2g} in all, over the "
            f"{MAX_WORK:.0e} a test may take (about {MAX_WORK / 1e8 / 60:.0f} minutes of one core); "
            "lower B (the smallest p-value is 1/(B+1)) or the number of responses."
        )


def check_null(null: object) -> str:
    if null not in NULLS:
        raise ValueError(f"`null` must be in {set(NULLS)}, got {null!r}.")
    return null


# --------------------------------------------------------------------------- engine
def _p_value(stats: np.ndarray, t_obs: float, *, exact: bool) -> float:
    tol = 1e-12 * max(1.0, abs(t_obs))
    hits = int(np.count_nonzero(stats >= t_obs - tol))
    if exact:
        return hits / stats.size
    return (1 + hits) / (1 + stats.size)


def run_permutations(
    stat: Callable[[np.ndarray], np.ndarray],
    n: int,
    k: int,
    *,
    n_permutations: int,
    rng: np.random.Generator,
    sequential: int | None = None,
    batch: int | None = None,
) -> tuple[float, np.ndarray, float, bool, bool]:
    """Observed statistic, permutation statistics and p-value for a prepared measure.

    Splits are evaluated in batches of at most :func:`max_batch` rows, so memory
    stays bounded whatever ``k`` and ``n_permutations``; the splits themselves
    depend only on ``(rng, index)``, so neither the batch size nor the thread
    count changes the result. With ``sequential = h`` the batches start at
    :data:`SEQUENTIAL_FIRST_BATCH` and double, so a clear null stops after a few
    dozen permutations.

    Returns ``(t_obs, stats, p_value, exact, stopped_early)``.
    """
    per_split = n * n / 2.0  # pair visits of one split, at most

    def evaluate(subsets: np.ndarray) -> np.ndarray:
        with _threads_for(subsets.shape[0] * per_split):
            return stat(subsets)

    t_obs = float(evaluate(np.arange(k, dtype=np.int32)[None, :])[0])
    n_splits = math.comb(n, k)
    cap = max_batch(k, batch)
    if n_splits <= min(n_permutations, MAX_EXACT_SPLITS):
        stats = np.concatenate([evaluate(sub) for sub in _exact_batches(n, k, cap)])
        return t_obs, stats, _p_value(stats, t_obs, exact=True), True, False

    seed = int(rng.integers(0, 2**63 - 1))
    tol = 1e-12 * max(1.0, abs(t_obs))
    stats = np.empty(n_permutations)
    size = min(cap, SEQUENTIAL_FIRST_BATCH) if sequential is not None else cap
    done = hits = 0
    while done < n_permutations:
        count = min(size, n_permutations - done)
        with _threads_for(count * per_split):
            subsets = random_subsets(n, k, count, seed=seed, start=done)
        part = evaluate(subsets)
        stats[done : done + count] = part
        if sequential is not None:
            exceed = part >= t_obs - tol
            n_exceed = int(np.count_nonzero(exceed))
            if hits + n_exceed >= sequential:
                # Besag–Clifford: stop at the l-th permutation where the h-th exceedance falls
                cut = done + int(np.nonzero(exceed)[0][sequential - hits - 1]) + 1
                return t_obs, stats[:cut].copy(), sequential / cut, False, True
            hits += n_exceed
            size = min(cap, 2 * size)
        done += count
    return t_obs, stats, _p_value(stats, t_obs, exact=False), False, False


def _all_identical(matrix: np.ndarray) -> bool:
    """Every pairwise similarity (or distance) is the same: no split can differ."""
    vals = off_diagonal(matrix)
    return float(vals.max() - vals.min()) <= 1e-9 * max(1.0, float(np.abs(vals).max()))


def _null_alt(similarity: np.ndarray, k: int, null: str) -> tuple[np.ndarray, np.ndarray]:
    """P0 (within the base group; with ``pooled``, within both groups) and P1."""
    p0 = off_diagonal(similarity[:k, :k])
    if null == "pooled":
        p0 = np.concatenate([p0, off_diagonal(similarity[k:, k:])])
    return p0, similarity[:k, k:].ravel().copy()


def _test_on_matrices(
    similarity: np.ndarray,
    distance: np.ndarray | None,
    k: int,
    measure: Measure,
    *,
    n_permutations: int,
    rng: np.random.Generator,
    sequential: int | None,
    batch: int | None,
    bins: int,
    null: str = "base",
) -> DBPAResult:
    n = similarity.shape[0]
    m = n - k
    p0, p1 = _null_alt(similarity, k, null)
    used = distance if measure.uses == "distance" and distance is not None else similarity
    if _all_identical(used):
        warnings.warn(
            "All responses are identical (every pairwise similarity is equal): ω = 0 and "
            "p = 1, and the test carries no information. Sample with temperature > 0 and "
            "do not reuse cached copies of one draw.",
            DBPAWarning,
            stacklevel=3,
        )
        edges = histogram_edges(similarity, bins) if measure.name == "jsd" else None
        return DBPAResult(0.0, 1.0, p0, p1, np.zeros(0), measure.name, k, m, 0, bin_edges=edges, null=null)
    stat = measure.prepare(used, k, m, bins, null == "pooled")
    edges = getattr(stat, "edges", None)
    t_obs, stats, p, exact, stopped = run_permutations(
        stat, n, k, n_permutations=n_permutations, rng=rng, sequential=sequential, batch=batch
    )
    return DBPAResult(
        effect_size=t_obs,
        p_value=float(p),
        null_similarities=p0,
        alt_similarities=p1,
        permutation_statistics=stats,
        measure=measure.name,
        k=k,
        m=m,
        n_permutations=int(stats.size),
        exact=exact,
        stopped_early=stopped,
        bin_edges=edges,
        chance_effect_size=float(stats.mean()),
        null=null,
    )


def smallest_p_value(
    k: int, m: int, *, n_permutations: int, measure: str = DEFAULT_MEASURE, null: str = "base"
) -> float:
    """The smallest p-value a test of k against m responses can return.

    Known before any sampling (``k, m >= 2`` with ``k + m <= 20_000`` and
    ``1 <= B <= 10⁸``, as in :func:`dbpa_test`): ``1 / (B + 1)`` for a random test; for an exact
    test (``C(k+m, k) <= B``) ``1 / C(k+m, k)``, or ``2 / C(k+m, k)`` when
    ``k == m`` and the statistic is symmetric (an energy distance, or
    ``null="pooled"``), because a split and its complement then tie.

    Examples
    --------
    >>> smallest_p_value(2, 2, n_permutations=2000, measure="jsd")   # 1 of 6 splits
    0.16666666666666666
    >>> smallest_p_value(20, 20, n_permutations=2000)
    0.0004997501249375312
    """
    k, m = check_sizes(k, m)
    n_permutations = check_permutations(n_permutations)
    meas = get_measure(measure)
    check_null(null)
    n_splits = math.comb(k + m, k)
    if n_splits <= min(n_permutations, MAX_EXACT_SPLITS):
        ties = 2 if (k == m and (meas.symmetric or null == "pooled")) else 1
        return ties / n_splits
    return 1.0 / (n_permutations + 1)


def memory_estimate(
    k: int, m: int, *, n_permutations: int, measure: str = DEFAULT_MEASURE, bins: int = DEFAULT_BINS
) -> int:
    """Bytes one test needs at its peak (an estimate, known before sampling).

    The pooled similarity matrix (and the distance matrix of an energy measure,
    the bin matrix of ``jsd``, the sorted pairs of ``wasserstein``/``ks``), one
    batch of split indices (at most :data:`MAX_BATCH_BYTES`) and the B
    permutation statistics, which the result keeps. Arguments have the bounds of
    :func:`dbpa_test` (``k + m <= 20_000``, ``B <= 10⁸``, ``bins <= 10_000``).
    """
    meas = get_measure(measure)
    k, m = check_sizes(k, m)
    n_permutations = check_permutations(n_permutations)
    bins = _bins_iv(bins)
    n = k + m
    pairs = n * (n - 1) // 2
    need = 8 * n * n  # similarity
    if meas.uses == "distance":
        need += 8 * n * n
    elif meas.name == "jsd":
        need += n * n * (1 if bins <= 256 else 4) + 8 * n * bins
    else:
        need += pairs * (8 + 8 + 2 * 4)  # values, gaps, two index arrays (and argsort)
    need += min(MAX_BATCH_BYTES, 4 * k * max(1, min(n_permutations, math.comb(n, k))))
    return need + 8 * n_permutations


def dbpa_test(
    base: ArrayLike,
    perturbed: ArrayLike,
    *,
    measure: str = DEFAULT_MEASURE,
    n_permutations: int = 10_000,
    rng: RngLike = None,
    sequential: int | None = None,
    batch: int | None = None,
    bins: int = DEFAULT_BINS,
    null: str = "base",
) -> DBPAResult:
    """Distribution-based perturbation test on two groups of response embeddings.

    P0 holds the cosine similarities among the base responses (i < j), P1 those
    between base and perturbed responses; ω = ``measure`` compares them (or, for
    ``energy-*``, the default, compares the embeddings directly). The p-value
    comes from permuting the pooled responses (never the similarity values).

    Parameters
    ----------
    base : array_like, shape (k, d)
        Embeddings of k >= 2 responses to the base prompt, one row per response.
    perturbed : array_like, shape (m, d)
        Embeddings of m >= 2 responses to the perturbed prompt (or another model).
        ``k + m <= 20_000`` (:data:`MAX_RESPONSES`): the pooled similarity matrix
        takes ``8 (k + m)²`` bytes, 3.2 GB at the bound (twice that for ``energy-*``).
    measure : str, default "energy-l2"
        A name in :data:`dbpa_core.MEASURES`. The default is the most powerful
        calibrated measure on recorded real responses
        (``benchmarks/bench_measures.py``); ``jsd`` is the papers' measure.
    n_permutations : int, default 10000
        B, the number of random splits. When C(k+m, k) <= B every split is
        enumerated and the test is exact. At most 10⁸ (:data:`MAX_PERMUTATIONS`:
        the result keeps every statistic, 800 MB there), and at most
        ``10¹⁰ / (n²/2 [+ bins for jsd])`` for n = k + m responses
        (:data:`MAX_WORK` pair visits, about two minutes of one core; see
        :func:`permutation_work`).
    rng : None, int or numpy.random.Generator
        Seed of the splits; the same seed gives the same p-value on any machine.
    sequential : int, optional
        h for Besag–Clifford sequential stopping: stop once h permutation
        statistics reach T_obs and report ``p = h / l``. Starts with 64
        permutations and doubles, so a clear null stops within milliseconds;
        ``None`` (default) runs all B permutations. Any h >= 1; an h above B
        never stops early.
    batch : int, optional
        Number of splits evaluated per kernel call, >= 1; capped so that the split
        indices take at most 32 MiB whatever k and B. Never changes the result.
    bins : int, default 30
        Histogram bins for ``jsd`` (over the whiskers of the pooled similarities),
        in [2, 10_000] (:data:`MAX_BINS`): every permutation fills and sums
        histograms of ``bins`` counts, and more bins than pairs stay empty.

    Raises
    ------
    ValueError
        For an argument out of its bounds (checked before any work, each message
        names the argument, its bound and why), too few responses, or embeddings of
        different widths.
    null : {"base", "pooled"}, default "base"
        What P0 holds for ``jsd``, ``wasserstein`` and ``ks``: the similarities
        among the base responses (the papers' test; swapping base and perturbed
        changes ω and p), or among the responses of *each* group (symmetric:
        use it when neither group is a natural reference, e.g. two models). The
        ``energy-*`` measures are symmetric either way.

    Returns
    -------
    DBPAResult
        ``effect_size`` (ω), ``chance_effect_size`` (mean of the T_b),
        ``effect_above_chance``, ``p_value``, ``null_similarities`` (P0),
        ``alt_similarities`` (P1), ``permutation_statistics`` (the T_b).

    Notes
    -----
    ``p = (1 + #{b : T_b >= T_obs}) / (1 + B)`` with a tie tolerance of
    ``1e-12 * max(1, |T_obs|)``: never 0. A small p says the perturbed answers
    differ from the base answers more than the base answers differ among
    themselves; a large p says the sample cannot tell — not that nothing changed.
    ω has no fixed zero (chance alone gives ω > 0, more so at small k): read
    ``effect_above_chance``, which is about 0 when nothing changed.

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
    null = check_null(null)
    n_permutations, gen, sequential, batch, bins = _engine_iv(n_permutations, rng, sequential, batch, bins)
    x = check_embeddings(base, "base")
    y = check_embeddings(perturbed, "perturbed")
    _group_sizes_iv(x.shape[0], y.shape[0])
    _work_iv(x.shape[0], y.shape[0], n_permutations, meas, bins)
    if x.shape[1] != y.shape[1]:
        raise ValueError(
            f"`base` and `perturbed` have embeddings of different widths "
            f"({x.shape[1]} vs {y.shape[1]}); embed both with the same model."
        )
    pooled = np.vstack([x, y])
    with single_threaded_blas():
        similarity = cosine_similarity_matrix(pooled)
        distance = (
            pairwise_distance_matrix(pooled, meas.metric)
            if meas.uses == "distance" and meas.metric is not None
            else None
        )
        return _test_on_matrices(
            similarity,
            distance,
            x.shape[0],
            meas,
            n_permutations=n_permutations,
            rng=gen,
            sequential=sequential,
            batch=batch,
            bins=bins,
            null=null,
        )


def dbpa_test_similarity(
    similarity: ArrayLike,
    k: int,
    *,
    measure: str = DEFAULT_MEASURE,
    n_permutations: int = 10_000,
    rng: RngLike = None,
    sequential: int | None = None,
    batch: int | None = None,
    bins: int = DEFAULT_BINS,
    null: str = "base",
) -> DBPAResult:
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
        ``energy-l2`` (default; uses ``d = sqrt(2 (1 - S))``, the Euclidean
        distance of unit vectors whose cosine similarity is S), ``energy-cosine``
        (``d = 1 - S``), ``jsd``, ``wasserstein`` or ``ks``. ``energy-l1`` needs
        embeddings.

    Notes
    -----
    Other parameters are those of :func:`dbpa_test`, with the same bounds (the
    matrix counts ``k + m`` responses).
    """
    meas = get_measure(measure)
    null = check_null(null)
    if meas.uses == "distance" and meas.metric == "l1":
        raise ValueError(
            f"`measure` {measure!r} needs embeddings; with a similarity matrix use "
            "'energy-l2', 'energy-cosine', 'jsd', 'wasserstein' or 'ks'."
        )
    n_permutations, gen, sequential, batch, bins = _engine_iv(n_permutations, rng, sequential, batch, bins)
    from ._validate import real_array

    s = real_array(similarity, "similarity", "a square array of numbers")
    if s.ndim != 2 or s.shape[0] != s.shape[1]:
        raise ValueError(f"`similarity` must be a square matrix, got shape {s.shape}.")
    if not np.all(np.isfinite(s)):
        raise ValueError("`similarity` contains NaN or infinite values.")
    if not np.allclose(s, s.T, atol=1e-9):
        raise ValueError("`similarity` must be symmetric (S[i, j] == S[j, i]).")
    k = check_int(k, "k", 0)
    n = s.shape[0]
    if not 2 <= k <= n - 2:
        raise ValueError(
            f"`k` must lie in [2, {n - 2}] for a {n} x {n} `similarity` matrix (k counts its "
            f"base responses and must leave at least 2 perturbed ones), got {k}."
            if n >= 4
            else f"`similarity` is {n} x {n}: it needs at least 4 responses "
            f"(2 base and 2 perturbed) for any `k`, got k = {k}."
        )
    _group_sizes_iv(k, n - k)
    _work_iv(k, n - k, n_permutations, meas, bins)
    distance = None
    if meas.uses == "distance":
        distance = np.maximum(1.0 - s, 0.0)
        if meas.metric == "l2":  # |a - b| = sqrt(2 (1 - cos)) for unit vectors
            distance = np.sqrt(2.0 * distance)
        np.fill_diagonal(distance, 0.0)
    with single_threaded_blas():
        return _test_on_matrices(
            s,
            distance,
            k,
            meas,
            n_permutations=n_permutations,
            rng=gen,
            sequential=sequential,
            batch=batch,
            bins=bins,
            null=null,
        )
