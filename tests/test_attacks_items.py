"""Items: the JSONL format, the data-set loaders, distractors, the prompt template,
option shuffling and the sample set."""

import json

import pytest

from dbpa_core.attacks import wordnet as W
from dbpa_core.attacks.consistency import INSTRUCTIONS, option_orders, reorder, shuffle_options
from dbpa_core.attacks.items import (
    DEFAULT_INSTRUCTION,
    NONE_OF_THE_OTHERS,
    Item,
    ItemsError,
    check_template,
    detect_format,
    infer_answer_type,
    load_items,
    make_options,
    render_prompt,
)
from dbpa_core.attacks.sample import DATASETS, sample_items


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def jsonl(*objs):
    return "".join(json.dumps(o) + "\n" for o in objs)


def test_jsonl_letters_and_texts(tmp_path):
    p = write(
        tmp_path,
        "mine.jsonl",
        jsonl(
            {
                "id": "a",
                "passage": "Mary went home.",
                "question": "Where is Mary?",
                "options": ["home", "park"],
                "answer": "A",
            },
            {"id": "b", "question": "Where?", "options": ["home", "park", "office"], "answer": "(C)"},
            {"question": "Where?", "options": ["home", "park"], "answer": "park"},
            {"question": "Where?", "options": ["Home", "Park"], "answer": "park", "instruction": ""},
            {"question": "Sum?", "options": [41, 42], "answer": 42},
        ),
    )
    items = load_items(p)
    assert [it.answer_letter for it in items] == ["A", "C", "B", "B", "B"]
    assert [it.id for it in items] == ["a", "b", "3", "4", "5"]
    assert items[0].instruction == DEFAULT_INSTRUCTION and items[3].instruction == ""
    assert {it.dataset for it in items} == {"mine"}
    assert items[0].attack_field == "passage" and items[1].attack_field == "question"
    assert load_items(p, limit=2, dataset="x")[1].dataset == "x"


@pytest.mark.parametrize(
    "line, match",
    [
        ('{"question": "q", "options": ["a", "b"]}', "line 1: missing 'answer'"),
        ('{"question": "", "options": ["a", "b"], "answer": "A"}', "line 1: 'question' must be non-empty"),
        (
            '{"question": "q", "options": ["a", "b"], "answer": "C"}',
            r"answer 'C' is neither an option's letter \(A-B\)",
        ),
        ('{"question": "q", "options": ["a"], "answer": "A"}', "'options' must be a list of at least 2"),
        ('{"question": "q", "options": ["a", "a"], "answer": "A"}', "two options have the same text"),
        (
            '{"question": "q", "options": ["a", "b"], "answer": "A", "colour": 1}',
            r"unknown field\(s\) colour",
        ),
        ('{"question": "q", "options": ["a", "b"], "answer": "A", "passage": 3}', "'passage' must be text"),
        ("not json", "line 1: not valid JSON"),
        ("[1, 2]", "each line must be a JSON object"),
    ],
)
def test_jsonl_errors_name_the_line(tmp_path, line, match):
    p = write(tmp_path, "bad.jsonl", line + "\n")
    with pytest.raises(ItemsError, match=match):
        load_items(p, format="jsonl")


def test_duplicate_ids_and_missing_file(tmp_path):
    p = write(
        tmp_path,
        "d.jsonl",
        jsonl(
            {"id": 1, "question": "q", "options": ["a", "b"], "answer": "A"},
            {"id": 1, "question": "r", "options": ["a", "b"], "answer": "B"},
        ),
    )
    with pytest.raises(ItemsError, match="the id '1' is used twice"):
        load_items(p)
    with pytest.raises(ItemsError, match="no such file"):
        load_items(tmp_path / "nope.jsonl")


def test_answer_types():
    assert [
        infer_answer_type(a)
        for a in (
            True,
            "yes",
            "False",
            12,
            "1,250",
            "$3.50",
            "12%",
            "wolves",
            "well-known",
            "the kitchen",
            "x + 2",
        )
    ] == [
        "boolean",
        "boolean",
        "boolean",
        "number",
        "number",
        "number",
        "number",
        "word",
        "word",
        "text",
        "text",
    ]


