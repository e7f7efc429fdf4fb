"""Character, word and visual attacks: ρ = 0 and ρ = 1, seeds, nesting, spans,
homoglyph skeletons, WordNet synonyms, and every bad input."""

import collections

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dbpa_core.attacks import text as T
from dbpa_core.attacks import wordnet as W
from dbpa_core.attacks.text import attack_text, homoglyph_table, skeleton, synonyms, word_spans

PASSAGE = (
    "Sheep are afraid of wolves. Gertrude is a sheep. Mice are afraid of cats. "
    "Winona is a mouse, and she doesn't like the well-known hallway!"
)
needs_wordnet = pytest.mark.skipif(not W.installed(), reason="WordNet not installed (make wordnet)")
LEVELS_OK = ["char", "visual"] + (["word"] if W.installed() else [])

words_text = st.lists(
    st.sampled_from(
        ["Mary", "went", "to", "the", "kitchen", "a", "I", "42", "don't", "well-known", "Ωmega", "x"]
    ),
    min_size=0,
    max_size=12,
).map(" ".join)


@pytest.mark.parametrize("level", LEVELS_OK)
@settings(max_examples=40, deadline=None)
@given(text=words_text, seed=st.integers(0, 2**32))
def test_rho_zero_changes_nothing(level, text, seed):
    r = attack_text(text, level, 0.0, rng=seed)
    assert r.text == text and r.changes == ()


@pytest.mark.parametrize("level", LEVELS_OK)
def test_rho_one_attacks_every_word(level):
    for seed in range(5):
        r = attack_text(PASSAGE, level, 1.0, rng=seed)
        n = len(word_spans(PASSAGE))
        assert r.n_words == n
        assert r.attacked_words == tuple(range(n))
        if level == "char":  # every word is different (a repeat, a deletion or an insertion)
            assert all(c.after != c.before for c in r.changes)
        if level == "visual":  # every word has a letter with a homoglyph here
            assert all(c.after != c.before for c in r.changes)
            assert not any(w.isascii() for w in T.WORD.findall(r.text))


@pytest.mark.parametrize("level", LEVELS_OK)
def test_same_seed_same_text_other_seed_other_text(level):
    a = attack_text(PASSAGE, level, 0.5, rng=7)
    assert attack_text(PASSAGE, level, 0.5, rng=7) == a
    assert attack_text(PASSAGE, level, 0.5, rng=8).text != a.text
    g = attack_text(PASSAGE, level, 0.5, rng=np.random.default_rng(7))  # a generator gives a seed
    assert attack_text(PASSAGE, level, 0.5, rng=np.random.default_rng(7)) == g


@pytest.mark.parametrize("level", LEVELS_OK)
def test_rho_levels_are_nested(level):
    """Words attacked at a lower ρ are attacked the same way at every higher ρ."""
    prev = {}
    for rho in np.round(np.arange(0.1, 1.01, 0.1), 1):
        r = attack_text(PASSAGE, level, float(rho), rng=3)
        now = {c.word: (c.op, c.before, c.after) for c in r.changes}
        assert all(now.get(k) == v for k, v in prev.items())
        prev = now
    assert len(prev) == len(word_spans(PASSAGE))


@pytest.mark.parametrize("level", LEVELS_OK)
@settings(max_examples=30, deadline=None)
@given(text=words_text, seed=st.integers(0, 2**32), rho=st.floats(0, 1))
def test_changes_say_where_the_text_changed(level, text, seed, rho):
    r = attack_text(text, level, rho, rng=seed)
    for c in r.changes:
        assert r.text[c.new_start : c.new_end] == c.after
        if not (level == "word" and c.op == "insert"):
            assert text[c.start : c.end].strip() == c.before
    # rebuilding the attacked text from the original and the changes gives it back
    if level != "word":
        rebuilt, pos = [], 0
        for c in r.changes:
            rebuilt += [text[pos : c.start], c.after]
            pos = c.end
        rebuilt.append(text[pos:])
        assert "".join(rebuilt) == r.text


