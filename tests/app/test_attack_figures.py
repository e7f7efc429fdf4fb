"""The battery's figure builders and page tables, tested directly on a result from the
rule-based model."""

import pytest

from dbpa_core.attacks.battery import run_battery
from dbpa_core.attacks.sample import sample_items
from dbpa_core.attacks.spec import parse_attack_spec
from dbpa_core.cache import Cache
from tests.rule_model import RuleModel, vocabulary_of
from ui import attack_figures as F
from ui import battery


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    items = sample_items(2, seed=0)
    vocab = vocabulary_of([it.passage for it in items] + [it.question for it in items])
    with RuleModel(vocab) as srv:
        spec = parse_attack_spec(f"""
model: {{backend: openai, name: rule-model, base_url: "{srv.base_url}"}}
data: {{sample: 2}}
attacks: [{{level: char, rho: [0.2, 1.0]}}, {{level: visual, rho: [0.5]}}]
consistency: {{instructions: true, option_orders: 3}}
rti: [delete]
curve: {{items: 1, levels: [char], rho: [0.5, 1.0]}}
samples: 4
permutations: 100
embedder: {{backend: rouge1}}
""")
        return run_battery(spec, cache=Cache(tmp_path_factory.mktemp("c")))


def test_er_asr_figure(result):
    fig = F.er_asr_figure(result)
    names = [t.name for t in fig.data]
    assert names[:2] == ["ER (wrong)", "ASR (answer changed)"] and names[2].startswith("clean ER")
    assert list(fig.data[0].x) == ["char<br>ρ = 0.2", "char<br>ρ = 1", "visual r=0.5<br>ρ = 0.5"]
    assert list(fig.data[1].y) == [r.asr.value for r in result.attacks()]
    assert F.er_asr_figure(result, "arithmetic").layout.title.text.endswith("arithmetic")


def test_dataset_heatmaps(result):
    fig = F.dataset_heatmap(result, "er")
    assert list(fig.data[0].y) == list(result.datasets) and fig.data[0].x[0] == "clean"
    assert F.dataset_heatmap(result, "asr").data[0].text[0][0] == "–"  # no ASR when clean


def test_rti_curve_consistency_patterns(result):
    rti = F.rti_figure(result)
    assert rti.data[0].name == "all" and list(rti.data[0].y) == [1.0]  # deletions change nothing
    curve = F.curve_figure(result)
    assert len(curve.data) == 1 and list(curve.data[0].x) == [0.5, 1.0]
    cons = F.consistency_figure(result)
    assert {t.type for t in cons.data} == {"box"} and "std" in cons.layout.annotations[0].text
    pos = F.patterns_figure(result, "position")
    assert list(pos.data[0].x) == ["head", "middle", "tail"]
    assert F.patterns_figure(result, "pos", level="nonsense") is None
    figs = F.battery_figures(result)
    html = F.html_report(result, figs)
    assert html.count("<h3>") == sum(f is not None for f in figs.values())


def test_page_tables(result):
    t7 = battery.table7(result)
    assert list(t7.columns) == ["attack", "ρ", "ER", "ER 95% CI", "ASR", "ASR 95% CI", "n", "unparsed"]
    assert len(t7) == 1 + 3 and t7["attack"][0] == "clean"
    # a numeric column (shown as "–" for clean, never "None")
    assert t7["ASR"].dtype.kind == "f" and t7["ASR"].isna().tolist() == [True, False, False, False]
    ds = battery.dataset_table(result)
    assert list(ds["data set"]) == list(result.datasets) and "char ρ=1 ASR" in ds.columns
    assert battery.rti_table(result)["data set"].iloc[0] == "all"
    assert set(battery.consistency_table(result)["kind"]) == {"instructions", "option orders"}
    unparsed = battery.answers_table(result, only_unparsed=True)
    assert len(unparsed) == result.unparsed and set(unparsed["read as"]) <= {"unparsed"}
    (attack, rho), *_ = battery.example_choices(result)
    ex = battery.examples_html(result, attack, rho)
    assert ex and all("<mark>" in e["html"] or "<del>" in e["html"] for e in ex)
    assert "Clean:" in battery.summary(result)


