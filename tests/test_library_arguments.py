"""Library functions name the argument that is wrong, or accept what is valid (issue 7)."""

import numpy as np
import pytest

from dbpa_core import adjust_pvalues, dbpa_test, dbpa_test_similarity, multiple_testing, roc_over_alpha
from dbpa_core.similarity import check_embeddings

GOOD = np.random.default_rng(0).normal(size=(6, 4)) + 2


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: adjust_pvalues(None), r"`pvalues` must be a 1-D sequence of numbers, got None"),
        (lambda: multiple_testing(None), r"`pvalues` must be a 1-D sequence of numbers, got None"),
        (
            lambda: roc_over_alpha(None, [0.1]),
            r"`control_pvalues` must be a 1-D sequence of numbers, got None",
        ),
        (
            lambda: roc_over_alpha([0.1], None),
            r"`target_pvalues` must be a 1-D sequence of numbers, got None",
        ),
        (lambda: adjust_pvalues([0.1, 0.2], ["holm"]), r"`method` must be one of .* \(a string\), got list"),
        (lambda: multiple_testing([0.1], {"bh"}), r"`method` must be one of .* \(a string\), got set"),
        (lambda: adjust_pvalues(np.array([0.1, 0.2], dtype=complex)), r"`pvalues` .* got complex numbers"),
        (lambda: adjust_pvalues(np.array([True, False])), r"`pvalues` .* got booleans"),
        (lambda: roc_over_alpha([0.1], [True]), r"`target_pvalues` .* got booleans"),
        (lambda: adjust_pvalues([[0.1], [0.2, 0.3]]), r"`pvalues` must be a 1-D sequence of numbers"),
    ],
)
def test_p_value_arguments_are_named(call, match):
    with pytest.raises(TypeError, match=match):
        call()


def test_pvalues_nan_still_says_nan():
    with pytest.raises(ValueError, match="`pvalues` contains NaN"):
        adjust_pvalues([0.1, np.nan])


@pytest.mark.parametrize("alpha", [np.float32(0.05), np.float64(0.05), 0.05, np.float16(0.05)])
def test_alpha_of_any_real_type_is_accepted(alpha):
    r = multiple_testing([0.01, 0.5], "holm", alpha=alpha)
    assert r.alpha == pytest.approx(0.05, rel=1e-3) and r.reject.tolist() == [True, False]


@pytest.mark.parametrize(
    "alpha,exc,match",
    [
        (True, TypeError, r"`alpha` must be a number in \(0, 1\), got bool"),
        ("0.05", TypeError, r"`alpha` must be a number in \(0, 1\), got str"),
        (np.nan, ValueError, r"`alpha` must lie in \(0, 1\), got nan"),
        (np.float32(1.5), ValueError, r"`alpha` must lie in \(0, 1\)"),
    ],
)
def test_bad_alpha_is_named(alpha, exc, match):
    with pytest.raises(exc, match=match):
        multiple_testing([0.1], "holm", alpha=alpha)


@pytest.mark.parametrize("k", [5, 7, 100])
def test_k_larger_than_the_similarity_matrix(k):
    with pytest.raises(
        ValueError, match=rf"`k` must lie in \[2, 2\] for a 4 x 4 `similarity` matrix.*got {k}"
    ):
        dbpa_test_similarity(np.eye(4), k, n_permutations=10)


@pytest.mark.parametrize(
    "s,match",
    [
        (np.eye(4, dtype=complex), "`similarity` must be a square array of numbers, got complex numbers"),
        (np.eye(4, dtype=bool), "`similarity` must be a square array of numbers, got booleans"),
        (None, "`similarity` must be a square array of numbers, got None"),
    ],
)
def test_similarity_of_the_wrong_type(s, match):
    with pytest.raises(TypeError, match=match):
        dbpa_test_similarity(s, 2, n_permutations=10)


