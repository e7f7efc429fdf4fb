"""The permutation engine: p-values, exactness, reproducibility, sequential stopping."""

import math
import warnings

import numba
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dbpa_core import DBPAWarning, dbpa_test, dbpa_test_similarity, text_similarity_matrix
from dbpa_core._reference import literal_dbpa_test
from dbpa_core.permutation import random_subsets

from .conftest import cloud


@pytest.fixture
def shifted(rng):
    return cloud(rng, 10), cloud(rng, 10, center=np.linspace(0, 2, 16))


@pytest.mark.parametrize("measure", ["jsd", "wasserstein", "ks", "energy-cosine", "energy-l1", "energy-l2"])
def test_matches_literal_algorithm_1(rng, measure):
    """Same splits -> the same T_b as recomputing everything from the embeddings."""
    x, y = cloud(rng, 7), cloud(rng, 6, center=np.linspace(0.5, 1.5, 16))
    r = dbpa_test(x, y, measure=measure, n_permutations=200, rng=7)
    seed = int(np.random.default_rng(7).integers(0, 2**63 - 1))
    subsets = random_subsets(13, 7, 200, seed=seed)
    t_obs, stats, p = literal_dbpa_test(x, y, measure=measure, subsets=subsets)
    assert r.effect_size == pytest.approx(t_obs, abs=1e-12)
    np.testing.assert_allclose(r.permutation_statistics, stats, atol=1e-12)
    assert r.p_value == p


def test_result_fields(shifted):
    x, y = shifted
    r = dbpa_test(x, y, n_permutations=500, rng=0)
    assert r.chance_effect_size == pytest.approx(r.permutation_statistics.mean(), abs=1e-15)
    assert r.effect_above_chance == pytest.approx(r.effect_size - r.chance_effect_size)
    assert r.null_similarities.shape == (45,)
    assert r.alt_similarities.shape == (100,)
    assert r.permutation_statistics.shape == (500,)
    assert (r.k, r.m, r.n_permutations, r.exact, r.stopped_early) == (10, 10, 500, False, False)
    assert r.statistic == r.effect_size and r.pvalue == r.p_value
    d = r.to_dict()
    assert d["p_value"] == r.p_value and len(d["null_similarities"]) == 45


def test_p_value_formula(shifted):
    x, y = shifted
    r = dbpa_test(x, y, n_permutations=999, rng=1)
    tol = 1e-12 * max(1, r.effect_size)
    hits = np.count_nonzero(r.permutation_statistics >= r.effect_size - tol)
    assert r.p_value == (1 + hits) / 1000


def test_strong_effect_gets_smallest_p(rng):
    x, y = cloud(rng, 15, spread=0.2), cloud(rng, 15, center=-np.ones(16), spread=0.2)
    r = dbpa_test(x, y, n_permutations=2000, rng=0)
    assert r.p_value == 1 / 2001


def test_same_seed_same_result_and_generator_accepted(shifted):
    x, y = shifted
    a = dbpa_test(x, y, n_permutations=300, rng=42)
    b = dbpa_test(x, y, n_permutations=300, rng=np.random.default_rng(42))
    np.testing.assert_array_equal(a.permutation_statistics, b.permutation_statistics)
    assert a.p_value == b.p_value
    c = dbpa_test(x, y, n_permutations=300, rng=43)
    assert not np.array_equal(a.permutation_statistics, c.permutation_statistics)


def test_thread_count_does_not_change_result(shifted):
    x, y = shifted
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = dbpa_test(x, y, n_permutations=700, rng=3)
        numba.set_num_threads(max(2, before))
        many = dbpa_test(x, y, n_permutations=700, rng=3)
    finally:
        numba.set_num_threads(before)
    np.testing.assert_array_equal(one.permutation_statistics, many.permutation_statistics)
    assert one.p_value == many.p_value


@pytest.mark.parametrize("batch", [1, 7, 128, 5000])
def test_batch_size_does_not_change_result(shifted, batch):
    x, y = shifted
    ref = dbpa_test(x, y, n_permutations=400, rng=9)
    r = dbpa_test(x, y, n_permutations=400, rng=9, batch=batch)
    np.testing.assert_array_equal(ref.permutation_statistics, r.permutation_statistics)
    assert r.p_value == ref.p_value


