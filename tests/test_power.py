"""Planning that tells the truth: sample size on the effect above chance, power
simulation that refuses what it cannot know, and what a plan can reach at all."""

import math
import warnings

import numpy as np
import pytest

from dbpa_core import (
    PlanningWarning,
    attainable_significance,
    dbpa_test,
    power_simulation,
    sample_size,
    smallest_adjusted_p,
    smallest_p_value,
)

from .conftest import cloud


# --------------------------------------------------------------------------- sample_size
def test_sample_size_formula():
    # ((z_{1-0.05/2} + z_{0.8}) / 0.5)^2 = ((1.959964 + 0.841621) / 0.5)^2 = 31.4
    assert sample_size(0.5) == 32
    # M = 8: z_{1-0.05/16} = 2.734369 -> ((2.734369 + 0.841621) / 0.5)^2 = 51.1
    assert sample_size(0.5, n_tests=8) == 52
    assert sample_size(0.5, scale=2.0) == 63
    assert sample_size(5.0) == 2  # never fewer than 2
    assert sample_size(0.2) > sample_size(0.4)


@pytest.mark.parametrize("bad", [0, -0.1, True, "0.2"])
def test_sample_size_needs_a_positive_effect_above_chance(bad):
    with pytest.raises(ValueError, match="`effect_above_chance` must be > 0"):
        sample_size(bad)
    with pytest.raises(ValueError, match="give `effect_above_chance`"):
        sample_size()


@pytest.mark.parametrize("measure", ["energy-l2", "jsd"])
def test_sample_size_from_pilot_lands_near_measured_power(measure):
    """The k planned for power 0.8 from a pilot's null spread (k0 = 20) and the effect
    above chance reaches a power in a broad band around 0.8 when measured by
    simulation on the same populations (a normal approximation, optimistic)."""
    rng = np.random.default_rng(12345)
    base = cloud(rng, 200)
    pert = cloud(rng, 200, center=np.linspace(0.5, 1.5, 16))
    pilot = dbpa_test(base[:20], pert[:20], measure=measure, n_permutations=999, rng=0)
    effect = dbpa_test(base[100:], pert[100:], measure=measure, n_permutations=199, rng=0).effect_above_chance
    k = sample_size(effect, pilot=pilot, power=0.8)
    assert 4 <= k < 60
    measured = power_simulation(
        base[:100], pert[:100], [k], n_simulations=60, measure=measure, n_permutations=199, rng=1
    ).power[0]
    assert 0.45 <= measured <= 1.0, f"{measure}: planned k = {k}, measured power {measured}"
    # a larger effect needs fewer responses, a smaller one more
    assert sample_size(2 * effect, pilot=pilot) < k < sample_size(effect / 2, pilot=pilot)


def test_sample_size_from_pilot_errors(rng):
    x = cloud(rng, 10)
    null_pilot = dbpa_test(x[:5], x[5:], n_permutations=300, rng=0)
    if null_pilot.effect_above_chance <= 0:
        with pytest.raises(ValueError, match="shows no effect to plan for"):
            sample_size(pilot=null_pilot)
    assert sample_size(0.05, pilot=null_pilot) >= 2  # an explicit target works
    with pytest.raises(TypeError, match="`pilot` must be a DBPAResult"):
        sample_size(0.1, pilot={"k": 5})
    short = dbpa_test(x[:5], x[5:], n_permutations=200, rng=0, sequential=1)
    with pytest.raises(ValueError, match="fewer than 20 permutation statistics"):
        sample_size(0.1, pilot=short)


# --------------------------------------------------------------------------- power_simulation
def test_power_simulation_grows_with_k(rng):
    base = cloud(rng, 40)
    pert = cloud(rng, 40, center=np.linspace(0.5, 1.5, 16))
    r = power_simulation(base, pert, [4, 20], n_simulations=40, n_permutations=199, rng=0)
    assert r.power.shape == (2,) and r.power_ci.shape == (2, 2)
    assert r.power[1] > r.power[0]
    assert r.power[1] >= 0.8
    assert r.smallest_sample_size(0.8) == 20
    assert np.all(r.power_ci[:, 0] <= r.power) and np.all(r.power <= r.power_ci[:, 1])
    assert r.n_permutations == 199 and r.notes == ()


def test_gaussian_method_is_gone(rng):
    base = cloud(rng, 10)
    with pytest.raises(ValueError, match="`method='gaussian'` was removed"):
        power_simulation(base, base, [30], method="gaussian")
    with pytest.raises(ValueError, match=r"`method` must be in \{'subsample'\}"):
        power_simulation(base, base, [5], method="bootstrap")


@pytest.mark.parametrize("k", [10, 12])
def test_subsampling_refuses_k_at_or_above_the_pilot_size(rng, k):
    base, pert = cloud(rng, 10), cloud(rng, 12)
    with pytest.raises(ValueError, match=r"subsampling needs k < 10 .*same data set every time"):
        power_simulation(base, pert, [4, k], n_simulations=2)


def test_unreachable_level_raises_permutations_with_a_warning(rng):
    base, pert = cloud(rng, 20), cloud(rng, 20, center=np.linspace(0, 2, 16))
    # alpha / M = 0.05 / 40 = 0.00125 < 1 / (499 + 1): power would read 0
    with pytest.warns(PlanningWarning, match=r"can never reach α/M = 0.00125.*B raised to 3999"):
        r = power_simulation(base, pert, [8], n_simulations=3, n_tests=40, n_permutations=499, rng=0)
    assert r.n_permutations == 3999
    # the default B is chosen to fit alpha / M, silently
    with warnings.catch_warnings():
        warnings.simplefilter("error", PlanningWarning)
        r = power_simulation(base, pert, [8], n_simulations=3, n_tests=40, rng=0)
    assert r.n_permutations == 3999
    assert power_simulation(base, pert, [8], n_simulations=3, rng=0).n_permutations == 499