def test_phrase_and_forest_figures(result):
    import dataclasses

    from dbpa_core.attacks import phrases as P
    from dbpa_core.attacks.importance import forest_importances

    ph = result.phrases
    assert ph is not None and ph.table
    fig = F.phrase_figure(result)
    attacked = [r for r in ph.rows() if r.words]
    assert list(fig.data[0].x) == [r.value for r in attacked]
    assert list(fig.data[0].y) == pytest.approx([r.share for r in attacked])
    assert fig.layout.title.text == "Which phrases break it"
    # the rule model changes every answer whose passage it cannot read: one outcome, no forest
    assert not ph.forest.fitted and F.importance_figure(result) is None
    assert "Every one of" in battery.forest_text(result)
    assert battery.importance_table(result).empty
    t = battery.phrase_table(result)
    assert list(t["phrase"]) == list(P.GROUPS) and "ASR when hit" in t.columns
    never = t[t["attacked words"] == 0]
    assert len(never) and set(never["lift"]) == {"–"}
    # with a fitted forest: bars ranked, the most important on top, accuracy in the title
    obs = []
    for i in range(20):
        for hit in (["NP", "VP"], ["NP"], ["PP", "NP"], ["VP"]):
            words = tuple(P.AttackedWord(j, "w", "repeat", g) for j, g in enumerate(hit))
            obs.append(P.Observation("d", f"i{i}", "char", "char", 0.5, 10, words, "VP" in hit))
    forest = forest_importances(
        P.feature_matrix(obs),
        [o.changed for o in obs],
        [o.item for o in obs],
        P.FEATURES,
        trees=50,
        repeats=5,
    )
    fitted = dataclasses.replace(
        result, phrases=P.PhraseAnalysis(tuple(obs), tuple(P.phrase_table(obs)), forest)
    )
    imp = F.importance_figure(fitted)
    assert list(imp.data[0].y)[-1] == "VP" and imp.data[0].x[-1] == pytest.approx(forest.ranked()[0].mean)
    assert f"held-out accuracy {forest.accuracy:.2f}" in imp.layout.title.text
    assert "QP" not in imp.data[0].y  # never attacked: never used, left out
    assert forest.beats_baseline and imp.data[0].marker.color[-1] == F.ACCENT
    # a forest no better than the majority guess: grey bars, and the title says so
    worse = dataclasses.replace(forest, accuracy=forest.baseline)
    weak = F.importance_figure(
        dataclasses.replace(fitted, phrases=dataclasses.replace(fitted.phrases, forest=worse))
    )
    assert set(weak.data[0].marker.color) == {F.GREY} and "say little" in weak.layout.title.text
    assert battery.importance_table(fitted)["feature"][0] == "VP"
    assert "held-out accuracy" in battery.forest_text(fitted)
    html = F.html_report(fitted, F.battery_figures(fitted))
    assert "What predicts a changed answer" in html and "Which phrases break it" in html


def test_option_tables(result):
    """The Options tab: every letter from A to the last right one, and the answer-blind
    rules with the check's one sentence before a run."""
    pos = battery.positions_table(result.answer_positions())
    assert list(pos[""]) == ["right option", "answered"]
    letters = [c for c in pos.columns if c]
    assert letters == [chr(ord("A") + i) for i in range(len(letters))]
    assert pos.iloc[0][letters].sum() == len(result.spec.items)
    leaks = battery.leak_table(result.leaks)
    assert list(leaks.columns) == [
        "data set",
        "rule",
        "right",
        "chance",
        "p (Holm)",
        "gives answers away",
        "n",
    ]
    assert (leaks["data set"] == "all").sum() >= 10 and set(leaks["gives answers away"]) == {"no"}
    check = battery.leak_check(result.spec)
    assert check.startswith("Answer-blind check: no rule that ignores the question beats chance")
    assert f"of {len(result.spec.items)} items; chance" in check
