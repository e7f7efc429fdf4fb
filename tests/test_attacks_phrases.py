"""Phrase types of attacked words (read from spaCy's dependency parse) against sentences
labelled by hand, the per-item frequency vectors, the phrase table, the random forest on
synthetic data whose outcome hangs on one phrase type, and the battery end to end with a
rule-based model that breaks only when a verb phrase is attacked."""

import json

import numpy as np
import pytest

from dbpa_core.attacks import importance as I
from dbpa_core.attacks import phrases as P
from dbpa_core.attacks import wordnet as W
from dbpa_core.attacks.battery import plan, report_html, run_battery
from dbpa_core.attacks.sample import sample_items
from dbpa_core.attacks.spec import parse_attack_spec
from dbpa_core.attacks.text import attack_text
from dbpa_core.cache import Cache

from .rule_model import RuleModel, vocabulary_of

# Penn-Treebank judgments, written by hand: each word with the label of the smallest phrase
# that holds it (a word without a label is punctuation, not a word of the attacks)
HAND = [
    "The/NP cat/NP sat/VP on/PP the/NP mat/NP .",
    "The/NP old/NP man/NP picked/VP up/PRT about/QP 5/QP million/QP dollars/NP .",
    "Who/WHNP gave/VP the/NP very/ADJP big/ADJP dog/NP three/NP bones/NP yesterday/NP ?",
    "Where/WHADVP did/VP it/NP run/VP so/ADVP quickly/ADVP ?",
    "I/NP think/VP that/SBAR the/NP results/NP are/VP very/ADJP important/ADJP .",
    "He/NP looked/VP it/NP up/PRT because/SBAR he/NP was/VP not/VP sure/ADJP .",
    "Which/WHNP book/WHNP did/VP you/NP read/VP ?",
    "Whose/WHNP car/WHNP is/VP red/ADJP ?",
    "The/NP house/NP in/WHPP which/WHNP she/NP lived/VP was/VP sold/VP .",
    "She/NP paid/VP more/QP than/QP 10/QP dollars/NP for/PP the/NP books/NP .",
    "Between/QP 3/QP and/QP 4/QP people/NP came/VP .",
    "Cats/NP and/NP dogs/NP can/VP swim/VP .",
    "The/NP cat/NP sat/VP and/S the/NP dog/NP slept/VP .",
    "Mary/NP wants/VP to/VP go/VP to/PP the/NP kitchen/NP .",
    "There/NP is/VP a/NP red/NP ball/NP and/NP a/NP blue/NP box/NP .",
    "If/SBAR it/NP rains/VP , we/NP will/VP stay/VP inside/ADVP .",
    "How/WHADJP many/WHADJP apples/WHNP did/VP John's/NP sister/NP eat/VP ?",
    "Wow/INTJ , the/NP results/NP were/VP surprisingly/ADJP good/ADJP .",
    "Bill/NP quickly/ADVP moved/VP to/PP the/NP hallway/NP after/PP lunch/NP .",
    "Sheep/NP are/VP afraid/ADJP of/PP wolves/NP .",
    "Fred/NP has/VP three/NP red/NP books/NP and/NP two/NP blue/NP pens/NP .",
    "She/NP turned/VP off/PRT the/NP light/NP when/WHADVP he/NP arrived/VP .",
    "Don't/VP forget/VP the/NP keys/NP .",
    "The/NP letter/NP that/WHNP she/NP wrote/VP in/PP 1990/NP was/VP never/ADVP sent/VP .",
    "Seven/NP of/PP the/NP ten/NP students/NP passed/VP .",
    "John/NP , who/WHNP is/VP tall/ADJP , ran/VP away/ADVP .",
    "The/NP bag/NP was/VP carried/VP by/PP the/NP boy/NP .",
    "Why/WHADVP did/VP Sandra/NP pick/VP up/PRT the/NP apple/NP ?",
    "Lily/NP is/VP a/NP swan/NP and/S Bernhard/NP is/VP a/NP frog/NP .",
]


def _hand(line):
    words, text = [], ""
    for tok in line.split():
        word, _, label = tok.rpartition("/") if "/" in tok else (tok, "", "")
        text += ("" if not text or word in ",.?" else " ") + word
        if label:
            words.append((word, label))
    return text, words


