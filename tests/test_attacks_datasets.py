"""The data sets of the paper's Table 1 in their published formats, on small files
written in each real layout (tests/data/battery/): Sen-Making (the combined CSV, and the
subtask data files with their gold-answer files), QED (jsonlines), ECQA (the glued CSV),
QASC (JSONL), NoahQA (JSON) and e-SNLI's s1/s2/labels files. Auto-detection names each
one, and a file it cannot place says what it tried and what it found."""

import json
import shutil
from pathlib import Path

import pytest

from dbpa_core.attacks.items import (
    FORMATS,
    NONE_OF_THE_OTHERS,
    ItemsError,
    detect_format,
    load_items,
    parse_items_text,
)

DATA = Path(__file__).parent / "data" / "battery"


@pytest.mark.parametrize(
    "path, fmt",
    [
        ("sen-making/test.csv", "sen-making"),
        ("sen-making-sub/subtaskA_test_data.csv", "sen-making-a"),
        ("sen-making-sub/subtaskB_test_data.csv", "sen-making-b"),
        ("qed/qed-dev.jsonlines", "qed"),
        ("ecqa/cqa_data_test.csv", "ecqa"),
        ("qasc/dev.jsonl", "qasc"),
        ("noahqa/dev.json", "noahqa"),
        ("esnli/s1.dev", "esnli-txt"),
        ("esnli/labels.dev", "esnli-txt"),
    ],
)
def test_each_published_format_is_recognised(path, fmt):
    assert detect_format(DATA / path) == fmt
    assert load_items(DATA / path)  # and read


def test_sen_making_combined_csv_gives_both_subtasks():
    items = load_items(DATA / "sen-making" / "test.csv")
    a = [it for it in items if it.id.endswith("-A")]
    b = [it for it in items if it.id.endswith("-B")]
    assert len(a) == len(b) == 3 and {it.dataset for it in items} == {"sen-making"}
    first = a[0]
    assert first.question == "Which statement is against common sense?"
    assert first.options == ("Statement 1", "Statement 2")
    wrong_line = first.passage.splitlines()[first.answer]
    assert wrong_line.endswith("He poured milk into the pillow.")
    assert "He poured milk into the glass." in first.passage
    # the right statement is not always first: the order is drawn
    assert len({it.answer for it in a}) == 2 or len(a) < 3
    assert b[0].passage == "He poured milk into the pillow."
    assert b[0].answer_text == "A pillow cannot hold a liquid."
    assert set(b[0].options) == {
        "A pillow cannot hold a liquid.",
        "Pillows are usually white like milk.",
        "Milk is sold in glass bottles.",
    }
    assert load_items(DATA / "sen-making" / "test.csv", seed=0) == items  # seeded


def test_sen_making_subtasks_read_their_gold_answers_beside_them(tmp_path):
    a = load_items(DATA / "sen-making-sub" / "subtaskA_test_data.csv")
    assert [it.id for it in a] == ["101", "102", "103"]
    assert [it.answer for it in a] == [1, 0, 1]  # the statement against common sense
    assert a[0].passage == (
        "Statement 1: She drank a cup of hot tea.\nStatement 2: She drank a cup of hot sand."
    )
    b = load_items(DATA / "sen-making-sub" / "subtaskB_test_data.csv")
    assert [it.answer_letter for it in b] == ["A", "C", "B"]
    assert b[1].answer_text.startswith("A cloud is water vapour")
    assert b[0].passage == "She drank a cup of hot sand."
    # without its gold file beside it: one line that says which file it needs
    lone = tmp_path / "subtaskA_test_data.csv"
    shutil.copy(DATA / "sen-making-sub" / "subtaskA_test_data.csv", lone)
    with pytest.raises(ItemsError, match=r"subtaskA_gold_answers\.csv.*must lie beside it"):
        load_items(lone)
    gold = tmp_path / "elsewhere.csv"
    gold.write_text("101,1\n102,0\n103,1\n")
    assert [it.answer for it in load_items(lone, answers=gold)] == [1, 0, 1]
    gold.write_text("101,1\n")
    with pytest.raises(ItemsError, match="the id '102' has no answer"):
        load_items(lone, answers=gold)


