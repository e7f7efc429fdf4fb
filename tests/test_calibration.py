"""Type-I error and power of every measure (hyppo-style calibration tests).

Several hundred data sets drawn from one distribution: the false-positive rate
at α = .05 must fall in its 99.9 % binomial interval and the p-values must look
uniform (KS test). A shifted distribution must be detected.
"""

import numpy as np
import pytest
from scipy import stats

from dbpa_core import MEASURES, dbpa_test

N_DATASETS = 400
B = 199


def _clouds(gen, k, m, shift):
    d = 12
    center = np.ones(d)
    other = center + shift * np.linspace(-1, 1, d)
    return (center + 0.7 * gen.standard_normal((k, d)), other + 0.7 * gen.standard_normal((m, d)))


@pytest.mark.parametrize("measure", sorted(MEASURES))
def test_null_calibration(measure):
    gen = np.random.default_rng(2024)
    pvals = np.array(
        [
            dbpa_test(*_clouds(gen, 8, 7, 0.0), measure=measure, n_permutations=B, rng=gen).p_value
            for _ in range(N_DATASETS)
        ]
    )
    rejections = int(np.sum(pvals <= 0.05))
    lo, hi = stats.binom.ppf([0.0005, 0.9995], N_DATASETS, 0.05)
    assert lo <= rejections <= hi, f"{measure}: {rejections}/{N_DATASETS} false positives"
    assert stats.kstest(pvals, "uniform").pvalue > 0.001
    assert pvals.min() >= 1 / (B + 1)


@pytest.mark.parametrize("measure", sorted(MEASURES))
def test_power(measure):
    gen = np.random.default_rng(7)
    pvals = np.array(
        [
            dbpa_test(*_clouds(gen, 15, 15, 2.0), measure=measure, n_permutations=B, rng=gen).p_value
            for _ in range(40)
        ]
    )
    assert np.mean(pvals <= 0.05) >= 0.8, f"{measure}: power {np.mean(pvals <= 0.05)}"


@pytest.mark.parametrize("measure", ["jsd", "wasserstein", "ks"])
def test_null_calibration_pooled_null(measure):
    gen = np.random.default_rng(2025)
    pvals = np.array(
        [
            dbpa_test(
                *_clouds(gen, 8, 7, 0.0), measure=measure, n_permutations=B, rng=gen, null="pooled"
            ).p_value
            for _ in range(N_DATASETS)
        ]
    )
    rejections = int(np.sum(pvals <= 0.05))
    lo, hi = stats.binom.ppf([0.0005, 0.9995], N_DATASETS, 0.05)
    assert lo <= rejections <= hi, f"{measure}: {rejections}/{N_DATASETS} false positives"
    assert stats.kstest(pvals, "uniform").pvalue > 0.001


@pytest.mark.parametrize("k", [5, 10, 20])
def test_effect_above_chance_averages_zero_under_the_null(k):
    """ω has no fixed zero (chance ω shrinks with k), the effect above chance has: its
    mean over null data sets is 0 within 4 standard errors, for every measure."""
    gen = np.random.default_rng(100 + k)
    above = {m: [] for m in MEASURES}
    chance = {m: [] for m in MEASURES}
    for _ in range(150):
        x, y = _clouds(gen, k, k, 0.0)
        for m in MEASURES:
            r = dbpa_test(x, y, measure=m, n_permutations=99, rng=gen)
            above[m].append(r.effect_above_chance)
            chance[m].append(r.chance_effect_size)
    for m in MEASURES:
        a = np.asarray(above[m])
        se = a.std(ddof=1) / np.sqrt(a.size)
        assert abs(a.mean()) <= 4 * se, f"{m} at k = {k}: mean above chance {a.mean():.4g} ± {se:.2g}"
        assert np.mean(chance[m]) > 10 * se  # raw ω under H0 is far from 0


def test_sequential_stopping_keeps_the_false_positive_rate():
    """Besag–Clifford p-values (h = 10, starting with 64 permutations) are valid: under
    the null at most about 5 % fall at or below .05, and most runs stop early."""
    gen = np.random.default_rng(77)
    runs = [
        dbpa_test(*_clouds(gen, 8, 8, 0.0), n_permutations=999, rng=gen, sequential=10)
        for _ in range(N_DATASETS)
    ]
    pvals = np.array([r.p_value for r in runs])
    rejections = int(np.sum(pvals <= 0.05))
    hi = stats.binom.ppf(0.9995, N_DATASETS, 0.05)
    assert rejections <= hi, f"{rejections}/{N_DATASETS} false positives"
    assert np.mean([r.stopped_early for r in runs]) > 0.8
    assert np.median([r.n_permutations for r in runs]) < 64
