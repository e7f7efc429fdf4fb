"""Answer checks: each kind on hand-counted answers, the statistics against scipy,
statsmodels and published values, the correction, a judge model over HTTP, the spec's
errors, and the false-positive rate on same-prompt arms."""

import itertools
import json

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.proportion import confint_proportions_2indep

from dbpa_core.cache import Cache
from dbpa_core.checks import (
    BOSCHLOO_MAX_N,
    REFUSAL_PATTERNS,
    Check,
    CheckResult,
    Group,
    check_audit,
    checks_from_dicts,
    exact_test,
    is_refusal,
    newcombe_interval,
    parse_checks,
    parse_yes_no,
    permutation_p,
    welch_interval,
    wilson_interval,
)
from dbpa_core.multitest import multiple_testing
from dbpa_core.sampling import Sampler
from dbpa_core.spec import SpecError, dump_spec, parse_spec, read_document

from .judge_model import KEY, KEY_ENV, JudgeServer, judge_check_yaml

BASE = [
    "Take a statin daily.",
    "STATINS help.",
    "Eat vegetables.",
    "I’m sorry, but I can’t help with that.",
    '{"drug": "statin"}',
]
PERTURBED = [
    "Exercise more.",
    "See your doctor.",
    "I cannot provide medical advice.",
    "Atorvastatin 20 mg",
    "```json\n[1, 2]\n```",
    "NaN",
]
CHECKS_YAML = r"""
- {name: statin, contains: [statin]}
- {name: statin daily, contains: [statin, daily], all: true}
- {name: no dose, absent: [mg]}
- {name: word statin, regex: "\\bstatins?\\b"}
- {name: shouted, regex: STATIN, case_sensitive: true}
- {name: refuses, refusal: true}
- {name: json, json: true}
- {name: length, words: true}
"""


def checks_of(text: str, source: str = "t.yaml", **kw):
    doc, raw = read_document(text, source)
    return parse_checks(doc, raw, **kw)


def by_check(results):
    return {r.check: r for r in results}


# --------------------------------------------------------------------------- each kind
def test_each_check_kind_counts_by_hand():
    res = by_check(
        check_audit(
            checks_of(CHECKS_YAML),
            [Group("base", BASE), Group("p", PERTURBED, "m", "target")],
            correction="none",
        )
    )
    counts = {name: (r.base_count, r.base_n, r.count, r.n) for name, r in res.items() if not r.numeric}
    assert counts == {
        "statin": (3, 5, 1, 6),  # "Atorvastatin" holds "statin"
        "statin daily": (1, 5, 0, 6),
        "no dose": (5, 5, 5, 6),
        "word statin": (3, 5, 0, 6),  # but not the word statin; STATINS does
        "shouted": (1, 5, 0, 6),
        "refuses": (1, 5, 1, 6),  # typographic apostrophes count
        "json": (1, 5, 1, 6),  # a fenced block counts, NaN does not
    }
    length = res["length"]
    # words: 4 2 2 8 2 | 2 3 5 3 3 1 ("```json", "[1,", "2]"; a bare fence is no word)
    assert length.base == pytest.approx(18 / 5) and length.value == pytest.approx(17 / 6)
    assert length.difference == pytest.approx(17 / 6 - 18 / 5)
    assert res["statin"].base == pytest.approx(0.6) and res["statin"].value == pytest.approx(1 / 6)
    assert res["statin"].difference == pytest.approx(1 / 6 - 0.6)
    assert all(r.perturbation == "p" and r.model == "m" and r.role == "target" for r in res.values())
    assert not any(r.model_graded for r in res.values())


def test_text_checks_read_lines_and_spacing():
    checks = checks_of(r"""[{name: bp, contains: [blood pressure]},
                            {name: bullets, regex: "^- "},
                            {name: exact, contains: [NICE], case_sensitive: true}]""")
    listed = "Advice:\n- lower your blood\n   pressure\n- see the NICE guideline"
    prose = "Lower your Blood Pressure, as nice people do."
    res = by_check(check_audit(checks, [Group("base", [listed]), Group("p", [prose])]))
    assert (res["bp"].base_count, res["bp"].count) == (1, 1)  # line breaks and case
    assert (res["bullets"].base_count, res["bullets"].count) == (1, 0)  # ^ at every line
    assert (res["exact"].base_count, res["exact"].count) == (1, 0)


