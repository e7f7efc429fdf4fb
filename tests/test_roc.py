"""ROC over α: shape, AUC as a rank statistic, TPR at an allowed FPR."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dbpa_core import best_model_at_fpr, roc_over_alpha


def test_simple_curve():
    r = roc_over_alpha([0.3, 0.8], [0.01, 0.3, 0.5])
    np.testing.assert_allclose(r.alpha, [0, 0.01, 0.3, 0.5, 0.8, 1.0])
    np.testing.assert_allclose(r.fpr, [0, 0, 0.5, 0.5, 1, 1])
    np.testing.assert_allclose(r.tpr, [0, 1 / 3, 2 / 3, 1, 1, 1])
    # P(target < control) + 1/2 P(tie): pairs (.01,.3) (.01,.8) (.3,.8) (.5,.8) win,
    # (.3,.3) ties, (.5,.3) loses -> 4.5 / 6
    assert r.auc == pytest.approx(4.5 / 6)
    assert r.tpr_at_fpr(0.0) == pytest.approx(1 / 3)
    assert r.tpr_at_fpr(0.5) == 1.0
    assert r.alpha_at_fpr(0.0) == 0.01


def test_perfect_and_useless():
    assert roc_over_alpha([0.5, 0.9], [0.001, 0.01]).auc == 1.0
    assert roc_over_alpha([0.001, 0.01], [0.5, 0.9]).auc == 0.0
    assert roc_over_alpha([0.2, 0.2], [0.2]).auc == 0.5


plist = st.lists(
    st.sampled_from([0.0001, 0.001, 0.01, 0.04, 0.05, 0.2, 0.5, 1.0]) | st.floats(0, 1, allow_nan=False),
    min_size=1,
    max_size=15,
)


@settings(max_examples=150, deadline=None)
@given(c=plist, t=plist)
def test_roc_invariants(c, t):
    r = roc_over_alpha(c, t)
    assert (r.fpr[0], r.tpr[0]) == (0, 0) and (r.fpr[-1], r.tpr[-1]) == (1, 1)
    assert r.alpha[0] == 0 and r.alpha[-1] == 1
    assert np.all(np.diff(r.fpr) >= 0) and np.all(np.diff(r.tpr) >= 0)
    assert np.all(np.diff(r.alpha) >= 0)
    c, t = np.asarray(c), np.asarray(t)
    rank = np.mean(t[:, None] < c[None, :]) + 0.5 * np.mean(t[:, None] == c[None, :])
    assert r.auc == pytest.approx(rank, abs=1e-12)
    assert 0 <= r.tpr_at_fpr(0.05) <= 1


def test_best_model_depends_on_allowed_fpr():
    # model a: cautious (great at FPR 0), model b: better once some FPR is allowed
    a = roc_over_alpha([0.5, 0.6, 0.7, 0.8], [0.01, 0.9, 0.95, 0.99])
    b = roc_over_alpha([0.02, 0.6, 0.7, 0.8], [0.001, 0.03, 0.04, 0.05])
    assert best_model_at_fpr({"a": a, "b": b}, 0.0) == ("b", 0.25)
    name, tpr = best_model_at_fpr({"a": a, "b": b}, 0.25)
    assert name == "b" and tpr == 1.0
    with pytest.raises(ValueError, match="`rocs` is empty"):
        best_model_at_fpr({}, 0.05)