@pytest.mark.parametrize(
    "bad,match",
    [
        (GOOD.astype(complex), r"`base` must be a 2-D array of numbers .*got complex numbers"),
        (GOOD > 2, r"`base` must be a 2-D array of numbers .*got booleans"),
        (None, r"`base` must be a 2-D array of numbers .*got None"),
        ([[1.0, 2.0], [3.0]], r"`base` must be a 2-D array of numbers"),
    ],
)
def test_embeddings_of_the_wrong_type(bad, match):
    with pytest.raises(TypeError, match=match):
        dbpa_test(bad, GOOD, n_permutations=10)


@pytest.mark.parametrize(
    "scale,match",
    [
        (1e300, r"`perturbed` has entries as large as 1e\+300 \(row 0\): their squares overflow"),
        (1e-300, r"`perturbed` row 0 has no entry larger than 1e-300: its norm underflows"),
    ],
)
def test_extreme_magnitudes_are_named_not_a_silent_p_of_1(scale, match):
    y = GOOD.copy()
    y[0] = np.sign(y[0]) * scale
    with pytest.raises(ValueError, match=match):
        dbpa_test(GOOD, y, n_permutations=10)


def test_large_but_safe_magnitudes_are_accepted():
    # the default energy-l2 is a distance on the embeddings: it scales with them, p does not
    r1 = dbpa_test(GOOD, GOOD[::-1] + 1, n_permutations=200, rng=1)
    r2 = dbpa_test(GOOD * 1e100, (GOOD[::-1] + 1) * 1e100, n_permutations=200, rng=1)
    assert r1.p_value == r2.p_value and r2.effect_size == pytest.approx(r1.effect_size * 1e100)
    # jsd sees only cosine similarities: the same test at any magnitude
    j1 = dbpa_test(GOOD, GOOD[::-1] + 1, measure="jsd", n_permutations=200, rng=1)
    j2 = dbpa_test(GOOD * 1e100, (GOOD[::-1] + 1) * 1e100, measure="jsd", n_permutations=200, rng=1)
    assert j1.p_value == j2.p_value and j1.effect_size == pytest.approx(j2.effect_size)


def test_bool_rng_is_refused():
    with pytest.raises(
        TypeError, match=r"`rng` must be None, an int seed or a numpy\.random\.Generator, got bool"
    ):
        dbpa_test(GOOD, GOOD + 1, n_permutations=10, rng=True)


def test_numpy_integers_are_accepted():
    r = dbpa_test(GOOD, GOOD + 1, n_permutations=np.int64(50), rng=np.int32(3))
    assert r.n_permutations > 0


def test_check_embeddings_returns_float64():
    out = check_embeddings(np.ones((2, 3), dtype=np.int32), "x")
    assert out.dtype == np.float64


# ---------------------------------------------------------------- bounds from memory and time (issue 36)
HEAVY_WORK = (
    "dbpa_core.permutation.run_permutations",
    "dbpa_core.permutation.cosine_similarity_matrix",
    "dbpa_core.permutation.pairwise_distance_matrix",
    "scipy.stats.permutation_test",
    "rouge_score.rouge_scorer.RougeScorer",
)
"""What a refused call must never reach: the permutation engines, the pooled similarity
and distance matrices, the pairwise text scorer."""


@pytest.fixture
def no_heavy_work(monkeypatch):
    """Refusing comes before the work: each of :data:`HEAVY_WORK` fails the test if called
    (a cause check, not a stopwatch: a loaded machine can take any time to refuse)."""
    import rouge_score.rouge_scorer  # noqa: F401 - importable, so the name can be patched
    import scipy.stats  # noqa: F401

    for name in HEAVY_WORK:

        def called(*args, _name=name, **kwargs):
            raise AssertionError(f"did work before refusing: {_name} was called")

        monkeypatch.setattr(name, called)


def test_absurd_bins_is_refused_at_once_not_computed(no_heavy_work):
    with pytest.raises(
        ValueError, match=r"`bins` must be <= 10_000, got 10_000_000: every permutation fills"
    ):
        dbpa_test(GOOD, GOOD + 1, measure="jsd", bins=10**7)


