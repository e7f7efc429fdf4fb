"""Generated options leak nothing: the answer's rank among number options is uniform,
every number answer gets 5 distinct options in its own format, a word distractor is of
the answer's kind and never one of its inflections, and for text answers "None of the
other options is correct" sits at a random position and is right in a documented share."""

import random
import re
from collections import Counter

import pytest

from dbpa_core.attacks import wordnet as W
from dbpa_core.attacks.items import (
    LATEST_YEAR,
    NONE_OF_THE_OTHERS,
    NONE_SHARE,
    make_options,
    question_form,
    siblings_by_form,
)


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


def _generated(gen, n: int, *, draws: int, seed: int = 0):
    """(answer, options, index, kind) for ``n`` answers drawn by ``gen``."""
    rnd = random.Random(draws)
    for i in range(n):
        a = gen(rnd)
        yield (a, *make_options(a, seed=seed, item_id=str(i)))


def test_the_answers_rank_among_sorted_number_options_is_uniform():
    ranks = Counter()
    for a, opts, idx, kind in _generated(_gsm8k_like, 1000, draws=7):
        assert kind == "number" and opts[idx] == a
        assert len(set(opts)) == 5
        order = sorted(range(5), key=lambda j: _value(opts[j]))
        ranks[order.index(idx)] += 1
    assert set(ranks) == {0, 1, 2, 3, 4}
    assert max(ranks.values()) <= 250, ranks  # no rank holds more than 25 %


@pytest.mark.parametrize(
    "answer",
    [
        "0",
        "1",
        "2",
        "-3",
        "-0.5",
        "3.75",
        "0.01",
        "1,250,000",
        "1000000000",
        "$12.50",
        "45%",
        "12 cm",
        "3.5 kg",
        "40 apples",
        "-$7",
        "7 km/h",
        "98.6 °F",
    ],
)
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


@pytest.mark.skipif(not W.installed(), reason="WordNet not installed (make wordnet)")
def test_word_distractors_are_never_an_inflection_of_the_answer():
    """bAbI 15: "Sheep are afraid of wolves. ... What is Gertrude afraid of? wolf" must
    not offer "wolves" (the passage's word) as a wrong option."""
    passage = (
        "Wolves are afraid of mice. Sheep are afraid of wolves. Mice are afraid of cats. "
        "Cats are afraid of sheep. Gertrude is a sheep. Winona is a mouse."
    )
    vocab = ["wolf", "mouse", "cat", "sheep"]
    for i, answer in enumerate(["wolf", "mouse", "cat", "sheep"] * 5):
        opts, idx, _ = make_options(answer, vocabulary=vocab, passage=passage, item_id=str(i))
        assert opts[idx] == answer and len(set(opts)) == 5
        low = [o.lower() for o in opts]
        for a, b in (("wolf", "wolves"), ("mouse", "mice"), ("cat", "cats"), ("sheep", "sheeps")):
            assert not (a in low and b in low), opts
        assert all(o != NONE_OF_THE_OTHERS for o in opts)


@pytest.mark.skipif(not W.installed(), reason="WordNet not installed (make wordnet)")
def test_wordnet_loads_without_the_multilingual_map():
    """The map from WordNet 3.0 to the loaded version serves only Open Multilingual WordNet,
    which is not loaded: skipping it halves the load; English lookups are unchanged."""
    wn = W.wordnet()
    assert wn.map30 is None and wn.get_version() == "3.0"
    assert wn.synsets("dog")[0].name() == "dog.n.01"
    assert "domestic_dog" in wn.synsets("dog")[0].lemma_names()


def test_installed_finds_the_files_without_reading_them(monkeypatch, tmp_path):
    """The skip marks' check reads no WordNet file (it runs in every test process at
    collection); it agrees with a real load, and says no where nothing is to be found."""
    import nltk

    monkeypatch.setattr(W, "_reader_at", lambda root: pytest.fail("installed() read WordNet"))
    found = W.installed()
    monkeypatch.undo()
    assert found == W.available()

    def nowhere(name):
        raise LookupError(name)

    monkeypatch.setattr(nltk.data, "find", nowhere)
    monkeypatch.setattr(W, "_user_target", lambda: tmp_path / "user")
    monkeypatch.setattr(W, "DEBIAN_DIR", tmp_path / "debian")
    assert not W.installed()