def test_a_gold_answer_file_given_as_data_says_what_to_load():
    with pytest.raises(ItemsError, match=r"gold-answer file.*load the subtask's data file"):
        load_items(DATA / "sen-making-sub" / "subtaskB_gold_answers.csv")


def test_qed():
    items = load_items(DATA / "qed" / "qed-dev.jsonlines")
    # 9250 has no answer; 9301's NQ answer was judged not in the passage by QED's
    # annotators (explanation_type none): both left out
    assert [it.id for it in items] == ["8865", "9021", "9133"]
    london = items[0]
    assert london.question == "Which city does the river thames flow through?"
    assert london.passage.startswith("The River Thames flows") and london.answer_text == "London"
    assert len(set(london.options)) == 5
    assert items[1].answer_text == "8,849 metres" and items[1].answer_type == "number"
    assert all(o.endswith(" metres") for o in items[1].options)
    assert (
        items[2].answer_text == "Jane Austen" or items[2].answer_text == NONE_OF_THE_OTHERS
    )  # multi_sentence: NQ's short answer


def test_ecqa_and_its_annotation_file():
    items = load_items(DATA / "ecqa" / "cqa_data_test.csv")
    assert [it.id for it in items] == ["075e483d21c29a511267ef62bedc0461", "61fe6e879ff18686d7552425a36344c8"]
    assert items[0].options == ("ignore", "enforce", "authoritarian", "yell at", "avoid")
    assert items[0].answer_text == "ignore" and items[0].passage == ""
    assert items[1].answer_text == "jewelry box" and items[0].dataset == "ecqa"
    with pytest.raises(ItemsError, match=r"ECQA's annotation file.*generate_data\.py"):
        load_items(DATA / "ecqa" / "ecqa.jsonl")


def test_qasc():
    items = load_items(DATA / "qasc" / "dev.jsonl")
    assert len(items) == 2  # the line without answerKey (the test split) is left out
    it = items[0]
    assert len(it.options) == 8 and it.answer_letter == "F"
    assert it.answer_text == "local weather conditions"
    assert it.passage.startswith("Climate is generally described in terms of temperature")
    assert "local weather conditions such as winds" in it.passage


def test_noahqa():
    items = {it.id: it for it in load_items(DATA / "noahqa" / "dev.json")}
    assert set(items) == {"p1-q1", "p1-q2", "p2-q1"}  # unanswerable left out
    q1 = items["p1-q1"]
    assert q1.passage == "Tom has 12 apples. He gives 5 apples to Mary. Mary already had 3 apples."
    assert q1.answer_text == "7" and q1.answer_type == "number" and len(set(q1.options)) == 5
    assert items["p1-q2"].options == ("Yes", "No", "Unable to determine")
    assert items["p1-q2"].answer_text == "Yes"
    assert items["p2-q1"].answer_text == "market"


def test_esnli_from_its_s1_s2_labels_files(tmp_path):
    items = load_items(DATA / "esnli" / "s2.dev")
    assert [it.answer_text for it in items] == ["entailment", "contradiction", "neutral"]
    assert items[0].passage == "A man is playing a guitar on stage ."
    assert "A man is performing music ." in items[0].question
    assert {it.dataset for it in items} == {"esnli"}
    for name in ("s1.dev", "s2.dev"):
        shutil.copy(DATA / "esnli" / name, tmp_path / name)
    with pytest.raises(ItemsError, match=r"labels\.dev is not beside it"):
        load_items(tmp_path / "s1.dev")
    (tmp_path / "labels.dev").write_text("entailment\n")
    with pytest.raises(ItemsError, match="one line per pair; they have 4, 4 and 1"):
        load_items(tmp_path / "s1.dev")


