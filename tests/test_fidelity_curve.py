"""The calibrated quantile curve: reference values, exact integrals against numerical
integration, monotonicity (hypothesis), ε, coverage of new scenarios by simulation, the
tightness band, the pairwise verdict, and one test per bad input."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dbpa_core.fidelity import curve as cv
from dbpa_core.fidelity import discrepancy as dz
from dbpa_core.fidelity.analysis import Comparison
from dbpa_core.fidelity.sets import kl_radius_categorical

finite = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False)
samples = st.lists(finite, min_size=2, max_size=60)


def test_quantile_reference_values():
    d = [0.1, 0.4, 0.2, 0.3]  # sorted: 0.1 0.2 0.3 0.4, m = 4
    assert cv.quantile(d, 0.25) == 0.1  # ⌈0.25·4⌉ = 1
    assert cv.quantile(d, 0.26) == 0.2  # ⌈1.04⌉ = 2
    assert cv.quantile(d, 0.5) == 0.2
    assert cv.quantile(d, 1.0) == 0.4
    assert cv.quantile(d, 0.0) == 0.1
    assert cv.quantile(np.arange(10.0), 0.7) == 6.0  # 0.7·10 is 7.000000000000001 in floats
    assert cv.calibrated(d, 0.0) == 0.2 and cv.calibrated(d, 1.0) == 0.4
    assert cv.calibrated(d, 0.5) == 0.3  # V_m(0.75)


def test_auc_and_cvar_reference_values():
    d = [0.1, 0.4, 0.2, 0.3]
    # V_cal = 0.3 on (0, 0.5], 0.4 on (0.5, 1]
    assert cv.auc_cal(d) == pytest.approx(0.35)
    # CVaR_0.1 = mean of V_cal on [0.9, 1] = 0.4; CVaR at alpha = 0.6 = (0.1·0.3 + 0.5·0.4)/0.6
    assert cv.cvar(d, 0.1) == pytest.approx(0.4)
    assert cv.cvar(d, 0.6) == pytest.approx((0.1 * 0.3 + 0.5 * 0.4) / 0.6)


def numeric_integral(values, lo, hi, n=400_000):
    b = lo + (np.arange(n) + 0.5) * (hi - lo) / n
    return float(np.mean(cv.quantile(values, b))) * (hi - lo)


@pytest.mark.parametrize("m", [2, 3, 7, 40, 333])
def test_integrals_against_numerical_integration(m):
    v = np.random.default_rng(m).gamma(2.0, 0.1, m)
    assert cv.auc_cal(v) == pytest.approx(2 * numeric_integral(v, 0.5, 1.0), abs=1e-4)
    for a in (0.05, 0.1, 0.37):
        assert cv.cvar(v, a) == pytest.approx(2 / a * numeric_integral(v, 1 - a / 2, 1.0), abs=1e-4)
    tau = (np.arange(200_000) + 0.5) / 200_000
    assert cv.auc_cal(v) == pytest.approx(float(np.mean(cv.calibrated(v, tau))), abs=1e-4)


@given(samples, st.floats(0, 1), st.floats(0, 1))
@settings(max_examples=300, deadline=None)
def test_curve_is_non_decreasing(values, t1, t2):
    lo, hi = sorted((t1, t2))
    assert cv.calibrated(values, lo) <= cv.calibrated(values, hi)
    assert cv.quantile(values, lo) <= cv.quantile(values, hi)


@given(samples, st.floats(0.01, 0.99))
@settings(max_examples=300, deadline=None)
def test_summaries_are_ordered(values, alpha):
    v = np.asarray(values)
    auc, tail = cv.auc_cal(v), cv.cvar(v, alpha)
    tol = 1e-9 * (1 + np.abs(v).max())
    assert cv.quantile(v, 0.5) - tol <= auc <= v.max() + tol  # V_cal runs from V_m(½) to max
    assert auc - tol <= tail <= v.max() + tol  # the worst share's mean is larger
    tau, val = cv.steps(v)
    assert np.all(np.diff(val) >= 0) and tau[-1] == 1.0


@given(samples, samples, st.floats(0.5, 0.99), st.floats(0, 1))
@settings(max_examples=200, deadline=None)
def test_band_edges_are_ordered(lower, upper, gamma, tau):
    m = min(len(lower), len(upper))
    lo_v = np.minimum(np.asarray(lower[:m]), np.asarray(upper[:m]))  # lower pseudo <= upper
    lo, hi = cv.band(lo_v, upper[:m], gamma, tau)
    assert lo <= hi


def test_epsilon_reference_value():
    # ℓ = log(2·500/0.05) = log(20000); ε = sqrt(2·0.1·ℓ + (ℓ² + 4ℓ)/500) + (ℓ + 2)/sqrt(500)
    #   + sqrt(log(4/0.05)/2)
    ell = math.log(20000)
    want = (
        math.sqrt(0.2 * ell + (ell**2 + 4 * ell) / 500)
        + (ell + 2) / math.sqrt(500)
        + math.sqrt(math.log(80) / 2)
    )
    assert cv.epsilon(0.1, 500, 0.05) == pytest.approx(want)
    # by hand: ℓ = 9.9034876; sqrt(1.9806975 + 0.2753878) = 1.5020265; 11.9034876 / 22.3606798 =
    # 0.5323401; sqrt(4.3820266 / 2) = 1.4802072; sum 3.5145738
    assert want == pytest.approx(3.5145738, abs=1e-7)
    assert cv.guaranteed_level(0.1, 500, 0.05) == pytest.approx(0.9 - want / math.sqrt(500))


# --------------------------------------------------------------------------- coverage


def world(rng, m, d=4):
    """Scenarios with known real p and a simulator q (70 % p, 30 % noise)."""
    p = rng.dirichlet(np.ones(d), m)
    return p, 0.7 * p + 0.3 * rng.dirichlet(np.ones(d), m)


def test_coverage_of_new_scenarios_by_simulation():
    """SPEC §3: with probability >= 1 - η, a new scenario has Δ <= V̂_m(1 - α/2) with
    probability >= 1 - α - ε/√m. Twenty data sets of m = 400 scenarios with known p; the
    share of 20,000 new scenarios whose true TV(p, q) is below the bound. The same check
    fails when the best case Δ⁻ replaces the worst case Δ̂ (the test can fail)."""
    alpha, eta, m = 0.1, 0.05, 400
    level = cv.guaranteed_level(alpha, m, eta)
    held, held_lower = [], []
    for rep in range(20):
        rng = np.random.default_rng(100 + rep)
        p, q = world(rng, m)
        n = rng.integers(20, 300, m)
        p_hat = np.array([rng.multinomial(k, pp) / k for k, pp in zip(n, p, strict=True)])
        r = kl_radius_categorical(n, 4, gamma=0.5)
        upper, lower = dz.tv_upper(p_hat, r, q), dz.tv_lower(p_hat, r, q)
        new_p, new_q = world(rng, 20_000)
        true = 0.5 * np.abs(new_p - new_q).sum(axis=1)
        held.append((true <= cv.quantile(upper, 1 - alpha / 2)).mean() >= level)
        held_lower.append((true <= cv.quantile(lower, 1 - alpha / 2)).mean() >= level)
    assert np.mean(held) >= 1 - eta
    assert np.mean(held_lower) < 0.5


def test_the_unseen_scenario_set_covers_new_scenarios():
    """The set {u : TV(u, q̂) <= V̂_m(1 - α/2)} built from one data set holds the real
    distribution of new scenarios at least as often as the guarantee says."""
    from dbpa_core.fidelity.analysis import SimulatorCurve

    rng = np.random.default_rng(9)
    m = 400
    p, q = world(rng, m)
    n = rng.integers(50, 300, m)
    p_hat = np.array([rng.multinomial(k, pp) / k for k, pp in zip(n, p, strict=True)])
    curve = SimulatorCurve(
        "sim", "counts", dz.tv_upper(p_hat, kl_radius_categorical(n, 4), q), None, alpha=0.1
    )
    new_p, new_q = world(rng, 2000)
    held = np.mean([curve.unseen_set(qq, "tv").contains(pp) for pp, qq in zip(new_p, new_q, strict=True)])
    assert held >= cv.guaranteed_level(0.1, m, 0.05)
    s = SimulatorCurve("s", "counts", np.array([0.01, 0.04, 0.09]), None, alpha=0.5).unseen_set(
        0.3, "squared"
    )
    assert s.radius == 0.09 and s.interval == pytest.approx((0.0, 0.6))  # V_m(0.75) = 0.09
    assert s.contains(0.55) and not s.contains(0.65)


@pytest.mark.parametrize("gamma", [0.5, 0.8])
def test_tightness_band_contains_the_real_curve(gamma):
    rng = np.random.default_rng(7)
    m = 3000
    p, q = world(rng, m)
    n = rng.integers(300, 2000, m)
    p_hat = np.array([rng.multinomial(k, pp) / k for k, pp in zip(n, p, strict=True)])
    r = kl_radius_categorical(n, 4, gamma=gamma)
    upper, lower = dz.tv_upper(p_hat, r, q), dz.tv_lower(p_hat, r, q)
    new_p, new_q = world(rng, 200_000)
    true = 0.5 * np.abs(new_p - new_q).sum(axis=1)
    for tau in (0.1, 0.25, 0.5, 0.75, 0.9, 0.99):
        lo, hi = cv.band(lower, upper, gamma, tau)
        v = np.quantile(true, tau)
        assert lo <= v <= hi, (tau, lo, v, hi)


# --------------------------------------------------------------------------- comparisons


def test_verdicts_follow_u_hat():
    """As statsmodels' reject == (p <= alpha): the verdict is exactly the sign of Û."""
    rng = np.random.default_rng(8)
    for _ in range(200):
        d1, d2 = rng.normal(0, 0.1, 40), rng.normal(0, 0.1, 40)
        c = Comparison("A", "B", 0.1, d1, d2)
        want = {
            (True, True): "both",
            (True, False): "first",
            (False, True): "second",
            (False, False): "neither",
        }[(c.u_hat <= 0, c.u_hat_reverse <= 0)]
        assert c.verdict == want
        assert c.u_hat == cv.quantile(d1, 0.95)