@pytest.mark.skipif(not W.installed(), reason="WordNet not installed (make wordnet)")
def test_a_colour_gets_colours():
    """bAbI 16: four colours among the answers; the fifth option is a colour too."""
    from dbpa_core.attacks.wordnet import wordnet

    colours = ["white", "yellow", "green", "gray"]
    passage = "Lily is a swan. Lily is white. Bernhard is a frog. Greg is a swan."
    for i, answer in enumerate(colours * 3):
        opts, idx, _ = make_options(answer, vocabulary=colours, passage=passage, item_id=str(i))
        assert opts[idx] == answer and len(set(opts)) == 5
        for o in opts:
            assert any(
                "color" in h.name()
                for s in wordnet().synsets(o, "n")
                for h in s.closure(lambda x: x.hypernyms())
            ), (o, opts)
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


@pytest.mark.skipif(not W.installed(), reason="WordNet not installed (make wordnet)")
def test_no_option_is_a_slur_or_an_obscenity():
    """Person nouns and names drew WordNet co-hyponyms such as an ethnic slur, "Negro",
    "Jew"; no option may have a sense marked as a slur, disparagement or obscenity."""
    from dbpa_core.attacks.wordnet import wordnet

    wn = wordnet()
    answers = [
        "Tom",
        "woman",
        "student",
        "farmer",
        "boy",
        "man",
        "girl",
        "Mary",
        "John",
        "child",
        "worker",
        "neighbor",
        "friend",
        "soldier",
        "Peter",
        "Bill",
        "teacher",
    ]
    for answer in answers:
        for i in range(15):
            opts, idx, _ = make_options(answer, item_id=str(i))
            for j, o in enumerate(opts):
                if j == idx:
                    continue
                assert o.lower() not in {"negro", "jew", "nigger", "kike"}, (answer, opts)
                for s in wn.synsets(o.lower()):
                    assert not {d.name().split(".")[0] for d in s.usage_domains()} & _BAD_DOMAINS, (
                        answer,
                        o,
                        s,
                    )
                    assert not _BAD_GLOSS.search(s.definition()), (answer, o, s.definition())


@pytest.mark.skipif(not W.installed(), reason="WordNet not installed (make wordnet)")
def test_a_persons_name_gets_names():
    from dbpa_core.attacks.items import _GIVEN_NAMES

    for answer in ("Mary", "John", "Tom", "Sandra"):
        for i in range(10):
            opts, _, _ = make_options(answer, item_id=str(i))
            assert len(set(opts)) == 5
            assert set(opts) - {answer} <= set(_GIVEN_NAMES), opts


@pytest.mark.parametrize(
    "answer, pattern",
    [
        ("−5", r"−?\d+"),
        ("+3", r"\+\d+"),
        ("007", r"\d{3}"),
        ("1,000", r"\d{1,3}(,\d{3})*"),
        ("12,500", r"\d{1,3}(,\d{3})*"),
        ("1990s", r"1[89]\d0s|20\d0s"),
        ("-0", r"-?\d"),
        ("−0.25", r"−?\d\.\d\d"),
        ("$3.50", r"-?\$\d+\.\d0"),
        ("12 cm", r"\d+ cm"),
    ],
)
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
        if i % 2:  # round: multiples of 5, 10, 50, 100, 1000
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


@pytest.mark.skipif(not W.installed(), reason="WordNet not installed (make wordnet)")
@pytest.mark.parametrize(
    "answer", ["Barack Obama", "the red house", "Jane Austen", "Take 3 tablets of the statin after dinner"]
)
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


@pytest.mark.skipif(not W.installed(), reason="WordNet not installed (make wordnet)")
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
    names = ["Wilhelm Röntgen", "Marie Curie", "Max Planck", "Niels Bohr", "Lise Meitner", "Enrico Fermi"]
    places = [
        "the Pacific Ocean",
        "the Red Sea",
        "the Black Forest",
        "the Grand Canyon",
        "the Golden Gate",
        "the Sahara Desert",
    ]
    vocab = names + places + ["1895", "in the kitchen"]
    for answer, pool in [("Wilhelm Röntgen", names), ("the Red Sea", places)]:
        for seed in range(20):
            opts, _, kind = make_options(answer, seed=seed, vocabulary=vocab, item_id=str(seed))
            assert kind == "text"
            others = [o for o in opts if o not in (answer, NONE_OF_THE_OTHERS)]
            assert others and all(o in pool for o in others), (answer, opts)


# --------------------------------------------------------------------------- word/text probe fixes
NEEDS_WN = pytest.mark.skipif(not W.installed(), reason="WordNet not installed (make wordnet)")


