"""Generated options leak nothing: the answer's rank among number options is uniform,
every number answer gets 5 distinct options in its own format, a word distractor is of
the answer's kind and never one of its inflections, and for text answers "None of the
other options is correct" sits at a random position and is right in a documented share."""
import random
import re
from collections import Counter

import pytest

from dbpa_core.attacks import wordnet as W
from dbpa_core.attacks.items import NONE_OF_THE_OTHERS, NONE_SHARE, make_options


def _value(option: str) -> float:
    return float(re.sub(r"[^\d.\-]", "", option.replace(",", "")))


def _gsm8k_like(rnd: random.Random) -> str:
    """Answers as grade-school word problems have them: mostly counts and money."""
    r = rnd.random()
    if r < 0.6:
        return str(int(10 ** rnd.uniform(0, 4)))
    if r < 0.75:
        return f"{rnd.uniform(0, 500):.2f}"
    if r < 0.85:
        return f"{rnd.randint(1000, 999999):,}"
    if r < 0.95:
        return str(-rnd.randint(1, 300))
    return f"${rnd.randint(1, 200)}"


def test_the_answers_rank_among_sorted_number_options_is_uniform():
    rnd = random.Random(7)
    ranks = Counter()
    for i in range(1000):
        a = _gsm8k_like(rnd)
        opts, idx, kind = make_options(a, seed=0, item_id=str(i))
        assert kind == "number" and opts[idx] == a
        assert len(set(opts)) == 5
        order = sorted(range(5), key=lambda j: _value(opts[j]))
        ranks[order.index(idx)] += 1
    assert set(ranks) == {0, 1, 2, 3, 4}
    assert max(ranks.values()) <= 250, ranks          # no rank holds more than 25 %


@pytest.mark.parametrize("answer", ["0", "1", "2", "-3", "-0.5", "3.75", "0.01", "1,250,000",
                                    "1000000000", "$12.50", "45%", "12 cm", "3.5 kg",
                                    "40 apples", "-$7", "7 km/h", "98.6 °F"])
def test_every_number_answer_gets_five_distinct_options_in_its_format(answer):
    opts, idx, kind = make_options(answer, seed=3, item_id="q")
    assert kind == "number" and opts[idx] == answer
    assert len(opts) == len(set(opts)) == 5
    tail = re.sub(r"^[-\d$.,\s]+", "", answer)
    assert all(o.endswith(tail) for o in opts)
    num_a = re.search(r"\d[\d,]*(?:\.\d+)?", answer).group()
    decimals = len(num_a.split(".")[1]) if "." in num_a else 0
    for o in opts:
        num = re.search(r"\d[\d,]*(?:\.\d+)?", o).group()
        assert (len(num.split(".")[1]) if "." in num else 0) == decimals, o
        assert ("," in num) == ("," in num_a) or _value(o) < 1000, o
    if not answer.startswith("-"):
        assert all(_value(o) >= 0 for o in opts)


@pytest.mark.skipif(not W.available(), reason="WordNet not installed (make wordnet)")
def test_word_distractors_are_never_an_inflection_of_the_answer():
    """bAbI 15: "Sheep are afraid of wolves. ... What is Gertrude afraid of? wolf" must
    not offer "wolves" (the passage's word) as a wrong option."""
    passage = ("Wolves are afraid of mice. Sheep are afraid of wolves. Mice are afraid of cats. "
               "Cats are afraid of sheep. Gertrude is a sheep. Winona is a mouse.")
    vocab = ["wolf", "mouse", "cat", "sheep"]
    for i, answer in enumerate(["wolf", "mouse", "cat", "sheep"] * 5):
        opts, idx, _ = make_options(answer, vocabulary=vocab, passage=passage, item_id=str(i))
        assert opts[idx] == answer and len(set(opts)) == 5
        low = [o.lower() for o in opts]
        for a, b in (("wolf", "wolves"), ("mouse", "mice"), ("cat", "cats"), ("sheep", "sheeps")):
            assert not (a in low and b in low), opts
        assert all(o != NONE_OF_THE_OTHERS for o in opts)


@pytest.mark.skipif(not W.available(), reason="WordNet not installed (make wordnet)")
def test_a_colour_gets_colours():
    """bAbI 16: four colours among the answers; the fifth option is a colour too."""
    from dbpa_core.attacks.wordnet import wordnet

    colours = ["white", "yellow", "green", "gray"]
    passage = "Lily is a swan. Lily is white. Bernhard is a frog. Greg is a swan."
    for i, answer in enumerate(colours * 3):
        opts, idx, _ = make_options(answer, vocabulary=colours, passage=passage, item_id=str(i))
        assert opts[idx] == answer and len(set(opts)) == 5
        for o in opts:
            assert any("color" in h.name() for s in wordnet().synsets(o, "n")
                       for h in s.closure(lambda x: x.hypernyms())), (o, opts)
        assert not {"swan", "frog", "Lily", "Greg"} & set(opts)