def test_char_operations_and_their_counts():
    rng = np.random.default_rng(0)
    text = " ".join(["attacking"] * 4000)
    counts = {}
    for op in ("repeat", "delete", "insert"):
        r = attack_text(text, "char", 1.0, rng=rng, op=op)
        diffs = collections.Counter(len(c.after) - len(c.before) for c in r.changes)
        counts[op] = diffs
        assert {c.op for c in r.changes} == {op}
    n = 4000
    # repeat 1, 2 or 3 times with probabilities .4/.4/.2; delete likewise; insert one letter
    for op, sign in (("repeat", 1), ("delete", -1)):
        for k, p in ((1, 0.4), (2, 0.4), (3, 0.2)):
            assert abs(counts[op][sign * k] / n - p) < 0.03, (op, k, counts[op])
    assert counts["insert"] == {1: n}
    drawn = attack_text(text, "char", 1.0, rng=1)
    ops = collections.Counter(c.op for c in drawn.changes)
    assert set(ops) == {"repeat", "delete", "insert"}
    assert all(abs(v / n - 1 / 3) < 0.03 for v in ops.values())


def test_char_delete_keeps_longer_words_and_drops_one_letter_words():
    for seed in range(20):
        r = attack_text("a cat", "char", 1.0, rng=seed, op="delete")
        # "a" and the space after it went; "cat" lost 1 or 2 of its letters, never all
        assert r.text in {"ct", "ca", "at", "c", "a", "t"}
        assert r.changes[0].after == "" and r.changes[0].end == 2


def test_visual_attack_maps_back_through_the_skeleton():
    for seed in range(20):
        for r in (0.1, 0.5, 0.9):
            att = attack_text(PASSAGE, "visual", 1.0, rng=seed, letters=r)
            assert skeleton(att.text) == skeleton(PASSAGE)
            assert att.text != PASSAGE
            for c in att.changes:
                letters = sum(ch.isalpha() for ch in c.before)
                replaced = sum(a != b for a, b in zip(c.before, c.after, strict=True))
                want = min(sum(ch in homoglyph_table() for ch in c.before), max(1, int(r * letters + 0.5)))
                assert replaced == want == int(c.source)


def test_homoglyph_table_uses_the_confusables_data():
    from confusable_homoglyphs.confusables import confusables_data

    table = homoglyph_table()
    assert "m" not in table  # its only confusable is the pair "rn"
    for letter, glyphs in table.items():
        for g in glyphs:
            assert not g.isascii() and len(g) == 1
            linked = {d["c"] for d in confusables_data.get(g, [])} | {
                d["c"] for d in confusables_data.get(letter, [])
            }
            assert g in linked or letter in linked or skeleton(letter) in linked
    assert skeleton("Ьаnk") == skeleton("bank")  # Cyrillic soft sign and a


@needs_wordnet
def test_word_replacements_are_real_wordnet_synonyms():
    wn = W.wordnet()
    seen = collections.Counter()
    for seed in range(30):
        r = attack_text(PASSAGE, "word", 1.0, rng=seed, op="replace")
        for c in r.changes:
            seen[c.source] += 1
            if c.source == "synonym":
                lemmas = {n.lower() for s in wn.synsets(c.before.lower()) for n in s.lemma_names()}
                assert c.after.lower() in lemmas and c.after.lower() != c.before.lower()
            elif c.source == "passage":
                assert c.after.lower() in {w.lower() for w in T.WORD.findall(PASSAGE)}
            else:
                assert c.source == "wordnet" and wn.synsets(c.after)
    assert seen["synonym"] > 50 and seen["passage"] > 100 and seen["wordnet"] > 0
    # about half of the new words come from the passage
    assert abs(seen["passage"] / sum(seen.values()) - 0.5) < 0.1


@needs_wordnet
def test_word_operations():
    n = len(word_spans(PASSAGE))
    d = attack_text(PASSAGE, "word", 1.0, rng=0, op="delete")
    assert d.text.strip(" ,.!") == "" and len(d.changes) == n
    ins = attack_text(PASSAGE, "word", 1.0, rng=0, op="insert")
    assert len(word_spans(ins.text)) >= 2 * n
    assert all(c.before == "" and c.after for c in ins.changes)
    assert "wolves" in synonyms("wolf") or synonyms("wolves")  # morphy: wolves -> wolf
    assert "wolves" not in synonyms("wolves") and "wolf" not in synonyms("wolves")