@NEEDS_WN
def test_informal_and_offensive_words_are_never_offered():
    from dbpa_core.attacks.items import _offensive

    for w in ("Abo", "clit", "bum", "pimp", "skivvy", "dope", "dimwit", "stupid", "slave"):
        assert _offensive(w, True), w
    for answer in ("Muslim", "Buddhist", "Australian", "Jewish"):
        for i in range(10):
            opts, idx, _ = make_options(answer, item_id=str(i))
            others = {o.lower() for j, o in enumerate(opts) if j != idx}
            assert len(opts) >= 4 and not others & {"slave", "abo", "servant"}, opts
            assert all(_offensive(o) is False for o in others)


@NEEDS_WN
def test_religions_and_nationalities_get_only_their_like():
    from dbpa_core.attacks.items import _PEOPLES, _RELIGIONS

    for answer, pool in (("Muslim", _RELIGIONS), ("Buddhist", _RELIGIONS), ("German", _PEOPLES)):
        for i in range(10):
            opts, _, _ = make_options(answer, item_id=str(i))
            assert set(opts) <= set(pool), opts


@NEEDS_WN
@pytest.mark.parametrize(
    "answer,wrong",
    [
        ("bus", "omnibus"),
        ("plane", "airplane"),
        ("violin", "fiddle"),
        ("baby", "infant"),
        ("insulin", "hormone"),
        ("iron", "metal"),
        ("king", "monarch"),
        ("father", "pappa"),
        ("father", "papa"),
        ("father", "pa"),
    ],
)
def test_no_synonym_or_broader_word_is_a_distractor(answer, wrong):
    from dbpa_core.attacks.items import _related

    assert _related(answer, wrong)
    vocab = [wrong, "car", "train", "dog", "apple", "river"]
    for i in range(15):
        opts, _, _ = make_options(answer, item_id=str(i), vocabulary=vocab, passage=f"The {wrong} was there.")
        assert wrong not in opts, opts


def _passage_rates(items):
    rnd, hit, most = random.Random(0), 0.0, 0.0
    for passage, opts, idx in items:
        pl = passage.lower()
        counts = [len(re.findall(r"\b" + re.escape(o.lower()) + r"\b", pl)) for o in opts]
        inside = [j for j, c in enumerate(counts) if c] or list(range(len(opts)))
        top = [j for j, c in enumerate(counts) if c == max(counts)]
        hit += (idx in inside) / len(inside)
        most += (idx in top) / len(top)
        rnd.random()
    return hit / len(items), most / len(items)


@NEEDS_WN
def test_the_option_found_in_the_passage_does_not_give_the_answer_away():
    rnd = random.Random(5)
    people = [
        "Mark Twain",
        "Isaac Newton",
        "Marie Curie",
        "Neil Armstrong",
        "Elton John",
        "Taylor Swift",
        "Albert Einstein",
    ]
    places = ["Paris", "London", "Texas", "Canada", "Chicago", "Florida", "Alaska"]
    dates = ["June 4, 1944", "July 4, 1776", "May 8, 1945", "April 15, 1912", "March 1, 2018"]
    rooms = ["kitchen", "garden", "hallway", "bedroom", "office", "bathroom"]
    items = []
    for i in range(150):
        p, q, d = rnd.sample(people, 3), rnd.sample(places, 3), rnd.sample(dates, 3)
        answer = rnd.choice([p[0], q[0], d[0]])
        passage = (
            f"{p[0]} visited {q[0]} on {d[0]}. {p[1]} went to {q[1]} on {d[1]}. "
            f"Later {p[2]} met them in {q[2]} on {d[2]}."
        )
        opts, idx, _ = make_options(
            answer, item_id=str(i), passage=passage, vocabulary=people + places + dates
        )
        items.append((passage, opts, idx))
        r = rnd.sample(rooms, 4)
        passage = f"Mary went to the {r[0]}. John moved to the {r[1]}. Sandra went to the {r[2]}."
        opts, idx, _ = make_options(r[0], item_id=str(i), passage=passage, vocabulary=rooms)
        items.append((passage, opts, idx))
    inside, most = _passage_rates(items)
    assert inside <= 0.35 and most <= 0.35, (inside, most)


