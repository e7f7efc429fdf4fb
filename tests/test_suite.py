"""Suites of cases: placeholders, set:, the correction across the suite, the pooled
test, Storey's estimate, the command line end to end and the estimate."""

import json
import math

import numpy as np
import pytest

from dbpa_core import runs
from dbpa_core.audit import run_audit
from dbpa_core.cache import Cache
from dbpa_core.cli import main
from dbpa_core.multitest import multiple_testing
from dbpa_core.spec import SpecError, load_spec, parse_spec
from dbpa_core.suite import case_spec, fisher_combined, pool, run_suite, storey_pi0

from .fake_openai import FakeOpenAI

PERTS = """perturbations:
  - {name: comedian, prefix: "Act as a comedian.", role: target}
  - {name: renamed, set: {name: Ahmed}, role: control}
"""


def suite_yaml(url, cases="cases: {file: cases.csv}", extra=""):
    return f"""
model: {{backend: openai, name: fake-model, base_url: "{url}", max_retries: 0}}
embedder: {{backend: openai, name: fake-embed, base_url: "{url}"}}
samples: 6
permutations: 199
seed: 3
{extra}
{cases}
base: {{prompt: "{{name}} is {{age}} years old with cholesterol {{chol}}. Advice?"}}
{PERTS}"""


def write_cases(tmp_path, n=5):
    rows = ["id,name,age,chol"] + [f"p{i},John{i},{60 + i},{5 + i * 0.5}" for i in range(n)]
    (tmp_path / "cases.csv").write_text("\n".join(rows) + "\n")


# --------------------------------------------------------------------------- the spec
def test_placeholders_prefix_template_and_set_fill_every_case():
    spec = parse_spec("""
model: {backend: local}
cases:
  - {id: a, name: John, age: 70}
  - {name: Mary, age: 41}
base: {prompt: "{name}, {age}: {{json}}"}
perturbations:
  - {name: pre, prefix: "Be brief.", suffix: "Thanks."}
  - {name: tpl, prompt: "As a doctor: {name} ({age})"}
  - {name: older, set: {age: 90}}
  - {name: both, prompt: "Patient {name}, {age}", set: {name: Ahmed}}
""")
    assert [c.id for c in spec.cases] == ["a", "2"]  # the row number when no id column
    assert spec.correction == "bh"  # the suite default
    assert spec.n_tests == 8
    s = case_spec(spec, spec.cases[0])
    assert s.base_prompt == "John, 70: {json}"
    got = {p.name: p.prompt for p in s.perturbations}
    assert got == {
        "pre": "Be brief. John, 70: {json} Thanks.",
        "tpl": "As a doctor: John (70)",
        "older": "John, 90: {json}",
        "both": "Patient Ahmed, 70",
    }
    assert case_spec(spec, spec.cases[1]).perturbations[2].prompt == "Mary, 90: {json}"


def test_spec_choice_of_correction_is_kept():
    spec = parse_spec("""
model: {backend: local}
correction: holm
cases: [{name: a}, {name: b}]
base: {prompt: "hi {name}"}
perturbations: [{name: p, suffix: "!"}]
""")
    assert spec.correction == "holm"


@pytest.mark.parametrize(
    "cases, message",
    [
        ("id,name,age\nx,John,70\ny,Mary\n", r"cases\.csv.*line 3: 2 values for 3 columns"),
        (
            "id,name\nx,John\ny,Mary\n",
            r"case 'x' \(cases\.csv, line 2\): no column 'age' for the "
            r"placeholder \{age\} in base\.prompt",
        ),
        ("id,name,age\nx,John,70\nx,Mary,3\n", r"line 3: the id 'x' is used twice"),
        ("id,name,age\n", r"'cases' holds no case"),
    ],
)
def test_case_errors_name_the_row(tmp_path, cases, message):
    (tmp_path / "cases.csv").write_text(cases)
    (tmp_path / "s.yaml").write_text("""model: {backend: local}
cases: {file: cases.csv}
base: {prompt: "{name} is {age}"}
perturbations: [{name: p, prefix: "Hi."}]
""")
    with pytest.raises(SpecError, match=message):
        load_spec(tmp_path / "s.yaml")