@pytest.mark.parametrize(
    "name, text, found",
    [
        ("data.csv", "a,b,c\n1,2,3\n", "a table with the columns a, b, c"),
        (
            "x.jsonl",
            json.dumps({"prompt": "p", "completion": "c"}) + "\n",
            "JSON lines with the fields completion, prompt",
        ),
        ("x.json", json.dumps([{"text": "t"}]), "a JSON list whose first entry has text"),
        ("x.json", json.dumps({"a": {"b": 1}}, indent=2), "a JSON object whose first entry has b"),
        ("y.json", json.dumps({"a": {"b": 1}}), "JSON lines with the fields a"),
        ("x.txt", "just some prose\n", "neither JSON, a CSV table nor a bAbI task"),
    ],
)
def test_a_file_it_cannot_place_says_what_it_tried_and_found(name, text, found):
    with pytest.raises(ItemsError) as err:
        parse_items_text(text, source=name)
    msg = str(err.value)
    assert found in msg and "cannot tell which data set" in msg
    assert all(f in msg for f in ("sen-making", "qed", "esnli", "noahqa"))


def test_the_sen_making_csv_is_never_read_as_esnli():
    text = (DATA / "sen-making" / "test.csv").read_text()
    assert detect_format("esnli_like_name.csv", text) == "sen-making"
    with pytest.raises(ItemsError, match="a Sen-Making file needs the column"):
        parse_items_text("Sentence1,Sentence2,gold_label\na,b,neutral\n", source="x.csv", format="sen-making")


def test_every_format_has_a_loader_and_a_name_in_the_manual():
    manual = (Path(__file__).parent.parent / "docs" / "guides" / "battery.md").read_text()
    for f in FORMATS:
        assert f"`{f}`" in manual, f


def test_a_spec_names_the_gold_answers_of_a_subtask(tmp_path):
    from dbpa_core.attacks.spec import parse_attack_spec
    from dbpa_core.spec import SpecError

    data = tmp_path / "subtaskB_test_data.csv"
    shutil.copy(DATA / "sen-making-sub" / "subtaskB_test_data.csv", data)
    shutil.copy(DATA / "sen-making-sub" / "subtaskB_gold_answers.csv", tmp_path / "gold.csv")
    body = """
model: {backend: openai, name: m, base_url: "http://127.0.0.1:9/v1"}
data: {file: subtaskB_test_data.csv, answers: %s}
attacks: [{level: char, rho: [0.5]}]
"""
    spec = parse_attack_spec(body % "gold.csv", base_dir=tmp_path)
    assert [it.answer_letter for it in spec.items] == ["A", "C", "B"]
    assert {it.dataset for it in spec.items} == {"sen-making"}
    with pytest.raises(SpecError, match=r"gold-answer file 'nope\.csv' does not exist"):
        parse_attack_spec(body % "nope.csv", base_dir=tmp_path)


def test_deeply_nested_json_is_one_line(tmp_path):
    """A battery items file nested thousands deep is refused in one line (json.loads would
    raise a RecursionError traceback)."""
    from dbpa_core.attacks.items import ItemsError, load_items

    deep = "[" * 100_000 + "]" * 100_000
    for name, text, fmt in (
        ("deep.json", deep, "strategyqa"),
        ("deep.jsonl", '{"a": ' + deep + "}\n", "jsonl"),
    ):
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(ItemsError, match="nested too deeply") as exc:
            load_items(path, format=fmt)
        assert "\n" not in str(exc.value)


@pytest.mark.parametrize(
    "name, text, found",
    [
        # SST-2's layout is not CREAK's: its label is 0/1, not true/false
        (
            "sst2.jsonl",
            json.dumps({"sentence": "a fine film", "label": 1}) + "\n",
            "whose label is 1 (CREAK's is true or false)",
        ),
        # a SQuAD-like file is not ours with one misspelt field
        (
            "squad.jsonl",
            json.dumps({"question": "q?", "answer": "a", "context": "c"}) + "\n",
            "JSON lines with the fields answer, context, question",
        ),
        # numbered prose is not a bAbI task (no question with its answer after a tab)
        ("notes.txt", "1 first point\n2 second point\n", "neither JSON, a CSV table nor a bAbI task"),
    ],
)
def test_a_look_alike_of_a_known_format_is_not_read_as_it(name, text, found):
    with pytest.raises(ItemsError) as err:
        parse_items_text(text, source=name)
    assert found in str(err.value) and "cannot tell which data set" in str(err.value)


