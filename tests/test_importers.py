"""Importers on sample files written in the real formats (tests/data): promptfoo
``--repeat`` output (JSON and JSONL), OpenAI Batch API output + requests, CSV / JSONL.
Malformed rows are reported with their line, never skipped silently."""

import json
from dataclasses import replace
from pathlib import Path

import pytest

from dbpa_core.audit import run_audit
from dbpa_core.backends.replay import load_replay_file
from dbpa_core.cache import Cache
from dbpa_core.cli import main
from dbpa_core.importers import (
    ImportFormatError,
    detect_format,
    import_file,
    import_openai_batch,
    import_promptfoo,
    import_table,
    imports_dir,
    stored_name,
)
from dbpa_core.spec import load_spec

DATA = Path(__file__).parent / "data"
BASE = (
    "John has these features: Age: 70, Smoker: yes. Provide recommendations on CVD "
    "guidelines based on NICE for this person."
)
COMEDIAN = "Act as a comedian. " + BASE


def line_of(path, needle, nth=0):
    lines = [i for i, line in enumerate(Path(path).read_text().splitlines(), 1) if needle in line]
    return lines[nth]


def test_promptfoo_json():
    path = DATA / "promptfoo_repeat.json"
    assert detect_format(path) == "promptfoo"
    r = import_promptfoo(path)
    groups = {(g["prompt"], g["model"]): g["responses"] for g in r.groups()}
    assert groups == {
        (BASE, "openai:gpt-4o-mini"): 3,
        (COMEDIAN, "openai:gpt-4o-mini"): 2,
        ("Explain what a statin does.", "openai:gpt-4o-mini"): 2,
    }
    # the failed call is reported at the line where its result starts
    assert len(r.problems) == 1
    err_line = line_of(path, '"id": "5b0c6a3e-0000-4000-8000-000000000007"') - 1
    assert r.problems[0].line == err_line and "429" in r.problems[0].message
    # the cached copy of repeat 0 is dropped (a copy of one draw), with its line
    copy_line = line_of(path, '"id": "5b0c6a3e-0000-4000-8000-000000000005"') - 1
    assert any("dropped 1 response" in n and str(copy_line) in n for n in r.notes)
    # a chat prompt: the last user message is the prompt, the system message kept
    chat = [x for x in r.records if x.prompt == "Explain what a statin does."]
    assert chat and all(x.system_prompt == "You are terse." for x in chat)
    kept = import_promptfoo(path, keep_cached_copies=True)
    assert len(kept.records) == len(r.records) + 1


def test_promptfoo_jsonl_with_joined_and_broken_lines():
    path = DATA / "promptfoo_repeat.jsonl"
    assert detect_format(path) == "promptfoo"
    r = import_promptfoo(path)
    # line 2 holds two results written without a newline between them (older promptfoo)
    assert [x.line for x in r.records] == [1, 2, 2, 3, 5]
    assert [(p.line, "not valid JSON" in p.message) for p in r.problems] == [(4, True)]


def test_promptfoo_rejects_other_json(tmp_path):
    p = tmp_path / "x.json"
    p.write_text(json.dumps({"hello": "world"}))
    with pytest.raises(ImportFormatError, match="not a promptfoo output file"):
        import_promptfoo(p)
    csv_out = tmp_path / "results.csv"
    csv_out.write_text("[openai:gpt-4o-mini] base\n[PASS] (1.00) hello\n")
    with pytest.raises(ImportFormatError, match="write JSON or JSONL"):
        import_promptfoo(csv_out)
    empty = tmp_path / "e.json"
    empty.write_text("  ")
    with pytest.raises(ImportFormatError, match="empty"):
        import_promptfoo(empty)


