"""The battery's output files: every column in results.csv (the page's download and
``dbpa attack --out``), atomic writes that never mix two runs, a full disk in one line,
and an empty option refused in one line."""

import csv
import errno
import io
import json

import pytest

from dbpa_core.attacks.battery import run_battery
from dbpa_core.attacks.items import ItemsError, parse_items_text
from dbpa_core.attacks.spec import parse_attack_spec
from dbpa_core.cache import Cache
from dbpa_core.cli import main

from .rule_model import passages_model, write_items


@pytest.fixture(scope="module")
def server():
    with passages_model() as srv:
        yield srv


@pytest.fixture
def data(tmp_path):
    return write_items(tmp_path / "items.jsonl")


def _spec(server, data, body):
    return f"""
model: {{backend: openai, name: rule-model, base_url: "{server.base_url}", max_retries: 0}}
data: {data}
{body}
"""


def test_results_csv_has_the_asr_columns(server, data, tmp_path):
    spec = parse_attack_spec(_spec(server, data, "attacks: [{level: char, rho: [1.0]}]"))
    res = run_battery(spec, cache=Cache(tmp_path / "c"))
    rows = list(csv.DictReader(io.StringIO(res.to_csv())))
    assert {"asr", "asr_low", "asr_high", "asr_unparsed"} <= set(rows[0])
    clean, attacked = rows[0], rows[1]
    assert clean["attack"] == "clean" and clean["asr"] == ""
    assert attacked["attack"] == "char" and float(attacked["asr"]) == res.attacks()[0].asr.value


def test_reused_out_folder_keeps_nothing_of_the_last_run(server, data, tmp_path, capsys):
    out = tmp_path / "out"
    first = tmp_path / "first.yaml"
    first.write_text(
        _spec(server, data, "attacks: [{level: char, rho: [1.0]}]\nconsistency: {option_orders: 2}")
    )
    assert main(["--cache-dir", str(tmp_path / "c"), "attack", str(first), "--out", str(out), "--quiet"]) == 0
    assert (out / "consistency.csv").exists()
    second = tmp_path / "second.yaml"
    second.write_text(_spec(server, data, "attacks: [{level: char, rho: [0.5]}]"))
    assert (
        main(["--cache-dir", str(tmp_path / "c"), "attack", str(second), "--out", str(out), "--quiet"]) == 0
    )
    assert not (out / "consistency.csv").exists()
    rows = list(csv.DictReader((out / "results.csv").open()))
    assert {r["rho"] for r in rows if r["attack"] != "clean"} == {"0.5"}
    assert "asr" in rows[0]
    assert not list(out.glob(".*.tmp"))


def test_full_disk_is_one_line_and_keeps_the_last_results(server, data, tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    spec = tmp_path / "s.yaml"
    spec.write_text(_spec(server, data, "attacks: [{level: char, rho: [1.0]}]"))
    args = ["--cache-dir", str(tmp_path / "c"), "attack", str(spec), "--out", str(out), "--quiet"]
    assert main(args) == 0
    before = (out / "results.json").read_text()
    capsys.readouterr()
    import dbpa_core.outputs as O

    real = O._write_text

    def full(path, text):
        if text:  # the folder check writes an empty probe; results hit the full disk
            raise OSError(errno.ENOSPC, "No space left on device")
        real(path, text)

    monkeypatch.setattr(O, "_write_text", full)
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "No space left on device" in err[0] and "cached" in err[0]
    assert (out / "results.json").read_text() == before
    assert not list(out.glob(".*.tmp"))


def test_out_on_dev_full_is_one_line(server, data, tmp_path, capsys):
    import os

    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    spec = tmp_path / "s.yaml"
    spec.write_text(_spec(server, data, "attacks: [{level: char, rho: [1.0]}]"))
    assert (
        main(["--cache-dir", str(tmp_path / "c"), "attack", str(spec), "--out", "/dev/full", "--quiet"]) == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "/dev/full" in err[0]


@pytest.mark.parametrize("options", [["", "b"], ["a", "  "]])
def test_an_empty_option_is_refused(options):
    line = json.dumps({"question": "q?", "options": options, "answer": "A"})
    with pytest.raises(ItemsError, match=r"x.jsonl, line 1: option [AB] is empty"):
        parse_items_text(line + "\n", source="x.jsonl")


def test_instruction_variants_are_the_papers_five_and_the_users_own_each_once(server, data):
    from dbpa_core.attacks.battery import plan
    from dbpa_core.attacks.consistency import INSTRUCTIONS

    body = (
        'consistency: {instructions: ["Pick one.", "Pick one.", '
        '"Complete the description with an appropriate ending:"]}'
    )
    spec = parse_attack_spec(_spec(server, data, body))
    assert spec.instructions == INSTRUCTIONS + ("Pick one.",)
    asked = plan(spec)["instruction"]
    assert len(asked) == 6 * len(spec.items)  # no variant for the item's own instruction
    assert sorted({q.variant for q in asked}) == list(range(6))
    assert all(q.item.instruction in spec.instructions for q in asked)


def test_answer_positions_show_a_model_that_always_says_one_letter(data, tmp_path):
    """The rule model answers A on every clean prompt: the summary, results.json and the
    warnings show it, beside where the right options are."""
    from dbpa_core.attacks.battery import summary_text

    with passages_model() as srv:
        items = write_items(tmp_path / "mixed.jsonl", 9, answers="ABC", prefix="m")
        spec = parse_attack_spec(_spec(srv, items, "attacks: [{level: char, rho: [0.5]}]"))
        res = run_battery(spec, cache=Cache(tmp_path / "c"))
    pos = res.to_dict()["answer_positions"]
    assert pos["gold"] == {"A": 3, "B": 3, "C": 3} and pos["answered"] == {"A": 9, "B": 0, "C": 0}
    assert pos["top"] == "A" and pos["top_share"] == 1.0
    assert "answer positions (clean): right A 3 B 3 C 3; answered A 9 B 0 C 0" in summary_text(res)
    assert any("answered A in 100%" in w for w in res.warnings)
    assert "Answer positions" in res.files()["report.html"]