def test_distractors_by_answer_type():
    opts, idx, kind = make_options(True)
    assert opts == ("True", "False", "Unable to determine") and idx == 0 and kind == "boolean"
    assert make_options("no")[0] == ("Yes", "No", "Unable to determine")
    assert make_options("no")[1] == 1
    opts, idx, kind = make_options("42", seed=1, item_id="q")
    assert kind == "number" and len(opts) == len(set(opts)) == 5 and opts[idx] == "42"
    assert all(float(o) >= 0 for o in opts)
    assert make_options("42", seed=1, item_id="q") == (opts, idx, kind)  # seeded
    opts, idx, _ = make_options("3.5", seed=0)
    assert opts[idx] == "3.5" and all("." in o for o in opts)
    opts, idx, kind = make_options("wolves", vocabulary=["cats", "mice", "dogs", "sheep", "wolves", "x y"])
    assert kind == "word" and opts[idx] == "wolves" and len(opts) == 5
    assert set(opts) <= {"cats", "mice", "dogs", "sheep", "wolves"}
    opts, idx, kind = make_options("Take the statin with 40 mg daily", item_id="t")
    assert kind == "text" and NONE_OF_THE_OTHERS in opts
    assert opts[idx] in ("Take the statin with 40 mg daily", NONE_OF_THE_OTHERS)
    assert len(set(opts)) == len(opts) == 5
    assert any("40" not in o for o in opts)  # a changed formula (number)


@pytest.mark.skipif(not W.installed(), reason="WordNet not installed (make wordnet)")
def test_word_distractors_of_the_same_kind_from_the_passage():
    passage = "The tiger chased the rabbit while the eagle watched the snake near the river."
    opts, idx, _ = make_options("fox", vocabulary=[], passage=passage, item_id="z")
    assert opts[idx] == "fox" and len(opts) == 5
    assert set(opts) - {"fox"} <= {"tiger", "rabbit", "eagle", "snake", "river", "watched", "chased"}


# --------------------------------------------------------------------------- loaders
def test_strategyqa(tmp_path):
    p = write(
        tmp_path,
        "strategyqa_train.json",
        json.dumps(
            [
                {
                    "qid": "q1",
                    "term": "x",
                    "question": "Could a llama birth twice during the War in Vietnam?",
                    "answer": False,
                    "facts": ["The War in Vietnam was 19 years.", "Llamas gestate 11 months."],
                },
                {"qid": "q2", "question": "No answer in the test split"},
            ]
        ),
    )
    assert detect_format(p) == "strategyqa"
    (it,) = load_items(p)
    assert it.id == "q1" and it.answer_text == "False" and it.passage.startswith("The War")
    assert it.options == ("True", "False", "Unable to determine") and it.dataset == "strategyqa"


def test_aqua(tmp_path):
    p = write(
        tmp_path,
        "train.json",
        jsonl(
            {
                "question": "Two trains ... what is the speed?",
                "options": ["A)21", "B)21.5", "C)22", "D)22.5", "E)23"],
                "rationale": "...",
                "correct": "B",
            }
        ),
    )
    assert detect_format(p) == "aqua"
    (it,) = load_items(p)
    assert it.options == ("21", "21.5", "22", "22.5", "23") and it.answer_letter == "B"
    assert it.attack_field == "question"


def test_creak(tmp_path):
    p = write(
        tmp_path,
        "creak.json",
        jsonl({"ex_id": "c1", "sentence": "Harry Potter can fly.", "explanation": "...", "label": "true"}),
    )
    (it,) = load_items(p)
    assert it.passage == "Harry Potter can fly." and it.answer_text == "True" and it.dataset == "creak"


def test_gsm8k(tmp_path):
    p = write(
        tmp_path,
        "train.jsonl",
        jsonl(
            {
                "question": "Natalia sold clips to 48 friends in April. She sold half as many in May. "
                "How many clips did she sell altogether?",
                "answer": "In May she sold 48/2 = 24.\n#### 72",
            }
        ),
    )
    assert detect_format(p) == "gsm8k"
    (it,) = load_items(p)
    assert it.question == "How many clips did she sell altogether?"
    assert it.passage.startswith("Natalia") and it.answer_text == "72" and len(it.options) == 5


def test_esnli(tmp_path):
    p = write(
        tmp_path,
        "esnli_dev.csv",
        "pairID,gold_label,Sentence1,Sentence2,Explanation_1\n"
        "p1,entailment,A man plays a guitar.,A man makes music.,Guitar is music\n"
        "p2,-,A dog runs.,A cat sleeps.,\n"
        "p3,contradiction,A dog runs.,The dog sleeps.,Runs vs sleeps\n",
    )
    items = load_items(p)
    assert [it.id for it in items] == ["p1", "p3"]
    assert items[0].answer_text == "entailment" and items[1].answer_text == "contradiction"
    assert items[0].passage == "A man plays a guitar." and "A man makes music." in items[0].question


def test_babi(tmp_path):
    p = write(
        tmp_path,
        "qa15_basic-deduction_test.txt",
        "1 Sheep are afraid of wolves.\n2 Gertrude is a sheep.\n3 Cats are afraid of mice.\n"
        "4 What is Gertrude afraid of?\twolves\t1 2\n"
        "1 Mice are afraid of cats.\n2 Emily is a mouse.\n3 What is Emily afraid of?\tcats\t1 2\n",
    )
    assert detect_format(p) == "babi"
    items = load_items(p, dataset="bAbI 15")
    assert len(items) == 2 and items[0].answer_text == "wolves" and items[1].answer_text == "cats"
    assert items[1].passage == "Mice are afraid of cats. Emily is a mouse."
    assert "wolves" in items[1].options  # the other answers are distractors
    assert items[0].dataset == "bAbI 15"


