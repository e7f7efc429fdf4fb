"""Hardening of the newer surfaces: each test plays one hostile input or fault and fails
without its fix (credentials, odd Unicode, imports, sizes, history, cache, secrets, library)."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dbpa_core import roc as roc_mod
from dbpa_core.multitest import significance_stars
from dbpa_core.permutation import (
    MAX_PERMUTATIONS,
    dbpa_test,
    dbpa_test_similarity,
    smallest_p_value,
)
from dbpa_core.power import attainable_significance


# --------------------------------------------------------------------------- library
@pytest.mark.parametrize("b", [10**12, 2**64, MAX_PERMUTATIONS + 1])
def test_huge_n_permutations_is_refused_with_the_limit(b):
    x = np.random.default_rng(0).normal(size=(4, 3))
    with pytest.raises(ValueError, match=r"`n_permutations` must be <= 100_000_000"):
        dbpa_test(x, x + 1, n_permutations=b)
    with pytest.raises(ValueError, match="n_permutations"):
        smallest_p_value(5, 5, n_permutations=b)


@pytest.mark.parametrize("k", [0, 1, 5, 6])
def test_similarity_k_out_of_range_names_k(k):
    s = np.eye(6)
    with pytest.raises(ValueError, match=r"`k` must lie in \[2, 4\]"):
        dbpa_test_similarity(s, k, n_permutations=9)


@pytest.mark.parametrize("kw, name", [(dict(k=0, m=5, n_permutations=99), "k"),
                                      (dict(k=5, m=1, n_permutations=99), "m"),
                                      (dict(k=5, m=5, n_permutations=0), "n_permutations")])
def test_smallest_p_value_refuses_impossible_tests(kw, name):
    k, m = kw.pop("k"), kw.pop("m")
    with pytest.raises(ValueError, match=f"`{name}`"):
        smallest_p_value(k, m, **kw)


def test_smallest_p_value_text_is_a_type_error_naming_k():
    with pytest.raises(TypeError, match="`k` must be an integer"):
        smallest_p_value("5", 5, n_permutations=99)


def test_attainable_significance_names_correction():
    with pytest.raises(ValueError, match="`correction`"):
        attainable_significance(10, n_permutations=999, correction="x")


@pytest.mark.parametrize("p, exc", [(float("nan"), ValueError), (2.0, ValueError),
                                    (-0.1, ValueError), ("0.01", TypeError), (None, TypeError),
                                    (True, TypeError), ([0.01, "x"], TypeError)])
def test_significance_stars_refuses_what_is_not_a_p_value(p, exc):
    with pytest.raises(exc, match="`p`"):
        significance_stars(p)


@settings(max_examples=60, deadline=None)
@given(st.floats(min_value=0.0, max_value=1.0))
def test_significance_stars_follow_the_thresholds(p):
    want = "***" if p < 0.001 else "**" if p < 0.01 else "*" if p < 0.05 else ""
    assert significance_stars(p) == want
    assert significance_stars([p, p]) == [want, want]


def test_best_model_at_fpr_refuses_wrong_types():
    r = roc_mod.roc_over_alpha([0.5, 0.9], [0.001, 0.2])
    with pytest.raises(TypeError, match="`rocs` must be a mapping"):
        roc_mod.best_model_at_fpr([r], 0.05)
    with pytest.raises(TypeError, match=r"`rocs\['a'\]` must be a ROCResult"):
        roc_mod.best_model_at_fpr({"a": "not a roc"}, 0.05)
    with pytest.raises(ValueError, match="`max_fpr`"):
        roc_mod.best_model_at_fpr({"a": r}, math.nan)
    assert roc_mod.best_model_at_fpr({"a": r}, 0.05) == ("a", 1.0)


@settings(max_examples=40, deadline=None)
@given(st.one_of(st.integers(min_value=-5, max_value=3), st.text(max_size=3), st.none(),
                 st.floats(allow_nan=True), st.booleans()))
def test_smallest_p_value_gives_a_valid_p_or_a_named_error(k):
    try:
        p = smallest_p_value(k, 5, n_permutations=99)
    except (TypeError, ValueError) as exc:
        assert "`k`" in str(exc)
    else:
        assert 0.0 < p <= 1.0