def test_hand_labelled_sentences():
    assert len(HAND) >= 15
    total, wrong = 0, []
    for line in HAND:
        text, want = _hand(line)
        got = P.sentence_labels(text)
        assert [w for w, _ in got] == [w for w, _ in want], text
        total += len(want)
        wrong += [(text, w, e, g) for (w, e), (_, g) in zip(want, got, strict=True) if e != g]
    # the parse is a model's guess: allow a few misses, never many
    assert len(wrong) <= 0.03 * total, wrong
    covered = {lab for line in HAND for _, lab in _hand(line)[1]}
    assert covered >= {
        "NP",
        "VP",
        "PP",
        "ADJP",
        "ADVP",
        "QP",
        "PRT",
        "WHNP",
        "WHADVP",
        "WHADJP",
        "WHPP",
        "SBAR",
        "S",
        "INTJ",
    }


def test_groups():
    assert [P.group_of(x) for x in ("NP", "WHNP", "WHADVP", "WHPP", "SBAR", "S", "X", "QP")] == [
        "NP",
        "WH",
        "WH",
        "WH",
        "other",
        "other",
        "other",
        "QP",
    ]
    assert set(map(P.group_of, P.LABELS)) == set(P.GROUPS)


# --------------------------------------------------------------------------- vectors
class _Q:  # the parts of a battery query the observations read
    def __init__(self, item, name="char", rho=0.5, dataset="d"):
        self.base = type("B", (), {"id": item, "dataset": dataset})()
        self.name, self.rho = name, rho


def test_vectors_count_each_attacked_word_by_its_phrase():
    text = "The old man picked up the apple."  # NP NP NP VP PRT NP NP
    labels = P.label_words([text], {text: attack_text(text, "char", 0.0).words})
    assert [P.group_of(x) for x in labels[text]] == ["NP", "NP", "NP", "VP", "PRT", "NP", "NP"]
    att = attack_text(text, "char", 1.0, rng=1)
    none = attack_text(text, "char", 0.0, rng=1)
    obs = P.observations([(_Q("a"), att, True), (_Q("b"), none, False)], labels)
    assert len(obs) == 1  # an attack that changed no word is left out
    o = obs[0]
    assert o.counts().tolist() == [5, 1, 0, 0, 0, 0, 1, 0, 0] and o.vector().sum() == pytest.approx(1)
    assert o.vector()[P.GROUPS.index("NP")] == pytest.approx(5 / 7) and o.attacked_share == 1.0
    # a deleted word keeps its phrase; an inserted one counts as an attack on the word it follows
    dele = P.observations([(_Q("c"), attack_text(text, "word", 1.0, rng=2, op="delete"), False)], labels)[0]
    assert [(w.text, w.op, w.label) for w in dele.words][3:5] == [
        ("picked", "delete", "VP"),
        ("up", "delete", "PRT"),
    ]
    assert P.feature_matrix(obs).shape == (1, len(P.FEATURES)) and P.FEATURES[-1] == P.AMOUNT
    if W.available():
        att = attack_text(text, "word", 0.3, rng=4, op="insert")
        ins = P.observations([(_Q("d"), att, False)], labels)[0]
        assert ins.words and all(w.op == "insert" for w in ins.words)
        assert [w.text for w in ins.words] == [text[slice(*att.words[c.word])] for c in att.changes]


def _obs(item, groups, changed, level="char", n_words=20):
    words = tuple(
        P.AttackedWord(i, f"w{i}", "repeat", g if g != "WH" else "WHNP") for i, g in enumerate(groups)
    )
    return P.Observation("d", item, level, level, 0.5, n_words, words, changed)


def test_phrase_table_is_the_mean_vector():
    obs = [
        _obs("a", ["NP", "NP", "VP", "PP"], True),
        _obs("b", ["VP"], True),
        _obs("c", ["NP", "NP"], False, level="word"),
    ]
    rows = {(r.level, r.value): r for r in P.phrase_table(obs)}
    np_all = rows[("all", "NP")]
    assert np_all.share == pytest.approx((0.5 + 0) / 2)  # changed: a and b
    assert np_all.base_share == pytest.approx((0.5 + 0 + 1) / 3)  # every attack
    assert (np_all.words, np_all.words_changed, np_all.hit, np_all.hit_changed) == (4, 2, 2, 1)
    assert np_all.asr_when_hit == 0.5 and np_all.lift == pytest.approx(0.25 / 0.5)
    assert rows[("all", "VP")].share == pytest.approx((0.25 + 1) / 2)
    assert rows[("word", "NP")].share == 0.0 and rows[("word", "NP")].words_changed == 0
    assert [r.level for r in P.phrase_table(obs)][-1] == "all"
    assert rows[("all", "QP")].lift != rows[("all", "QP")].lift  # never attacked: NaN