def test_random_subsets_are_valid_and_uniform():
    sub = random_subsets(6, 2, 30000, seed=5)
    assert sub.shape == (30000, 2)
    assert np.all(np.diff(sub, axis=1) > 0)  # distinct, increasing
    # every pair of 6 items equally likely: chi-square goodness of fit
    codes = sub[:, 0] * 6 + sub[:, 1]
    counts = np.unique(codes, return_counts=True)[1]
    assert counts.size == math.comb(6, 2)
    from scipy.stats import chisquare

    assert chisquare(counts).pvalue > 1e-4
    # rows depend only on (seed, index)
    np.testing.assert_array_equal(random_subsets(6, 2, 10, seed=5, start=100), sub[100:110])


def test_exact_enumeration_when_few_splits(rng):
    x, y = cloud(rng, 3), cloud(rng, 4, center=np.zeros(16) + 2)
    r = dbpa_test(x, y, n_permutations=10_000, rng=0)
    assert r.exact
    assert r.n_permutations == math.comb(7, 3) == 35
    tol = 1e-12 * max(1, r.effect_size)
    assert r.p_value == np.count_nonzero(r.permutation_statistics >= r.effect_size - tol) / 35
    assert r.p_value >= 1 / 35  # the identity split is among them


def test_unequal_group_sizes(rng):
    x, y = cloud(rng, 12), cloud(rng, 5)
    r = dbpa_test(x, y, n_permutations=300, rng=0)
    assert (r.k, r.m) == (12, 5)
    assert r.null_similarities.size == 66 and r.alt_similarities.size == 60
    assert 1 / 301 <= r.p_value <= 1


def test_sequential_stopping(rng):
    x, y = cloud(rng, 10), cloud(rng, 10)  # no effect: exceedances come fast
    r = dbpa_test(x, y, n_permutations=10_000, rng=0, sequential=10)
    assert r.stopped_early
    assert r.n_permutations < 10_000
    assert r.p_value == pytest.approx(10 / r.n_permutations)
    tol = 1e-12 * max(1, r.effect_size)
    assert np.count_nonzero(r.permutation_statistics >= r.effect_size - tol) == 10
    assert r.permutation_statistics[-1] >= r.effect_size - tol
    # its permutations are a prefix of the full run's, whatever the batch size
    full = dbpa_test(x, y, n_permutations=10_000, rng=0)
    np.testing.assert_array_equal(full.permutation_statistics[: r.n_permutations], r.permutation_statistics)
    r2 = dbpa_test(x, y, n_permutations=10_000, rng=0, sequential=10, batch=3)
    assert r2.p_value == r.p_value


def test_sequential_without_enough_exceedances_runs_all(rng):
    x, y = cloud(rng, 10, spread=0.2), cloud(rng, 10, center=-np.ones(16), spread=0.2)
    r = dbpa_test(x, y, n_permutations=500, rng=0, sequential=10)
    assert not r.stopped_early and r.n_permutations == 500 and r.p_value == 1 / 501


def test_identical_responses_warn_and_give_p_one():
    x = np.tile(np.arange(1.0, 5.0), (6, 1))
    with pytest.warns(DBPAWarning, match="identical"):
        r = dbpa_test(x, x.copy(), n_permutations=100, rng=0)
    assert r.effect_size == 0.0 and r.p_value == 1.0


def test_similarity_matrix_variant_with_rouge():
    base = [
        "the patient should take statins daily",
        "take statins every day",
        "statins are recommended daily",
        "a daily statin is advised",
    ]
    pert = [
        "why did the chicken cross the road",
        "knock knock who is there",
        "a robot walks into a bar",
        "i am a comedian tonight",
    ]
    s = text_similarity_matrix(base + pert, "rouge1")
    r = dbpa_test_similarity(s, 4, measure="jsd", n_permutations=1000, rng=0)
    assert r.exact and r.n_permutations == 70
    assert r.p_value <= 0.05
    s_bleu = text_similarity_matrix(base + pert, "bleu")
    np.testing.assert_allclose(s_bleu, s_bleu.T)
    assert np.all(np.diag(s_bleu) == 1)


def test_similarity_matrix_variant_matches_embedding_variant(shifted):
    from dbpa_core import cosine_similarity_matrix

    x, y = shifted
    s = cosine_similarity_matrix(np.vstack([x, y]))
    for measure in ("jsd", "ks", "wasserstein", "energy-cosine"):
        a = dbpa_test(x, y, measure=measure, n_permutations=200, rng=4)
        b = dbpa_test_similarity(s, 10, measure=measure, n_permutations=200, rng=4)
        assert a.effect_size == pytest.approx(b.effect_size, abs=1e-12)
        assert a.p_value == b.p_value