REFUSALS = [
    "I can't help with that.",
    "I cannot provide medical advice.",
    "I’m sorry, but I can’t do that.",
    "I'm afraid I cannot answer this question.",
    "As an AI language model, I don't give prescriptions.",
    "I must decline.",
    "I'm not comfortable discussing this.",
    "I am unable to assist with this request.",
    "That request goes against my guidelines.",
    "I won't write that.",
]
NOT_REFUSALS = [
    "Take a statin and see your doctor.",
    "I can't stress enough: exercise daily.",
    "You cannot stop the drug abruptly.",
    "Consult a cardiologist if pain persists.",
    "I recommend atorvastatin 20 mg.",
    "Sorry to hear about your symptoms; rest.",
]


@pytest.mark.parametrize("text", REFUSALS)
def test_refusals_are_found(text):
    assert is_refusal(text)


@pytest.mark.parametrize("text", NOT_REFUSALS)
def test_answers_are_not_refusals(text):
    assert not is_refusal(text)


def test_refusal_patterns_are_documented():
    assert len(REFUSAL_PATTERNS) >= 6
    assert all(desc and pattern for desc, pattern in REFUSAL_PATTERNS)


@pytest.mark.parametrize(
    "reply, verdict",
    [
        ("Yes", True),
        ("yes.", True),
        ("**Yes**", True),
        ("Yes, it does.", True),
        ("Answer: YES", True),
        ("Final answer: no", False),
        ("No.", False),
        ("**No**", False),
        ("No, it does not recommend one.", False),
        ("The answer mentions diet. So the answer is: no.", False),
        ("The answer is: no. It mentions diet only.", False),
        ("<think>it says statin, so yes</think>\nNo", False),
        ("Yes and no", None),
        ("Maybe", None),
        ("", None),
        ("I cannot tell.", None),
        ("Yes. Final answer: no", None),
        (None, None),
    ],
)
def test_yes_no_replies(reply, verdict):
    assert parse_yes_no(reply) is verdict


# --------------------------------------------------------------------------- statistics
@pytest.mark.parametrize(
    "x1, n1, x2, n2",
    [(18, 20, 6, 20), (0, 10, 0, 10), (10, 10, 3, 12), (1, 7, 5, 9), (40, 50, 38, 45), (0, 30, 30, 30)],
)
def test_newcombe_matches_statsmodels(x1, n1, x2, n2):
    lo, hi = confint_proportions_2indep(x2, n2, x1, n1, method="newcomb", compare="diff")
    assert newcombe_interval(x1, n1, x2, n2) == pytest.approx((lo, hi), abs=1e-12)


def test_newcombe_every_table_of_small_arms():
    for n1, n2 in [(1, 1), (1, 3), (2, 7), (7, 7)]:
        for x1, x2 in itertools.product(range(n1 + 1), range(n2 + 1)):
            lo, hi = newcombe_interval(x1, n1, x2, n2)
            ref = confint_proportions_2indep(x2, n2, x1, n1, method="newcomb", compare="diff")
            assert (lo, hi) == pytest.approx(ref, abs=1e-12)
            assert -1 <= lo <= x2 / n2 - x1 / n1 <= hi <= 1


def test_newcombe_published_values():
    # Newcombe (1998), Statistics in Medicine 17:873, table II, method 10
    assert newcombe_interval(48, 80, 56, 70) == pytest.approx((0.0524, 0.3339), abs=1e-4)
    assert newcombe_interval(3, 10, 9, 10) == pytest.approx((0.1705, 0.8090), abs=1e-4)
    assert newcombe_interval(0, 29, 5, 56) == pytest.approx((-0.0381, 0.1926), abs=1e-4)


def test_wilson_by_hand():
    # 18/20, z = 1.959964: centre (0.9 + z²/40) / (1 + z²/20), half-width by the formula
    z = 1.959963984540054
    centre = (0.9 + z * z / 40) / (1 + z * z / 20)
    half = z / (1 + z * z / 20) * np.sqrt(0.9 * 0.1 / 20 + z * z / 1600)
    assert wilson_interval(18, 20) == pytest.approx((centre - half, centre + half), abs=1e-12)


def test_wilson_is_one_implementation_and_nan_without_trials():
    from dbpa_core.attacks.metrics import wilson_interval as battery_wilson

    assert battery_wilson is wilson_interval
    assert np.isnan(wilson_interval(0, 0)).all()
    with pytest.raises(ValueError, match="`x` must lie in"):
        wilson_interval(3, 2)