def test_verdict_sentences():
    neg, pos = -np.ones(20), np.ones(20)
    assert (
        Comparison("A", "B", 0.1, neg, pos).sentence()
        == "A is at least as good as B on at least 90 % of these questions (worst case over their "
        "confidence sets)."
    )
    assert (
        Comparison("A", "B", 0.2, pos, neg, level=0.4).sentence()
        == "B is at least as good as A on at least 80 % of these questions (worst case over their "
        "confidence sets); for new questions like these, guaranteed on at least 40 %."
    )
    assert "each is at least as good as the other" in Comparison("A", "B", 0.1, 0 * neg, 0 * neg).sentence()
    assert Comparison("A", "B", 0.05, pos, pos).sentence().startswith("Undecided between A and B")


# --------------------------------------------------------------------------- bad input


def test_fewer_than_two_scenarios():
    with pytest.raises(ValueError, match=r"m >= 2"):
        cv.quantile([0.3], 0.5)
    with pytest.raises(ValueError, match=r"`m` .* must be a whole number >= 2"):
        cv.epsilon(0.1, 1, 0.05)


@pytest.mark.parametrize(
    "name, call",
    [
        ("alpha", lambda: cv.cvar([0.1, 0.2], 1.0)),
        ("alpha", lambda: cv.epsilon(0.0, 10, 0.05)),
        ("eta", lambda: cv.epsilon(0.1, 10, 1.5)),
        ("gamma", lambda: cv.band([0.1, 0.2], [0.1, 0.2], 0.0, 0.5)),
    ],
)
def test_levels_outside_zero_one(name, call):
    with pytest.raises(ValueError, match=rf"`{name}` must lie in \(0, 1\)"):
        call()


def test_non_finite_values():
    with pytest.raises(ValueError, match="`values` must be finite"):
        cv.auc_cal([0.1, float("nan"), 0.3])


def test_tau_outside_zero_one():
    with pytest.raises(ValueError, match=r"`tau` must lie in \[0, 1\]"):
        cv.calibrated([0.1, 0.2], 1.2)