@pytest.mark.parametrize(
    "call,match",
    [
        (
            lambda: dbpa_test_similarity(np.eye(6), 3, measure="jsd", bins=10**5),
            r"`bins` must be <= 10_000, got 100_000: .*2.4 MB per thread",
        ),
        (
            lambda: dbpa_test(GOOD, GOOD + 1, n_permutations=10**9),
            r"`n_permutations` must be <= 100_000_000, got 1_000_000_000: the result keeps every "
            r"permutation statistic \(8 bytes each, 800 MB at the bound\)",
        ),
        (
            lambda: dbpa_test(np.ones((20, 3)) + np.arange(3), np.ones((20, 3)), n_permutations=10**8),
            r"`n_permutations` must be <= 12_499_999 for 20 \+ 20 responses with energy-l2, got "
            r"100_000_000: each permutation visits up to 800 pairs, 8e\+10 in all, over the 1e\+10",
        ),
    ],
)
def test_engine_bounds(call, match, no_heavy_work):
    with pytest.raises(ValueError, match=match):
        call()


def test_too_many_responses_named_with_their_memory(no_heavy_work):
    rng = np.random.default_rng(0)
    base, perturbed = rng.normal(size=(15_000, 2)) + 3, rng.normal(size=(6_000, 2)) + 3
    with pytest.raises(
        ValueError, match=r"hold 15_000 \+ 6_000 responses; together they must be <= 20_000: .*\(3.5 GB here"
    ):
        dbpa_test(base, perturbed)


@pytest.mark.parametrize(
    "call,match",
    [
        (
            "smallest_p_value(10**7, 10**7, n_permutations=100)",
            r"`k` must be <= 19_998, got 10_000_000: a test pools at most that many responses",
        ),
        (
            "attainable_significance(10**9, n_permutations=100)",
            r"`k` must be <= 19_998, got 1_000_000_000",
        ),
        (
            "attainable_significance(15_000, 6_000, n_permutations=100)",
            r"`k` \+ `m` must be <= 20_000, got 21_000: the pooled similarity matrix takes 8 n² bytes \(3.5 GB",
        ),
        ("memory_estimate(10**7, 10**7, n_permutations=100)", r"`k` must be <= 19_998"),
        ("memory_estimate(20, 20, n_permutations=100, bins=10**6)", r"`bins` must be <= 10_000"),
        (
            "attainable_significance(3, n_permutations=100, n_tests=10**300)",
            r"`n_tests` must be <= 1_000_000_000, got about 1e300: every test of the family samples",
        ),
        ("smallest_adjusted_p(0.01, 10**400)", r"`n_tests` must be <= 1_000_000_000, got about 1e400"),
        ("sample_size(0.5, n_tests=10**12)", r"`n_tests` must be <= 1_000_000_000"),
        (
            "sample_size(1e-300)",
            r"`effect_above_chance` = 1e-300 would need k = .* responses per group, more than a test "
            r"can pool \(10_000 per group",
        ),
        (
            "power_simulation(GOOD, GOOD + 1, [3], n_simulations=10**9)",
            r"`n_simulations` must be <= 10_000, got 1_000_000_000: each simulation runs a whole test",
        ),
        (
            "power_simulation(GOOD, GOOD + 1, [10**30])",
            r"`sample_sizes` goes up to 10+ but the pilot has only 6",
        ),
        (
            "wilson_interval(10**400, 10**401)",
            r"`n` must be <= 9_007_199_254_740_992, got about 1e401: larger counts are not exact",
        ),
        ("wilson_interval(5, 3)", r"`x` must lie in \[0, n\]; got x=5, n=3"),
        ("exact_test(1, 2, 3, 2)", r"`x2` must be <= 2, got 3"),
        (
            "permutation_p([1.0, 2.0], [3.0], n_permutations=10**9)",
            r"`n_permutations` must be <= 100_000_000",
        ),
        (
            "permutation_p(list(range(1000)), list(range(1000)), n_permutations=10**8)",
            r"`n_permutations` must be <= 5_000_000 for 2_000 answers, got 100_000_000",
        ),
        (
            "epsilon(0.1, 10**400, 0.05)",
            r"`m` \(the number of scenarios\) must be <= 1e\+12, got about 1e400",
        ),
        ("guaranteed_level(0.1, 10**13, 0.05)", r"`m` \(the number of scenarios\) must be <= 1e\+12"),
        (
            "run_fidelity(sample_data(), baseline_k=10**15)",
            r"`baseline_k` must be <= 1_000_000_000, got 1_000_000_000_000_000",
        ),
        (
            "plan_study(FIDELITY, grid=[100, 10**12])",
            r"`grid` must be <= 1_000_000, got 1_000_000_000_000: the chance of a verdict at m questions",
        ),
        (
            "run_fidelity(sample_data(), seed=-1)",
            r"`seed` must be >= 0 \(numpy's seeds are non-negative\), got -1",
        ),
    ],
)
def test_every_numeric_argument_has_a_named_bound(call, match, no_heavy_work):
    import time

    from dbpa_core import (
        attainable_significance,
        power_simulation,
        sample_size,
        smallest_adjusted_p,
        smallest_p_value,  # noqa: F401
    )
    from dbpa_core.checks import exact_test, permutation_p, wilson_interval  # noqa: F401
    from dbpa_core.fidelity import (  # noqa: F401
        epsilon,
        guaranteed_level,
        plan_study,
        run_fidelity,
        sample_data,
    )
    from dbpa_core.permutation import memory_estimate  # noqa: F401

    names = {**globals(), **locals()}
    if "FIDELITY" in call:
        names["FIDELITY"] = run_fidelity(sample_data(), band=False)
    t = time.perf_counter()
    with pytest.raises(ValueError, match=match):
        eval(call, names)
    # the engines are patched to fail if called; what else these calls could do first
    # (draw simulations, fidelity baselines, a plan's grid) takes minutes to hours
    assert time.perf_counter() - t < 30, f"{call} did work before refusing"
    del attainable_significance, power_simulation, sample_size, smallest_adjusted_p


