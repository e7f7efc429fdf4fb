"""Sequential sampling: answers drawn in rounds, tests valid at every look, rounds from
the cache, the stop rules and the spec's errors."""

import textwrap

import numpy as np
import pytest

from dbpa_core.audit import run_audit
from dbpa_core.cache import Cache
from dbpa_core.runs import estimate
from dbpa_core.sequential import (
    Plan,
    SequentialSampling,
    default_looks,
    default_weights,
    permutations_at,
    run_rounds,
    sequential_p,
    stop_level,
)
from dbpa_core.spec import SpecError, parse_spec
from dbpa_core.types import DBPAResult

from .word_model import BASE, BagOfWords, WordModel


def spec(seed=0, samples=40, extra="", sequential="sequential_sampling: true", perts=None):
    perts = perts or [
        '{name: same, prompt: "' + BASE + '", role: control}',
        '{name: comedian, prefix: "Act as a comedian.", role: target}',
    ]
    lines = "\n".join(f"  - {p}" for p in perts)
    return parse_spec(
        textwrap.dedent(f"""\
        model: {{backend: openai, name: words, base_url: 'http://127.0.0.1:9/v1'}}
        embedder: {{backend: openai, name: bow, base_url: 'http://127.0.0.1:9/v1'}}
        samples: {samples}
        permutations: 199
        seed: {seed}
        measure: energy-l2
        base: {{prompt: "{BASE}"}}
        {sequential}
        {extra}
        perturbations:
        """)
        + lines
        + "\n",
        source="test",
        allow_key_env=True,
    )


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "x")


def run(s, cache=None, model=None):
    return run_audit(
        s, cache=cache or Cache(enabled=False), backends={0: model or WordModel()}, embedder=BagOfWords()
    )


def test_a_large_change_stops_at_the_first_look_and_the_control_runs_on():
    model = WordModel()
    r = run(spec(), model=model)
    p = {x.name: x for x in r.perturbations}
    com, same = p["comedian"], p["same"]
    assert com.sequential.reason == "rejected" and com.samples_used == 12 and com.significant
    assert same.sequential.reason in ("maximum", "rejected")
    assert same.samples_used == 40 or same.sequential.reason == "rejected"
    # the comedian's arm drew 12 answers, the control's and the base's 40
    per_prompt = {}
    for q in model.asked:
        per_prompt[q.prompt] = per_prompt.get(q.prompt, 0) + 1
    assert per_prompt["Act as a comedian. " + BASE] == 12
    assert len(model.asked) == 12 + 40 + 40
    assert "sequential, 3 looks (k = 12, 18, 40), weights 0.25, 0.25, 0.5; stopped at k = 12" in (
        com.sequential.statement
    )
    d = com.to_dict()
    assert d["samples_used"] == 12 and d["stop_reason"] == "rejected"
    assert d["p_value"] == com.sequential.p_value == com.sequential.looks[0].p_value / 0.25
    assert r.to_dict()["sequential"].startswith("sequential, 3 looks")
    assert "samples_used,stop_reason" in r.to_csv().splitlines()[0]


# --------------------------------------------------------------------------- the rules
def test_plan_defaults():
    assert default_looks(40) == (12, 18, 40)
    assert default_looks(20) == (12, 20)
    assert default_looks(30) == (12, 18, 30)
    assert default_looks(80) == (12, 18, 36, 80)
    assert default_looks(100) == (12, 18, 36, 100)
    assert default_looks(8) == (8,)
    assert default_looks(17) == (17,)  # fewer than 1.5 times the first look: one look
    assert default_looks(40, first=10) == (10, 15, 40)
    # at the default maximum two looks that can stop a null control for futility come
    # before half of it (the one at k = 18 is where most null controls stop)
    assert [k for k in default_looks(40)[:-1] if k < 20] == [12, 18]
    assert default_weights(2) == (0.5, 0.5)
    assert default_weights(4) == pytest.approx((1 / 6, 1 / 6, 1 / 6, 0.5))
    plan = SequentialSampling().plan(40)
    assert plan == Plan((12, 18, 40), (0.25, 0.25, 0.5), 0.95)
    # the futility bound's confidence is shared by the looks that can stop for futility
    assert plan.confidence_at(0) == plan.confidence_at(1) == pytest.approx(1 - 0.05 / 2)


def test_stop_level_and_permutations():
    assert stop_level(0.05, "holm", 8) == pytest.approx(0.05 / 8)
    assert stop_level(0.05, "bh", 8) == stop_level(0.05, "bonferroni", 8)
    assert stop_level(0.05, "none", 8) == 0.05
    b = permutations_at(0.05 / 8, 0.25, 2000)
    assert 1 / (b + 1) <= 0.25 * 0.05 / 8 / 10  # p can reach a tenth of the look's level
    assert permutations_at(0.05, 0.5, 5000) == 5000  # never fewer than the spec's B


def test_sequential_p_is_the_weighted_minimum():
    assert sequential_p([0.02, 0.001], [0.5, 0.5]) == pytest.approx(0.002)
    assert sequential_p([0.9, 0.8], [0.5, 0.5]) == 1.0
    assert sequential_p([0.01], [0.0]) == 1.0  # a look without weight cannot reject