def test_jsonl_cases_and_their_errors(tmp_path):
    (tmp_path / "c.jsonl").write_text('{"id": "a", "name": "Jo"}\n\n{"id": "b", "nom": "x"}\n')
    (tmp_path / "s.yaml").write_text("""model: {backend: local}
cases: {file: c.jsonl}
base: {prompt: "hi {name}"}
perturbations: [{name: p, prompt: "hey {name}"}]
""")
    with pytest.raises(
        SpecError,
        match=r"s\.yaml, line 2: case 'b' \(c\.jsonl, line 3\): "
        r"no column 'name'",
    ):
        load_spec(tmp_path / "s.yaml")
    (tmp_path / "c.jsonl").write_text('{"id": "a", "name": "Jo"}\nnot json\n')
    with pytest.raises(SpecError, match=r"c\.jsonl', line 2: not valid JSON"):
        load_spec(tmp_path / "s.yaml")


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "cases: [{name: a}]\nbase: {prompt: 'hi {nam}'}\nperturbations: [{name: p, suffix: x}]",
            r"line 2: case '1' \(cases\[0\] \(line 2\)\): no column 'nam'",
        ),
        (
            "base: {prompt: 'hi {name}'}\nperturbations: [{name: p, suffix: x}]",
            r"base\.prompt has the placeholder \{name\} but the spec gives no cases",
        ),
        (
            "base: {prompt: 'hi'}\nperturbations: [{name: p, set: {name: x}}]",
            r"'set' changes the columns of cases, and the spec gives no 'cases'",
        ),
        (
            "cases: [{name: a}]\nbase: {prompt: 'hi {name}'}\nperturbations: [{name: p, set: {age: 3}}]",
            r"set: 'age' is not a placeholder of its prompt",
        ),
        (
            "cases: [{name: a}]\nbase: {prompt: 'hi {name} {'}\nperturbations: [{name: p, suffix: x}]",
            r"literal brace",
        ),
        (
            "cases: [{name: [1, 2]}]\nbase: {prompt: 'hi {name}'}\nperturbations: [{name: p, suffix: x}]",
            r"column 'name' must be text or a number",
        ),
    ],
)
def test_placeholder_and_set_errors(text, message):
    with pytest.raises(SpecError, match=message):
        parse_spec("model: {backend: local}\n" + text)


def test_plain_spec_with_json_braces_still_reads():
    spec = parse_spec("""model: {backend: local}
base: {prompt: 'Answer as {"answer": "A"}'}
perturbations: [{name: p, suffix: x}]
""")
    assert spec.cases == () and spec.correction == "holm"


# --------------------------------------------------------------------------- statistics
def test_storey_pi0_on_synthetic_pvalues():
    rng = np.random.default_rng(0)
    null = rng.uniform(size=800)
    changed = rng.beta(0.05, 20, size=200)  # nearly all below 0.5
    pi0 = storey_pi0(np.concatenate([null, changed]))
    assert abs(pi0 - 0.8) < 0.06
    assert storey_pi0([0.1, 0.2, 0.6, 0.9]) == pytest.approx(2 / (0.5 * 4))  # = 1, clipped
    assert storey_pi0([0.01, 0.02, 0.03, 0.7]) == pytest.approx(1 / (0.5 * 4))
    assert abs(storey_pi0(rng.uniform(size=5000)) - 1.0) < 0.05


def test_fisher_against_a_hand_computation():
    ps = [0.01, 0.2, 0.5]
    x = -2 * sum(math.log(p) for p in ps)
    # chi-squared with 2m degrees of freedom: sf = exp(-x/2) * sum_{k<m} (x/2)^k / k!
    hand = math.exp(-x / 2) * sum((x / 2) ** k / math.factorial(k) for k in range(3))
    stat, p = fisher_combined(ps)
    assert stat == pytest.approx(x) and p == pytest.approx(hand, rel=1e-12)
    from dbpa_core.suite import fisher_log10_p

    assert fisher_log10_p(stat, 3) == pytest.approx(math.log10(hand))
    # 400 cases at the smallest p of B = 1999: p underflows, its logarithm does not
    stat, p = fisher_combined([1 / 2000] * 400)
    assert p == 0.0
    assert fisher_log10_p(stat, 400) == pytest.approx(-796.868144743312, rel=1e-9)  # mpmath


