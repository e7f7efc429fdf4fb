"""Planning: the guaranteed level by m, the chance each pairwise verdict is decided with m
questions (the binomial form against resampling the questions by hand), the questions
needed, the plug-in share labelled as having no guarantee, and `dbpa fidelity --plan`."""

import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from dbpa_core.fidelity import curve as cv
from dbpa_core.fidelity import from_arrays, run_fidelity, sample_data
from dbpa_core.fidelity.analysis import Comparison
from dbpa_core.fidelity.plan import M_GRID, REACHABLE, chance_at

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def result():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return run_fidelity(sample_data(), band=False)


@pytest.mark.parametrize(
    "share,m,alpha", [(0.03, 100, 0.1), (0.05, 200, 0.1), (0.0, 100, 0.1), (0.2, 50, 0.3), (0.01, 500, 0.05)]
)
def test_the_chance_is_what_resampling_the_questions_gives(share, m, alpha):
    """Resample m questions with replacement from 200 whose share ``share`` has δ̂ > 0 and
    apply the verdict's own rule (Û_m(1 - α/2) <= 0): the share of decided resamples
    matches the binomial chance."""
    rng = np.random.default_rng(7)
    deltas = np.where(np.arange(200) < round(share * 200), 0.1, -0.1)
    hits = 0
    reps = 3000
    for _ in range(reps):
        c = Comparison("a", "b", alpha, rng.choice(deltas, m), np.zeros(m))
        hits += c.u_hat <= 0
    assert hits / reps == pytest.approx(chance_at(float(np.mean(deltas > 0)), m, alpha), abs=0.03)


def test_plan_of_the_sample(result):
    plan = result.plan()
    assert plan.m == 40 and list(plan.levels)[:1] == [40]
    for m, level in plan.levels.items():
        assert level == pytest.approx(cv.guaranteed_level(0.1, m, 0.05))
    assert plan.guarantee_from is not None and plan.levels[40] > 0
    assert cv.guaranteed_level(0.1, plan.guarantee_from - 1, 0.05) <= 0
    close_uniform = plan.pair("sim-close", "uniform")
    assert close_uniform.chance[2000] > 0.99 and close_uniform.needed is not None
    never = plan.pair("sim-biased", "sim-close")
    assert never.needed is None and never.chance[100] < 1e-9
    # the plug-in share: where the loss at p̂ is not above the other's, by hand
    a, b = result.simulator("sim-close").plugin, result.simulator("sim-biased").plugin
    assert plan.pair("sim-close", "sim-biased").plugin_share == pytest.approx(np.mean(a <= b))
    assert len(plan.pairs) == 2 * len(result.comparisons)
    assert set(close_uniform.chance) == set(M_GRID)
    text = plan.text()
    assert "plug-in share (no guarantee)" in text and "guaranteed level" in text


def test_sentence_when_nothing_is_reachable():
    """Few questions, sets too wide: no verdict at 80 %, and the sentence says what helps."""
    rng = np.random.default_rng(2)
    real = rng.multinomial(12, [0.4, 0.4, 0.2], 60)
    sims = {
        "a": rng.multinomial(30, [0.4, 0.4, 0.2], 60) + 1,
        "b": rng.multinomial(30, [0.3, 0.3, 0.4], 60) + 1,
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = run_fidelity(from_arrays(real, sims), band=False)
    plan = res.plan()
    s = plan.sentence()
    assert s.startswith(
        f"With 60 questions no pairwise verdict is reachable at α = 0.1 "
        f"(decided in at least {100 * REACHABLE:.0f} % of resamples"
    )
    if all(p.needed is None for p in plan.pairs):
        assert "more real answers per question" in s
    assert res.to_dict()["plan"]["sentence"] == s


def test_cli_plan(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "dbpa_core.cli",
            "fidelity",
            "sample",
            "--plan",
            "--out",
            str(tmp_path / "never"),
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("With 40 questions 2 of 12 pairwise verdicts")
    assert "sim-close ≥ uniform" in proc.stdout and "guaranteed level" in proc.stdout
    assert not (tmp_path / "never").exists()  # --plan writes nothing


def test_binomial_against_scipy():
    from scipy.stats import binom

    from dbpa_core.fidelity.plan import _binom_cdf

    for k, m, s in [
        (0, 10, 0.3),
        (5, 100, 0.05),
        (50, 2000, 0.02),
        (3, 3, 0.5),
        (-1, 4, 0.2),
        (10, 100, 0.0),
        (10, 100, 1.0),
        (2500, 100000, 0.03),
    ]:
        assert _binom_cdf(k, m, s) == pytest.approx(float(binom.cdf(k, m, s)), abs=1e-12)