def _fake(p_by_look, eac=0.0):
    def test(i, k, b, confidence):
        p = p_by_look[i][k]
        r = DBPAResult(0.5 + eac, p, np.zeros(1), np.zeros(1), np.zeros(4), "energy-l2", k, k, b)
        upper = None if confidence is None else eac + 0.01
        return r, upper

    return test


def test_run_rounds_stop_rules():
    plan = Plan((10, 20, 40), (0.25, 0.25, 0.5))
    drawn = []
    p = {
        0: {10: 0.001, 20: 0.5, 40: 0.5},  # rejects at the first look: 0.001 / 0.25 <= 0.00625
        1: {10: 0.002, 20: 0.0009, 40: 0.5},  # 0.008 > 0.00625, then 0.0036: rejects at 20
        2: {10: 0.5, 20: 0.5, 40: 0.003},  # 0.006 at the last look: rejects there
        3: {10: 0.5, 20: 0.5, 40: 0.5},  # runs to the maximum
    }
    results, records = run_rounds(
        plan,
        4,
        level=0.05 / 8,
        min_effect=None,
        permutations=100,
        draw=lambda k, open_: drawn.append((k, open_)),
        test=_fake(p),
    )
    assert drawn == [(10, [0, 1, 2, 3]), (20, [1, 2, 3]), (40, [2, 3])]
    assert [r.reason for r in records] == ["rejected", "rejected", "rejected", "maximum"]
    assert [r.stopped_at for r in records] == [10, 20, 40, 40]
    assert records[1].p_value == pytest.approx(0.0036)
    assert records[3].p_value == 1.0
    assert "because it reached the maximum" in records[3].statement
    assert results[1].k == 20


def test_futility_needs_min_effect_and_a_bound_below_it():
    plan = Plan((10, 20, 40), (0.25, 0.25, 0.5))
    p = {0: {10: 0.5, 20: 0.5, 40: 0.5}}
    _, none = run_rounds(
        plan, 1, level=0.05, min_effect=None, permutations=9, draw=lambda *a: None, test=_fake(p)
    )
    assert none[0].reason == "maximum" and none[0].stopped_at == 40  # no δ: nulls run to the end
    _, small = run_rounds(
        plan, 1, level=0.05, min_effect=0.05, permutations=9, draw=lambda *a: None, test=_fake(p, eac=0.0)
    )
    assert small[0].reason == "futility" and small[0].stopped_at == 10
    assert "no change above δ = 0.05" in small[0].statement
    _, big = run_rounds(
        plan, 1, level=0.05, min_effect=0.05, permutations=9, draw=lambda *a: None, test=_fake(p, eac=0.06)
    )
    assert big[0].reason == "maximum"  # the bound (0.07) is not below δ


def test_weighted_bonferroni_holds_alpha_however_many_looks():
    """Type-I error with every look taken: strongly dependent looks (a running z-test on
    accumulating data), each p exactly uniform. The naive 'reject if any look has p <= α'
    is far above α; p_seq stays at or below it."""
    from scipy import stats

    rng = np.random.default_rng(0)
    n_sim, looks = 20_000, (10, 20, 40, 80)
    x = rng.standard_normal((n_sim, looks[-1]))
    p = np.stack([stats.norm.sf(x[:, :k].sum(1) / np.sqrt(k)) for k in looks], axis=1)
    w = np.array(default_weights(len(looks)))
    p_seq = np.minimum(1, (p / w).min(axis=1))
    alpha, se = 0.05, np.sqrt(0.05 * 0.95 / n_sim)
    assert (p.min(axis=1) <= alpha).mean() > alpha + 10 * se  # looking often inflates
    assert (p_seq <= alpha).mean() <= alpha + 2 * se
    # and p_seq is super-uniform at every level
    for a in (0.01, 0.1, 0.5):
        assert (p_seq <= a).mean() <= a + 3 * np.sqrt(a * (1 - a) / n_sim)


def test_type_one_error_of_real_permutation_looks():
    """The same with the audit's own permutation test on null answers (one prompt, fresh
    draws), every look taken: the rate of p_seq <= α is at most α (plus noise)."""
    from dbpa_core.permutation import dbpa_test

    rng = np.random.default_rng(3)
    plan = Plan((6, 12), (0.5, 0.5))
    hits, n_sim = 0, 150
    for s in range(n_sim):
        z = rng.standard_normal((24, 8))
        ps = [dbpa_test(z[:k], z[12 : 12 + k], n_permutations=399, rng=s).p_value for k in plan.looks]
        hits += sequential_p(ps, plan.weights) <= 0.1
    assert hits / n_sim <= 0.1 + 2.5 * np.sqrt(0.1 * 0.9 / n_sim)