# --------------------------------------------------------------------------- the forest
def _synthetic(seed, n_items=30, per_item=5, target="VP"):
    """Random attacked words; the answer changes exactly when a word of ``target`` was hit."""
    rng = np.random.default_rng(seed)
    groups = ["NP"] * 5 + ["VP"] * 2 + ["PP", "ADJP", "ADVP", "QP", "PRT", "WH"]
    obs = []
    for i in range(n_items):
        for _ in range(per_item):
            hit = list(rng.choice(groups, size=int(rng.integers(1, 5))))
            obs.append(_obs(f"i{i}", hit, target in hit))
    return obs


def _fit(obs, seed=0):
    return I.forest_importances(
        P.feature_matrix(obs),
        [o.changed for o in obs],
        [(o.dataset, o.item) for o in obs],
        P.FEATURES,
        seed=seed,
        trees=100,
        repeats=10,
    )


@pytest.mark.parametrize("target", ["VP", "PP"])
def test_forest_finds_the_phrase_that_breaks_it(target):
    obs = _synthetic(1, target=target)
    f = _fit(obs)
    assert 0 < f.changed < f.rows and f.items == 30 and f.folds == I.MAX_FOLDS
    assert f.accuracy > f.baseline + 0.1 and f.beats_baseline and not f.note
    ranked = f.ranked()
    assert ranked[0].feature == target
    assert ranked[0].mean > 5 * max(abs(r.mean) for r in ranked[1:])
    # seeded: the same rows give the same numbers
    again = _fit(obs)
    assert again.to_dict() == f.to_dict()
    d = f.to_dict()
    assert d["importances"][0]["feature"] == target and json.dumps(d)


def test_forest_on_a_large_battery_costs_less_and_still_finds_it():
    obs = _synthetic(3, n_items=60, per_item=20)
    f = _fit(obs)
    assert (f.rows, f.items, f.folds, f.repeats) == (1200, 60, 3, 5)
    assert f.ranked()[0].feature == "VP" and f.beats_baseline


def test_forest_refuses_with_a_note_not_an_error():
    one = [_obs(f"i{i}", ["NP"], True) for i in range(10)]
    f = _fit(one)
    assert not f.fitted and "Every one of the 10 attacks changed the answer" in f.note
    none = _fit([_obs(f"i{i}", ["NP"], False) for i in range(10)])
    assert "left the answer as it was" in none.note
    few = _fit(
        [_obs("a", ["NP"], True), _obs("a", ["VP"], False), _obs("b", ["VP"], False), _obs("b", ["NP"], True)]
    )
    assert not few.fitted and "Too few" in few.note and "2 items" in few.note
    empty = I.forest_importances(np.zeros((0, 2)), [], [], ["a", "b"])
    assert not empty.fitted and empty.rows == 0 and empty.note
    assert json.dumps(f.to_dict()) and f.to_dict()["importances"] == []
    with pytest.raises(ValueError, match="one group per row"):
        I.forest_importances(np.zeros((3, 2)), [True, False, True], ["a"], ["x", "y"])


def test_forest_that_learns_nothing_says_so():
    rng = np.random.default_rng(5)
    obs = [_obs(f"i{i // 4}", ["NP", "VP"], bool(rng.random() < 0.5)) for i in range(80)]
    f = _fit(obs)
    assert f.fitted and not f.beats_baseline and "no better than" in f.note


def test_without_scikit_learn(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "sklearn.ensemble", None)
    f = _fit(_synthetic(2))
    assert not f.fitted and "scikit-learn is not installed" in f.note


# --------------------------------------------------------------------------- end to end
BODY = """
data: {sample: 5}
seed: 7
attacks: [{level: char, rho: [0.05, 0.1, 0.2, 0.3]}]
"""


def _spec(url):
    return parse_attack_spec(
        f'model: {{backend: openai, name: rule-model, base_url: "{url}", '
        f"concurrency: 8, max_retries: 0}}" + BODY
    )