def test_word_level_without_wordnet_says_what_to_run(monkeypatch):
    def missing():
        raise W.WordNetMissing(W.HINT)

    monkeypatch.setattr(W, "wordnet", missing)
    monkeypatch.setattr(T, "_wordnet_words", T._wordnet_words.__wrapped__)
    with pytest.raises(W.WordNetMissing, match=r"make wordnet.*wordnet-base"):
        attack_text(PASSAGE, "word", 0.5, rng=0)
    # deletion needs no WordNet
    assert attack_text(PASSAGE, "word", 1.0, rng=0, op="delete").changes


def test_wordnet_install_writes_lexnames(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    with pytest.raises(W.WordNetMissing, match=r"lacks adj\.exc"):
        W.install(src, tmp_path / "dst")
    if not W.DEBIAN_DIR.is_dir():
        pytest.skip("Debian's wordnet-base is not installed")
    out = W.install(W.DEBIAN_DIR, tmp_path / "wn")
    lines = (out / "lexnames").read_text().splitlines()
    assert len(lines) == 45 and lines[3] == "03\tnoun.Tops\t1"
    # what nltk's reader asserts of each line: three fields, the first its number
    assert all(int(ln.split()[0]) == i and len(ln.split()) == 3 for i, ln in enumerate(lines))
    assert {f.name for f in out.iterdir()} >= set(W.FILES) | {"lexnames", "index.sense"}


@pytest.mark.parametrize(
    "kwargs, err, match",
    [
        (dict(text=3, level="char", rho=0.1), TypeError, "`text` must be a string"),
        (dict(text="a", level="typo", rho=0.1), ValueError, "`level` must be one of char, word, visual"),
        (dict(text="a", level="char", rho=1.5), ValueError, r"`rho` must be a number in \[0, 1\]"),
        (dict(text="a", level="char", rho=True), ValueError, "`rho` must be a number"),
        (
            dict(text="a", level="char", rho=0.1, op="replace"),
            ValueError,
            "`op` for the char level must be one of repeat, delete, insert",
        ),
        (
            dict(text="a", level="visual", rho=0.1, letters=0),
            ValueError,
            r"`letters` .* must lie in \(0, 1\]",
        ),
        (dict(text="a", level="char", rho=0.1, rng="seed"), TypeError, "`rng` must be an int seed"),
    ],
)
def test_bad_input(kwargs, err, match):
    with pytest.raises(err, match=match):
        attack_text(**kwargs)


def test_highlight_segments_cover_the_text():
    r = attack_text(PASSAGE, "char", 0.4, rng=2)
    segs = T.highlight_segments(r)
    assert "".join(p for p, k in segs if k != "deleted") == r.text
    assert sum(k == "changed" for _, k in segs) == sum(c.after != "" for c in r.changes)


@pytest.mark.parametrize("level", LEVELS_OK)
def test_a_batch_gives_what_one_by_one_gives(level):
    texts = [PASSAGE, "", "Mary went home.", PASSAGE[::-1], "a"]
    seeds = [3, 4, 5, 6, 7]
    batch = T.attack_texts(texts, level, 0.6, seeds=seeds, letters=0.9)
    assert batch == [
        attack_text(t, level, 0.6, rng=s, letters=0.9) for t, s in zip(texts, seeds, strict=True)
    ]
    with pytest.raises(ValueError, match="same length"):
        T.attack_texts(texts, level, 0.6, seeds=[1])


@pytest.mark.parametrize("text", ["mmm 2024 hello", "In 1999 and 2024 zzz www", "3 + 4 = 7"])
def test_a_word_counts_as_attacked_only_if_its_text_changed(text):
    """Digits have no homoglyph: a visual attack leaves them as they are and must not
    record them as attacked (the word tables would count words that never changed)."""
    for seed in range(20):
        r = attack_text(text, "visual", 1.0, rng=seed, letters=0.5)
        assert all(c.before != c.after for c in r.changes)
        assert {c.before for c in r.changes}.isdisjoint({"2024", "1999", "3", "4", "7"})


def test_a_replacement_by_the_same_word_is_no_change(monkeypatch):
    import dbpa_core.attacks.text as T

    monkeypatch.setattr(T, "_new_word", lambda w, u, words, lowered: (w, "passage"))
    r = attack_text("the cat sat", "word", 1.0, rng=0, op="replace")
    assert r.text == "the cat sat" and r.changes == ()