def test_bounds_leave_ordinary_plans_alone():
    from dbpa_core import attainable_significance, smallest_p_value
    from dbpa_core.checks import permutation_p, wilson_interval

    assert smallest_p_value(10_000, 10_000, n_permutations=10**7) == pytest.approx(1 / (10**7 + 1))
    assert attainable_significance(20, n_permutations=10**7, n_tests=1000).reachable
    assert dbpa_test(GOOD, GOOD + 1, measure="jsd", bins=10_000, n_permutations=50, rng=0).p_value > 0
    assert wilson_interval(np.int64(3), np.int64(10))[0] > 0
    assert 0 < permutation_p([1.0, 2.0, 3.0], [4.0, 5.0, 6.0], n_permutations=10**8) <= 1


def test_similarity_matrices_have_bounds(no_heavy_work):
    import tracemalloc

    from dbpa_core.similarity import cosine_similarity_matrix, text_similarity_matrix

    x, y, z = np.ones((20_001, 2)), np.ones((40_000, 2)), np.ones((20_000, 2))
    tracemalloc.start()
    try:
        with pytest.raises(
            ValueError, match=r"`x` must have at most 20_000 rows, got 20_001: .*would take 3.2 GB"
        ):
            cosine_similarity_matrix(x)
        with pytest.raises(
            ValueError, match=r"`x` and `y` have 40_000 and 20_000 rows: the matrix would take 6.4 GB"
        ):
            cosine_similarity_matrix(y, z)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024**2, f"{peak / 1024**2:.0f} MB allocated before refusing"  # not GBs
    with pytest.raises(
        ValueError, match=r"`texts` must hold at most 2_000 texts, got 2_001: every pair is scored"
    ):
        text_similarity_matrix(["an answer"] * 2_001)  # RougeScorer patched to fail if built