# --------------------------------------------------------------------------- the audit
def test_a_rerun_reads_every_round_from_the_cache(tmp_path):
    cache = Cache(tmp_path / "cache")
    first = run(spec(), cache=cache)
    model = WordModel()
    again = run(spec(), cache=cache, model=model)
    assert model.asked == []  # a finished sequential run calls nothing
    assert again.usage["calls"] == 0
    for a, b in zip(first.perturbations, again.perturbations, strict=True):
        assert (a.p_value, a.samples_used, a.sequential.reason) == (
            b.p_value,
            b.samples_used,
            b.sequential.reason,
        )
    # the same answers a fixed-k run asks for: turning sequential off reuses them
    fixed_model = WordModel()
    run(spec(sequential=""), cache=cache, model=fixed_model)
    assert len(fixed_model.asked) == 28  # only the comedian's answers 12..39 were missing


def test_min_effect_stops_a_null_control_early():
    r = run(spec(extra="min_effect: 0.3"))
    same = next(x for x in r.perturbations if x.name == "same")
    assert same.sequential.reason == "futility" and same.samples_used == 12
    assert same.sequential.looks[0].upper_bound < 0.3
    assert len(r.responses("base")) == 12  # nothing open after the first look


def test_estimate_gives_best_and_worst_case():
    est = estimate(spec())
    seq = est["sequential"]
    assert (seq["best_calls"], seq["worst_calls"]) == (36, 120)
    assert est["totals"]["calls"] == 120  # the worst case, as a fixed-k run


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("sequential_sampling: {looks: [20, 10, 40]}", "looks must increase"),
        ("sequential_sampling: {looks: [10, 20]}", r"the last look must be 'samples' \(40\)"),
        ("sequential_sampling: {looks: [1, 40]}", "sequential_sampling.looks"),
        ("sequential_sampling: {weights: [0.5, 0.5, 0.5]}", "sum to 1"),
        ("sequential_sampling: {weights: [0.5, 0.5]}", "2 weights for 3 looks"),
        ("sequential_sampling: {weights: [0.5, 0.5, 0.0]}", "last look's weight"),
        ("sequential_sampling: {confidence: 1.5}", "confidence"),
        ("sequential_sampling: {after: 3}", "after"),
        ("sequential_sampling: yes please", "sequential_sampling"),
    ],
)
def test_spec_errors(text, message):
    with pytest.raises(SpecError, match=message):
        spec(sequential=text)


def test_spec_round_trip():
    from dbpa_core.spec import dump_spec

    s = spec(sequential="sequential_sampling: {looks: [5, 40], weights: [0.2, 0.8]}")
    assert s.sequential_sampling.plan(40) == Plan((5, 40), (0.2, 0.8), 0.95)
    back = parse_spec(dump_spec(s), allow_key_env=True)
    assert back.sequential_sampling == s.sequential_sampling
    assert spec().sequential_sampling == SequentialSampling()
    assert spec(sequential="sequential_sampling: false").sequential_sampling is None


def test_a_suite_stops_each_test_at_the_suites_level():
    from dbpa_core.suite import run_suite

    s = parse_spec(
        textwrap.dedent("""\
        model: {backend: openai, name: words, base_url: 'http://127.0.0.1:9/v1'}
        embedder: {backend: openai, name: bow, base_url: 'http://127.0.0.1:9/v1'}
        samples: 40
        permutations: 199
        measure: energy-l2
        sequential_sampling: true
        base: {prompt: "{name} is 70 and takes statins. Is his risk high?"}
        cases: [{name: John}, {name: Ahmed}, {name: Wei}]
        perturbations:
          - {name: same, prefix: "", suffix: " ", role: control}
          - {name: comedian, prefix: "Act as a comedian.", role: target}
        """),
        source="test",
        allow_key_env=True,
    )
    model = WordModel()
    r = run_suite(s, cache=Cache(enabled=False), backends={0: model}, embedder=BagOfWords())
    com = [t for t in r.tests if t["perturbation"] == "comedian"]
    assert all(t["stop_reason"] == "rejected" and t["samples_used"] == 12 for t in com)
    assert all(t["significant"] for t in com)
    # the stop level is α over the suite's 6 tests, not over one case's 2
    assert all(t["p_value"] <= 0.05 / 6 for t in com)
    assert all("stopped at k = 12" in t["sequential_statement"] for t in com)
    assert len(model.asked) < 3 * (40 + 40 + 40)
    assert "samples_used,stop_reason" in r.to_csv().splitlines()[0]
    pooled = {d["perturbation"]: d for d in r.pooled}
    assert pooled["comedian"]["significant"]
    # the run interface (history, report, JUnit) says it per case
    from dbpa_core.runs import as_run

    said = [v.outcome for v in as_run(r).verdicts() if v.name == "comedian" and v.part.startswith("case")]
    assert len(said) == 3 and all("12 answers per arm, stopped: rejected" in o for o in said)


