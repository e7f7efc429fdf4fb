import numpy as np
import pytest

from dbpa_core import power_simulation, sample_size

from .conftest import cloud


def test_sample_size_formula():
    # ((z_{1-0.05/2} + z_{0.8}) / 0.5)^2 = ((1.959964 + 0.841621) / 0.5)^2 = 31.4
    assert sample_size(0.5) == 32
    # M = 8: z_{1-0.05/16} = 2.734369 -> ((2.734369 + 0.841621) / 0.5)^2 = 51.1
    assert sample_size(0.5, n_tests=8) == 52
    assert sample_size(0.5, scale=2.0) == 63
    assert sample_size(5.0) == 2  # never fewer than 2
    assert sample_size(0.2) > sample_size(0.4)


def test_power_simulation_grows_with_k(rng):
    base = cloud(rng, 40)
    pert = cloud(rng, 40, center=np.linspace(-1, 3, 16))
    r = power_simulation(base, pert, [4, 20], n_simulations=40, n_permutations=199, rng=0)
    assert r.power.shape == (2,) and r.power_ci.shape == (2, 2)
    assert r.power[1] > r.power[0]
    assert r.power[1] >= 0.8
    assert r.smallest_sample_size(0.8) == 20
    assert np.all(r.power_ci[:, 0] <= r.power) and np.all(r.power <= r.power_ci[:, 1])


def test_power_simulation_gaussian_extrapolates(rng):
    # one pilot group used twice: the fitted distributions are equal, power ~ alpha
    base = cloud(rng, 10)
    r = power_simulation(base, base, [30], n_simulations=60, n_permutations=99,
                         method="gaussian", rng=1)
    assert r.method == "gaussian"
    assert r.power[0] <= 0.2
    pert = cloud(rng, 10, center=np.linspace(-1, 3, 16))
    r = power_simulation(base, pert, [30], n_simulations=20, n_permutations=99,
                         method="gaussian", rng=1)
    assert r.power[0] >= 0.9


def test_power_simulation_reproducible(rng):
    base, pert = cloud(rng, 12), cloud(rng, 12, center=np.linspace(0, 2, 16))
    a = power_simulation(base, pert, [6], n_simulations=10, n_permutations=99, rng=3)
    b = power_simulation(base, pert, [6], n_simulations=10, n_permutations=99, rng=3)
    assert a.power[0] == b.power[0]
    with pytest.raises(ValueError, match="`n_simulations` must be >= 1"):
        power_simulation(base, pert, [6], n_simulations=0)
