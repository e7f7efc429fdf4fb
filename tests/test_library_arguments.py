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