def test_fill_rounds_fetches_each_round_of_every_case_together(tmp_path):
    """The library under `dbpa audit --batch` of a suite: one fetch per round with every
    case's open arms; the suite then runs from the cache with the p-values of a run made
    without it; a fetch that leaves samples out is said in one error."""
    from dbpa_core.backends.base import BackendError
    from dbpa_core.sampling import Job, Sampler, model_key
    from dbpa_core.suite import fill_rounds, run_suite

    s = parse_spec(
        textwrap.dedent("""\
        model: {backend: openai, name: words, base_url: 'http://127.0.0.1:9/v1'}
        embedder: {backend: openai, name: bow, base_url: 'http://127.0.0.1:9/v1'}
        samples: 20
        permutations: 199
        measure: energy-l2
        sequential_sampling: true
        base: {prompt: "{name} is 70 and takes statins. Is his risk high?"}
        cases: [{name: John}, {name: Wei}]
        perturbations:
          - {name: same, prefix: "", suffix: " ", role: control}
          - {name: comedian, prefix: "Act as a comedian.", role: target}
        """),
        source="test",
        allow_key_env=True,
    )
    cache = Cache(tmp_path / "c")
    model = WordModel()
    sampler = Sampler(cache, backends={model_key(s.model): model})
    rounds: list[int] = []

    def fetch(jobs):
        rounds.append(len(jobs))
        sampler.sample([Job(m, r) for m, r in jobs])

    with pytest.raises(BackendError, match="did not reach the cache"):
        fill_rounds(s, cache, lambda jobs: None, backends={0: WordModel()}, embedder=BagOfWords())
    assert fill_rounds(s, cache, fetch, backends={0: model}, embedder=BagOfWords()) == 2
    # round 1: 2 cases x (base, same, comedian) x 12; every comedian stops there, and
    # round 2 tops up each case's base and control to 20 (2 x 2 x 8)
    assert rounds == [72, 32]
    asked = len(model.asked)
    r = run_suite(s, cache=cache, backends={0: model}, embedder=BagOfWords())
    assert r.usage["calls"] == 0 and len(model.asked) == asked
    live = run_suite(s, cache=Cache(enabled=False), backends={0: WordModel()}, embedder=BagOfWords())
    assert [t["p_value"] for t in r.tests] == [t["p_value"] for t in live.tests]
    assert fill_rounds(s, cache, fetch, backends={0: model}, embedder=BagOfWords()) == 0


# --------------------------------------------------------------------------- the command line
def _replay_spec(tmp_path, extra=""):
    import json

    from .fake_openai import fake_text

    prompts = [BASE, "Act as a comedian. " + BASE]
    with open(tmp_path / "rec.jsonl", "w") as fh:
        for p in prompts:
            for i in range(60):
                fh.write(json.dumps({"prompt": p, "response": fake_text(p, i), "model": "m"}) + "\n")
    path = tmp_path / "spec.yaml"
    path.write_text(
        textwrap.dedent(f"""\
        model: {{backend: replay, file: rec.jsonl}}
        embedder: {{backend: rouge1}}
        samples: 20
        permutations: 999
        sequential_sampling: true
        {extra}
        base: {{prompt: "{BASE}"}}
        perturbations:
          - {{name: same, prompt: "{BASE}", role: control}}
          - {{name: comedian, prompt: "{prompts[1]}", role: target}}
        """)
    )
    return path


