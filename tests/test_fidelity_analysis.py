"""run_fidelity: every simulator plus uniform, the result's files, what each loss uses,
the warnings, and one test per bad argument."""
import json
import warnings

import numpy as np
import pytest

from dbpa_core.fidelity import FidelityWarning, from_arrays, run_fidelity, sample_data
from dbpa_core.fidelity import curve as cv
from dbpa_core.fidelity import discrepancy as dz
from dbpa_core.fidelity.sample import sample_values_data
from dbpa_core.fidelity.sets import kl_radius_categorical

pytestmark = pytest.mark.filterwarnings("ignore::dbpa_core.fidelity.FidelityWarning")


@pytest.fixture(scope="module")
def result():
    return run_fidelity(sample_data(), loss="tv", gamma=0.5, eta=0.05)


def test_every_simulator_and_uniform(result):
    assert [s.name for s in result.simulators] == ["sim-close", "sim-biased", "sim-flat", "uniform"]
    assert len(result.comparisons) == 6
    # the uniform curve is the tv worst case against 1/d, recomputed here by hand
    data = sample_data()
    for j in (0, 20, 39):
        p = data.scenarios[j].real / data.scenarios[j].real.sum()
        d = p.size
        r = kl_radius_categorical(data.scenarios[j].real.sum(), d)
        want = dz.tv_upper(p[None], np.array([r]), np.full((1, d), 1 / d))[0]
        assert result.simulator("uniform").upper[j] == pytest.approx(want)


def test_the_sample_tells_its_simulators_apart(result):
    assert result.comparison("sim-close", "sim-biased").verdict == "first"
    assert result.comparison("sim-biased", "sim-close").verdict == "second"
    assert result.comparison("sim-close", "uniform").verdict == "first"
    close, biased = result.simulator("sim-close"), result.simulator("sim-biased")
    assert close.auc_cal < result.simulator("uniform").auc_cal < biased.auc_cal


def test_summaries_match_the_curve_module(result):
    for s in result.simulators:
        assert s.auc_cal == cv.auc_cal(s.upper)
        assert s.cvar() == cv.cvar(s.upper, 0.1)
        assert s.guarantee_quantile == cv.quantile(s.upper, 0.95)
        assert np.all(s.lower <= s.upper + 1e-12)


def test_fidelity_json_has_what_the_issue_asks(result, tmp_path):
    paths = result.write(tmp_path / "out")
    assert [p.split("/")[-1] for p in paths] == ["fidelity.json", "fidelity.csv",
                                                 "comparisons.csv", "report.html"]
    doc = json.loads((tmp_path / "out" / "fidelity.json").read_text())
    names = [s["name"] for s in doc["simulators"]]
    assert names[-1] == "uniform"
    for s in doc["simulators"]:
        assert set(s["discrepancies"]) == set(sample_data().ids)
        assert {"auc_cal", "cvar_10", "curve", "band"} <= set(s)
        assert len(s["curve"]["tau"]) == len(s["curve"]["value"])
    c = doc["comparisons"][0]
    assert {"first", "second", "u_hat", "verdict", "sentence"} <= set(c)
    assert doc["settings"]["loss"] == "tv" and doc["guarantee"]["level"] == result.guaranteed_level
    csv_lines = (tmp_path / "out" / "fidelity.csv").read_text().splitlines()
    assert len(csv_lines) == 41 and csv_lines[0].startswith("scenario,n_real,options,radius,sim-close")
    html = (tmp_path / "out" / "report.html").read_text()
    assert "<svg" in html and "sim-close is at least as good as sim-biased" in html


@pytest.mark.parametrize("loss, set_name", [("w1", "categorical KL"), ("squared", "Bernoulli KL / "
                                                                              "Hoeffding mean"),
                                            ("absolute", "Bernoulli KL / Hoeffding mean")])
def test_other_losses(loss, set_name):
    r = run_fidelity(sample_data(), loss=loss)
    assert r.set_name == set_name and len(r.simulators) == 4
    assert all(np.all(s.upper >= 0) for s in r.simulators)