def test_pool_by_hand():
    from dbpa_core.spec import Perturbation

    tests = [
        {
            "case": str(i),
            "perturbation": "a",
            "omega": 0.5,
            "effect_above_chance": e,
            "p_value": p,
            "significant": s,
        }
        for i, (e, p, s) in enumerate(
            [(0.1, 0.001, True), (0.3, 0.02, False), (0.2, 0.6, False), (0.2, 0.9, False)]
        )
    ]
    tests += [
        {
            "case": str(i),
            "perturbation": "b",
            "omega": 0.1,
            "effect_above_chance": 0.0,
            "p_value": 0.7,
            "significant": False,
        }
        for i in range(4)
    ]
    out = pool(tests, [Perturbation("a", "x"), Perturbation("b", "y")], correction="bonferroni", alpha=0.05)
    a, b = out
    assert a["p_value"] == pytest.approx(fisher_combined([0.001, 0.02, 0.6, 0.9])[1])
    assert a["p_adjusted"] == pytest.approx(min(1, 2 * a["p_value"]))
    assert a["mean_effect_above_chance"] == pytest.approx(0.2)
    assert a["ci_low"] <= 0.2 <= a["ci_high"] and a["ci_low"] >= 0.1 and a["ci_high"] <= 0.3
    assert a["discoveries"] == 1 and a["share_discovered"] == 0.25
    assert a["pi0"] == pytest.approx(1.0) and a["share_changed"] == pytest.approx(0.0)
    assert b["ci_low"] == b["ci_high"] == 0.0 and not b["significant"]


# --------------------------------------------------------------------------- running
@pytest.fixture
def cache(tmp_path):
    c = Cache(tmp_path / "cache")
    yield c
    c.close()


def test_suite_corrects_across_all_tests_and_pools(tmp_path, cache):
    write_cases(tmp_path, 4)
    with FakeOpenAI(models=("fake-model", "fake-embed")) as srv:
        (tmp_path / "s.yaml").write_text(suite_yaml(srv.base_url))
        spec = load_spec(tmp_path / "s.yaml")
        with pytest.raises(ValueError, match="run_suite"):
            run_audit(spec, cache=cache)
        events = []
        res = run_suite(spec, cache=cache, progress=events.append)
        delivered = list(srv.delivered)
        # without a cache, each case fetches its own samples: the same results
        uncached = run_suite(spec, cache=Cache(enabled=False))
    assert len(delivered) == len(set(delivered)) == 4 * 3 * 6  # each sample paid once
    assert [t["p_value"] for t in uncached.tests] == [t["p_value"] for t in res.tests]
    assert uncached.usage["calls"] == res.usage["calls"]
    cases_bar = [e for e in events if e.stage == "cases"]
    assert cases_bar[-1].done == cases_bar[-1].total == 4
    assert any(e.detail.startswith("cases p0..p3: sampling") for e in cases_bar)
    assert len(res.tests) == 8 and [t["case"] for t in res.tests[:2]] == ["p0", "p0"]
    mt = multiple_testing([t["p_value"] for t in res.tests], "bh")
    assert np.allclose([t["p_adjusted"] for t in res.tests], mt.p_adjusted)
    # one case's own audit gives the same raw p-value (the suite is that audit, per case)
    one = run_audit(case_spec(spec, spec.cases[0]), cache=cache, permutation_seed=1)
    assert one.perturbations[0].p_value == res.tests[0]["p_value"]
    com, ren = res.pooled
    assert com["perturbation"] == "comedian" and com["significant"]
    assert com["discoveries"] == 4 and com["mean_effect_above_chance"] > 0.1
    assert ren["mean_effect_above_chance"] < com["ci_low"]
    assert res.usage["calls"] == 4 * 3 * 6