def test_battery_finds_that_attacked_verbs_break_the_model(tmp_path):
    """The rule model answers B when the passage has a word it does not know; here it knows
    the attacked forms of every word except verbs', so only an attacked verb phrase changes
    its answer — the forest must say so."""
    spec = _spec("http://127.0.0.1:9")
    vocab = vocabulary_of([it.passage for it in spec.items] + [it.question for it in spec.items])
    queries = plan(spec)["attack"]
    texts = {q.attack.original: q.attack.words for q in queries}
    labels = P.label_words(list(texts), texts)
    for q in queries:
        for c in q.attack.changes:
            if P.group_of(labels[q.attack.original][c.word]) != "VP":
                vocab.add(c.after.lower())
    with RuleModel(vocab) as srv:
        res = run_battery(_spec(srv.base_url), cache=Cache(tmp_path / "c"))
    ph = res.phrases
    vp = next(r for r in ph.rows() if r.value == "VP")
    assert vp.lift > 1 and vp.asr_when_hit > 0.9
    f = ph.forest
    assert f.items == len(sample_items(5, seed=0)) and f.ranked()[0].feature == "VP"
    assert f.accuracy > f.baseline
    # results.json, the CSVs and the report carry it
    d = json.loads(res.to_json())
    assert d["phrases"]["forest"]["importances"][0]["feature"] == "VP"
    assert {r["phrase"] for r in d["phrases"]["table"]} == set(P.GROUPS)
    files = res.csv_files()
    assert files["phrases.csv"].startswith("level,phrase,words")
    assert files["importances.csv"].splitlines()[1].startswith("VP,")
    words = files["phrase_words.csv"].splitlines()
    assert len(words) - 1 == sum(len(q.attack.changes) for q in queries)
    html = report_html(res)
    assert "Which phrases break it" in html and "Held-out accuracy" in html
    written = res.write(tmp_path / "out")
    assert {p.rsplit("/", 1)[-1] for p in written} >= {"phrases.csv", "importances.csv", "phrase_words.csv"}


def test_battery_without_changed_words_has_no_analysis(tmp_path):
    with RuleModel(vocabulary_of(["x"])) as srv:
        spec = parse_attack_spec(
            f"model: {{backend: openai, name: rule-model, base_url: "
            f'"{srv.base_url}"}}\ndata: {{sample: 1}}\n'
            "attacks: [{level: char, rho: [0.0]}]\n"
        )
        res = run_battery(spec, cache=Cache(tmp_path / "c"))
    assert res.phrases is None and json.loads(res.to_json())["phrases"] is None
    assert "phrases.csv" not in res.csv_files()


def test_each_text_is_parsed_once_for_tags_and_phrases(monkeypatch):
    from collections import OrderedDict

    from dbpa_core.attacks import patterns

    real, calls = patterns.nlp(), []

    class Counting:
        def pipe(self, texts, **kw):
            calls.append(list(texts))
            return real.pipe(texts, **kw)

    monkeypatch.setattr(patterns, "nlp", Counting)
    monkeypatch.setattr(patterns, "_SYNTAX_CACHE", OrderedDict())
    monkeypatch.setattr(patterns, "SYNTAX_CACHE_TEXTS", 2)
    text = "Sandra picked up the apple."
    spans = {text: attack_text(text, "char", 0.0).words}
    assert patterns.tag_words([text], spans)[text][1] == ("VERB", "ROOT")
    assert P.label_words([text, text], spans)[text] == ["NP", "VP", "PRT", "NP", "NP"]
    assert calls == [[text]]
    others = {t: attack_text(t, "char", 0.0).words for t in ("One cat.", "Two dogs.")}
    P.label_words(list(others), others)
    assert len(patterns._SYNTAX_CACHE) == 2 and (text, tuple(spans[text])) not in patterns._SYNTAX_CACHE


def test_without_spacy_the_analysis_says_so(monkeypatch):
    from collections import OrderedDict

    from dbpa_core.attacks import patterns

    def missing():
        raise P.SpacyMissing("spaCy's English model is not installed.")

    monkeypatch.setattr(patterns, "nlp", missing)
    monkeypatch.setattr(patterns, "_SYNTAX_CACHE", OrderedDict())
    att = attack_text("Mary went home.", "char", 1.0, rng=0)

    class Rec:
        def __init__(self, kind, index):
            self.query = type(
                "Q", (), {"kind": kind, "attack": att, "base": _Q("a").base, "name": "char", "rho": 1.0}
            )()
            self.parsed = type("A", (), {"index": index})()

    out = P.analyse_battery([Rec("attack", 1)], {("d", "a"): Rec("clean", 0)})
    assert out.forest is None and not out.table and "not installed" in out.note
    assert "not installed" in out.html() and json.dumps(out.to_dict())