def test_a_number_the_passage_writes_gets_the_passages_other_numbers():
    """An answer read off the passage (QED's years, counts) gets the passage's other
    numbers written the same way: made-up numbers beside it would point at it."""
    rnd = random.Random(2)
    items = []
    for i in range(200):
        years = rnd.sample(range(1800, 2020), 5)
        counts = rnd.sample(range(2, 90), 3)
        answer = rnd.choice([str(years[0]), f"{counts[0]} km"])
        passage = (
            f"The bridge opened in {years[0]} and closed in {years[1]}. It was rebuilt "
            f"in {years[2]}, {years[3]} and {years[4]}. It is {counts[0]} km long, "
            f"{counts[1]} km from the city and {counts[2]} km from the sea."
        )
        opts, idx, kind = make_options(answer, item_id=str(i), passage=passage)
        assert kind == "number" and opts[idx] == answer and len(set(opts)) == 5
        if answer.endswith("km"):
            assert all(o.endswith(" km") and not re.fullmatch(r"\d{4} km", o) for o in opts)
        else:  # years get years, never the lengths
            assert all(re.fullmatch(r"\d{4}", o) for o in opts), opts
        items.append((passage, opts, idx))
    inside, _ = _passage_rates(items)
    assert inside <= 0.3, inside
    # an answer the passage does not write (GSM8K's sums) keeps its made-up options
    plain = make_options("40", item_id="x")
    assert make_options("40", item_id="x", passage="He had 12 apples and 7 pears.") == plain


@pytest.mark.parametrize(
    "question, form",
    [
        ("What did Fred give to Bill?", "what did"),
        ("How many objects is Mary carrying?", "how many"),
        ("Who received the milk?", "who received"),
        ("In which year did it open?", "which year"),
        ("the first man on the moon", "the first"),
        ("", ""),
    ],
)
def test_question_forms(question, form):
    assert question_form(question) == form


@NEEDS_WN
def test_answers_to_questions_asked_the_same_way_are_each_others_distractors():
    """bAbI: "What did Fred give to Bill?" has football, milk and apple for answers: the
    football gets milk and apple, not sports; a count gets counts; a path ("n and e")
    gets other paths, never a re-ordering of its own, nor the rooms the passage names."""
    kin = siblings_by_form(
        [
            ("What did Fred give to Bill?", "football"),
            ("What did Mary give to Jeff?", "milk"),
            ("What did Jeff give to Fred?", "apple"),
            ("Who received the milk?", "Bill"),
        ]
    )
    assert kin["what did"] == ["football", "milk", "apple"] and kin["who received"] == ["Bill"]
    passage = "Fred picked up the football. Fred gave the football to Bill."
    for i in range(20):
        opts, idx, _ = make_options(
            "football",
            item_id=str(i),
            passage=passage,
            vocabulary=["football", "milk", "apple", "Bill"],
            siblings=kin["what did"],
        )
        assert {"milk", "apple"} <= set(opts) and opts[idx] == "football"
    counts = ["none", "one", "two", "three"]
    for i, a in enumerate(counts * 5):
        opts, idx, _ = make_options(a, item_id=str(i), vocabulary=counts, siblings=counts)
        assert set(counts) <= set(opts) and len(set(opts)) == 5 and opts[idx] == a
        assert all(o in ("none", "one", "two", "three", "four", "five", "six") for o in opts)
    paths = [f"{a} and {b}" for a in "nsew" for b in "nsew"]
    for i, a in enumerate(paths):
        opts, idx, _ = make_options(
            a,
            item_id=str(i),
            vocabulary=paths,
            siblings=paths,
            passage="The kitchen is north of the garden. The office is west of the hallway.",
        )
        others = [o for o in opts if o not in (a, NONE_OF_THE_OTHERS)]
        assert len(others) >= 3 and all(o in paths for o in others), opts
        x, _, y = a.split()
        assert f"{y} and {x}" not in others, opts


@NEEDS_WN
@pytest.mark.parametrize("answer", ["10-12", "Alzheimer's disease", "twice daily", "the French Revolution"])
def test_a_text_answer_gets_at_least_four_options(answer):
    """With distractors, at least 4 options; without (no data set, no passage), an
    ItemsError, never the answer and "None of..." alone."""
    from dbpa_core.attacks.items import ItemsError

    vocab = ["the Pacific Ocean", "Marie Curie", "1895", "in the kitchen", "type 2 diabetes"]
    for i in range(10):
        opts, _, _ = make_options(answer, item_id=str(i), vocabulary=vocab)
        assert len(opts) >= 4 and len(set(opts)) == len(opts), opts
        try:
            opts, _, _ = make_options(answer, item_id=str(i))
        except ItemsError:
            continue
        assert len(opts) >= 4 and len(set(opts)) == len(opts), opts