def test_cli_suite_end_to_end_and_estimate(tmp_path, capsys):
    write_cases(tmp_path, 3)
    with FakeOpenAI(models=("fake-model", "fake-embed")) as srv:
        (tmp_path / "s.yaml").write_text(suite_yaml(srv.base_url, extra="correction: holm"))
        cache_dir = str(tmp_path / "cache")
        assert main(["--cache-dir", cache_dir, "estimate", str(tmp_path / "s.yaml")]) == 0
        out = capsys.readouterr().out
        assert "suite: 3 cases x 2 perturbations = 6 tests" in out
        assert "total: 54 calls (0 cached)" in out
        rc = main(
            [
                "--cache-dir",
                cache_dir,
                "audit",
                str(tmp_path / "s.yaml"),
                "--out",
                str(tmp_path / "out"),
                "--quiet",
                "--fail-on-control",
            ]
        )
        out = capsys.readouterr().out
        assert main(["--cache-dir", cache_dir, "estimate", str(tmp_path / "s.yaml")]) == 0
        assert "total: 0 calls (54 cached)" in capsys.readouterr().out
        # a control that changes the answers across the cases fails the run (from the cache)
        (tmp_path / "s.yaml").write_text(suite_yaml(srv.base_url).replace("target", "control"))
        assert (
            main(
                [
                    "--cache-dir",
                    cache_dir,
                    "audit",
                    str(tmp_path / "s.yaml"),
                    "--out",
                    str(tmp_path / "out2"),
                    "--quiet",
                    "--fail-on-control",
                ]
            )
            == 1
        )
        assert (
            "FAIL: control perturbation(s) changed the answers detectably: comedian"
            in capsys.readouterr().err
        )
    assert rc == 0
    assert "3 cases x 2 perturbations = 6 tests" in out and "comedian" in out
    res = json.loads((tmp_path / "out" / "results.json").read_text())
    assert res["mode"] == "suite" and res["cases"] == 3 and res["correction"] == "holm"
    assert len(res["tests"]) == 6 and len(res["pooled"]) == 2
    assert set(res["tests"][0]) >= {
        "case",
        "perturbation",
        "omega",
        "effect_above_chance",
        "p_value",
        "p_adjusted",
    }
    holm = multiple_testing([t["p_value"] for t in res["tests"]], "holm").p_adjusted
    assert np.allclose([t["p_adjusted"] for t in res["tests"]], holm)
    assert res["spec"]["cases"][0] == {"id": "p0", "name": "John0", "age": "60", "chol": "5.0"}
    csv_lines = (tmp_path / "out" / "results.csv").read_text().splitlines()
    assert len(csv_lines) == 7 and csv_lines[0].startswith("case,perturbation")
    lines = (tmp_path / "out" / "responses.jsonl").read_text().splitlines()
    assert len(lines) == 3 * 3 * 6 and json.loads(lines[0])["case"] == "p0"
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.endswith(".partial")]


def test_estimate_counts_every_case(tmp_path):
    spec = parse_spec("""
model: {backend: openai, name: gpt-4o-mini}
samples: 5
cases: [{name: a}, {name: b}, {name: c}]
base: {prompt: "hi {name}"}
perturbations: [{name: p, suffix: "!"}, {name: q, set: {name: z}}]
""")
    est = runs.estimate(spec, cache=Cache(tmp_path / "c"))
    assert est["cases"] == 3 and est["tests"] == 6
    assert est["totals"]["calls"] == 3 * 3 * 5
    assert {r["arm"]: r["calls"] for r in est["arms"]} == {"base": 15, "p": 15, "q": 15}


def test_dump_spec_round_trips_a_suite():
    from dbpa_core.spec import dump_spec

    spec = parse_spec("""
model: {backend: local}
cases: [{id: a, name: Jo, age: 70}, {name: Al, age: 85}]
base: {prompt: "{name} is {age}"}
perturbations:
  - {name: pre, prefix: "Hi.", role: target}
  - {name: tpl, prompt: "Dr {name}, {age}"}
  - {name: older, set: {age: 85}, role: control}
""")
    again = parse_spec(dump_spec(spec))
    assert [c.to_dict() for c in again.cases] == [c.to_dict() for c in spec.cases]
    for s in spec.cases:
        assert case_spec(again, s).perturbations == case_spec(spec, s).perturbations
    assert again.correction == "bh"


