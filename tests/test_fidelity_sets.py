"""Confidence sets of the fidelity module: radii against their formulas, coverage by
simulation, the binary-KL interval and the KL ball's support function against brute
force, and one test per bad input."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize

from dbpa_core.fidelity.sets import (
    bernoulli_set,
    binary_kl,
    binary_kl_interval,
    categorical_set,
    hoeffding_halfwidth,
    kl_ball_support,
    kl_divergence,
    kl_radius_bernoulli,
    kl_radius_categorical,
    mean_set,
    w1_radius,
)


def simplex_grid(n=600):
    """Every point of the 3-option simplex on a grid of step 1/n."""
    i, j = np.meshgrid(np.arange(n + 1), np.arange(n + 1))
    keep = i + j <= n
    u = np.stack([i[keep], j[keep], n - i[keep] - j[keep]], axis=1) / n
    return u


def ball_points(p, r, grid):
    return grid[kl_divergence(np.broadcast_to(p, grid.shape), grid) <= r]


# --------------------------------------------------------------------------- radii


def test_radii_reference_values():
    # by hand: (d-1)/n * log(2 (d-1) / (1 - gamma)) = 4/500 * log(16) = 0.0221807...
    assert float(kl_radius_categorical(500, 5, gamma=0.5)) == pytest.approx(4 / 500 * math.log(16))
    assert float(kl_radius_bernoulli(200, gamma=0.5)) == pytest.approx(math.log(4) / 200)
    assert float(hoeffding_halfwidth(100, low=-1, high=1, gamma=0.5)) == pytest.approx(
        2 * math.sqrt(math.log(4) / 200)
    )
    # 512 sigma / sqrt(n) + sigma sqrt(256 e / n log(1/(1-gamma))), sigma = 2, n = 400
    assert float(w1_radius(400, sigma=2.0, gamma=0.5)) == pytest.approx(
        512 * 2 / 20 + 2 * math.sqrt(256 * math.e / 400 * math.log(2))
    )


def test_at_one_half_the_radii_are_the_specs():
    """SPEC §3 writes log(2/γ); at the default γ = ½ that is log(2/(1-γ))."""
    n, d = 321, 4
    assert float(kl_radius_categorical(n, d, gamma=0.5)) == pytest.approx(
        (d - 1) / n * math.log(2 * (d - 1) / 0.5)
    )
    assert float(kl_radius_bernoulli(n, gamma=0.5)) == pytest.approx(math.log(2 / 0.5) / n)


def test_two_options_categorical_radius_is_bernoulli():
    assert float(kl_radius_categorical(77, 2, gamma=0.8)) == pytest.approx(
        float(kl_radius_bernoulli(77, gamma=0.8))
    )


# --------------------------------------------------------------------------- coverage


@pytest.mark.parametrize("gamma", [0.5, 0.8, 0.95])
def test_categorical_set_covers_with_probability_gamma(gamma):
    rng = np.random.default_rng(1)
    p = np.array([0.5, 0.2, 0.2, 0.1])
    n = 120
    counts = rng.multinomial(n, p, size=4000)
    ball = categorical_set(counts, gamma=gamma)
    covered = ball.contains(np.broadcast_to(p, counts.shape)).mean()
    assert covered >= gamma


@pytest.mark.parametrize("gamma", [0.5, 0.8, 0.95])
def test_bernoulli_and_mean_sets_cover(gamma):
    rng = np.random.default_rng(2)
    p, n = 0.3, 60
    k = rng.binomial(n, p, size=5000)
    assert bernoulli_set(k, np.full(k.shape, n), gamma=gamma).contains(p).mean() >= gamma
    x = rng.uniform(0, 1, size=(5000, n)) ** 2  # mean 1/3, values in [0, 1]
    s = mean_set(x.mean(axis=1), n, low=0.0, high=1.0, gamma=gamma)
    assert s.contains(1 / 3).mean() >= gamma


def test_the_specs_literal_radius_would_undercover_at_high_gamma():
    """Why the radii use 1 - γ: with log(2/γ) at γ = 0.95 the Bernoulli set covers far
    less than 95 % (the coverage test above would fail with it)."""
    rng = np.random.default_rng(3)
    p, n, gamma = 0.3, 60, 0.95
    k = rng.binomial(n, p, size=5000)
    lo, hi = binary_kl_interval(k / n, math.log(2 / gamma) / n)
    assert ((lo <= p) & (p <= hi)).mean() < 0.9


# --------------------------------------------------------------------------- binary KL


@pytest.mark.parametrize("p", [0.0, 0.03, 0.3, 0.5, 0.97, 1.0])
def test_binary_kl_interval_against_a_grid(p):
    r = 0.05
    lo, hi = (float(x) for x in binary_kl_interval(p, r))
    grid = np.linspace(0, 1, 200_001)
    inside = grid[binary_kl(p, grid) <= r]
    assert lo == pytest.approx(inside.min(), abs=1e-5)
    assert hi == pytest.approx(inside.max(), abs=1e-5)
    for end in (lo, hi):
        if 0 < end < 1:
            assert float(binary_kl(p, end)) == pytest.approx(r, abs=1e-9)


@given(st.floats(0, 1), st.floats(1e-6, 3))
@settings(max_examples=200, deadline=None)
def test_binary_kl_interval_contains_p_and_grows_with_r(p, r):
    lo, hi = binary_kl_interval(p, r)
    lo2, hi2 = binary_kl_interval(p, 2 * r)
    assert lo - 1e-12 <= p <= hi + 1e-12
    assert lo2 <= lo + 1e-12 and hi2 >= hi - 1e-12


# --------------------------------------------------------------------------- support


def test_support_function_against_a_grid_and_its_maximizer():
    rng = np.random.default_rng(4)
    grid = simplex_grid(700)
    cases = [
        (np.array([0.5, 0.3, 0.2]), 0.04),
        (np.array([0.0, 0.6, 0.4]), 0.1),
        (np.array([1.0, 0.0, 0.0]), 0.2),
        (np.array([0.2, 0.2, 0.6]), 0.0),
    ]
    cases += [(rng.dirichlet(np.ones(3)), rng.uniform(0.001, 0.3)) for _ in range(8)]
    for p, r in cases:
        w = rng.normal(size=3)
        value, u = kl_ball_support(p[None], w[None], np.array([r]))
        brute = (ball_points(p, r, grid) @ w).max()
        assert value[0] >= brute - 1e-9  # never below a feasible point
        assert value[0] <= brute + 3 * np.abs(w).max() / 700  # and within the grid's step
        assert kl_divergence(p, u[0]) <= r + 1e-9 and u[0].sum() == pytest.approx(1)
        assert u[0] @ w == pytest.approx(value[0])


def test_support_function_against_a_general_solver_in_five_options():
    rng = np.random.default_rng(5)
    for _ in range(10):
        p = rng.dirichlet(np.ones(5))
        r = rng.uniform(0.005, 0.2)
        w = rng.normal(size=5)
        value, _ = kl_ball_support(p[None], w[None], np.array([r]))
        res = minimize(
            lambda u, w=w: -(u @ w),
            p,
            method="SLSQP",
            bounds=[(1e-12, 1)] * 5,
            constraints=[
                {"type": "eq", "fun": lambda u: u.sum() - 1},
                {"type": "ineq", "fun": lambda u, p=p, r=r: r - kl_divergence(p, u)},
            ],
            options={"ftol": 1e-13, "maxiter": 1000},
        )
        assert value[0] == pytest.approx(-res.fun, abs=1e-6)


def test_binary_support_is_the_binary_kl_upper_end():
    """Data processing: the largest u(S) on the ball is the binary-KL upper end at p(S)."""
    p = np.array([[0.1, 0.25, 0.4, 0.25]])
    s = np.array([[1.0, 0.0, 1.0, 0.0]])
    value, _ = kl_ball_support(p, s, np.array([0.03]))
    _, hi = binary_kl_interval(0.5, 0.03)
    assert value[0] == pytest.approx(float(hi), abs=1e-9)


@given(st.lists(st.floats(0.0, 1.0), min_size=2, max_size=6), st.floats(0.0, 1.0), st.integers(0, 2**31))
@settings(max_examples=150, deadline=None)
def test_support_is_between_the_centre_and_the_largest_weight(raw, r, seed):
    p = np.array(raw) + 1e-3
    p /= p.sum()
    w = np.random.default_rng(seed).normal(size=p.size)
    v, u = kl_ball_support(p[None], w[None], np.array([r]))
    v2, _ = kl_ball_support(p[None], w[None], np.array([2 * r]))
    assert p @ w - 1e-9 <= v[0] <= w.max() + 1e-9
    assert v2[0] >= v[0] - 1e-9
    assert kl_divergence(p, u[0]) <= r + 1e-7


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("gamma", [0.0, 1.0, 1.5, -0.2, float("nan")])
def test_gamma_outside_zero_one(gamma):
    with pytest.raises(ValueError, match=r"`gamma` must lie in \(0, 1\)"):
        kl_radius_categorical(100, 3, gamma=gamma)


def test_gamma_not_a_number():
    with pytest.raises(TypeError, match="`gamma` must be a number"):
        kl_radius_bernoulli(100, gamma="0.5")


@pytest.mark.parametrize("n", [0, -5, float("inf")])
def test_n_must_be_positive(n):
    with pytest.raises(ValueError, match=r"`n` .* must be positive"):
        kl_radius_bernoulli(n)


def test_d_must_be_two_or_more():
    with pytest.raises(ValueError, match=r"`d` .* must be at least 2"):
        kl_radius_categorical(100, 1)


@pytest.mark.parametrize("sigma", [0, -1.0, float("nan")])
def test_sigma_must_be_positive(sigma):
    with pytest.raises(ValueError, match=r"`sigma` .* must be a positive number"):
        w1_radius(100, sigma=sigma)


def test_bounds_must_be_ordered():
    with pytest.raises(ValueError, match="`bounds` must be two finite numbers a < b"):
        hoeffding_halfwidth(10, low=1.0, high=1.0)