@NEEDS_WN
def test_multi_word_answers_get_no_nonsense_swaps():
    vocab = ["Marie Curie", "1895", "in the kitchen", "the Red Sea", "gravity"]
    for answer in ("type 2 diabetes", "the Pacific Ocean"):
        for i in range(10):
            opts, _, _ = make_options(answer, item_id=str(i), vocabulary=vocab)
            assert set(opts) <= set(vocab) | {answer, NONE_OF_THE_OTHERS}, opts


def test_too_few_distractors_raise_items_error():
    from dbpa_core.attacks.items import ItemsError

    with pytest.raises(ItemsError, match="no distractors"):
        make_options("qwzx blorp", item_id="x", vocabulary=[])


# --------------------------------------------------------------- numbers: progressions
def _units(option: str) -> int:
    """An option of a number answer in units of its last decimal (``$12.50`` -> 1250)."""
    return int(re.sub(r"[^\d-]", "", option.replace("−", "-")))


def _lvl(n: int) -> int:
    n, g = abs(n), 1
    if n == 0:
        return 0
    while n % (g * 5 if str(g)[0] == "1" else g * 2) == 0:
        g = g * 5 if str(g)[0] == "1" else g * 2
    return g


def _gsm8k_numbers(rnd: random.Random) -> str:
    """GSM8K-like answers with their share of round ones (multiples of 5, 10, 100)."""
    r = rnd.random()
    if r < 0.7:
        v = int(10 ** rnd.uniform(0, 4))
        u = rnd.random()
        v = (
            max(5, round(v / 5) * 5)
            if u < 0.12
            else max(10, round(v / 10) * 10)
            if u < 0.4
            else max(100, round(v / 100) * 100)
            if u < 0.5
            else v
        )
        return str(v)
    return _gsm8k_like(rnd)


def _window_scores(values: list[int]) -> list[int]:
    """For each option: how many others are among its 8 nearest equally round values on
    each side (how the old distractors were drawn)."""
    out = []
    for i, n in enumerate(values):
        lv = _lvl(n) or 1

        def ok(v, n=n, lv=lv):
            return v != 0 and (n < 0 or v > 0) and _lvl(v) == lv

        near = [v for v in (n - k * lv for k in range(1, 60)) if ok(v)][:8] + [
            v for v in (n + k * lv for k in range(1, 60)) if ok(v)
        ][:8]
        out.append(sum(v in near for j, v in enumerate(values) if j != i))
    return out


def _share(scores: list[float], idx: int, largest: bool = True) -> float:
    """The expected hit of "pick the best-scored option", ties broken at random."""
    best = max(scores) if largest else min(scores)
    ties = [j for j, s in enumerate(scores) if s == best]
    return (idx in ties) / len(ties)


def test_no_answer_blind_rule_beats_chance_on_gsm8k_like_numbers():
    """Distractors are no longer drawn from the answer's 8 nearest equally round values,
    the middle of the range is no cue, and 0 is no sign that the answer is the largest."""
    rnd = random.Random(5)
    window = middle = zero_largest = 0.0
    n = with_zero = 0
    for i in range(1200):
        a = _gsm8k_numbers(rnd)
        opts, idx, kind = make_options(a, seed=0, item_id=str(i))
        assert kind == "number" and opts[idx] == a and len(set(opts)) == 5
        values = [_units(o) for o in opts]
        n += 1
        window += _share(_window_scores(values), idx)
        mid = (max(values) + min(values)) / 2
        middle += _share([abs(v - mid) for v in values], idx, largest=False)
        if 0 in values and values[idx] != 0:
            with_zero += 1
            zero_largest += _share(values, idx)
    assert window / n <= 0.25, window / n
    assert middle / n <= 0.25, middle / n
    assert with_zero >= 20 and zero_largest / with_zero <= 0.25, (with_zero, zero_largest)


def test_number_options_are_five_consecutive_multiples_of_a_step():
    steps = Counter()
    for a, opts, _, _ in _generated(_gsm8k_numbers, 300, draws=9, seed=1):
        values = sorted(_units(o) for o in opts)
        gaps = {b - c for b, c in zip(values[1:], values[:-1], strict=True)}
        assert len(gaps) == 1, opts
        steps[gaps.pop() / max(abs(_units(a)), 1) < 0.1] += 1
    assert min(steps.values()) >= 30, steps  # the step's size relative to the answer varies