def test_a_case_whose_change_changes_nothing_is_flagged(tmp_path, cache):
    """In case b the name change is no change at all: as a target that is a warning; as a
    control it is a same-prompt control, which draws answers of its own (no warning)."""
    cases = """cases:
  - {id: a, name: John, age: 70, chol: 5}
  - {id: b, name: Ahmed, age: 71, chol: 6}"""
    with FakeOpenAI(models=("fake-model", "fake-embed")) as srv:
        as_control = run_suite(parse_spec(suite_yaml(srv.base_url, cases=cases)), cache=cache)
        target = suite_yaml(srv.base_url, cases=cases).replace(
            "{name: renamed, set: {name: Ahmed}, role: control}",
            "{name: renamed, set: {name: Ahmed}, role: target}",
        )
        as_target = run_suite(parse_spec(target), cache=cache)
    assert not [w for w in as_control.warnings if "same prompt as the base" in w]
    flagged = [w for w in as_target.warnings if "same prompt as the base" in w]
    assert len(flagged) == 1 and flagged[0].endswith("(case b)") and "'renamed'" in flagged[0]


def test_cases_sharing_a_prompt_are_named():
    from dbpa_core.spec import spec_warnings

    spec = parse_spec("""
model: {backend: local}
cases: [{id: a, name: Jo, age: 70}, {id: b, name: Al, age: 70}, {id: c, name: Jo, age: 70}]
base: {prompt: "{name} is {age}"}
perturbations: [{name: renamed, set: {name: Ahmed}}]
""")
    said = " ".join(spec_warnings(spec))
    assert "1 case(s) have the same prompt for the base as an earlier case (a and c)" in said
    assert "2 case(s) have the same prompt for perturbation 'renamed'" in said


def test_sensitivity_refuses_a_suite_in_one_line(tmp_path, capsys):
    (tmp_path / "s.yaml").write_text("""model: {backend: local}
cases: [{name: a}, {name: b}]
base: {prompt: "hi {name}"}
perturbations: [{name: p, suffix: "!"}]
""")
    assert main(["sensitivity", str(tmp_path / "s.yaml"), "--dry-run"]) == 2
    assert "is a suite (cases:); sensitivity studies take one base prompt" in capsys.readouterr().err


def test_bad_cases_files_are_one_line_errors(tmp_path):
    (tmp_path / "s.yaml").write_text("""model: {backend: local}
cases: {file: cases.csv}
base: {prompt: "hi {name}"}
perturbations: [{name: p, suffix: "!"}]
""")
    (tmp_path / "cases.csv").write_bytes(b"name\nJos\xe9\n")
    with pytest.raises(SpecError, match=r"cases\.csv, line 2: not UTF-8"):
        load_spec(tmp_path / "s.yaml")
    (tmp_path / "cases.csv").write_text("\ufeffname\nJo\n")  # a byte-order mark is fine
    assert load_spec(tmp_path / "s.yaml").cases[0].values == {"name": "Jo"}
    (tmp_path / "s.yaml").write_text((tmp_path / "s.yaml").read_text().replace(".csv", ".xlsx"))
    (tmp_path / "cases.xlsx").write_text("x")
    with pytest.raises(SpecError, match=r"give a \.csv or \.jsonl file"):
        load_spec(tmp_path / "s.yaml")


def test_a_stopped_suite_raises_and_resumes_from_the_cache(tmp_path, cache, monkeypatch):
    from dbpa_core.sampling import RunCancelled

    write_cases(tmp_path, 3)
    with FakeOpenAI(models=("fake-model", "fake-embed")) as srv:
        spec = parse_spec(suite_yaml(srv.base_url, cases="cases: {file: cases.csv}"), base_dir=tmp_path)
        stored: list[str] = []
        set_many = cache.set_many

        def storing(values, *args, **kwargs):
            set_many(values, *args, **kwargs)
            stored.extend(values)

        monkeypatch.setattr(cache, "set_many", storing)
        with pytest.raises(RunCancelled):  # once the cache holds 7 answers
            run_suite(spec, cache=cache, should_stop=lambda: len(stored) >= 7)
        # Stop abandons the requests in flight; the server may still be answering them
        # (answers nobody reads, so not cached): wait for that before counting
        srv.wait_idle()
        first = len(srv.delivered)
        res = run_suite(spec, cache=cache)
        cached = res.usage["cached_samples"]
        assert 7 <= cached <= first < 54  # what the stopped run kept, it kept
        # the resume asks only for what the cache lacks, each sample once: an answer in
        # flight at the stop may be paid again, one that was cached never
        assert res.usage["calls"] == 54 - cached
        assert len(srv.delivered) - first == 54 - cached
        assert len(set(srv.delivered)) == 54
