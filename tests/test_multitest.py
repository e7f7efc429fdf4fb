"""Multiple-testing corrections against R's p.adjust, statsmodels and scipy."""

from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import false_discovery_control
from statsmodels.stats.multitest import multipletests

from dbpa_core import adjust_pvalues, multiple_testing, significance_stars

# p <- c(0.01, 0.02, 0.03, 0.04, 0.05, 0.2, 0.001, 0.5)
# p.adjust(p, "holm"); p.adjust(p, "bonferroni"); p.adjust(p, "BH") -- R is not installable
# here: the values were worked out by hand from p.adjust's definitions (sorted p times
# M - i + 1 with a running max; M / i with a running min from the top) and agree with
# statsmodels.stats.multitest.multipletests(p, method="holm" / "bonferroni" / "fdr_bh").
P = np.array([0.01, 0.02, 0.03, 0.04, 0.05, 0.2, 0.001, 0.5])
R_HOLM = np.array([0.07, 0.12, 0.15, 0.16, 0.16, 0.4, 0.008, 0.5])
R_BONF = np.array([0.08, 0.16, 0.24, 0.32, 0.40, 1.0, 0.008, 1.0])
R_BH = np.array([0.04, 0.16 / 3, 0.06, 0.064, 0.2 / 3, 1.6 / 7, 0.008, 0.5])


@pytest.mark.parametrize("method,ref", [("holm", R_HOLM), ("bonferroni", R_BONF), ("bh", R_BH)])
def test_matches_r_p_adjust(method, ref):
    np.testing.assert_allclose(adjust_pvalues(P, method), ref, rtol=1e-12)


def test_bh_matches_scipy():
    p = np.random.default_rng(0).uniform(size=50) ** 3
    np.testing.assert_allclose(adjust_pvalues(p, "bh"), false_discovery_control(p), rtol=1e-12)


pvals = st.lists(st.floats(0, 1, allow_nan=False), min_size=1, max_size=30)


@settings(max_examples=100, deadline=None)
@given(p=pvals, method=st.sampled_from(["bonferroni", "holm", "bh"]))
def test_matches_statsmodels_and_invariants(p, method):
    p = np.asarray(p)
    adj = adjust_pvalues(p, method)
    sm = {"bonferroni": "bonferroni", "holm": "holm", "bh": "fdr_bh"}[method]
    # statsmodels' holm ends with gc.collect(), a whole collection of this process's heap
    # (0.2-0.8 s in a test process that holds torch): the reference values do not need it
    with mock.patch("gc.collect"):
        reject, ref, _, _ = multipletests(p, alpha=0.05, method=sm)
    np.testing.assert_allclose(adj, ref, rtol=1e-10, atol=1e-15)
    assert np.all(adj >= p - 1e-15) and np.all(adj <= 1)
    order = np.argsort(p, kind="stable")
    assert np.all(np.diff(adj[order]) >= -1e-15)  # monotone in p
    res = multiple_testing(p, method, alpha=0.05)
    np.testing.assert_array_equal(res.reject, res.p_adjusted <= 0.05)
    np.testing.assert_array_equal(res.reject, reject)


def test_none_and_empty():
    np.testing.assert_array_equal(adjust_pvalues([0.2, 0.01], "none"), [0.2, 0.01])
    assert adjust_pvalues([], "holm").size == 0


def test_stars():
    assert significance_stars([0.0005, 0.001, 0.005, 0.01, 0.049, 0.05, 0.5]) == [
        "***",
        "**",
        "**",
        "*",
        "*",
        "",
        "",
    ]
    assert significance_stars(0.0001) == "***"
    res = multiple_testing([0.001, 0.02, 0.3], "bonferroni")
    assert res.stars == ("**", "", "")