def _clock(answer: str):
    m = re.fullmatch(r"(\d{1,2}):(\d\d)(\s*[ap]\.?m\.?)?", answer, re.I)
    return m and (int(m[1]), int(m[2]), m[3] or "")


def _check_time(answer, o):
    (ha, _, ampm), (h, mi, ampm_o) = _clock(answer), _clock(o)
    assert mi < 60 and (ampm_o.strip().lower()[:1] in ("a", "p") if ampm else not ampm_o)
    twelve = ampm or (1 <= ha <= 12 and not answer.startswith("0"))
    assert (1 <= h <= 12) if twelve else (0 <= h <= 23)
    padded = re.match(r"0\d:", answer)  # zero-padded hours stay padded, others don't
    assert re.match(r"\d\d:", o) if padded else not re.match(r"0\d:", o)


def _check_ordinal(answer, o):
    m = re.fullmatch(r"(\d+)(st|nd|rd|th)", o)
    n = int(m[1])
    assert n >= 1 and m[2] == ("th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th"))


def _check_year(answer, o):
    assert re.fullmatch(r"\d{4}", o) and 1000 <= int(o) <= max(int(answer), LATEST_YEAR)


def _check_percent(answer, o):
    assert o.endswith("%") and 0 <= float(o.rstrip("% ")) <= 100