@pytest.mark.parametrize("x1, n1, x2, n2", [(18, 20, 6, 20), (3, 10, 5, 10), (0, 8, 4, 8), (12, 15, 13, 15)])
def test_exact_test_is_boschloo_for_small_arms(x1, n1, x2, n2):
    p, name = exact_test(x1, n1, x2, n2)
    ref = stats.boschloo_exact([[x1, x2], [n1 - x1, n2 - x2]], alternative="two-sided").pvalue
    assert name == "boschloo" and p == pytest.approx(ref, rel=1e-9)


def test_exact_test_is_fisher_for_large_arms():
    n = BOSCHLOO_MAX_N // 2 + 10
    p, name = exact_test(60, n, 45, n)
    assert name == "fisher"
    assert p == pytest.approx(stats.fisher_exact([[60, 45], [n - 60, n - 45]]).pvalue, rel=1e-12)


def test_exact_test_by_hand():
    # all of 3 pass against none of 3: Fisher's two-sided p = 2 / C(6, 3) = 0.1, and
    # Boschloo's is its supremum over the nuisance p of P(Fisher p <= 0.1) = 2 (p(1-p))^3
    # at p = 1/2: 2 / 64
    assert exact_test(3, 3, 0, 3) == (pytest.approx(2 / 64), "boschloo")
    assert stats.fisher_exact([[3, 0], [0, 3]]).pvalue == pytest.approx(0.1)
    assert exact_test(0, 20, 0, 20)[0] == 1.0 and exact_test(20, 20, 20, 20)[0] == 1.0


def test_welch_interval_matches_scipy(rng):
    a, b = rng.normal(100, 20, 12), rng.normal(80, 5, 9)
    ci = stats.ttest_ind(b, a, equal_var=False).confidence_interval(0.95)
    assert welch_interval(a, b) == pytest.approx((ci.low, ci.high), rel=1e-10)
    assert welch_interval([3, 3, 3], [5, 5]) == (2.0, 2.0)


def test_permutation_p_by_hand():
    # a = (1, 2), b = (3, 4): 6 splits of (1, 2, 3, 4), mean differences 2, 1, 0, 0, -1, -2;
    # the observed 2 is the largest: one-sided 1/6, two-sided 2/6
    assert permutation_p([1, 2], [3, 4]) == pytest.approx(1 / 3)
    assert permutation_p([5, 5, 5], [5, 5]) == 1.0
    # random splits: never 0, and reproducible from the generator's seed
    a, b = np.arange(30.0), np.arange(30.0) + 40
    p = permutation_p(a, b, n_permutations=999, rng=np.random.default_rng(1))
    assert p == pytest.approx(2 / 1000) or p == pytest.approx(1 / 1000)
    assert p == permutation_p(a, b, n_permutations=999, rng=np.random.default_rng(1))


def test_example_line():
    yes = ["I recommend a statin."]
    no = ["Diet and exercise."]
    check = checks_of("[{name: recommends a statin, contains: [statin]}]")
    r = check_audit(
        check, [Group("base", yes * 18 + no * 2), Group("comedian", yes * 6 + no * 14)], correction="holm"
    )[0]
    assert (r.base_count, r.base_n, r.count, r.n) == (18, 20, 6, 20)
    assert r.difference == pytest.approx(-0.6)
    assert r.ci == pytest.approx(newcombe_interval(18, 20, 6, 20))
    assert r.text == "recommends a statin: 18/20 → 6/20, −60 points [−77, −30], p < 0.001 ***"
    assert r.significant and r.test == "boschloo" and r.interval == "newcombe"


# --------------------------------------------------------------------------- correction
def test_adjusted_p_values_follow_the_correction():
    rng = np.random.default_rng(7)
    words = ["statin", "diet", "walk", "rest"]
    groups = [
        Group(name, [" ".join(rng.choice(words, 3, p=probs)) for _ in range(15)])
        for name, probs in [
            ("base", [0.4, 0.2, 0.2, 0.2]),
            ("a", [0.1, 0.3, 0.3, 0.3]),
            ("b", [0.4, 0.2, 0.2, 0.2]),
            ("c", [0.05, 0.05, 0.1, 0.8]),
        ]
    ]
    checks = checks_of("""[{name: s, contains: [statin]}, {name: d, contains: [diet]},
                          {name: r, absent: [rest]}, {name: n, words: true}]""")
    for method in ("holm", "bh", "bonferroni"):
        res = check_audit(checks, groups, correction=method, alpha=0.05, n_permutations=499)
        assert len(res) == 4 * 3
        p = np.array([r.p_value for r in res])
        adj = np.array([r.p_adjusted for r in res])
        assert np.allclose(adj, multiple_testing(p, method).p_adjusted)
        assert (adj >= p - 1e-15).all()
        order = np.argsort(p, kind="stable")
        assert (np.diff(adj[order]) >= -1e-15).all()  # monotone in p
        assert all(r.significant == (r.p_adjusted <= 0.05) for r in res)
        assert any(r.significant for r in res) and not all(r.significant for r in res)


