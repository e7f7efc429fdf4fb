"""The battery end to end over HTTP against a small rule-based model (tests/rule_model.py):
ER, ASR, RTI and consistency against hand-computed values, the robustness curve, caching,
stop and resume, the CLI, and spec errors with their line."""

import json
from types import SimpleNamespace

import numpy as np
import pytest

from dbpa_core.attacks import wordnet as W
from dbpa_core.attacks.battery import RTI_RHOS, run_battery
from dbpa_core.attacks.spec import load_attack_spec, parse_attack_spec
from dbpa_core.attacks.text import attack_text, derive_seed
from dbpa_core.cache import Cache
from dbpa_core.cli import main
from dbpa_core.runs import estimate
from dbpa_core.sampling import RunCancelled, Sampler
from dbpa_core.spec import SpecError

from .rule_model import WORD, RuleModel, vocabulary_of

# six items, gold A, A, B, C, A, B; the rule model answers A on a clean prompt
ITEMS = [
    ("i1", "Mary went to the kitchen. John stayed in the garden all day.", "A"),
    ("i2", "The cat sat on the mat. The dog slept near the door.", "A"),
    ("i3", "Sandra picked up the apple and walked to the office.", "B"),
    ("i4", "Fred has three red books and two blue pens on his desk.", "C"),
    ("i5", "Bill moved to the hallway after lunch with his sister.", "A"),
    ("i6", "Anna travelled to the cellar. Tom journeyed to the bedroom.", "B"),
]
GOLD = [g for _, _, g in ITEMS]
VOCAB = vocabulary_of([p for _, p, _ in ITEMS] + ["Which option is right?"])


@pytest.fixture
def data(tmp_path):
    p = tmp_path / "items.jsonl"
    p.write_text(
        "".join(
            json.dumps(
                {
                    "id": i,
                    "passage": pas,
                    "question": "Which option is right?",
                    "options": ["first", "second", "third"],
                    "answer": g,
                    "dataset": "even" if int(i[1]) % 2 == 0 else "odd",
                }
            )
            + "\n"
            for i, pas, g in ITEMS
        )
    )
    return p


@pytest.fixture(scope="module")
def server():
    with RuleModel(VOCAB) as srv:
        yield srv


def spec_text(server, data, body, extra=""):
    return f"""
model: {{backend: openai, name: rule-model, base_url: "{server.base_url}", concurrency: 8, max_retries: 0}}
data: {data}
seed: 3
{extra}
{body}
"""


def run(server, data, tmp_path, body, extra="", **kw):
    spec = parse_attack_spec(spec_text(server, data, body, extra))
    return spec, run_battery(spec, cache=Cache(tmp_path / "cache"), **kw)


def test_er_and_asr_by_hand(server, data, tmp_path):
    _, res = run(
        server,
        data,
        tmp_path,
        """
attacks:
  - {level: char, rho: [0.0, 1.0]}
  - {level: visual, rho: [1.0], letters: 1.0}
  - {level: word, rho: [1.0], op: delete}
""",
    )
    clean = res.clean()
    assert (clean.er.value, clean.er.n, clean.er.unparsed) == (3 / 6, 6, 0)  # wrong: B, C, B
    rows = {(r.attack, r.rho): r for r in res.attacks()}
    # rho = 0: nothing changed
    assert rows[("char", 0.0)].er.value == 0.5 and rows[("char", 0.0)].asr.value == 0.0
    # rho = 1, typos: every passage has unknown words -> B everywhere; gold B twice
    r = rows[("char", 1.0)]
    assert (r.er.value, r.asr.value, r.er.unparsed) == (4 / 6, 1.0, 0)
    # homoglyphs: unreadable -> unparsed, wrong, changed
    r = rows[("visual r=1", 1.0)]
    assert (r.er.value, r.asr.value, r.er.unparsed, r.asr.unparsed) == (1.0, 1.0, 6, 6)
    assert r.er.value_parsed != r.er.value_parsed  # NaN: nothing parsed
    # every word deleted: no passage left, the question's words are known -> A, no change
    r = rows[("word:delete", 1.0)]
    assert (r.er.value, r.asr.value) == (0.5, 0.0)
    # per data set: odd items i1, i3, i5 have gold A, B, A
    odd = {(x.attack, x.rho): x for x in res.attacks("odd")}
    assert odd[("char", 1.0)].er.value == pytest.approx(2 / 3)
    assert res.clean("odd").er.value == pytest.approx(1 / 3)
    # Wilson intervals around the values
    assert rows[("char", 1.0)].er.low < 4 / 6 < rows[("char", 1.0)].er.high