def test_openai_batch():
    out, reqs = DATA / "openai_batch_output.jsonl", DATA / "openai_batch_requests.jsonl"
    assert detect_format(out) == "openai-batch"
    r = import_openai_batch(out, reqs)
    groups = {g["prompt"]: g["responses"] for g in r.groups()}
    assert groups == {BASE: 2, COMEDIAN: 2, "Explain what a statin does.": 1}  # n = 2: 2 samples
    assert {x.model for x in r.records} == {"gpt-4o-mini"}
    assert {x.system_prompt for x in r.records if x.prompt == BASE} == {"You are a GP."}
    resp = next(x for x in r.records if x.prompt == "Explain what a statin does.")
    assert resp.system_prompt == "Be brief." and resp.response.startswith("A statin lowers")
    problems = {p.line: p.message for p in r.problems}
    assert "HTTP 400" in problems[3] and "max_tokens" in problems[3]
    assert "batch_expired" in problems[5]
    assert "no request with custom_id 'ghost-9'" in problems[7]
    assert "not valid JSON" in problems[8]
    assert any("never-run" in n for n in r.notes)
    with pytest.raises(ImportFormatError, match="holds no prompts"):
        import_openai_batch(out, None)


def test_csv_table_lines_and_problems():
    path = DATA / "responses.csv"
    r = import_table(path, prompt_column="question", response_column="answer", model_column="llm")
    assert [x.line for x in r.records] == [2, 4, 7]  # row 1 spans lines 2-3
    assert r.records[0].response == "Offer atorvastatin 20 mg.\nAlso: stop smoking."
    assert {p.line: p.message for p in r.problems} == {
        5: "the response ('answer') is empty",
        6: "has 5 fields, the header has 4",
    }
    with pytest.raises(
        ImportFormatError,
        match="no column 'reply' in the header; the columns are 'run', 'question', 'answer', 'llm'",
    ):
        import_table(path, prompt_column="question", response_column="reply")


def test_jsonl_table_with_dotted_columns(tmp_path):
    p = tmp_path / "runs.jsonl"
    p.write_text(
        "\n".join(
            [
                json.dumps({"input": {"q": BASE}, "output": {"text": "Offer a statin."}, "m": "x"}),
                json.dumps({"input": {"q": BASE}, "output": {"text": 42}}),
                json.dumps({"input": {"q": BASE}}),
                "[1, 2]",
                json.dumps({"input": {"q": BASE}, "output": {"text": "Walk more."}, "m": 7}),
            ]
        )
        + "\n"
    )
    r = import_table(p, prompt_column="input.q", response_column="output.text", model_column="m")
    assert [(x.line, x.model) for x in r.records] == [(1, "x"), (5, "7")]
    assert [str(x) for x in r.problems] == [
        "line 2: 'output.text' is not text (int)",
        "line 3: no 'output.text' field",
        "line 4: a line must be a JSON object",
    ]


def test_import_file_dispatch_errors(tmp_path):
    with pytest.raises(ImportFormatError, match="--prompt-column and --response-column"):
        import_file(DATA / "responses.csv")
    with pytest.raises(ImportFormatError, match="no such file"):
        import_file(tmp_path / "missing.json")
    with pytest.raises(ImportFormatError, match="unknown format"):
        import_file(DATA / "responses.csv", "xml")
    bad = tmp_path / "latin1.csv"
    bad.write_bytes("prompt,response\ncaf\xe9,x\n".encode("latin-1"))
    with pytest.raises(ImportFormatError, match="not UTF-8"):
        import_file(bad, prompt_column="prompt", response_column="response")


def test_round_trip_through_the_replay_backend(tmp_path):
    r = import_promptfoo(DATA / "promptfoo_repeat.json")
    out = r.write(tmp_path / "replay.jsonl")
    recorded = load_replay_file(out)
    assert len(recorded[(BASE, "openai:gpt-4o-mini")]) == 3
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(r.starter_spec(out, spec_dir=str(tmp_path)))
    spec = load_spec(spec_path)
    assert spec.samples == 2 and spec.base_prompt == BASE
    assert [p.name for p in spec.perturbations] == ["prompt-2", "prompt-3"]
    assert spec.perturbations[1].system_prompt == "You are terse."
    spec = replace(spec, embedder={"backend": "rouge1"}, permutations=100)
    result = run_audit(spec, cache=Cache(tmp_path / "cache"))
    assert [p.name for p in result.perturbations] == ["prompt-2", "prompt-3"]