def test_none_of_the_others_is_right_in_a_share_and_moves():
    answers = [f"Take {k} tablets of the statin after dinner" for k in range(300)]
    right, where = 0, Counter()
    for i, a in enumerate(answers):
        opts, idx, kind = make_options(a, item_id=str(i))
        assert kind == "text" and len(set(opts)) == len(opts) == 5
        assert NONE_OF_THE_OTHERS in opts
        where[opts.index(NONE_OF_THE_OTHERS)] += 1
        if opts[idx] == NONE_OF_THE_OTHERS:
            right += 1
            assert a not in opts  # the right answer was removed
        else:
            assert opts[idx] == a
    assert abs(right / len(answers) - NONE_SHARE) < 0.07
    assert set(where) == {0, 1, 2, 3, 4} and max(where.values()) < 0.35 * len(answers)


def test_an_edited_copy_that_only_lost_an_article_is_no_distractor():
    for i in range(40):
        opts, idx, _ = make_options("Take the statin with 40 mg daily", item_id=str(i))
        others = [o for j, o in enumerate(opts) if j != idx]
        assert "Take statin with 40 mg daily" not in others


def test_a_short_text_answer_always_gets_options(monkeypatch):
    """An answer too short for edited copies ("A-1": one copy, "?!": none) keeps its
    answer rather than leaving "None of the other options" alone or nearly so."""
    monkeypatch.setattr(W, "available", lambda: False)
    for answer in ("A-1", "?!", "Jane Austen"):
        for i in range(60):
            opts, idx, kind = make_options(answer, item_id=str(i))
            assert kind == "text" and len(opts) >= 2 and len(set(opts)) == len(opts)
            if opts[idx] == NONE_OF_THE_OTHERS:
                assert len(opts) >= 3 and answer not in opts
            else:
                assert opts[idx] == answer


# --------------------------------------------------------------------------- review fixes
_BAD_DOMAINS = {"ethnic_slur", "disparagement", "obscenity", "vulgarism"}
_BAD_GLOSS = re.compile(r"\b(offensive|derogatory|slur|disparag\w*|obscen\w*|vulgar\w*)\b", re.I)


@pytest.mark.skipif(not W.available(), reason="WordNet not installed (make wordnet)")
def test_no_option_is_a_slur_or_an_obscenity():
    """Person nouns and names drew WordNet co-hyponyms such as an ethnic slur, "Negro",
    "Jew"; no option may have a sense marked as a slur, disparagement or obscenity."""
    from dbpa_core.attacks.wordnet import wordnet

    wn = wordnet()
    answers = ["Tom", "woman", "student", "farmer", "boy", "man", "girl", "Mary", "John",
               "child", "worker", "neighbor", "friend", "soldier", "Peter", "Bill", "teacher"]
    for answer in answers:
        for i in range(15):
            opts, idx, _ = make_options(answer, item_id=str(i))
            for j, o in enumerate(opts):
                if j == idx:
                    continue
                assert o.lower() not in {"negro", "jew", "nigger", "kike"}, (answer, opts)
                for s in wn.synsets(o.lower()):
                    assert not {d.name().split(".")[0] for d in s.usage_domains()} & _BAD_DOMAINS, \
                        (answer, o, s)
                    assert not _BAD_GLOSS.search(s.definition()), (answer, o, s.definition())


@pytest.mark.skipif(not W.available(), reason="WordNet not installed (make wordnet)")
def test_a_persons_name_gets_names():
    from dbpa_core.attacks.items import _GIVEN_NAMES

    for answer in ("Mary", "John", "Tom", "Sandra"):
        for i in range(10):
            opts, _, _ = make_options(answer, item_id=str(i))
            assert len(set(opts)) == 5
            assert set(opts) - {answer} <= set(_GIVEN_NAMES), opts


@pytest.mark.parametrize("answer, pattern", [
    ("−5", r"−?\d+"), ("+3", r"\+\d+"), ("007", r"\d{3}"), ("1,000", r"\d{1,3}(,\d{3})*"),
    ("12,500", r"\d{1,3}(,\d{3})*"), ("1990s", r"1[89]\d0s|20\d0s"), ("-0", r"-?\d"),
    ("−0.25", r"−?\d\.\d\d"), ("$3.50", r"-?\$\d+\.\d0"), ("12 cm", r"\d+ cm")])