def test_loader_errors(tmp_path):
    p = write(tmp_path, "train.json", jsonl({"question": "q", "options": ["A)1", "B)2"], "correct": "F"}))
    with pytest.raises(ItemsError, match="'correct' must be an option letter"):
        load_items(p, format="aqua")
    p = write(tmp_path, "g.jsonl", jsonl({"question": "q", "answer": "no number"}))
    with pytest.raises(ItemsError, match="line 1: the answer has no final '#### number'"):
        load_items(p, format="gsm8k")
    p = write(tmp_path, "e.csv", "a,b\n1,2\n")
    with pytest.raises(
        ItemsError,
        match=r"cannot tell which data set.*found a table with the "
        "columns a, b",
    ):
        load_items(p)
    with pytest.raises(ItemsError, match="needs the columns Sentence1, Sentence2 and gold_label"):
        load_items(p, format="esnli")
    with pytest.raises(ItemsError, match="format must be auto or one of"):
        load_items(p, format="squad")


# --------------------------------------------------------------------------- prompts
ITEM = Item("q", "Where is Mary?", ("home", "the park"), 1, "Mary went to the park.", "Choose one.", "d")


def test_default_template():
    assert render_prompt(ITEM) == (
        "Choose one.\n\nPassage: Mary went to the park.\n\n"
        "Question: Where is Mary?\n(A) home\n(B) the park\nAnswer:"
    )
    bare = render_prompt(ITEM.replace(passage="", instruction=""))
    assert bare == "Question: Where is Mary?\n(A) home\n(B) the park\nAnswer:"


def test_custom_template():
    t = "Q: {question}\nContext: {passage}\n{options}\nReply with a letter."
    assert render_prompt(ITEM, t) == (
        "Q: Where is Mary?\nContext: Mary went to the park.\n(A) home\n(B) the park\nReply with a letter."
    )
    for bad, match in (
        ("{question}", r"needs \{options\}"),
        ("{question} {options} {answer}", r"unknown placeholder\(s\) \{answer\}"),
        ("{question {options}", "not a valid format string"),
    ):
        with pytest.raises(ValueError, match=match):
            check_template(bad)


# --------------------------------------------------------------------------- consistency
def test_shuffled_options_keep_the_answer():
    item = Item("q", "Which?", ("a", "b", "c", "d", "e"), 3)
    for seed in range(50):
        moved, order = shuffle_options(item, seed)
        assert moved.answer_text == "d" and sorted(moved.options) == list(item.options)
        assert moved.options == tuple(item.options[i] for i in order)
    assert reorder(item, (4, 3, 2, 1, 0)).answer_letter == "B"
    with pytest.raises(ValueError, match=r"must be a permutation of 0\.\.4"):
        reorder(item, (0, 1, 2))


def test_option_orders():
    orders = option_orders(5, 6, seed=1)
    assert orders[0] == (0, 1, 2, 3, 4) and len(set(orders)) == 6
    assert orders == option_orders(5, 6, seed=1)
    assert len(option_orders(3, 100)) == 6  # every order of 3 options once
    with pytest.raises(ValueError, match="`n_orders` must be >= 1"):
        option_orders(3, 0)


def test_five_synonymous_instructions():
    assert len(INSTRUCTIONS) == 5 and INSTRUCTIONS[0] == ""
    assert INSTRUCTIONS[2].startswith("You must choose the best answer")


# --------------------------------------------------------------------------- sample set
def test_sample_set_is_reproducible_and_valid():
    a = sample_items(3, seed=0)
    assert a == sample_items(3, seed=0) and a != sample_items(3, seed=1)
    assert [it.dataset for it in a] == [d for d in DATASETS for _ in range(3)]
    for it in a:
        assert it.passage.count(".") >= 4 and it.options[it.answer]
        if it.dataset == "arithmetic":
            nums = [int(x) for x in it.passage.split() if x.isdigit()]
            assert int(it.answer_text) == nums[0] + nums[1] - nums[2]
        if it.dataset == "deduction":
            kind = it.passage.split(f"{it.question.split()[2]} is a ")[1].split(".")[0]
            plural = {"mouse": "mice", "wolf": "wolves", "sheep": "sheep", "fox": "foxes"}.get(
                kind, kind + "s"
            )
            assert f"{plural.capitalize()} are afraid of {it.answer_text}." in it.passage
    with pytest.raises(ValueError, match="unknown sample data set"):
        sample_items(1, datasets=("trivia",))