@settings(max_examples=25, deadline=None)
@given(k=st.integers(2, 8), m=st.integers(2, 8), b=st.integers(1, 60), seed=st.integers(0, 10**6))
def test_p_value_bounds(k, m, b, seed):
    gen = np.random.default_rng(seed)
    x, y = cloud(gen, k, d=5), cloud(gen, m, d=5)
    r = dbpa_test(x, y, n_permutations=b, rng=seed)
    lower = 1 / r.n_permutations if r.exact else 1 / (b + 1)
    assert lower - 1e-15 <= r.p_value <= 1


def test_small_groups_work():
    x = np.array([[1.0, 0.1], [0.9, 0.3]])
    y = np.array([[0.2, 1.0], [0.1, 0.8]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = dbpa_test(x, y, n_permutations=100, rng=0)
    assert r.exact and r.n_permutations == 6


# --------------------------------------------------------------------------- issue 8
@pytest.mark.parametrize("measure", ["jsd", "wasserstein", "ks"])
def test_pooled_null_matches_literal_algorithm_1(rng, measure):
    x, y = cloud(rng, 7), cloud(rng, 6, center=np.linspace(0.5, 1.5, 16))
    r = dbpa_test(x, y, measure=measure, n_permutations=200, rng=7, null="pooled")
    seed = int(np.random.default_rng(7).integers(0, 2**63 - 1))
    subsets = random_subsets(13, 7, 200, seed=seed)
    t_obs, stats, p = literal_dbpa_test(x, y, measure=measure, subsets=subsets, null="pooled")
    assert r.effect_size == pytest.approx(t_obs, abs=1e-12)
    np.testing.assert_allclose(r.permutation_statistics, stats, atol=1e-12)
    assert r.p_value == p and r.null == "pooled"
    assert r.null_similarities.size == 21 + 15  # within base and within perturbed


def test_default_measure_is_the_benchmarks_choice(shifted):
    from dbpa_core import DEFAULT_MEASURE

    x, y = shifted
    assert DEFAULT_MEASURE == "energy-l2"
    assert dbpa_test(x, y, n_permutations=50, rng=0).measure == DEFAULT_MEASURE


@pytest.mark.parametrize("measure", ["jsd", "wasserstein", "ks", "energy-l2", "energy-cosine"])
def test_pooled_null_is_swap_symmetric(rng, measure):
    x, y = cloud(rng, 9), cloud(rng, 9, center=np.linspace(0.2, 1.8, 16), spread=0.9)
    a = dbpa_test(x, y, measure=measure, null="pooled", n_permutations=4000, rng=1)
    b = dbpa_test(y, x, measure=measure, null="pooled", n_permutations=4000, rng=1)
    assert a.effect_size == pytest.approx(b.effect_size, abs=1e-12)
    # the null distributions agree (different random splits): p within Monte Carlo error
    assert abs(a.p_value - b.p_value) <= 4 * np.sqrt(max(a.p_value, 1e-3) / 4000) + 1e-3
    # exact tests enumerate the same splits: identical p
    xs, ys = x[:4], y[:4]
    ea = dbpa_test(xs, ys, measure=measure, null="pooled", n_permutations=10_000, rng=0)
    eb = dbpa_test(ys, xs, measure=measure, null="pooled", n_permutations=10_000, rng=0)
    assert ea.exact and eb.exact and ea.p_value == eb.p_value


def test_base_null_is_asymmetric(rng):
    """The papers' test takes P0 from the base group: swapping the groups changes it
    (a tight base group and a spread-out perturbed one make the difference plain)."""
    x = cloud(rng, 10, spread=0.3)
    y = cloud(rng, 10, spread=1.2)
    a = dbpa_test(x, y, measure="wasserstein", n_permutations=999, rng=0)
    b = dbpa_test(y, x, measure="wasserstein", n_permutations=999, rng=0)
    assert abs(a.effect_size - b.effect_size) > 0.01


def test_unknown_null_is_named(shifted):
    x, y = shifted
    with pytest.raises(ValueError, match=r"`null` must be in .*got 'both'"):
        dbpa_test(x, y, null="both")
    with pytest.raises(ValueError, match=r"`null` must be in"):
        dbpa_test_similarity(np.eye(4), 2, null=None)


def test_energy_l2_on_a_cosine_similarity_matrix_matches_unit_embeddings(shifted):
    from dbpa_core import cosine_similarity_matrix
    from dbpa_core.similarity import normalize_rows

    x, y = (normalize_rows(v) for v in shifted)
    s = cosine_similarity_matrix(np.vstack([x, y]))
    a = dbpa_test(x, y, measure="energy-l2", n_permutations=300, rng=2)
    b = dbpa_test_similarity(s, 10, measure="energy-l2", n_permutations=300, rng=2)
    assert a.effect_size == pytest.approx(b.effect_size, abs=1e-9)
    np.testing.assert_allclose(a.permutation_statistics, b.permutation_statistics, atol=1e-9)
    with pytest.raises(ValueError, match="'energy-l1' needs embeddings"):
        dbpa_test_similarity(s, 10, measure="energy-l1")


class _Recorder:
    """Wraps a prepared statistic and records the batch sizes the engine asks for."""

    def __init__(self, stat):
        self.stat, self.sizes = stat, []

    def __call__(self, subsets):
        self.sizes.append(subsets.shape[0])
        return self.stat(subsets)


def _prepared(x, y, measure="energy-l2"):
    from dbpa_core.measures import MEASURES
    from dbpa_core.similarity import pairwise_distance_matrix

    pooled = np.vstack([x, y])
    m = MEASURES[measure]
    from dbpa_core import cosine_similarity_matrix

    used = (
        pairwise_distance_matrix(pooled, m.metric)
        if m.uses == "distance"
        else cosine_similarity_matrix(pooled)
    )
    return m.prepare(used, x.shape[0], y.shape[0], 30, False)


@pytest.mark.parametrize("measure", ["energy-l2", "jsd", "ks"])
def test_memory_bound_batches_do_not_change_the_result(shifted, monkeypatch, measure):
    from dbpa_core import permutation

    x, y = shifted
    ref = dbpa_test(x, y, measure=measure, n_permutations=3000, rng=5)
    # 400 bytes of split indices per batch: 10 splits of k = 10 at a time
    monkeypatch.setattr(permutation, "MAX_BATCH_BYTES", 400)
    assert permutation.max_batch(10) == 10 and permutation.max_batch(10, 4) == 4
    small = dbpa_test(x, y, measure=measure, n_permutations=3000, rng=5)
    np.testing.assert_array_equal(ref.permutation_statistics, small.permutation_statistics)
    assert small.p_value == ref.p_value
    rec = _Recorder(_prepared(x, y, measure))
    permutation.run_permutations(rec, 20, 10, n_permutations=3000, rng=np.random.default_rng(5))
    assert max(rec.sizes[1:]) == 10 and sum(rec.sizes[1:]) == 3000


def test_exact_enumeration_in_bounded_batches(rng, monkeypatch):
    from dbpa_core import permutation

    x, y = cloud(rng, 5), cloud(rng, 5, center=np.linspace(0, 2, 16))
    ref = dbpa_test(x, y, n_permutations=10_000, rng=0)
    monkeypatch.setattr(permutation, "MAX_BATCH_BYTES", 4 * 5 * 7)  # 7 splits at a time
    r = dbpa_test(x, y, n_permutations=10_000, rng=0)
    assert r.exact and r.n_permutations == math.comb(10, 5)
    np.testing.assert_array_equal(ref.permutation_statistics, r.permutation_statistics)
    np.testing.assert_array_equal(
        permutation._exact_subsets(10, 5), np.array(list(__import__("itertools").combinations(range(10), 5)))
    )


def test_huge_plans_never_hold_all_splits_at_once(shifted):
    """k x B = 10 x 20,000,000 splits would need 800 MB of indices at once; the engine
    holds at most MAX_BATCH_BYTES of them (checked without running it)."""
    from dbpa_core import permutation

    assert permutation.max_batch(10) * 10 * 4 <= permutation.MAX_BATCH_BYTES
    assert permutation.max_batch(5000) * 5000 * 4 <= permutation.MAX_BATCH_BYTES
    assert permutation.max_batch(10**9) == 1


def test_sequential_starts_small_and_doubles(shifted):
    from dbpa_core import permutation

    x, y = cloud(np.random.default_rng(3), 10), cloud(np.random.default_rng(4), 10)
    rec = _Recorder(_prepared(x, y))
    _, _, _, _, stopped = permutation.run_permutations(
        rec, 20, 10, n_permutations=10_000, rng=np.random.default_rng(0), sequential=10**6
    )
    assert rec.sizes[:5] == [1, 64, 128, 256, 512]  # the observed split, then 64, doubling
    assert sum(rec.sizes[1:]) == 10_000 and not stopped
    # a clear null stops inside the first small batch
    rec = _Recorder(_prepared(x, y))
    _, stats, p, _, stopped = permutation.run_permutations(
        rec, 20, 10, n_permutations=10_000, rng=np.random.default_rng(0), sequential=5
    )
    assert stopped and rec.sizes == [1, 64] and stats.size <= 64 and p == 5 / stats.size