def test_a_file_named_like_esnli_is_esnli_only_beside_its_siblings(tmp_path):
    ours = tmp_path / "labels.jsonl"  # our format, named 'labels'
    ours.write_text(json.dumps({"question": "Which?", "options": ["x", "y"], "answer": "A"}) + "\n")
    assert [it.question for it in load_items(ours)] == ["Which?"]


def test_creak_refuses_a_label_that_is_not_true_or_false(tmp_path):
    p = tmp_path / "dev.json"
    p.write_text(
        json.dumps({"ex_id": "a", "sentence": "s", "label": "true"})
        + "\n"
        + json.dumps({"ex_id": "b", "sentence": "t", "label": "maybe"})
        + "\n"
    )
    with pytest.raises(ItemsError, match=r"line 2: a CREAK label is true or false, got 'maybe'"):
        load_items(p)


def test_the_qasc_layout_without_facts_is_named_after_its_file(tmp_path):
    row = {
        "id": "q1",
        "answerKey": "B",
        "question": {
            "stem": "Where do fish live?",
            "choices": [{"label": "A", "text": "trees"}, {"label": "B", "text": "water"}],
        },
    }
    p = tmp_path / "ARC-Easy-Test.jsonl"  # ARC and CommonsenseQA share QASC's layout
    p.write_text(json.dumps(row) + "\n")
    assert {it.dataset for it in load_items(p)} == {"ARC-Easy-Test"}
    p2 = tmp_path / "dev.jsonl"
    p2.write_text(json.dumps({**row, "fact1": "Fish live in water.", "fact2": "x"}) + "\n")
    assert {it.dataset for it in load_items(p2)} == {"qasc"}


def test_an_item_without_options_is_left_out_with_a_warning(tmp_path):
    from dbpa_core.attacks.items import ItemsWarning, load_items

    p = tmp_path / "qa1_test.txt"
    p.write_text(
        "1 Mary went to the kitchen.\n2 Where is Mary?\tkitchen\t1\n"
        "1 Zork is blorp.\n2 What is Zork?\tqwzx\t1\n"
        "1 John went to the kitchen.\n2 Where is John?\tkitchen\t1\n"
    )
    with pytest.warns(ItemsWarning, match=r"1 of 3 items left out.*ids 4"):
        items = load_items(p, format="babi")
    assert [it.id for it in items] == ["2", "6"]
    q = tmp_path / "qed-dev.jsonlines"
    q.write_text(
        "\n".join(
            json.dumps(
                {
                    "example_id": str(k),
                    "question_text": "q",
                    "paragraph_text": f"It is {a}.",
                    "annotation": {"answer": [{"paragraph_reference": {"string": a}}]},
                }
            )
            for k, a in enumerate(["Paris", "qwzx blorp"])
        )
        + "\n"
    )
    with pytest.warns(ItemsWarning, match=r"1 of 2 items left out.*ids 1"):
        assert len(load_items(q, format="qed")) == 1


def test_items_left_out_are_said_in_the_estimate_and_the_result(tmp_path, capsys):
    """An item whose answer gets no options is left out of the data (not the whole file),
    and the spec carries the note to `--estimate` and to the result's warnings, in words,
    not as a Python warning."""
    import warnings

    from dbpa_core.attacks.spec import load_attack_spec
    from dbpa_core.cli import main

    data = tmp_path / "qa1_test.txt"
    data.write_text(
        "1 Mary went to the kitchen.\n2 Where is Mary?\tkitchen\t1\n"
        "1 Zork is blorp.\n2 What is Zork?\tqwzx\t1\n"
        "1 John went to the garden.\n2 Where is John?\tgarden\t1\n"
    )
    spec = tmp_path / "s.yaml"
    spec.write_text(f"model: {{backend: local}}\ndata: {data}\nconsistency: {{option_orders: 2}}\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing escapes as a Python warning
        loaded = load_attack_spec(spec)
    assert len(loaded.items) == 2
    assert len(loaded.notes) == 1 and "1 of 3 items left out" in loaded.notes[0]
    assert main(["attack", str(spec), "--estimate"]) == 0
    assert "note: " in capsys.readouterr().err and "left out" in loaded.notes[0]
