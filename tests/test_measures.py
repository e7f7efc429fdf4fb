"""ω against scipy reference implementations, and its invariants."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from scipy import stats
from scipy.spatial.distance import cdist, jensenshannon

from dbpa_core import MEASURES, dbpa_test, dbpa_test_similarity, get_measure
from dbpa_core.measures import (
    energy_distance,
    histogram_edges,
    jsd_distance,
    ks_2sample,
    wasserstein_1d,
)
from dbpa_core.similarity import cosine_similarity_matrix

from .conftest import cloud


def _p0_p1(x, y):
    s = cosine_similarity_matrix(np.vstack([x, y]))
    k = x.shape[0]
    return s, s[:k, :k][np.triu_indices(k, 1)], s[:k, k:].ravel()


@pytest.fixture
def groups(rng):
    return cloud(rng, 12), cloud(rng, 9, center=np.linspace(0.5, 1.5, 16))


def test_registry_has_spec_measures():
    assert {"jsd", "energy-cosine", "energy-l1", "energy-l2", "wasserstein", "ks"} <= set(MEASURES)


def _whiskers(off):
    q1, q3 = np.percentile(off, [25, 75])
    return max(off.min(), q1 - 1.5 * (q3 - q1)), min(off.max(), q3 + 1.5 * (q3 - q1))


def test_jsd_matches_scipy_jensenshannon(groups):
    x, y = groups
    s, p0, p1 = _p0_p1(x, y)
    off = s[np.triu_indices(s.shape[0], 1)]
    lo, hi = _whiskers(off)
    # values beyond the whiskers are counted in the outer bins
    h0 = np.histogram(np.clip(p0, lo, hi), bins=30, range=(lo, hi))[0]
    h1 = np.histogram(np.clip(p1, lo, hi), bins=30, range=(lo, hi))[0]
    ref = jensenshannon(h0, h1)  # natural log; scipy returns the distance
    r = dbpa_test(x, y, measure="jsd", n_permutations=10, rng=0)
    assert r.effect_size == pytest.approx(ref, abs=1e-12)
    edges = histogram_edges(s)
    assert jsd_distance(np.clip(p0, lo, hi), np.clip(p1, lo, hi), edges) == pytest.approx(ref, abs=1e-12)
    np.testing.assert_allclose(r.bin_edges, np.linspace(lo, hi, 31))


def test_jsd_bins_ignore_one_off_topic_response(groups):
    """One response far from all others stretches min..max, not the whiskers."""
    x, y = groups
    s = cosine_similarity_matrix(np.vstack([x, y]))
    far = -np.ones((1, x.shape[1]))  # opposite direction: similarity about -1 to everyone
    s_out = cosine_similarity_matrix(np.vstack([x, y[:-1], far]))
    robust, robust_out = histogram_edges(s), histogram_edges(s_out)
    assert robust_out[-1] - robust_out[0] < 1.5 * (robust[-1] - robust[0])
    raw_out = histogram_edges(s_out, robust=False)
    assert raw_out[0] < -0.5 and raw_out[-1] - raw_out[0] > 2 * (robust_out[-1] - robust_out[0])


def test_jsd_minmax_bins_without_outliers_or_with_robust_off(groups):
    x, y = groups
    s = cosine_similarity_matrix(np.vstack([x, y]))
    off = s[np.triu_indices(s.shape[0], 1)]
    np.testing.assert_allclose(histogram_edges(s, robust=False), np.linspace(off.min(), off.max(), 31))
    # heavily tied text similarities (IQR 0) fall back to min..max
    tied = np.full((6, 6), 0.2)
    tied[0, 1] = tied[1, 0] = 0.9
    np.fill_diagonal(tied, 1.0)
    np.testing.assert_allclose(histogram_edges(tied, 4), np.linspace(0.2, 0.9, 5))


def test_wasserstein_matches_scipy(groups):
    x, y = groups
    _, p0, p1 = _p0_p1(x, y)
    ref = stats.wasserstein_distance(p0, p1)
    assert dbpa_test(x, y, measure="wasserstein", n_permutations=10, rng=0).effect_size == pytest.approx(
        ref, abs=1e-12
    )
    assert wasserstein_1d(p0, p1) == pytest.approx(ref, abs=1e-12)


def test_ks_matches_scipy(groups):
    x, y = groups
    _, p0, p1 = _p0_p1(x, y)
    ref = stats.ks_2samp(p0, p1).statistic
    assert dbpa_test(x, y, measure="ks", n_permutations=10, rng=0).effect_size == pytest.approx(
        ref, abs=1e-12
    )
    assert ks_2sample(p0, p1) == pytest.approx(ref, abs=1e-12)


def test_ks_with_ties_matches_scipy():
    # text similarities have many ties; the sweep must evaluate F only after a tie group
    s = np.array(
        [
            [1, 0.5, 0.5, 0.2, 0.5],
            [0.5, 1, 0.2, 0.2, 0.5],
            [0.5, 0.2, 1, 0.5, 0.2],
            [0.2, 0.2, 0.5, 1, 0.5],
            [0.5, 0.5, 0.2, 0.5, 1.0],
        ]
    )
    k = 3
    p0 = s[:k, :k][np.triu_indices(k, 1)]
    p1 = s[:k, k:].ravel()
    r = dbpa_test_similarity(s, k, measure="ks", n_permutations=10, rng=0)
    assert r.effect_size == pytest.approx(stats.ks_2samp(p0, p1).statistic, abs=1e-12)
    r = dbpa_test_similarity(s, k, measure="wasserstein", n_permutations=10, rng=0)
    assert r.effect_size == pytest.approx(stats.wasserstein_distance(p0, p1), abs=1e-12)


def test_energy_l2_in_one_dimension_matches_scipy(rng):
    # scipy's energy_distance is sqrt(2E|X-Y| - E|X-X'| - E|Y-Y'|) for 1-D samples
    u = rng.uniform(1, 3, size=(10, 1))
    v = rng.uniform(2, 5, size=(8, 1))
    ref = stats.energy_distance(u.ravel(), v.ravel()) ** 2
    for measure in ("energy-l2", "energy-l1"):
        r = dbpa_test(u, v, measure=measure, n_permutations=10, rng=0)
        assert r.effect_size == pytest.approx(ref, rel=1e-10)


@pytest.mark.parametrize(
    "metric,cdist_metric", [("l1", "cityblock"), ("l2", "euclidean"), ("cosine", "cosine")]
)
def test_energy_matches_brute_force(groups, metric, cdist_metric):
    x, y = groups
    ref = (
        2 * cdist(x, y, cdist_metric).mean()
        - cdist(x, x, cdist_metric).mean()
        - cdist(y, y, cdist_metric).mean()
    )
    r = dbpa_test(x, y, measure=f"energy-{metric}", n_permutations=10, rng=0)
    assert r.effect_size == pytest.approx(ref, rel=1e-9, abs=1e-12)
    assert energy_distance(x, y, metric) == pytest.approx(ref, rel=1e-9, abs=1e-12)


def test_unknown_measure_is_named():
    with pytest.raises(ValueError, match=r"`measure` must be in .*got 'cosine-magic'"):
        get_measure("cosine-magic")


finite = st.floats(-3, 3, allow_nan=False, allow_infinity=False)


@settings(max_examples=40, deadline=None)
@given(
    x=arrays(np.float64, (5, 4), elements=finite),
    y=arrays(np.float64, (4, 4), elements=finite),
    measure=st.sampled_from(sorted(MEASURES)),
)
def test_omega_is_non_negative(x, y, measure):
    x = x + 5.0  # keep rows away from zero vectors
    y = y + 5.0
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = dbpa_test(x, y, measure=measure, n_permutations=20, rng=0)
    assert r.effect_size >= 0
    assert np.all(r.permutation_statistics >= 0)


@settings(max_examples=30, deadline=None)
@given(
    x=arrays(np.float64, (6, 3), elements=finite),
    measure=st.sampled_from(["energy-cosine", "energy-l1", "energy-l2"]),
)
def test_energy_is_zero_for_identical_groups(x, measure):
    x = x + 5.0
    r = dbpa_test(x, x.copy(), measure=measure, n_permutations=10, rng=0)
    assert r.effect_size == pytest.approx(0.0, abs=1e-9)


@settings(max_examples=40, deadline=None)
@given(sample=arrays(np.float64, st.integers(2, 40), elements=st.floats(-1, 1)))
def test_sample_measures_are_zero_for_identical_samples(sample):
    edges = np.linspace(-1, 1, 31)
    assert jsd_distance(sample, sample.copy(), edges) == pytest.approx(0.0, abs=1e-12)
    assert wasserstein_1d(sample, sample.copy()) == 0.0
    assert ks_2sample(sample, sample.copy()) == 0.0
