"""Messages that say what to do (issue 36): a cache whose database is a folder, an items
file without its question or with a passage over the size limit."""

import json

import pytest

from dbpa_core.attacks.items import MAX_FIELD_CHARS, ItemsError, load_items
from dbpa_core.cli import main


def test_a_cache_database_that_is_a_folder_names_the_path_to_move(tmp_path, capsys):
    db = tmp_path / "cache" / "store" / "cache.db"
    db.mkdir(parents=True)
    assert main(["cache", "info", "--cache-dir", str(tmp_path / "cache")]) == 2
    err = capsys.readouterr().err
    assert f"its database {db} is a folder" in err
    assert f"mv {db} {db}.moved" in err and "--cache-dir ($DBPA_CACHE_DIR)" in err
    assert "Nothing in it was changed." in err and "Traceback" not in err
    assert db.is_dir() and not any(db.iterdir())  # nothing moved or removed for the user


def _write(path, *objs):
    path.write_text("".join(json.dumps(o) + "\n" for o in objs))
    return path


GOOD = {"id": "1", "passage": "Mary went home.", "question": "Where is Mary?", "options": ["home", "work"]}


def test_an_item_without_its_question_names_the_field_and_the_line(tmp_path):
    f = _write(
        tmp_path / "items.jsonl", {k: v for k, v in {**GOOD, "answer": "A"}.items() if k != "question"}
    )
    with pytest.raises(
        ItemsError, match=r"items.jsonl, line 1: missing 'question' \(the question the options"
    ):
        load_items(f)
    f = _write(
        tmp_path / "two.jsonl", {**GOOD, "answer": "A"}, {"id": "2", "options": ["a", "b"], "answer": "B"}
    )
    with pytest.raises(ItemsError, match=r"two.jsonl, line 2: missing 'question'"):
        load_items(f)


def test_a_passage_over_the_limit_says_its_size_and_the_limit(tmp_path):
    f = _write(tmp_path / "items.jsonl", {**GOOD, "passage": "word " * 200_000, "answer": "A"})
    with pytest.raises(
        ItemsError,
        match=rf"items.jsonl, line 1: 'passage' has 1_000_000 characters, over the limit of {MAX_FIELD_CHARS:_}",
    ):
        load_items(f)
    # just under the limit is read
    f = _write(tmp_path / "ok.jsonl", {**GOOD, "passage": "w" * (MAX_FIELD_CHARS - 1), "answer": "A"})
    assert len(load_items(f)) == 1


def test_other_formats_have_the_size_limit_too(tmp_path):
    f = _write(tmp_path / "train.jsonl", {"question": "x " * 60_000 + "?", "answer": "It is 4.\n#### 4"})
    with pytest.raises(
        ItemsError, match=r"train.jsonl: item .*'s question has 120_001 characters, over the limit"
    ):
        load_items(f)


def test_a_spec_whose_tests_would_run_for_hours_is_refused_before_any_call(tmp_path, capsys):
    from dbpa_core.spec import SpecError, parse_spec

    text = """
model: {backend: openai, name: m, base_url: "http://127.0.0.1:9/v1"}
embedder: {backend: rougeL}
samples: 100
permutations: 10000000
base: {prompt: "John is 70"}
perturbations: [{name: p, prompt: "Act as a comedian. John is 70"}]
"""
    with pytest.raises(
        SpecError,
        match=r"s.yaml, line 5: permutations: 10000000 with samples: 100 would take each test 2e\+11 pair "
        r"visits, over the 1e\+10 one test may take .*: lower permutations to at most 499999, or samples",
    ):
        parse_spec(text, source="s.yaml")
    parse_spec(text.replace("10000000", "400000"), source="s.yaml")  # under the bound


def test_a_history_database_that_is_a_folder_names_the_path_to_move(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DBPA_HOME", str(tmp_path))
    db = tmp_path / "history.sqlite3"
    db.mkdir()
    assert main(["history"]) == 2
    err = capsys.readouterr().err
    assert f"Cannot use the run history {db}: it is a folder, not a database file" in err
    assert f"mv {db} {db}.moved" in err and "DBPA_HOME (--home)" in err and "--no-history" in err
    assert db.is_dir()


def test_a_battery_spec_whose_tests_would_run_for_hours_is_refused_too():
    from dbpa_core.attacks.spec import parse_attack_spec
    from dbpa_core.spec import SpecError

    text = """
model: {backend: openai, name: m, base_url: "http://127.0.0.1:9/v1"}
data: sample
attacks: [{level: char, rho: [0.5]}]
samples: 200
permutations: 1000000
"""
    with pytest.raises(
        SpecError, match=r"b.yaml, line 6: permutations: 1000000 with samples: 200 would take"
    ):
        parse_attack_spec(text, source="b.yaml")