def test_cli_audit_says_why_each_test_stopped(tmp_path, capsys):
    import json

    from dbpa_core.cli import main

    spec_file = _replay_spec(tmp_path)
    args = [
        "--cache-dir",
        str(tmp_path / "c"),
        "audit",
        str(spec_file),
        "--out",
        str(tmp_path / "o"),
        "--quiet",
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "sequential sampling: 52 answers of at most 60 (13% fewer)" in out
    assert "comedian: sequential, 2 looks (k = 12, 20), weights 0.5, 0.5; stopped at k = 12 because" in out
    res = json.loads((tmp_path / "o" / "results.json").read_text())
    com = next(p for p in res["perturbations"] if p["name"] == "comedian")
    assert com["samples_used"] == 12 and com["stop_reason"] == "rejected"
    assert com["sequential"]["looks"][0]["k"] == 12
    assert len((tmp_path / "o" / "responses.jsonl").read_text().splitlines()) == 52
    # a rerun calls nothing
    assert main(args) == 0
    assert "0 new calls, 52 samples from the cache" in capsys.readouterr().out
    # the estimate: best and worst case
    assert main(["--cache-dir", str(tmp_path / "c2"), "estimate", str(spec_file)]) == 0
    assert "between 36 calls (every test stops at the first look) and 60" in capsys.readouterr().out
    # after the finished run: its cached rounds decide everything
    assert main(["--cache-dir", str(tmp_path / "c"), "estimate", str(spec_file)]) == 0
    assert "the 2 cached rounds decide every test: the run calls nothing more" in capsys.readouterr().out


def test_the_estimate_reads_a_pilot_from_the_cache(tmp_path, capsys):
    """A run stopped after its first round left a pilot in the cache: the estimate replays
    the first look from it (no call) and the comedian, already significant, costs nothing
    more; only the base and the control can need the next round."""
    from dbpa_core.audit import sequential_pilot
    from dbpa_core.cli import main
    from dbpa_core.sampling import RunCancelled
    from dbpa_core.spec import load_spec

    spec_file = _replay_spec(tmp_path)
    cache = Cache(tmp_path / "c")
    full = load_spec(spec_file)
    assert sequential_pilot(full, cache) is None  # nothing cached: no pilot
    saved: list[int] = []

    def progress(p):
        if p.stage == "sampling":
            saved.append(p.done)

    with pytest.raises(RunCancelled):  # stopped once the first round's 36 answers are saved
        run_audit(full, cache=cache, progress=progress, should_stop=lambda: bool(saved) and saved[-1] >= 36)
    pilot = sequential_pilot(full, cache)
    assert pilot == {
        "rounds": 1,
        "k": 12,
        "open": 1,
        "stopped": {"decided": 1},
        "best_calls": 16,
        "worst_calls": 16,
    }
    assert main(["--cache-dir", str(tmp_path / "c"), "estimate", str(spec_file)]) == 0
    said = capsys.readouterr().out
    assert "from the 1 cached round (a pilot, k = 12): 1 of 2 tests decided; 16 more calls" in said
    # the replay called nothing: the sequential run then pays exactly those 16
    done = run_audit(full, cache=cache)
    assert done.usage["calls"] == 16


def _replay_suite_spec(tmp_path, samples=20):
    """A suite of two cases on recorded answers (each case its own prompts)."""
    import json

    from .fake_openai import fake_text

    prompts = [f"{x}: {BASE}" for x in ("a", "b")]
    prompts += [f"{p} Thanks." for p in prompts] + [f"Act as a comedian. {p}" for p in prompts]
    with open(tmp_path / "rec.jsonl", "w") as fh:
        for p in prompts:
            for i in range(20):
                fh.write(json.dumps({"prompt": p, "response": fake_text(p, i), "model": "m"}) + "\n")
    path = tmp_path / f"suite{samples}.yaml"
    path.write_text(
        textwrap.dedent(f"""\
        model: {{backend: replay, file: rec.jsonl}}
        embedder: {{backend: rouge1}}
        samples: {samples}
        permutations: 999
        sequential_sampling: true
        base: {{prompt: "{{x}}: {BASE}"}}
        cases: [{{x: a}}, {{x: b}}]
        perturbations:
          - {{name: same, prompt: "{{x}}: {BASE} Thanks.", role: control}}
          - {{name: comedian, prompt: "Act as a comedian. {{x}}: {BASE}", role: target}}
        """)
    )
    return path


def test_a_suites_estimate_reads_each_cases_pilot_from_the_cache(tmp_path, capsys):
    """Every case's first round in the cache (a run at samples = 12 drew exactly those
    answers): the suite's estimate replays each case as the suite decides it (its own
    seed, the stop level over the suite's 4 tests) and sums the calls left; the suite's
    run then makes exactly the predicted calls, and afterwards the estimate says nothing
    is left."""
    from dbpa_core.cli import main
    from dbpa_core.runs import estimate as estimate_suite
    from dbpa_core.spec import load_spec
    from dbpa_core.suite import run_suite

    spec_file = _replay_suite_spec(tmp_path)
    cache = Cache(tmp_path / "c")
    full = load_spec(spec_file)
    assert "pilot" not in estimate_suite(full, cache=cache)["sequential"]  # nothing cached
    first = run_suite(load_spec(_replay_suite_spec(tmp_path, samples=12)), cache=cache)
    assert first.usage["calls"] == 2 * 3 * 12  # each case's first round, nothing more
    pilot = estimate_suite(full, cache=cache)["sequential"]["pilot"]
    # each comedian is already rejected at k = 12 (at 0.05 / 4); each case's base and
    # control need the second round: 2 cases x 2 arms x 8
    assert pilot == {
        "cases": 2,
        "piloted": 2,
        "rounds": 1,
        "open": 2,
        "stopped": {"decided": 2},
        "best_calls": 32,
        "worst_calls": 32,
    }
    assert main(["--cache-dir", str(tmp_path / "c"), "estimate", str(spec_file)]) == 0
    said = capsys.readouterr().out
    assert "from the cached rounds of 2 of 2 cases (a pilot): 2 of 4 tests decided; 32 more calls" in said
    done = run_suite(full, cache=cache)
    assert done.usage["calls"] == 32  # the replays called nothing, the run what was predicted
    assert estimate_suite(full, cache=cache)["sequential"]["pilot"]["worst_calls"] == 0
    assert main(["--cache-dir", str(tmp_path / "c"), "estimate", str(spec_file)]) == 0
    assert "the cached rounds of every case decide every test" in capsys.readouterr().out


def _batch_spec(tmp_path, srv, extra=""):
    path = tmp_path / "batch.yaml"
    path.write_text(
        textwrap.dedent(f"""\
        model: {{backend: openai, name: fake-model, base_url: "{srv.base_url}", api_key_env: DBPA_TEST_KEY}}
        embedder: {{backend: rouge1}}
        samples: 20
        max_tokens: 50
        permutations: 999
        sequential_sampling: true
        base: {{prompt: "{BASE}"}}
        perturbations:
          - {{name: same, prompt: "{BASE}", role: control}}
          - {{name: comedian, prompt: "Act as a comedian. {BASE}", role: target}}
        {extra}""")
    )
    return path


def test_cli_batch_sends_each_round_as_one_job(tmp_path, capsys, monkeypatch):
    """--batch with sequential sampling: one Batch API job per round, for the base and the
    arms still open; nothing asked live; the verdicts of a live run; a rerun sends nothing."""
    from dbpa_core import batch
    from dbpa_core.cli import main

    from .fake_batch import FakeBatch

    monkeypatch.setenv("DBPA_TEST_KEY", "sk-test")
    monkeypatch.setattr(batch, "POLL_FIRST", 0.01)
    with FakeBatch(api_key="sk-test", models=("fake-model",)) as srv:  # a job's answers are the live ones
        spec_file = _batch_spec(tmp_path, srv)
        args = ["--cache-dir", str(tmp_path / "c"), "audit", str(spec_file), "--no-history", "--quiet"]
        assert main(args + ["--out", str(tmp_path / "o"), "--batch"]) == 0
        cap = capsys.readouterr()
        assert srv.chat_ok == 0  # every answer came from a job
        # round 1: base, control and comedian to k = 12 (36 requests); the comedian stops
        # there, so round 2 tops up the base and the control only (16 requests)
        assert [len(srv.lines(c["input_file_id"])) for c in srv.created] == [36, 16]
        assert "Batch API, round of 36 samples: 36 answers of 36 requests cached from batch_1" in cap.err
        assert "Batch API, round of 16 samples: 16 answers of 16 requests cached from batch_2" in cap.err
        import json

        got = json.loads((tmp_path / "o" / "results.json").read_text())
        used = {p["name"]: (p["samples_used"], p["stop_reason"]) for p in got["perturbations"]}
        assert used == {"same": (20, "maximum"), "comedian": (12, "rejected")}
        # a rerun reads every round from the cache: no job, no call
        assert main(args + ["--out", str(tmp_path / "o2"), "--batch"]) == 0
        assert "0 new calls, 52 samples from the cache" in capsys.readouterr().out
        assert len(srv.created) == 2 and srv.chat_ok == 0
        # the same verdicts as answering live
        assert main(["--cache-dir", str(tmp_path / "live"), *args[2:], "--out", str(tmp_path / "o3")]) == 0
        assert srv.chat_ok == 52
        live = json.loads((tmp_path / "o3" / "results.json").read_text())
        assert [p["p_value"] for p in live["perturbations"]] == [p["p_value"] for p in got["perturbations"]]


def _batch_suite_spec(tmp_path, srv):
    path = tmp_path / "suite.yaml"
    path.write_text(
        textwrap.dedent(f"""\
        model: {{backend: openai, name: fake-model, base_url: "{srv.base_url}", api_key_env: DBPA_TEST_KEY}}
        embedder: {{backend: rouge1}}
        samples: 20
        max_tokens: 50
        permutations: 999
        sequential_sampling: true
        base: {{prompt: "{{name}}: {BASE}"}}
        cases: [{{name: John}}, {{name: Ahmed}}, {{name: Wei}}]
        perturbations:
          - {{name: same, prefix: "", suffix: " ", role: control}}
          - {{name: comedian, prefix: "Act as a comedian.", role: target}}
        """)
    )
    return path


def test_cli_batch_sends_each_round_of_a_suite_as_one_job(tmp_path, capsys, monkeypatch):
    """A suite with --batch and sequential sampling: one Batch API job per round for all
    the cases' open arms (not one per case and round); nothing asked live; the p-values of
    a live run; a rerun sends nothing."""
    import json

    from dbpa_core import batch
    from dbpa_core.cli import main

    from .fake_batch import FakeBatch

    monkeypatch.setenv("DBPA_TEST_KEY", "sk-test")
    monkeypatch.setattr(batch, "POLL_FIRST", 0.01)
    with FakeBatch(api_key="sk-test", models=("fake-model",)) as srv:
        spec_file = _batch_suite_spec(tmp_path, srv)
        args = ["--cache-dir", str(tmp_path / "c"), "audit", str(spec_file), "--no-history", "--quiet"]
        assert main(args + ["--out", str(tmp_path / "o"), "--batch"]) == 0
        cap = capsys.readouterr()
        assert srv.chat_ok == 0  # every answer came from a job
        # round 1: 3 cases x (base, control, comedian) x 12; every comedian stops there, so
        # round 2 tops up each case's base and control (3 x 2 x 8)
        assert [len(srv.lines(c["input_file_id"])) for c in srv.created] == [108, 48]
        assert "Batch API, round of 108 samples: 108 answers of 108 requests cached from batch_1" in cap.err
        assert "Batch API, round of 48 samples: 48 answers of 48 requests cached from batch_2" in cap.err
        got = json.loads((tmp_path / "o" / "results.json").read_text())["tests"]
        used = {(t["case"], t["perturbation"]): (t["samples_used"], t["stop_reason"]) for t in got}
        assert set(used.values()) == {(20, "maximum"), (12, "rejected")}
        assert all(used[c, "comedian"] == (12, "rejected") for c, _ in used)
        # a rerun reads every round from the cache: no job, no call
        assert main(args + ["--out", str(tmp_path / "o2"), "--batch"]) == 0
        assert len(srv.created) == 2 and srv.chat_ok == 0
        # the same p-values as answering live
        assert main(["--cache-dir", str(tmp_path / "live"), *args[2:], "--out", str(tmp_path / "o3")]) == 0
        assert srv.chat_ok == 156
        live = json.loads((tmp_path / "o3" / "results.json").read_text())["tests"]
        assert [t["p_value"] for t in live] == [t["p_value"] for t in got]


def test_history_and_report_keep_why_each_test_stopped(tmp_path):
    from dbpa_core.history import History
    from dbpa_core.report import build_report, collect

    r = run(spec())
    h = History(tmp_path / "h.sqlite3")
    run_id = h.record({"words": r}, source="cli")
    back = h.get(run_id).audits["words"]
    assert back.spec.sequential_sampling == SequentialSampling()
    for a, b in zip(r.perturbations, back.perturbations, strict=True):
        assert b.sequential == a.sequential
        assert b.samples_used == a.samples_used
    verdicts = {v.what: v.outcome for v in collect([run_id], h)[0].verdicts}
    assert "12 answers per arm, stopped: rejected" in verdicts["comedian (target)"]
    assert "12 answers per arm, stopped: rejected" in build_report([run_id], history=h)
    # the dashboard's page report: a column per test and the sentence
    from ui.export import html_report

    page = html_report("t", [back], {})
    assert "<th>answers per arm</th>" in page and "comedian: sequential, 3 looks" in page


def test_a_stopped_run_resumes_with_only_the_missing_answers(tmp_path):
    from dbpa_core.sampling import RunCancelled

    cache = Cache(tmp_path / "cache")
    first = WordModel()
    with pytest.raises(RunCancelled):  # stopped once the first round (3 x 12 answers) is in
        run_audit(
            spec(),
            cache=cache,
            backends={0: first},
            embedder=BagOfWords(),
            should_stop=lambda: len(first.asked) >= 36,
        )
    assert len(first.asked) == 36
    second = WordModel()
    r = run(spec(), cache=cache, model=second)
    asked = {(q.prompt, q.index) for q in first.asked}
    assert not asked & {(q.prompt, q.index) for q in second.asked}  # nothing paid twice
    assert len(asked) + len(second.asked) == 12 + 40 + 40
    assert {p.name: p.sequential.reason for p in r.perturbations}["comedian"] == "rejected"


def test_text_similarity_and_a_model_comparison_run_sequentially():
    from dataclasses import replace

    text = run(replace(spec(extra="min_effect: 0.5"), embedder={"backend": "rouge1"}))
    same = next(p for p in text.perturbations if p.name == "same")
    assert same.sequential.reason == "futility"  # the ROUGE bound is below 0.5 at once
    assert same.sequential.looks[0].upper_bound is not None
    models = parse_spec(
        textwrap.dedent(f"""\
        models:
          - {{backend: openai, name: words, base_url: 'http://127.0.0.1:9/v1', label: a}}
          - {{backend: openai, name: words, base_url: 'http://127.0.0.1:8/v1', label: b}}
        embedder: {{backend: openai, name: bow, base_url: 'http://127.0.0.1:9/v1'}}
        samples: 20
        permutations: 199
        sequential_sampling: true
        base: {{prompt: "{BASE}"}}
        """),
        source="test",
        allow_key_env=True,
    )
    m = run_audit(
        models, cache=Cache(enabled=False), backends={0: WordModel(), 1: WordModel()}, embedder=BagOfWords()
    )
    (b,) = m.perturbations
    assert b.sequential.reason in ("maximum", "rejected") and b.samples_used in (12, 20)


@pytest.mark.parametrize("shift", [0.0, 0.6])
def test_the_futility_bound_covers_the_effect(shift):
    """The bound at 95 % lies above the mean effect above chance (over many samples of the
    same k) in about 95 % of samples or more, with and without a change."""
    from dbpa_core.permutation import dbpa_test
    from dbpa_core.sequential import effect_upper_bound, statistic_matrix

    rng = np.random.default_rng(7)
    eac, upper = [], []
    for s in range(100):
        x = rng.standard_normal((10, 6))
        y = rng.standard_normal((10, 6)) + shift * np.eye(6)[0]
        r = dbpa_test(x, y, n_permutations=199, rng=s)
        z = np.vstack([x, y])
        m = statistic_matrix(z, measure="energy-l2")
        eac.append(r.effect_above_chance)
        upper.append(
            effect_upper_bound(
                m, 10, measure="energy-l2", effect_above_chance=r.effect_above_chance, confidence=0.95
            )
        )
    truth = np.mean(eac)
    assert np.mean(np.array(upper) >= truth) >= 0.9  # nominal 0.95


def test_the_effect_above_chance_is_the_scaled_u_statistic():
    """With every split enumerated (the chance level exact), ω minus chance is the unbiased
    energy distance times (2k - 2) / (2k - 1): the futility bound's estimate is that
    statistic, and its permutation part is that statistic's spread over the splits."""
    from dbpa_core.permutation import dbpa_test
    from dbpa_core.sequential import effect_upper_bound, energy_u_statistic, statistic_matrix

    rng = np.random.default_rng(3)
    x, y = rng.standard_normal((5, 4)), rng.standard_normal((5, 4)) + 0.5
    r = dbpa_test(x, y, n_permutations=2000, rng=0)  # C(10, 5) = 252 splits: exact
    d = statistic_matrix(np.vstack([x, y]), measure="energy-l2")
    u = energy_u_statistic(d, 5)
    assert r.effect_above_chance == pytest.approx(u * 8 / 9, rel=1e-9)
    up = effect_upper_bound(
        d, 5, measure="energy-l2", effect_above_chance=r.effect_above_chance, confidence=0.9
    )
    assert up > u and up == effect_upper_bound(
        d, 5, measure="energy-l2", effect_above_chance=r.effect_above_chance, confidence=0.9
    )  # seeded: the same bound twice
    # the other measures: the effect above chance plus a positive margin
    s = d.max() - d
    up_jsd = effect_upper_bound(s, 5, measure="wasserstein", effect_above_chance=0.01, confidence=0.9)
    assert 0.01 < up_jsd < np.inf


def test_wasserstein_futility_stops_need_no_note():
    """The futility bound of 'wasserstein' covers its stated confidence since its variance
    is the within-arm bootstrap's (benchmarks/bench_sequential.py --only measures): the
    spec check no longer warns about it."""
    from dbpa_core.spec import spec_notes

    s = parse_spec(
        textwrap.dedent(f"""\
        model: {{backend: openai, name: words, base_url: 'http://127.0.0.1:9/v1'}}
        embedder: {{backend: openai, name: bow, base_url: 'http://127.0.0.1:9/v1'}}
        samples: 40
        measure: wasserstein
        min_effect: 0.1
        sequential_sampling: true
        base: {{prompt: "{BASE}"}}
        perturbations:
          - {{name: comedian, prefix: "Act as a comedian.", role: target}}
        """),
        source="test",
        allow_key_env=True,
    )
    assert not any("wasserstein" in n or "futility" in n for n in spec_notes(s))


@pytest.fixture(scope="module")
def clustered_samples():
    """40 samples of 10 base answers (two clusters) against 10 answers that come from a
    third cluster with probability 0.7: a change like a persona's. Numba on one thread
    while they are used: hundreds of small statistics, where starting threads costs most."""
    import numba

    threads = numba.get_num_threads()
    numba.set_num_threads(1)
    rng = np.random.default_rng(11)
    centres = 2.0 * np.eye(8)[:3]
    out = []
    for _ in range(40):
        x = centres[rng.integers(0, 2, 10)] + rng.standard_normal((10, 8))
        moved = rng.random((10, 1)) < 0.7
        y = np.where(moved, centres[2], centres[rng.integers(0, 2, 10)]) + rng.standard_normal((10, 8))
        out.append(np.vstack([x, y]))
    yield out
    numba.set_num_threads(threads)


@pytest.mark.parametrize("measure", ["jsd", "wasserstein", "ks"])
def test_the_bootstrap_variance_is_the_variance_of_omega(clustered_samples, measure):
    """The within-arm bootstrap variance (the first-order part of the similarity measures'
    futility bound) is about the variance of ω over fresh samples: neither a fraction nor a
    multiple of it."""
    from dbpa_core.measures import get_measure
    from dbpa_core.sequential import bootstrap_variance
    from dbpa_core.similarity import cosine_similarity_matrix

    omega, boot = [], []
    first = np.arange(10, dtype=np.int32)[None, :]
    for s, z in enumerate(clustered_samples):
        sim = cosine_similarity_matrix(z)
        omega.append(get_measure(measure).prepare(sim, 10, 10, 30, False)(first)[0])
        boot.append(bootstrap_variance(sim, 10, measure=measure, rng=s, resamples=30))
    ratio = np.mean(boot) / np.var(omega, ddof=1)
    assert 0.5 < ratio < 2.5, ratio
    sim = cosine_similarity_matrix(clustered_samples[0])
    assert bootstrap_variance(sim, 10, measure=measure, rng=3, resamples=30) == bootstrap_variance(
        sim, 10, measure=measure, rng=3, resamples=30
    )  # seeded: the same variance twice


def test_the_wasserstein_bound_covers_the_effect(clustered_samples):
    """The bound at 95 % lies above the mean effect above chance in about 95 % of samples or
    more (the jackknife it replaced held only 89.7 % on recorded answers)."""
    from dbpa_core.permutation import dbpa_test_similarity
    from dbpa_core.sequential import effect_upper_bound
    from dbpa_core.similarity import cosine_similarity_matrix

    eac, upper = [], []
    for s, z in enumerate(clustered_samples):
        sim = cosine_similarity_matrix(z)
        r = dbpa_test_similarity(sim, 10, measure="wasserstein", n_permutations=99, rng=s)
        eac.append(r.effect_above_chance)
        upper.append(
            effect_upper_bound(
                sim, 10, measure="wasserstein", effect_above_chance=r.effect_above_chance, confidence=0.95
            )
        )
    assert np.mean(eac) > 0.05  # a change, not a null
    assert np.mean(np.array(upper) >= np.mean(eac)) >= 0.9  # nominal 0.95