def test_number_distractors_keep_the_answers_format(answer, pattern):
    for i in range(30):
        opts, idx, _ = make_options(answer, item_id=str(i))
        assert opts[idx] == answer and len(set(opts)) == 5
        for o in opts:
            assert re.fullmatch(pattern, o), (o, opts)
        if answer.startswith("−"):
            assert not any(o.startswith("-") for o in opts), opts
        if answer == "-0":
            assert "0" not in opts and "-0" in opts


def _roundness(option: str) -> float:
    n = int(re.sub(r"\D", "", option) or 0)
    if n == 0:
        return 99.0
    r = 0.0
    while n % 10 == 0:
        n, r = n // 10, r + 1
    return r + (0.5 if n % 5 == 0 else 0)


def test_neither_the_roundest_nor_the_least_round_option_gives_the_answer_away():
    rnd = random.Random(11)
    roundest = least = 0.0
    n = 1000
    for i in range(n):
        if i % 2:   # round: multiples of 5, 10, 50, 100, 1000
            a = str(rnd.choice([5, 10, 50, 100, 1000]) * rnd.randint(1, 30))
        else:
            a = str(rnd.choice([x for x in range(1, 2000) if x % 5]))
        opts, idx, _ = make_options(a, item_id=str(i))
        score = [_roundness(o) for o in opts]
        top = [j for j, s in enumerate(score) if s == max(score)]
        low = [j for j, s in enumerate(score) if s == min(score)]
        roundest += (idx in top) / len(top)
        least += (idx in low) / len(low)
    assert roundest / n <= 0.25 and least / n <= 0.25, (roundest / n, least / n)


@pytest.mark.parametrize("answer", ["0", "1", "2", "3", "4", "5", "6"])
def test_small_counts_have_no_negative_options_and_spread_ranks(answer):
    """0 is necessarily the smallest (a negative count would be absurd); 1..6 take every
    rank the non-negative range allows, about equally."""
    ranks = Counter()
    for i in range(300):
        opts, idx, _ = make_options(answer, item_id=str(i))
        assert len(set(opts)) == 5 and all(_value(o) >= 0 for o in opts)
        ranks[sorted(opts, key=_value).index(opts[idx])] += 1
    allowed = min(4, int(answer)) + 1
    assert set(ranks) == set(range(allowed))
    assert max(ranks.values()) < 300 / allowed * 1.35, ranks


@pytest.mark.skipif(not W.available(), reason="WordNet not installed (make wordnet)")
@pytest.mark.parametrize("answer", ["Barack Obama", "the red house", "Jane Austen",
                                    "Take 3 tablets of the statin after dinner"])
def test_text_distractors_share_no_content_word_with_the_answer(answer):
    from dbpa_core.attacks.items import _content, _lemmas

    mine = set().union(*(_lemmas(w) for w in _content(answer)))
    for i in range(40):
        opts, _, _ = make_options(answer, item_id=str(i))
        assert len(set(opts)) == 5
        for o in opts:
            if o in (answer, NONE_OF_THE_OTHERS):
                continue
            assert not any(_lemmas(w) & mine for w in _content(o)), (o, opts)


@pytest.mark.skipif(not W.available(), reason="WordNet not installed (make wordnet)")
def test_an_unknown_name_gets_names_from_the_passage_or_is_refused():
    from dbpa_core.attacks.items import ItemsError

    passage = "Barack Obama met Angela Merkel and Vladimir Putin in Berlin."
    for i in range(10):
        opts, idx, _ = make_options("Obama", passage=passage, item_id=str(i))
        assert opts[idx] == "Obama" and len(set(opts)) == 5 and NONE_OF_THE_OTHERS not in opts
        assert set(opts) <= {"Obama", "Barack", "Angela", "Merkel", "Vladimir", "Putin", "Berlin"}
    with pytest.raises(ItemsError, match="no distractors"):
        make_options("Microsoft", item_id="x")


def test_a_text_answer_takes_the_data_sets_answers_of_its_shape_first():
    """Word-for-word replacements read oddly ('the Cove Subject' for 'the Pacific Ocean'),
    which gives the fluent right answer away: a data set's own answers of the same shape
    (names for a name, about as many words) come first."""
    names = ["Wilhelm Röntgen", "Marie Curie", "Max Planck", "Niels Bohr", "Lise Meitner",
             "Enrico Fermi"]
    places = ["the Pacific Ocean", "the Red Sea", "the Black Forest", "the Grand Canyon",
              "the Golden Gate", "the Sahara Desert"]
    vocab = names + places + ["1895", "in the kitchen"]
    for answer, pool in [("Wilhelm Röntgen", names), ("the Red Sea", places)]:
        for seed in range(20):
            opts, _, kind = make_options(answer, seed=seed, vocabulary=vocab, item_id=str(seed))
            assert kind == "text"
            others = [o for o in opts if o not in (answer, NONE_OF_THE_OTHERS)]
            assert others and all(o in pool for o in others), (answer, opts)