def test_consistency_by_hand(server, data, tmp_path):
    _, res = run(server, data, tmp_path, "consistency: {instructions: true, option_orders: 6}")
    ins = [r for r in res.consistency if r.kind == "instructions" and r.dataset == "all"]
    # the paper's five, each once: no instruction -> C (1 of 6 right: i4), the four others
    # -> A (3 of 6); the item's own instruction is the clean baseline, not a sixth variant
    assert [r.accuracy.value for r in ins] == pytest.approx([1 / 6, 0.5, 0.5, 0.5, 0.5])
    assert ins[0].label == "(no instruction)"
    assert res.consistency_std("instructions") == pytest.approx(np.std([1 / 6] + [0.5] * 4))
    assert res.to_dict()["consistency"]["instructions"]["baseline_accuracy"] == 0.5
    orders = [r for r in res.consistency if r.kind == "option_orders" and r.dataset == "all"]
    assert len(orders) == 6  # all 3! orders, the original first
    # the model always says A: an order is right when it puts the gold option first
    gold_idx = ["ABC".index(g) for g in GOLD]
    recs = res.records_of("order")
    for r in orders:
        firsts = {x.query.base.id: x.query.order[0] for x in recs if x.query.variant == r.variant}
        want = np.mean([firsts[i] == g for (i, _, _), g in zip(ITEMS, gold_idx, strict=True)])
        assert r.accuracy.value == pytest.approx(want)
    assert sorted(r.accuracy.value for r in orders) == pytest.approx([1 / 6, 1 / 6, 1 / 3, 1 / 3, 0.5, 0.5])


@pytest.mark.skipif(not W.available(), reason="WordNet not installed (make wordnet)")
def test_rti_by_hand(server, data, tmp_path):
    _, res = run(server, data, tmp_path, "rti: true")
    got = {(r.attack, r.dataset): r for r in res.rti}
    # deletions never bring an unknown word: the answer never changes, r_x = 1 for all
    assert got[("delete", "all")].rti == 1.0 and got[("delete", "all")].result.n == 6
    assert got[("delete", "all")].result.never_changed_share == 1.0
    # insert / replace: the first rho whose attacked passage has a word the model does not know
    for op in ("insert", "replace"):
        want, never = [], []
        for iid, passage, _ in ITEMS:
            seed = derive_seed(3, "even" if int(iid[1]) % 2 == 0 else "odd", iid, "word", op, None)
            r_x, changed = 1.0, False
            for rho in RTI_RHOS:
                text = attack_text(passage, "word", rho, rng=seed, op=op).text
                if any(w.lower() not in VOCAB for w in WORD.findall(text)):
                    r_x, changed = rho, True
                    break
            want.append(r_x)
            never.append(not changed)
        assert got[(op, "all")].rti == pytest.approx(np.mean(want)), op
        assert got[(op, "all")].result.never_changed == sum(never), op
        assert got[(op, "odd")].rti == pytest.approx(np.mean(want[0::2]))
    # RTI asked only up to each item's change: no prompt after it
    asked = [r for r in res.records_of("rti") if r.query.name == "word:delete"]
    assert len(asked) <= 6 * len(RTI_RHOS)


