"""Checks in a suite: one family over every case x perturbation x check, the pooled check
per perturbation across cases (rates with intervals, the exact stratified test and
Cochran-Mantel-Haenszel), checks.csv."""

from __future__ import annotations

import csv
import io
import itertools
import math

import numpy as np
import pytest
from scipy.stats import fisher_exact, hypergeom

from dbpa_core.cache import Cache
from dbpa_core.checks import (
    CheckResult,
    cmh_test,
    mantel_haenszel_odds_ratio,
    pooled_rate_test,
    stratified_exact_test,
    wilson_interval,
)
from dbpa_core.multitest import multiple_testing
from dbpa_core.spec import load_spec
from dbpa_core.suite import correct_checks, pool_checks

from .fake_openai import FakeOpenAI

TABLES = [(1, 10, 8, 10), (3, 10, 5, 10), (0, 10, 0, 10), (2, 6, 4, 6)]


def brute_force_exact(tables):
    """The exact stratified p by enumerating every combination of the strata's values."""
    laws = []
    for x1, n1, x2, n2 in tables:
        m = x1 + x2
        support = range(max(0, m - n1), min(m, n2) + 1)
        laws.append([(a, hypergeom.pmf(a, n1 + n2, m, n2)) for a in support])
    observed = sum(t[2] for t in tables)
    dist: dict[int, float] = {}
    for combo in itertools.product(*laws):
        total = sum(a for a, _ in combo)
        dist[total] = dist.get(total, 0.0) + math.prod(p for _, p in combo)
    p_obs = dist[observed]
    return sum(p for p in dist.values() if p <= p_obs * (1 + 1e-7))


def test_exact_stratified_test_is_fisher_for_one_table_and_the_enumeration_for_many():
    for x1, n1, x2, n2 in [(1, 10, 8, 10), (0, 5, 5, 5), (3, 7, 2, 9), (4, 4, 4, 4)]:
        want = fisher_exact([[x1, x2], [n1 - x1, n2 - x2]]).pvalue
        assert stratified_exact_test([(x1, n1, x2, n2)]) == pytest.approx(want, rel=1e-9)
    assert stratified_exact_test(TABLES) == pytest.approx(brute_force_exact(TABLES), rel=1e-9)
    # a table where nothing varies changes nothing
    assert stratified_exact_test(TABLES) == pytest.approx(stratified_exact_test(TABLES[:2] + TABLES[3:]))


def test_cmh_and_the_odds_ratio_against_statsmodels():
    # reference: statsmodels.stats.contingency_tables.StratifiedTable(tables)
    #   .test_null_odds(correction=True) -> statistic 7.387769529869211, p 0.006566887305581748
    #   .oddsratio_pooled -> 5.647887323943661
    stat, p = cmh_test(TABLES)
    assert stat == pytest.approx(7.387769529869211, rel=1e-12)
    assert p == pytest.approx(0.006566887305581748, rel=1e-9)
    assert mantel_haenszel_odds_ratio(TABLES) == pytest.approx(5.647887323943661, rel=1e-12)
    pytest.importorskip("statsmodels")
    from statsmodels.stats.contingency_tables import StratifiedTable

    st = StratifiedTable(
        [np.array([[x2, n2 - x2], [x1, n1 - x1]]) for x1, n1, x2, n2 in TABLES if 0 < x1 + x2 < n1 + n2]
    )
    assert st.test_null_odds(correction=True).statistic == pytest.approx(stat, rel=1e-12)
    assert cmh_test([(0, 5, 0, 5), (5, 5, 5, 5)]) == (0.0, 1.0)


def test_pooled_rate_test_rates_intervals_and_rule():
    d = pooled_rate_test(TABLES)
    assert (d["base_count"], d["base_n"], d["count"], d["n"]) == (6, 36, 17, 36)
    assert d["base_ci"] == list(wilson_interval(6, 36)) and d["value_ci"] == list(wilson_interval(17, 36))
    assert d["test"] == "exact stratified" and d["p_value"] == pytest.approx(brute_force_exact(TABLES))
    assert d["difference"] == pytest.approx(11 / 36)
    assert d["ci"][0] < d["difference"] < d["ci"][1]
    big = [(50, 100, 60, 100)] * 260  # more than EXACT_STRATIFIED_MAX_N answers: CMH
    assert pooled_rate_test(big)["test"] == "cmh"


def test_exact_stratified_test_holds_its_level_under_the_null():
    """Type I error: 8 cases with different true rates, the same in both arms."""
    rng = np.random.default_rng(7)
    rates = rng.uniform(0.1, 0.9, 8)
    rejections = 0
    runs = 1000
    for _ in range(runs):
        t = [(int(rng.binomial(10, r)), 10, int(rng.binomial(10, r)), 10) for r in rates]
        rejections += stratified_exact_test(t) <= 0.05
    assert rejections / runs <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / runs)


def _result(check, pert, x1, x2, p):
    return CheckResult(
        check,
        "contains",
        pert,
        "m",
        "control",
        x1 / 10,
        x2 / 10,
        10,
        10,
        x1,
        x2,
        difference=(x2 - x1) / 10,
        ci=(-0.4, 0.4),
        p_value=p,
        p_adjusted=p,
    )


class _P:
    def __init__(self, name, role="control"):
        self.name, self.role = name, role