def test_kl_loss_with_positive_probabilities():
    data = from_arrays([[40, 60, 5], [10, 10, 30], [25, 25, 50]],
                       {"a": [[0.4, 0.5, 0.1], [0.2, 0.2, 0.6], [0.3, 0.2, 0.5]]})
    r = run_fidelity(data, loss="kl")
    assert r.comparison("a", "uniform").exact
    assert all(np.all(s.lower <= s.upper) for s in r.simulators)


@pytest.mark.parametrize("loss", ["w1", "squared", "absolute"])
def test_real_values(loss):
    r = run_fidelity(sample_values_data(), loss=loss, sigma=1.5, bounds=(0, 10))
    assert [s.name for s in r.simulators] == ["sim-close", "sim-shifted", "uniform"]
    assert r.bounds == (0.0, 10.0)
    if loss == "squared":
        assert r.simulator("sim-close").auc_cal < r.simulator("sim-shifted").auc_cal


def test_warnings_are_kept_and_raised():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = run_fidelity(sample_values_data(), loss="w1")
    text = " ".join(r.warnings)
    assert "sigma was not given" in text and "bounds were not given" in text
    assert "finite-sample guarantee is vacuous" in text
    assert any(issubclass(w.category, FidelityWarning) for w in caught)


def test_gamma_below_one_half_has_no_band_and_says_why():
    r = run_fidelity(sample_data(), gamma=0.3)
    assert not r.has_band and any("gamma = 0.3 < 1/2" in w for w in r.warnings)


def test_a_larger_gamma_widens_the_sets():
    a = run_fidelity(sample_data(), gamma=0.5).simulator("sim-close")
    b = run_fidelity(sample_data(), gamma=0.9).simulator("sim-close")
    assert np.all(b.upper >= a.upper - 1e-12) and np.all(b.lower <= a.lower + 1e-12)


# --------------------------------------------------------------------------- bad input


def test_unknown_loss():
    with pytest.raises(ValueError, match="`loss` must be one of tv, kl, w1, squared, absolute"):
        run_fidelity(sample_data(), loss="hamming")


@pytest.mark.parametrize("key", ["gamma", "eta", "alpha"])
@pytest.mark.parametrize("value", [0.0, 1.0, -1.0, 2.0])
def test_levels_outside_zero_one(key, value):
    with pytest.raises(ValueError, match=rf"`{key}` must lie in \(0, 1\)"):
        run_fidelity(sample_data(), **{key: value})


def test_data_must_be_fidelity_data():
    with pytest.raises(TypeError, match="`data` must be FidelityData"):
        run_fidelity([[1, 2], [3, 4]])


def test_tv_on_real_values():
    with pytest.raises(ValueError, match="`loss` 'tv' compares distributions over options"):
        run_fidelity(sample_values_data(), loss="tv")


def test_kl_against_a_zero_probability():
    with pytest.raises(ValueError, match=r"simulator 'sim-biased' gives option .* probability 0"):
        run_fidelity(sample_data(), loss="kl")


@pytest.mark.parametrize("kw, message", [
    (dict(sigma=-1.0), "`sigma` must be a positive number"),
    (dict(bounds=(3, 1)), "`bounds` must be two finite numbers a < b"),
    (dict(bounds="0-10"), r"`bounds` must be two numbers \(a, b\)"),
    (dict(bounds=(2, 3)), r"`bounds` \(2, 3\) do not contain every value"),
])
def test_bad_sigma_and_bounds(kw, message):
    with pytest.raises(ValueError, match=message):
        run_fidelity(sample_values_data(), loss="squared", **kw)


@pytest.mark.parametrize("module", ["sets", "curve", "data", "analysis", "__init__"])
def test_docstring_examples(module):
    import doctest
    import importlib

    mod = importlib.import_module("dbpa_core.fidelity" + ("" if module == "__init__" else f".{module}"))
    res = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
    assert res.attempted > 0 and res.failed == 0