def test_curve_is_a_dbpa_perturbation(server, data, tmp_path):
    _, res = run(
        server,
        data,
        tmp_path,
        """
curve: {items: 2, levels: [char], rho: [0.05, 1.0]}
samples: 8
permutations: 199
embedder: {backend: rouge1}
""",
    )
    rows = {(r.item, r.rho): r for r in res.curve}
    assert set(rows) == {("i1", 0.05), ("i1", 1.0), ("i2", 0.05), ("i2", 1.0)}
    for item in ("i1", "i2"):
        full = rows[(item, 1.0)]
        assert full.test is not None and full.changed_words > 5
        assert full.p_value == pytest.approx(1 / 200) and full.significant and full.stars
        assert full.effect_above_chance > 0
    # holm over the tested prompts
    tested = [r for r in res.curve if r.test is not None]
    assert all(
        r.p_adjusted == pytest.approx(min(1, r.p_value * len(tested)))
        for r in tested
        if r.p_value == min(t.p_value for t in tested)
    )
    assert len(res.curve_responses[("i1", "char", 1.0)]) == 8
    assert not any("robustness curve runs" in w for w in res.warnings)


def test_curve_warns_when_permutations_cannot_reach_alpha(server, data, tmp_path):
    _, res = run(
        server,
        data,
        tmp_path,
        """
curve: {items: 2, levels: [char], rho: [0.5, 0.8, 1.0]}
samples: 8
permutations: 50
embedder: {backend: rouge1}
""",
    )
    assert not any(r.significant for r in res.curve)
    assert any(
        "50 permutations cannot give one below 0.02" in w and "at least 120" in w for w in res.warnings
    ), res.warnings


def test_rerun_costs_nothing_and_a_stop_resumes(server, data, tmp_path):
    body = """
attacks: [{level: char, rho: [0.3, 0.6]}, {level: visual, rho: [0.5]}]
consistency: {option_orders: 3}
"""
    spec = parse_attack_spec(spec_text(server, data, body))
    est = estimate(spec, cache=Cache(tmp_path / "c"))
    total = est["calls"]
    assert total == est["answers"] > 6 and est["cached"] == 0
    events = []

    def stop_after_some():
        return len([e for e in events if e.stage == "answering" and e.done >= 4]) > 0

    with pytest.raises(RunCancelled, match="run again to resume"):
        run_battery(spec, cache=Cache(tmp_path / "c"), progress=events.append, should_stop=stop_after_some)
    before = server.requests
    res = run_battery(spec, cache=Cache(tmp_path / "c"))
    assert 0 < res.usage["calls"] < total
    assert res.usage["calls"] + res.usage["cached_samples"] == total
    assert server.requests - before == res.usage["calls"]
    assert estimate(spec, cache=Cache(tmp_path / "c"))["calls"] == 0
    again = run_battery(spec, cache=Cache(tmp_path / "c"))
    assert again.usage["calls"] == 0 and again.to_dict()["attacks"] == res.to_dict()["attacks"]
    assert res.to_dict()["attacks"][2]["er_parsed_only"] is None  # NaN: none parsed


def test_cli_writes_every_file(server, data, tmp_path, capsys):
    spec = tmp_path / "battery.yaml"
    spec.write_text(
        spec_text(
            server,
            data,
            """
attacks:
  - {level: char, rho: [0.5, 1.0]}
  - {level: visual, rho: [0.5], letters: 0.5}
consistency: {instructions: true, option_orders: 2}
""",
            extra="name: hand",
        )
    )
    out = tmp_path / "out"
    assert main(["--cache-dir", str(tmp_path / "c"), "attack", str(spec), "--estimate"]) == 0
    assert "at most" in capsys.readouterr().out
    rc = main(["--cache-dir", str(tmp_path / "c"), "attack", str(spec), "--out", str(out), "--quiet"])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "clean: ER 0.500" in printed and "visual r=0.5" in printed and "wrote" in printed
    d = json.loads((out / "results.json").read_text())
    assert {"er", "n", "unparsed"} <= set(d["clean"])
    assert {(a["level"], a["rho"]) for a in d["attacks"]} == {("char", 0.5), ("char", 1.0), ("visual", 0.5)}
    for a in d["attacks"]:
        assert {"er", "er_low", "er_high", "asr", "asr_low", "asr_high", "n", "unparsed"} <= set(a)
    assert d["consistency"]["instructions"]["std"] >= 0
    assert len(d["consistency"]["option_orders"]["accuracies"]) == 2
    assert d["by_dataset"]["clean"] and "patterns" in d and d["rti"] == []
    assert (out / "results.csv").read_text().startswith("dataset,attack,level,rho,op,letters,er,")
    lines = [json.loads(x) for x in (out / "attacked.jsonl").read_text().splitlines()]
    assert {x["kind"] for x in lines} == {"clean", "attack", "instruction", "order"}
    assert all("changes" in x for x in lines if x["kind"] == "attack")
    html = (out / "report.html").read_text()
    assert "ER and ASR per attack" in html and "<mark>" in html
    assert (out / "consistency.csv").exists() and (out / "patterns.csv").exists()