def test_one_family_over_the_suite_not_per_case():
    """A check at p = 0.013 in one case of 24: within its case (a family of 2) it would be
    a discovery; over the suite's 48 check tests it is not."""
    rng = np.random.default_rng(3)
    checked = []
    for i in range(24):
        for pert in ("a", "b"):
            p = 0.013 if (i, pert) == (0, "a") else float(rng.uniform(0.2, 1.0))
            checked.append((f"c{i}", _result("says unknown", pert, 5, 5, p)))
    rows = correct_checks(checked, "bh", 0.05)
    mt = multiple_testing([c.p_value for _, c in checked], "bh")
    assert [r["p_adjusted"] for r in rows] == pytest.approx(list(mt.p_adjusted))
    assert (
        rows[0]["p_adjusted"] > 0.3
        and not rows[0]["significant"]
        and rows[0]["flag"] == "no detectable change"
    )
    assert rows[0]["family"] == 48 and rows[0]["case"] == "c0" and rows[0]["correction"] == "bh"
    assert "adjusted" in rows[0]["text"]
    pooled = pool_checks(rows, [_P("a"), _P("b")], correction="bh", alpha=0.05)
    assert [(d["perturbation"], d["check"], d["cases"]) for d in pooled] == [
        ("a", "says unknown", 24),
        ("b", "says unknown", 24),
    ]
    assert (
        pooled[0]["p_value"] == pytest.approx(1.0)
        and pooled[0]["base"] == 0.5
        and pooled[0]["flag"] == "no detectable change"
    )


def write_cases(tmp_path, n=4):
    rows = ["id,name,word"] + [
        f"p{i},John{i},{w}" for i, w in zip(range(n), ["statins", "exercise", "salt", "doctor"], strict=False)
    ]
    (tmp_path / "cases.csv").write_text("\n".join(rows) + "\n")


def test_suite_checks_end_to_end(tmp_path, capsys):
    """{word} filled per case; the comedian arm (other words) loses it in every case: the
    pooled check finds it, the per-case rows are one family, checks.csv holds them."""
    write_cases(tmp_path)
    with FakeOpenAI(models=("fake-model", "fake-embed")) as srv:
        (tmp_path / "s.yaml").write_text(f"""
model: {{backend: openai, name: fake-model, base_url: "{srv.base_url}", max_retries: 0}}
embedder: {{backend: openai, name: fake-embed, base_url: "{srv.base_url}"}}
samples: 8
permutations: 199
cases: {{file: cases.csv}}
base: {{prompt: "{{name}}: what should I do about cholesterol?"}}
perturbations:
  - {{name: comedian, prefix: "Act as a comedian.", role: target}}
  - {{name: renamed, set: {{name: Ahmed}}, role: control}}
checks:
  - {{name: says the word, contains: ["{{word}}"]}}
  - {{name: length, words: true}}
""")
        spec = load_spec(tmp_path / "s.yaml")
        cache = Cache(tmp_path / "cache")
        from dbpa_core.suite import run_suite

        res = run_suite(spec, cache=cache)
        cache.close()
        from dbpa_core.cli import main

        args = ["--cache-dir", str(tmp_path / "cache"), "audit", str(tmp_path / "s.yaml")]
        assert main([*args, "--out", str(tmp_path / "cli"), "--quiet", "--no-history"]) == 0
        out = capsys.readouterr().out
    assert "Answer checks pooled over the cases" in out
    line = next(x for x in out.splitlines() if x.startswith("says the word") and "comedian" in x)
    assert "0% [0%," in line and "pts" in line
    assert len(res.checks) == 4 * 2 * 2
    tested = [r for r in res.checks if r["p_value"] is not None]
    mt = multiple_testing([r["p_value"] for r in tested], "bh")
    assert [r["p_adjusted"] for r in tested] == pytest.approx(list(mt.p_adjusted))
    assert {r["family"] for r in res.checks} == {len(tested)}
    by = {(d["perturbation"], d["check"]): d for d in res.pooled_checks}
    word = by[("comedian", "says the word")]
    assert word["value"] == 0 and word["base"] > 0.3 and word["significant"]
    tables = [
        (r["base_count"], r["base_n"], r["count"], r["n"])
        for r in res.checks
        if r["perturbation"] == "comedian" and r["check"] == "says the word"
    ]
    assert word["p_value"] == pytest.approx(stratified_exact_test(tables))
    assert by[("comedian", "length")]["test"] == "fisher"
    assert not by[("renamed", "says the word")]["significant"]
    paths = res.write(tmp_path / "out")
    assert any(p.endswith("checks.csv") for p in paths)
    rows = list(csv.DictReader(io.StringIO((tmp_path / "out" / "checks.csv").read_text())))
    assert len(rows) == 16 and rows[0]["case"] == "p0" and rows[0]["flag"]
    pooled = list(csv.DictReader(io.StringIO((tmp_path / "out" / "pooled_checks.csv").read_text())))
    assert len(pooled) == 4 and pooled[0]["test"] in ("exact stratified", "fisher")
    d = res.to_dict()
    assert d["pooled_checks"] and d["checks_family"] == len(tested)


def test_pooled_checks_table_shows_rates_intervals_and_unparsed_answers():
    from dbpa_core.suite import pooled_checks_rows

    rows = [
        dict(_result("chose unknown", "a", 2, 6, 0.5).to_dict(), case="c1", base_unparsed=1, unparsed=3),
        dict(_result("chose unknown", "a", 4, 8, 0.5).to_dict(), case="c2"),
    ]
    pooled = pool_checks(rows, [_P("a")], correction="bh", alpha=0.05)
    assert pooled[0]["name"] == "chose unknown" and pooled[0]["base_unparsed"] == 1
    table = pooled_checks_rows(pooled)
    assert table[0][:5] == ("check", "perturbation", "cases", "base [95% CI]", "perturbed [95% CI]")
    assert table[1][3].startswith("30% [") and table[1][3].endswith("+1?")
    assert table[1][4].startswith("70% [") and table[1][4].endswith("+3?")
    assert table[1][5] == "+40 pts"
