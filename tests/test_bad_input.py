"""Bad input gets a clear error naming the argument, never a wrong number."""

import numpy as np
import pytest

from dbpa_core import (
    adjust_pvalues,
    dbpa_test,
    dbpa_test_similarity,
    multiple_testing,
    power_simulation,
    roc_over_alpha,
    sample_size,
)
from dbpa_core.similarity import cosine_similarity_matrix, text_similarity_matrix

GOOD = np.random.default_rng(0).normal(size=(5, 4)) + 2


@pytest.mark.parametrize(
    "base,perturbed,match",
    [
        (GOOD[:1], GOOD, r"`base` needs at least 2 responses, got 1"),
        (GOOD, GOOD[:1], r"`perturbed` needs at least 2 responses, got 1"),
        (GOOD, np.ones((5, 3)), r"different widths \(4 vs 3\)"),
        (np.where(np.eye(5, 4) > 0, np.nan, GOOD), GOOD, r"`base` contains NaN or infinite"),
        (GOOD, np.where(np.eye(5, 4) > 0, np.inf, GOOD), r"`perturbed` contains NaN or infinite"),
        (np.vstack([GOOD, np.zeros((1, 4))]), GOOD, r"`base` contains a zero vector \(row 5\)"),
        (GOOD[0], GOOD, r"`base` must be a 2-D array"),
        (GOOD, np.ones((5, 0)), r"`perturbed` has embeddings of width 0"),
    ],
)
def test_bad_embeddings(base, perturbed, match):
    with pytest.raises(ValueError, match=match):
        dbpa_test(base, perturbed, n_permutations=10)


def test_non_numeric_embeddings():
    with pytest.raises(TypeError, match="`base` must be a 2-D array of numbers"):
        dbpa_test([["a", "b"], ["c", "d"]], GOOD[:, :2])


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        ({"n_permutations": 0}, ValueError, r"`n_permutations` must be >= 1, got 0"),
        ({"n_permutations": 2.5}, TypeError, r"`n_permutations` must be an integer"),
        ({"measure": "cosine"}, ValueError, r"`measure` must be in"),
        ({"sequential": 0}, ValueError, r"`sequential` must be >= 1"),
        ({"batch": 0}, ValueError, r"`batch` must be >= 1"),
        ({"bins": 1}, ValueError, r"`bins` must be >= 2"),
        ({"rng": "seed"}, TypeError, r"`rng` must be None, an int seed"),
        ({"rng": -1}, ValueError, r"`rng` seed must be non-negative"),
    ],
)
def test_bad_options(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        dbpa_test(GOOD, GOOD + 1, **kwargs)


@pytest.mark.parametrize(
    "s,k,match",
    [
        (np.ones((3, 4)), 1, r"`similarity` must be a square matrix"),
        (np.array([[1, 0.2, 0.3], [0.5, 1, 0.1], [0.3, 0.1, 1]]), 1, r"must be symmetric"),
        (np.full((4, 4), np.nan), 2, r"`similarity` contains NaN"),
        (np.eye(4), 1, r"`k` must lie in \[2, 2\].*got 1"),
        (np.eye(4), 3, r"`k` must lie in \[2, 2\].*got 3"),
    ],
)
def test_bad_similarity_matrix(s, k, match):
    with pytest.raises(ValueError, match=match):
        dbpa_test_similarity(s, k, n_permutations=10)


def test_similarity_matrix_rejects_embedding_only_measures():
    with pytest.raises(ValueError, match="'energy-l1' needs embeddings"):
        dbpa_test_similarity(np.eye(4), 2, measure="energy-l1")


@pytest.mark.parametrize(
    "p,match",
    [
        ([0.1, 1.2], r"`pvalues` must lie in \[0, 1\], got 1.2"),
        ([-0.1, 0.5], r"`pvalues` must lie in \[0, 1\], got -0.1"),
        ([0.1, np.nan], r"`pvalues` contains NaN"),
        ([[0.1, 0.2]], r"`pvalues` must be 1-D"),
    ],
)
def test_bad_pvalues(p, match):
    with pytest.raises(ValueError, match=match):
        adjust_pvalues(p, "holm")


def test_unknown_correction():
    with pytest.raises(ValueError, match=r"`method` must be in .*got 'sidak-ish'"):
        adjust_pvalues([0.1], "sidak-ish")


def test_bad_alpha():
    with pytest.raises(ValueError, match=r"`alpha` must lie in \(0, 1\)"):
        multiple_testing([0.1], "holm", alpha=0)


def test_empty_roc_lists():
    with pytest.raises(ValueError, match="`control_pvalues` is empty"):
        roc_over_alpha([], [0.1])
    with pytest.raises(ValueError, match="`target_pvalues` is empty"):
        roc_over_alpha([0.1], [])
    with pytest.raises(ValueError, match=r"`target_pvalues` must lie in \[0, 1\]"):
        roc_over_alpha([0.1], [2.0])


def test_roc_max_fpr_out_of_range():
    with pytest.raises(ValueError, match=r"`max_fpr` must lie in \[0, 1\]"):
        roc_over_alpha([0.1], [0.2]).tpr_at_fpr(1.5)


def test_bad_sample_size_arguments():
    with pytest.raises(ValueError, match="`effect_above_chance` must be > 0"):
        sample_size(0)
    with pytest.raises(ValueError, match=r"`power` must lie in \(0, 1\)"):
        sample_size(0.3, power=1.0)
    with pytest.raises(ValueError, match="`n_tests` must be >= 1"):
        sample_size(0.3, n_tests=0)


def test_bad_power_simulation_arguments():
    with pytest.raises(ValueError, match="pilot has only 5 responses"):
        power_simulation(GOOD, GOOD + 1, [10])
    with pytest.raises(ValueError, match="`method` must be in"):
        power_simulation(GOOD, GOOD + 1, [3], method="bootstrap")
    with pytest.raises(ValueError, match="`sample_sizes` must be >= 2"):
        power_simulation(GOOD, GOOD + 1, [1])


def test_bad_text_similarity_input():
    with pytest.raises(TypeError, match="`texts` must be a list of strings"):
        text_similarity_matrix("just one string")
    with pytest.raises(TypeError, match=r"`texts\[1\]` is int"):
        text_similarity_matrix(["a", 3])
    with pytest.raises(ValueError, match="`kind` must be in"):
        text_similarity_matrix(["a", "b"], "meteor")


def test_cosine_rejects_zero_rows():
    with pytest.raises(ValueError, match=r"`x` contains a zero vector \(row 1\)"):
        cosine_similarity_matrix([[1, 0], [0, 0]])