def test_report_escapes_text(server, tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text(
        json.dumps(
            {
                "id": "x",
                "passage": "the <script>alert(1)</script> cat",
                "question": "q?",
                "options": ["<b>a</b>", "b"],
                "answer": "A",
            }
        )
        + "\n"
    )
    _, res = run(server, p, tmp_path, "attacks: [{level: char, rho: [1.0]}]")
    from dbpa_core.attacks.battery import report_html

    html = report_html(res)
    assert "<script" not in html and "&lt;/" in html  # the passage's tags are shown as text


def test_word_attacks_without_wordnet_exit_2(server, data, tmp_path, capsys, monkeypatch):
    import dbpa_core.attacks.text as T

    def missing():
        raise W.WordNetMissing(W.HINT)

    monkeypatch.setattr(W, "wordnet", missing)
    monkeypatch.setattr(T, "_wordnet_words", lambda: missing())
    spec = tmp_path / "w.yaml"
    spec.write_text(spec_text(server, data, "attacks: [{level: word, rho: [0.5]}]"))
    assert main(["--cache-dir", str(tmp_path / "c"), "attack", str(spec), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "make wordnet" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "body, match",
    [
        (
            "attacks: [{level: typo, rho: [0.1]}]",
            r"line 6: attacks\[0\].level must be one of char, word, visual",
        ),
        ("attacks: [{level: char}]", r"line 6: missing attacks\[0\].rho"),
        (
            "attacks:\n  - {level: char, rho: [0.1, 1.5]}",
            r"line 7: attacks\[0\].rho: every ρ must be a number in \[0, 1\], got 1.5",
        ),
        (
            "attacks: [{level: char, rho: [0.1], op: replace}]",
            r"attacks\[0\].op must be one of repeat, delete, insert",
        ),
        ("attacks: [{level: char, rho: [0.1], letters: 0.5}]", "'letters' .* is only for the visual level"),
        ("attacks: [{level: visual, rho: [0.1], letters: 2}]", r"attacks\[0\].letters must be <= 1.0"),
        ("attacks: [{level: char, rho: 0.1}, {level: char, rho: 0.5}]", "the attack 'char' is listed twice"),
        ("attacks: [{level: char, rho: [0.1], colour: red}]", "unknown key 'colour' in attack 1"),
        ("consistency: {instructions: maybe}", "'instructions' is true .* or a list of your own"),
        ("consistency: {option_orders: -1}", "consistency.option_orders must be >= 0"),
        ("rti: [shuffle]", "'rti' is true or a list of word-level attacks from insert, delete, replace"),
        ("curve: {rho: [0.0, 0.5]}", "curve.rho starts above 0"),
        ("curve: {levels: [emoji]}", "curve.levels lists levels from char, word, visual"),
        ("rti: true\ntemplate: '{question}'", r"line 7: the template needs \{options\}"),
        ("rti: true\nsamples: 1", "line 7: samples must be >= 2"),
        ("rti: true\ncolour: 3", "unknown key 'colour' in the spec"),
        ("seed: 4", "nothing to run: add 'attacks', 'consistency', 'rti' or 'curve'"),
    ],
)
def test_spec_errors_name_the_line(server, data, body, match):
    text = f"""model: {{backend: openai, name: m, base_url: "http://127.0.0.1:9/v1"}}
data: {data}
seed: 3


{body}
"""
    if body.startswith("seed"):
        text = text.replace("seed: 3\n", "")
    with pytest.raises(SpecError, match=match):
        parse_attack_spec(text, source="s.yaml")


def test_data_errors_name_the_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q", "options": ["a", "b"], "answer": "A"}\n{"question": "q"}\n')
    for data, match in (
        (str(bad), r"line 2: cannot read the data: .*bad.jsonl, line 2: missing 'answer'"),
        ("nowhere.jsonl", "line 2: data file 'nowhere.jsonl' does not exist"),
        ("{sample: 0}", "'sample' is true or the number of items per sample data set"),
        ("{sample: 2, datasets: [trivia]}", "'datasets' lists sample data sets from"),
        ("{file: x.jsonl, sample: 2}", "either 'sample' or a 'file', not both"),
    ):
        spec = tmp_path / "s.yaml"
        spec.write_text(f"model: {{backend: local}}\ndata: {data}\nrti: true\n")
        with pytest.raises(SpecError, match=match):
            load_attack_spec(spec)
    spec.write_text("model: {backend: local}\nrti: true\n")
    with pytest.raises(SpecError, match="missing 'data'"):
        load_attack_spec(spec)


def test_sample_spec_and_example_parse(tmp_path):
    from pathlib import Path

    spec = load_attack_spec(Path(__file__).resolve().parents[1] / "examples" / "attack_sample.yaml")
    assert len(spec.items) == 12 and spec.datasets == ("deduction", "induction", "true/false", "arithmetic")
    assert [a.name for a in spec.attacks] == ["char", "word", "visual r=0.5"]
    assert (
        spec.option_orders == 6
        and len(spec.instructions) == 5
        and spec.rti == ("insert", "delete", "replace")
    )
    assert spec.temperature == 0.0 and spec.max_tokens == 16
    two = parse_attack_spec(
        {
            "data": [{"sample": 1, "datasets": ["arithmetic"]}, {"sample": 2, "datasets": ["deduction"]}],
            "curve": True,
        }
    )
    assert len(two.items) == 3 and two.curve.levels[0].level == "word"
    with pytest.raises(SpecError, match="two data entries give the same data set and item id"):
        parse_attack_spec({"data": ["sample", "sample"], "rti": True})


def test_sampler_can_be_given(server, data, tmp_path):
    spec = parse_attack_spec(spec_text(server, data, "attacks: [{level: char, rho: [0.5]}]"))
    s = Sampler(Cache(tmp_path / "given"))
    res = run_battery(spec, sampler=s)
    assert res.usage["calls"] == s.usage["calls"] > 0


@pytest.mark.skipif(not W.available(), reason="WordNet not installed (make wordnet)")
def test_rti_asked_ahead_gives_the_same_numbers_in_fewer_calls(server, data, tmp_path, monkeypatch):
    """On a model that batches prompts a round of RTI asks the next ρ levels too (up to
    RTI_AHEAD prompts): the items are still read level by level, so the values and the
    records are those of one level per round; only the calls are fewer, and the answers
    asked in vain are counted."""
    from dbpa_core.attacks import battery

    calls = []
    sample = Sampler.sample

    def counting(self, jobs, *, stage="sampling"):
        calls.append((stage, len(jobs)))
        return sample(self, jobs, stage=stage)

    monkeypatch.setattr(Sampler, "sample", counting)
    _, one = run(server, data, tmp_path / "one", "rti: [insert, replace]")
    one_calls, calls[:] = list(calls), []
    monkeypatch.setattr(battery, "_batches_prompts", lambda spec, sampler: True)
    _, ahead = run(server, data, tmp_path / "ahead", "rti: [insert, replace]")

    def rti_of(res):
        return [(r.attack, r.dataset, r.rti, r.result.never_changed) for r in res.rti]

    def records_of(res):
        return [(r.query.prompt, r.query.rho, r.response, r.parsed.index) for r in res.records_of("rti")]

    assert rti_of(ahead) == rti_of(one) and records_of(ahead) == records_of(one)
    assert records_of(one)  # something was asked
    # the first round goes with the first call in both; later rounds ask several levels
    rounds_one = [n for stage, n in one_calls if stage == "rti"]
    rounds_ahead = [n for stage, n in calls if stage == "rti"]
    assert len(rounds_ahead) < len(rounds_one)
    assert all(n <= battery.RTI_AHEAD for n in rounds_ahead)
    # every answer beyond those of one level per round is counted, none in the plain run
    assert one.usage["rti_ahead_unused"] == 0
    assert ahead.usage["rti_ahead_unused"] == ahead.usage["calls"] - one.usage["calls"] > 0


def test_only_a_local_model_is_asked_ahead(tmp_path):
    from dbpa_core.attacks.battery import _batches_prompts

    sampler = Sampler(Cache(tmp_path / "cache"))
    local = parse_attack_spec("model: {backend: local}\ndata: sample\nrti: true\n")
    assert _batches_prompts(local, sampler) is True  # SmolLM2: a plain Llama
    # a server's answers are paid for, a recording may not hold the prompts asked ahead:
    # neither backend is even made to ask
    for model in (
        {"backend": "openai", "name": "m", "base_url": "http://127.0.0.1:9/v1"},
        {"backend": "replay", "file": str(tmp_path / "missing.jsonl")},
    ):
        assert _batches_prompts(SimpleNamespace(model=model), sampler) is False


def test_what_loading_the_data_said_is_in_the_result(server, data, tmp_path):
    import dataclasses

    spec = parse_attack_spec(spec_text(server, data, "consistency: {option_orders: 2}"))
    spec = dataclasses.replace(spec, notes=("items.jsonl: 1 of 7 items left out: ...",))
    res = run_battery(spec, cache=Cache(tmp_path / "cache"))
    assert res.warnings[0] == "items.jsonl: 1 of 7 items left out: ..."
    assert res.to_dict()["warnings"][0].startswith("items.jsonl: 1 of 7")


def test_options_that_give_answers_away_are_reported(server, tmp_path, capsys):
    """Items whose right option is always the longest: said before the run (--estimate)
    and in the results (a note, the answer-blind table, answer_blind.csv, the report)."""
    p = tmp_path / "leaky.jsonl"
    opts = ["no", "not it", "the right one"]
    p.write_text(
        "".join(
            json.dumps(
                {
                    "id": f"x{i}",
                    "passage": ITEMS[i % 6][1],
                    "question": "Which option is right?",
                    "options": opts[i % 3 :] + opts[: i % 3],
                    "answer": "the right one",
                }
            )
            + "\n"
            for i in range(30)
        )
    )
    spec = tmp_path / "battery.yaml"
    spec.write_text(spec_text(server, p, "consistency: {option_orders: 2}"))
    assert main(["--cache-dir", str(tmp_path / "c"), "attack", str(spec), "--estimate"]) == 0
    assert "the longest option is right in 100% of 30 items" in capsys.readouterr().err
    res = run_battery(load_attack_spec(spec), cache=Cache(tmp_path / "c"))
    assert any("give answers away" in w and "the longest option" in w for w in res.warnings)
    rows = res.to_dict()["answer_blind"]
    longest = next(r for r in rows if r["rule"] == "longest")
    assert longest["share"] == 1.0 and longest["leaks"] and longest["chance"] == pytest.approx(1 / 3)
    files = res.files()
    assert files["answer_blind.csv"].startswith("rule,label,dataset,n,share,chance,")
    assert "Answer-blind rules" in files["report.html"]
    from dbpa_core.attacks.battery import summary_text

    assert "answer-blind rules: the best, the longest option, is right in 100% of 30 items" in summary_text(
        res
    )