def test_notes_for_unreachable_k_and_overlapping_draws(rng):
    base, pert = cloud(rng, 12), cloud(rng, 12, center=np.linspace(-1, 3, 16))
    with pytest.warns(PlanningWarning) as caught:
        r = power_simulation(base, pert, [2, 9], n_simulations=5, rng=0)
    text = " ".join(str(w.message) for w in caught)
    assert "k = 2: the smallest possible p is 0.333" in text  # 2 of C(4, 2) = 6 splits
    assert "k = 9: above half the pilot size" in text
    assert r.power[0] == 0.0 and len(r.notes) == 2


def test_power_simulation_reproducible(rng):
    base, pert = cloud(rng, 12), cloud(rng, 12, center=np.linspace(0, 2, 16))
    a = power_simulation(base, pert, [6], n_simulations=10, n_permutations=199, rng=3)
    b = power_simulation(base, pert, [6], n_simulations=10, n_permutations=199, rng=3)
    assert a.power[0] == b.power[0]
    with pytest.raises(ValueError, match="`n_simulations` must be >= 1"):
        power_simulation(base, pert, [6], n_simulations=0)


# --------------------------------------------------------------------------- attainability
def test_smallest_p_value_exact_and_random():
    assert smallest_p_value(2, 2, n_permutations=2000, measure="jsd") == pytest.approx(1 / 6)
    # a symmetric statistic ties a split with its complement when k = m
    assert smallest_p_value(2, 2, n_permutations=2000, measure="energy-l2") == pytest.approx(2 / 6)
    assert smallest_p_value(3, 3, n_permutations=2000, measure="jsd", null="pooled") == pytest.approx(2 / 20)
    assert smallest_p_value(3, 4, n_permutations=2000, measure="energy-l2") == pytest.approx(1 / 35)
    assert smallest_p_value(20, 20, n_permutations=2000) == pytest.approx(1 / 2001)


@pytest.mark.parametrize(
    "k,m,measure,null",
    [
        (2, 2, "wasserstein", "base"),
        (3, 3, "wasserstein", "base"),
        (2, 2, "energy-l2", "base"),
        (3, 3, "ks", "pooled"),
        (3, 4, "wasserstein", "base"),
        (3, 4, "energy-cosine", "base"),
    ],
)
def test_smallest_p_value_is_attained(k, m, measure, null):
    """The bound is the p of two well separated groups (a tight base group, so that
    no other split, the complement included, ties with the observed one)."""
    rng = np.random.default_rng(0)
    x = cloud(rng, k, spread=0.05)
    y = cloud(rng, m, center=-np.ones(16), spread=0.6)
    r = dbpa_test(x, y, measure=measure, null=null, n_permutations=2000, rng=0)
    assert r.exact
    assert r.p_value == pytest.approx(smallest_p_value(k, m, n_permutations=2000, measure=measure, null=null))


def test_smallest_adjusted_p():
    assert smallest_adjusted_p(1 / 2001, 3, "holm") == pytest.approx(3 / 2001)
    assert smallest_adjusted_p(1 / 2001, 3, "bonferroni") == pytest.approx(3 / 2001)
    assert smallest_adjusted_p(1 / 2001, 3, "bh") == pytest.approx(1 / 2001)
    assert smallest_adjusted_p(0.2, 8, "holm") == 1.0
    with pytest.raises(ValueError, match="`n_tests` must be >= 1, got 0"):
        smallest_adjusted_p(0.1, 0)
    with pytest.raises(ValueError, match="`method` must be in"):
        smallest_adjusted_p(0.1, 2, "sidak")


def test_k_two_can_never_be_significant():
    a = attainable_significance(2, n_permutations=2000, n_tests=8, measure="jsd")
    assert not a.reachable and a.smallest_p == pytest.approx(1 / 6)
    assert a.smallest_adjusted_p == 1.0
    assert "no result can be significant" in a.message
    assert f"at least k = {a.min_samples} responses" in a.message
    # the suggested k is the smallest that works
    assert (
        attainable_significance(
            a.min_samples, n_permutations=2000, n_tests=8, measure="jsd"
        ).smallest_adjusted_p
        < 0.05
    )
    assert not attainable_significance(
        a.min_samples - 1, n_permutations=2000, n_tests=8, measure="jsd"
    ).reachable


def test_three_responses_never_earn_a_star():
    a = attainable_significance(3, n_permutations=2000, correction="none", measure="jsd")
    assert a.smallest_p == pytest.approx(1 / 20) and a.best_stars == ""
    assert "no star can be reached" in a.message and "More responses" in a.message


def test_no_three_stars_with_2000_permutations_and_holm_over_three():
    a = attainable_significance(20, n_permutations=2000, n_tests=3)
    assert a.reachable and a.best_stars == "**"
    assert "at most '**'" in a.message and "3000 permutations" in a.message
    assert attainable_significance(20, n_permutations=3000, n_tests=3).message is None
    assert attainable_significance(20, n_permutations=2000, n_tests=3, correction="bh").message is None


def test_too_few_permutations_for_many_tests():
    a = attainable_significance(20, n_permutations=499, n_tests=40)
    assert not a.reachable and a.min_samples is None
    assert a.min_permutations == 800 and "at least 800 permutations" in a.message
    assert 40 / (a.min_permutations + 1) < 0.05 <= 40 / a.min_permutations


def test_attainability_to_dict():
    d = attainable_significance(2, n_permutations=100, measure="jsd").to_dict()
    assert d["reachable"] is False and d["exact"] is True and "message" in d
    assert math.isclose(d["smallest_p"], 1 / 6)