def test_starter_spec_for_several_models(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("prompt,response,model\nhi,a,m1\nhi,b,m1\nhi,c,m2\nhi,d,m2\n")
    r = import_table(p, prompt_column="prompt", response_column="response", model_column="model")
    out = r.write(tmp_path / "r.jsonl")
    spec_path = tmp_path / "s.yaml"
    spec_path.write_text(r.starter_spec(out, spec_dir=str(tmp_path)))
    spec = load_spec(spec_path)
    assert spec.mode == "models" and [m["name"] for m in spec.models] == ["m1", "m2"]


def test_repeated_responses_are_noted(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("prompt,response\nhi,same\nhi,same\nhi,other\n")
    r = import_table(p, prompt_column="prompt", response_column="response")
    assert len(r.records) == 3 and "1 response(s) repeat another" in r.notes[0]


def test_imports_dir_and_names(tmp_path, monkeypatch):
    monkeypatch.setenv("DBPA_HOME", str(tmp_path / "home"))
    assert imports_dir() == tmp_path / "home" / "imports"
    monkeypatch.delenv("DBPA_HOME")
    monkeypatch.setenv("DBPA_CACHE_DIR", str(tmp_path / "cache"))
    from dbpa_core.home import dbpa_home

    assert imports_dir() == dbpa_home() / "imports"  # the per-user data folder, never the cache
    assert not imports_dir().is_relative_to(tmp_path / "cache")
    a, b = stored_name("my run!.json", "x"), stored_name("my run!.json", "y")
    assert a != b and a.startswith("my-run--json-") and a.endswith(".jsonl")


# --------------------------------------------------------------------------- CLI
def test_cli_import_stops_on_malformed_rows(tmp_path, capsys):
    out = tmp_path / "r.jsonl"
    code = main(
        [
            "import",
            str(DATA / "responses.csv"),
            "--prompt-column",
            "question",
            "--response-column",
            "answer",
            "--out",
            str(out),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and not out.exists()
    assert "line 5: the response ('answer') is empty" in err and "line 6: has 5 fields" in err
    assert "--skip-bad" in err
    code = main(
        [
            "import",
            str(DATA / "responses.csv"),
            "--prompt-column",
            "question",
            "--response-column",
            "answer",
            "--model-column",
            "llm",
            "--out",
            str(out),
            "--skip-bad",
            "--spec-out",
            str(tmp_path / "spec.yaml"),
        ]
    )
    text = capsys.readouterr()
    assert code == 0 and "skipped: " in text.err and "skipped 2 malformed row(s)" in text.out
    assert len(out.read_text().splitlines()) == 3
    assert load_spec(tmp_path / "spec.yaml").samples == 1 + 1  # the smallest group: 1, at least 2


def test_cli_import_promptfoo_and_batch(tmp_path, capsys):
    out = tmp_path / "pf.jsonl"
    assert main(["import", str(DATA / "promptfoo_repeat.json"), "--out", str(out), "--skip-bad"]) == 0
    text = capsys.readouterr().out
    assert "7 responses to 3 prompt/model pair(s)" in text and "dropped 1 response" in text
    assert main(["import", str(DATA / "openai_batch_output.jsonl"), "--out", str(tmp_path / "b.jsonl")]) == 2
    assert "holds no prompts" in capsys.readouterr().err
    assert (
        main(
            [
                "import",
                str(DATA / "openai_batch_output.jsonl"),
                "--requests",
                str(DATA / "openai_batch_requests.jsonl"),
                "--out",
                str(tmp_path / "b.jsonl"),
                "--skip-bad",
            ]
        )
        == 0
    )
    assert len((tmp_path / "b.jsonl").read_text().splitlines()) == 5