def _check_decade(answer, o):
    assert re.fullmatch(r"\d{3}0s", o)
    assert int(o[:-1]) <= max(int(answer[:-1]), LATEST_YEAR // 10 * 10)


def _check_fraction(answer, o):
    import math
    from fractions import Fraction

    p, q = map(int, o.split("/"))
    pa, qa = map(int, answer.split("/"))
    assert p > 0 and q > 0
    assert (math.gcd(p, q) == 1) == (math.gcd(pa, qa) == 1)
    assert o == answer or Fraction(p, q) != Fraction(pa, qa)


def _check_range(answer, o):
    a, b = map(int, re.findall(r"\d+", o))
    a0, b0 = map(int, re.findall(r"\d+", answer))
    assert 0 <= a < b and b - a == b0 - a0 and o.endswith(answer.lstrip("0123456789-–"))


@pytest.mark.parametrize(
    "answer, check",
    [
        *[
            (a, _check_time)
            for a in ("3:45", "11:30", "12:00", "07:05", "23:15", "0:40", "9:41 pm", "11:45 PM", "6:07 a.m.")
        ],
        *[
            (a, _check_ordinal)
            for a in ("1st", "2nd", "3rd", "8th", "11th", "12th", "13th", "21st", "22nd", "101st")
        ],
        *[(a, _check_year) for a in ("2000", "1990", "1987", "1492", "1800", "2024", "1066")],
        *[(a, _check_percent) for a in ("100%", "97%", "0%", "50%", "75%", "2.5%", "99.9%")],
        *[(a, _check_decade) for a in ("2020s", "2010s", "1990s", "1850s")],
        *[(a, _check_fraction) for a in ("1/5", "3/4", "4/6", "7/3", "2/9", "1/2", "3/15")],
        *[(a, _check_range) for a in ("10-12", "3-5 kg", "1-2", "100-150")],
    ],
)
def test_every_number_format_gets_five_well_formed_distinct_options(answer, check):
    for i in range(40):
        opts, idx, kind = make_options(answer, item_id=str(i))
        assert kind == "number" and opts[idx] == answer and len(set(opts)) == 5, opts
        for o in opts:
            check(answer, o)


@pytest.mark.parametrize("answer", ["21th", "8rd", "2st", "3:75", "25:10", "4/0", "0/13", "12-10"])
def test_a_malformed_number_is_no_number(answer):
    assert make_options(answer, item_id="x")[2] != "number"


def _data_set_items(answers, **kw):
    """Options for each answer of a data set, its answers (repeats kept) the vocabulary."""
    from dbpa_core.attacks.items import Item

    out = []
    for i, a in enumerate(answers):
        opts, idx, kind = make_options(a, item_id=str(i), vocabulary=answers, **kw)
        assert kind == "number" and opts[idx] == a and len(set(opts)) == 5, (a, opts)
        out.append(Item(str(i), "How many?", opts, idx, "", "", "d", kind))
    return out


def test_a_data_sets_numbers_are_each_others_distractors():
    """With a data set's answers at hand, a number's distractors are its other answers
    of the same shape near it: every option is a real answer, so neither the rank, the
    roundness, the spacing nor how common a value is among the answers gives the right
    one away (a picker that knows which values the data set favours is at chance)."""
    from dbpa_core.attacks.leaks import leak_notes, option_leaks

    rnd = random.Random(3)
    answers = [_gsm8k_numbers(rnd) for _ in range(1200)]
    items = _data_set_items(answers)
    pool = Counter(answers)
    ranks, common = Counter(), 0.0
    for it in items:
        assert all(o in pool for o in it.options)  # every option is an answer of the set
        order = sorted(range(5), key=lambda j: float(it.options[j].replace("$", "").replace(",", "")))
        ranks[order.index(it.answer)] += 1
        counts = [pool[o] for o in it.options]  # the most frequent answer among them
        top = [j for j, c in enumerate(counts) if c == max(counts)]
        common += (it.answer in top) / len(top)
    assert max(ranks.values()) <= 0.25 * len(items), ranks
    assert not leak_notes(option_leaks(items))
    # "the answer most common in the data set": near chance (a value a tenth of the answers
    # near it share cannot be offered as often as that would need); with made-up options
    # that rule is right far more often
    made = 0.0
    for i, a in enumerate(answers):
        opts, idx, _ = make_options(a, item_id=str(i))
        counts = [pool[o] for o in opts]
        top = [j for j, c in enumerate(counts) if c == max(counts)]
        made += (idx in top) / len(top)
    assert common / len(items) <= 0.25 and made / len(items) >= 0.4, (common, made)
    # why: a value is offered about five times as often as it is right (100, a share of
    # the answers near it too large for that, is offered in every set it can be)
    offered = Counter(o for it in items for o in it.options)
    ratios = {v: offered[v] / k for v, k in pool.most_common(12) if v != "100"}
    assert all(4.0 <= r <= 6.0 for r in ratios.values()), ratios


def test_numbers_of_other_shapes_and_too_few_answers_are_no_distractors():
    """A sum in dollars gets dollars, a year years, a length in km lengths in km; with
    fewer than 8 different answers of its shape a number gets made-up options."""
    answers = (
        [f"${n}" for n in range(3, 40, 3)]
        + [str(y) for y in range(1900, 2000, 7)]
        + [f"{n} km" for n in range(5, 200, 11)]
        + ["7", "9"]
    )
    for it in _data_set_items(answers):
        a = it.options[it.answer]
        kind = "$" if a.startswith("$") else "km" if a.endswith("km") else "year" if len(a) == 4 else "plain"
        for o in it.options:
            assert (
                "$" if o.startswith("$") else "km" if o.endswith("km") else "year" if len(o) == 4 else "plain"
            ) == kind, it.options
        if kind == "plain":  # two plain answers: made-up options, a progression
            values = sorted(_units(o) for o in it.options)
            assert len({b - c for b, c in zip(values[1:], values[:-1], strict=True)}) == 1
        else:
            assert set(it.options) <= set(answers)


def test_gsm8k_options_come_from_the_files_answers(tmp_path):
    from dbpa_core.attacks.items import load_items

    rnd = random.Random(8)
    sums = [str(rnd.randint(2, 400)) for _ in range(40)]
    p = tmp_path / "test.jsonl"
    p.write_text(
        "".join(
            '{"question": "Tom has apples. He buys more. How many does he have?", '
            f'"answer": "He adds them.\\n#### {s}"}}\n'
            for s in sums
        )
    )
    items = load_items(p, format="gsm8k", limit=10)
    assert len(items) == 10
    for it, s in zip(items, sums, strict=False):
        assert it.options[it.answer] == s and set(it.options) <= set(sums)


@NEEDS_WN
def test_the_passages_own_animals_are_the_options_in_the_answers_number():
    """bAbI's deduction: the passage's animals (plural, as the answer) are the options;
    "dogs" and "cats", which WordNet also knows as insults, stay (the passage says them),
    and "frog" from "Sara is a frog" is no option beside "frogs"."""
    passage = (
        "Sheep are afraid of dogs. Cats are afraid of swans. Dogs are afraid of cats. "
        "Swans are afraid of frogs. Frogs are afraid of sheep. Sara is a frog."
    )
    animals = {"sheep", "dogs", "cats", "swans", "frogs"}
    for i, answer in enumerate(sorted(animals - {"sheep"}) * 3):
        opts, idx, _ = make_options(
            answer, item_id=str(i), passage=passage, vocabulary=sorted(animals | {"wolves", "mice"})
        )
        assert set(opts) == animals and opts[idx] == answer, opts


def test_inclusion_probabilities_sum_to_five_and_cap_the_common():
    from dbpa_core.attacks.items import _inclusion

    pi = _inclusion([1, 1, 2, 4, 2], 5)
    assert pi == [1.0] * 5
    pi = _inclusion([1] * 8 + [12], 5)  # 12 of 20 answers: in every draw, the rest share 4
    assert pi[-1] == 1.0 and sum(pi) == pytest.approx(5) and pi[0] == pytest.approx(0.5)
    pi = _inclusion([3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2], 5)
    assert sum(pi) == pytest.approx(5) and max(pi) <= 1.0
    assert pi[0] == pytest.approx(3 * pi[1]) and pi[-1] == pytest.approx(2 * pi[1])


@NEEDS_WN
def test_a_closed_set_of_answers_is_the_options_and_nothing_else():
    """bAbI's four colours are a colour's options (4, never "pink" from WordNet); "Where
    is the football?" gets rooms, not the football the passage names; "the milk" a
    3-option item of the only three things given."""
    colours = ["white", "yellow", "green", "gray"]
    for i, c in enumerate(colours * 3):
        opts, idx, _ = make_options(
            c,
            item_id=str(i),
            vocabulary=colours * 5,
            siblings=colours,
            passage=f"Lily is a swan. Lily is {c}. Greg is a swan.",
        )
        assert sorted(opts) == sorted(colours) and opts[idx] == c
    rooms = ["kitchen", "garden", "hallway", "bedroom", "office", "bathroom"]
    passage = "Mary got the football there. Mary went to the hallway. John went to the office."
    for i in range(10):
        opts, idx, _ = make_options(
            "hallway",
            item_id=str(i),
            passage=passage,
            siblings=rooms,
            vocabulary=rooms + ["football", "milk", "Mary"],
        )
        assert set(opts) <= set(rooms) and len(opts) == 5 and "office" in opts, opts
    things = ["football", "milk", "apple"]
    opts, idx, _ = make_options(
        "milk",
        item_id="m",
        siblings=things,
        vocabulary=things + ["Mary", "Bill"],
        passage="Fred gave the milk to Bill.",
    )
    assert sorted(opts) == sorted(things)


@NEEDS_WN
def test_place_names_get_place_names_not_pieces_or_common_words():
    """A one-word place gets the passage's other places, not "Pablo" of "Pablo Picasso";
    a county WordNet knows gets no "midst" or "side"; "was" is never read as "wa"."""
    passage = (
        "Pablo Picasso was born in Warsaw in 1881. The song was recorded by Albert "
        "Einstein at a studio in {}. It was released in 1900 and later covered by "
        "Jane Austen, who lived in Memphis until 1950."
    )
    places = ["Lincolnshire", "Memphis", "Warsaw", "Soweto", "Mexico City", "Ulm"]
    for answer in ("Lincolnshire", "Ulm"):
        for i in range(8):
            opts, idx, _ = make_options(
                answer, item_id=str(i), vocabulary=places, passage=passage.format(answer)
            )
            assert opts[idx] == answer
            assert not set(opts) & {
                "Pablo",
                "Picasso",
                "Albert",
                "Einstein",
                "Jane",
                "Austen",
                "Wa",
                "Midst",
                "Side",
                "End",
                "Exterior",
            }, opts


@NEEDS_WN
@pytest.mark.slow  # a second Python process loads WordNet (about a minute on 2 busy cores)
def test_options_do_not_change_with_pythons_string_hashing():
    """WordNet lists a synset's hyponyms in an order that follows Python's string hashing:
    the options WordNet supplies were other ones in another process (QED's
    "photosynthesis" got "sorption" once, "filling" the next time). Here: this process
    and one with another hash seed give the same options."""
    import json
    import os
    import subprocess
    import sys

    words = ["photosynthesis", "insulin", "oxygen", "evaporation", "saliva"] * 3
    code = (
        "import json; from dbpa_core.attacks.items import make_options; print(json.dumps("
        f"[make_options(a, item_id=str(i))[0] for i, a in enumerate({words!r})]))"
    )
    here = json.loads(json.dumps([make_options(a, item_id=str(i))[0] for i, a in enumerate(words)]))
    # a seed unlike this process's (random unless PYTHONHASHSEED fixes it)
    other = "2" if os.environ.get("PYTHONHASHSEED") == "1" else "1"
    there = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": other},
    ).stdout
    assert json.loads(there) == here