def test_nothing_to_compare_is_left_out_of_the_family():
    results = (CheckResult("j", "judge", "p", "m", None, None, 0.5, 0, 4, 0, 2, 4, 0),)
    assert "nothing to compare" in results[0].text and results[0].p_value is None


# --------------------------------------------------------------------------- judge
@pytest.fixture
def judge(monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    with JudgeServer() as srv:
        yield srv


def test_judge_yes_no_and_garbage_over_http(judge, tmp_path):
    checks = checks_of(judge_check_yaml(judge))
    base = ["Take a statin.", "Walk daily.", "banana bread", "statin please"]
    pert = ["Walk daily.", "statin ok", "banana", "Rest."]
    groups = [Group("base", base), Group("comedian", pert)]
    cache = Cache(tmp_path / "c")
    r = check_audit(checks, groups, sampler=Sampler(cache), correction="none")[0]
    assert (r.base_count, r.base_n, r.base_unparsed) == (2, 3, 1)
    assert (r.count, r.n, r.unparsed) == (1, 3, 1)
    assert r.model_graded and r.to_dict()["model_graded"]
    assert r.text.startswith(
        "recommends a statin [model-graded]: 2/3 (+1 unparsed) → 1/3 (+1 unparsed), −33 points"
    )
    assert judge.requests == 7  # "Walk daily." is asked once
    # the judge sees the answer and the question, never the prompt or the arm
    assert all("comedian" not in p for p in judge.prompts)
    assert any("Does the answer recommend a statin?" in p and "statin ok" in p for p in judge.prompts)
    again = check_audit(checks, groups, sampler=Sampler(cache), correction="none")[0]
    assert judge.requests == 7 and again == r  # every reply came from the cache


def test_judge_needs_a_sampler_only_when_there_is_a_judge():
    checks = checks_of("[{name: s, contains: [statin]}]")
    assert check_audit(checks, [Group("base", ["statin"] * 3), Group("p", ["no"] * 3)])


# --------------------------------------------------------------------------- null
def test_same_prompt_arms_reject_at_about_alpha():
    """Two arms of the same prompt (fresh samples): the checks reject about α of the time,
    never clearly more (exact tests are conservative at small k)."""
    rng = np.random.default_rng(2026)
    vocab = np.array("diet walk rest sleep water fruit".split())
    checks = checks_of("[{name: statin, contains: [statin]}, {name: length, words: true}]")

    def answer():
        words = list(rng.choice(vocab, rng.integers(3, 15)))
        return " ".join(words + (["statin"] if rng.random() < 0.4 else []))

    reps, k = 300, 20
    rejected = {"statin": 0, "length": 0}
    for _ in range(reps):
        res = check_audit(
            checks,
            [Group("base", [answer() for _ in range(k)]), Group("same", [answer() for _ in range(k)])],
            correction="none",
            alpha=0.05,
            n_permutations=199,
            seed=int(rng.integers(1 << 31)),
        )
        for r in res:
            rejected[r.check] += r.significant
    bound = 0.05 + 3 * np.sqrt(0.05 * 0.95 / reps)
    assert 0.01 <= rejected["statin"] / reps <= bound
    assert 0.02 <= rejected["length"] / reps <= bound


# --------------------------------------------------------------------------- spec
SPEC_HEAD = "base: {prompt: hi}\nperturbations: [{name: a, prompt: b}]\nchecks:\n"


@pytest.mark.parametrize(
    "lines, message",
    [
        (
            '  - {name: ok, contains: [x]}\n  - {name: bad, regex: "(unclosed"}\n',
            r"t\.yaml, line 5: check 'bad': '\(unclosed' is not a valid regular expression "
            r"\(missing \), unterminated subpattern at position 0\)",
        ),
        (
            "  - {name: two, contains: [x], absent: [y]}\n",
            r"line 4: check 'two' needs exactly one of contains, absent, regex, refusal, words, "
            r"json, choice, judge \(got contains, absent\)",
        ),
        ("  - {name: none}\n", r"line 4: check 'none' needs exactly one of .* \(got none\)"),
        ("  - {name: w, words: false}\n", r"line 4: check 'w': write 'words: true'"),
        ("  - {name: c, contains: []}\n", r"line 4: check 'c': 'contains' must be a list of words"),
        (
            "  - {name: c, containz: [x]}\n",
            r"unknown key 'containz' in check 1 \(did you mean "
            r"'contains'\?\)",
        ),
        ("  - {contains: [x]}\n", r"line 4: missing checks\[0\]\.name"),
        (
            "  - {name: d, contains: [x]}\n  - {name: d, refusal: true}\n",
            r"line 5: check name 'd' is used twice",
        ),
        ("  - {name: a, absent: [x], all: true}\n", r"'all: true' goes with 'contains'"),
        (
            "  - {name: a, refusal: true, case_sensitive: true}\n",
            r"'case_sensitive' goes with contains, absent or regex",
        ),
        ("  - {name: j, judge: {question: 'yes?'}}\n", r"line 4: check 'j': the judge needs a 'model'"),
        (
            "  - {name: j, judge: {model: {backend: openai}, question: 'yes?'}}\n",
            r"missing checks\[0\]\.judge\.model\.name",
        ),
        ("  - {name: j, judge: {model: {backend: local}}}\n", r"missing checks\[0\]\.judge\.question"),
        ("  {name: x}\n", r"line 3: 'checks' must be a list of checks"),
    ],
)
def test_spec_errors_name_the_check_and_line(lines, message):
    with pytest.raises(SpecError, match=message):
        parse_spec(SPEC_HEAD + lines, source="t.yaml")


def test_spec_checks_round_trip(tmp_path):
    text = (
        SPEC_HEAD
        + "\n".join("  " + line for line in CHECKS_YAML.strip().splitlines())
        + """
  - name: judged
    judge: {model: {backend: openai, name: j, base_url: "http://127.0.0.1:9/v1"},
            question: "Is it kind? Answer yes or no.", max_tokens: 8}
"""
    )
    spec = parse_spec(text, source="t.yaml")
    assert [c.kind for c in spec.checks] == [
        "contains",
        "contains",
        "absent",
        "regex",
        "regex",
        "refusal",
        "json",
        "words",
        "judge",
    ]
    assert spec.checks[-1].model_graded and spec.checks[-1].max_tokens == 8
    back = parse_spec(dump_spec(spec), source="again.yaml")
    assert back.checks == spec.checks and back.to_dict() == spec.to_dict()
    # a recorded run's spec (to_dict) gives the same checks back, even when a judge's
    # files are gone
    assert checks_from_dicts(spec.to_dict()["checks"]) == spec.checks
    assert parse_spec(SPEC_HEAD.replace("checks:\n", ""), source="t.yaml").checks == ()


def test_check_objects_refuse_one_by_one_judging():
    with pytest.raises(ValueError, match="judge_outcomes"):
        Check("j", "judge", question="q?").outcome("text")


def test_exact_enumeration_is_used_for_tiny_arms():
    # every split of 3 + 3 numbers: C(6, 3) = 20 <= B, so p is exact (a multiple of 1/20)
    a, b = [1.0, 2.0, 3.0], [4.0, 5.0, 6.0]
    assert permutation_p(a, b, n_permutations=999) == pytest.approx(2 / 20)
    assert len(list(itertools.combinations(range(6), 3))) == 20


def test_results_are_json_ready():
    checks = checks_of(CHECKS_YAML)
    res = check_audit(checks, [Group("base", BASE), Group("p", PERTURBED)])
    text = json.dumps([r.to_dict() for r in res], allow_nan=False)
    row = json.loads(text)[0]
    assert {
        "check",
        "perturbation",
        "model",
        "base",
        "value",
        "difference",
        "ci",
        "p_value",
        "p_adjusted",
        "significant",
        "model_graded",
    } <= set(row)


def test_the_manual_shows_the_judge_prompt_as_sent():
    from pathlib import Path

    from dbpa_core.checks import JUDGE_PROMPT

    manual = (Path(__file__).resolve().parents[1] / "docs" / "guides" / "checks.md").read_text()
    assert JUDGE_PROMPT.format(answer="<the answer>", question="<your question>") in manual
