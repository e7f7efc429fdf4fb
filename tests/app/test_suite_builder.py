"""Issue 33: a suite built on the Suite page by pointing and clicking — five cases pasted
into the grid, two presets (persona prefixes and a name swap), a check — run on recorded
answers (a replay file), gives the same pooled verdicts as ``dbpa audit`` on the page's
suite.yaml and cases.csv; the builder's pieces (reading cases, the spec it writes, the
fields it flags) on their own."""

import io
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from dbpa_core.audit import build_arms
from dbpa_core.spec import SpecError, load_spec, parse_spec
from dbpa_core.suite import case_spec

from .conftest import errors, plain, successes

SUITE = "pages/suite.py"
PASTED = (
    "id\tname\tage\tsmoker\n"
    "c1\tJohn\t70\tyes\nc2\tMary\t58\tno\nc3\tDavid\t45\tyes\nc4\tSusan\t66\tno\nc5\tPeter\t39\tyes\n"
)
BASE = "{name} is {age}, smoker: {smoker}. Should {name} take a statin?"
CALM = ["Yes, a statin is advised.", "A statin lowers the risk.", "Consider a statin and exercise."]
JOKE = ["Ha! Pills are for ducks.", "Why did the statin cross the road?", "Laugh more, that is all."]


def _doc(replay: str) -> dict:
    """The suite the test builds on the page, written by hand (to record its answers)."""
    cases = [
        dict(zip(("id", "name", "age", "smoker"), r.split("\t"), strict=True))
        for r in PASTED.split("\n")[1:-1]
    ]
    return {
        "name": "suite",
        "samples": 6,
        "permutations": 200,
        "model": {"backend": "replay", "file": replay},
        "embedder": {"backend": "rouge1"},
        "cases": cases,
        "base": {"prompt": BASE},
        "perturbations": [
            {"name": "comedian", "prefix": "Act as a comedian."},
            {"name": "child", "prefix": "Act as a child."},
            {"name": "name: Jamal", "set": {"name": "Jamal"}},
            {"name": "name: Emily", "set": {"name": "Emily"}},
        ],
    }


def record_answers(path: Path) -> Path:
    """Recorded answers (a replay file at ``path``) to every prompt of the suite: jokes for
    the personas, the same calm advice for the base prompts and the renamed ones (six
    answers a prompt). The browser test of the page records the same."""
    path.write_text("")
    spec = parse_spec(_doc(str(path)))
    lines = []
    for case in spec.cases:
        for arm in build_arms(case_spec(spec, case)):
            pool = JOKE if arm.prompt.startswith("Act as") else CALM
            lines += [json.dumps({"prompt": arm.prompt, "response": pool[i % 3]}) for i in range(6)]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def replay(tmp_path):
    return str(record_answers(tmp_path / "recorded.jsonl"))


def test_build_run_and_download_a_suite_like_dbpa_audit(make_app, replay, tmp_path):
    model = {"backend": "replay", "file": replay, "label": "recorded"}
    at = make_app(
        models=[model],
        page=SUITE,
        w_samples=6,
        w_permutations=200,
        w_embedder="rouge1",
        w_correction="bh",
        checks_table=pd.DataFrame(
            [{"name": "mentions a statin", "kind": "contains", "value": "statin", "all": False}]
        ).astype({"all": "boolean"}),
    )
    # the cases: pasted from a spreadsheet into the grid
    at.text_area(key="suite_paste").set_value(PASTED).run()
    at.button(key="suite_paste_use").click().run()
    assert any("Read 5 pasted cases" in s for s in successes(at)), successes(at)
    assert list(at.session_state["_suite_cases"]["id"]) == ["c1", "c2", "c3", "c4", "c5"]
    # the base prompt: a template over the pasted fields
    at.text_area(key="w_suite_base").set_value("{name} is {age}. Should {name} take a statin?").run()
    assert any("`smoker`" in w and "no template" in w for w in [plain(w.value) for w in at.warning])
    at.text_area(key="w_suite_base").set_value(BASE).run()
    assert not any("no template" in plain(w.value) for w in at.warning)
    # two presets, after the example's perturbations are removed
    at.button(key="suite_pert_clear").click().run()
    at.multiselect(key="suite_personas").set_value(["comedian", "child"]).run()
    at.selectbox(key="suite_personas_role").set_value("").run()
    at.button(key="suite_add_personas").click().run()
    assert at.selectbox(key="suite_swap_field").value == "name"
    at.multiselect(key="suite_swap_names").set_value(["Jamal", "Emily"]).run()
    at.selectbox(key="suite_swap_role").set_value("").run()
    at.button(key="suite_add_swap").click().run()
    assert not at.exception, at.exception
    assert not errors(at), errors(at)
    perts = at.session_state["_suite_perts"]
    assert list(perts["name"]) == ["comedian", "child", "name: Jamal", "name: Emily"]
    # the preview: one case's prompts
    assert at.selectbox(key="suite_preview_case").options == ["c1", "c2", "c3", "c4", "c5"]
    shown = [c.value for c in at.code]
    assert "Act as a comedian. John is 70, smoker: yes. Should John take a statin?" in shown
    assert "Jamal is 70, smoker: yes. Should Jamal take a statin?" in shown
    # before the run: calls, and what the correction allows
    calls = next(m for m in at.metric if m.label == "Recorded answers to read")
    assert calls.value == str(5 * 5 * 6)
    assert any("The smallest p each test can reach" in c.value for c in at.caption)
    at.button(key="suite_run").click().run()
    assert not at.exception, at.exception
    assert not errors(at), errors(at)
    summary = at.session_state["results"]["suite"]["suite"]
    verdicts = {d["perturbation"]: d["significant"] for d in summary["pooled"]}
    assert verdicts == {"comedian": True, "child": True, "name: Jamal": False, "name: Emily": False}
    # in words, first
    said = [plain(i.value) for i in at.info]
    assert any(s.startswith("2 of 4 perturbations change the answers") for s in said), said
    assert any("comedian" in plain(m.value) and "changes the answers" in plain(m.value) for m in at.markdown)
    # one case's answers side by side, with the check's marks
    side = next(d.value for d in at.dataframe if "base answer" in d.value.columns)
    assert len(side) == 6 and side.filter(like="checks").iloc[:, 0].str.contains("mentions a statin").all()
    # recorded in History, with its report and the results as downloads
    assert at.session_state["results_meta"]["suite"]["record"] is not None
    assert {"suite_dl_report", "suite_dl_json"} <= {b.key for b in at.get("download_button")}
    # the two files of the downloads run unchanged with `dbpa audit`: the same verdicts
    doc = at.session_state["_suite_doc"]
    from ui import suite_builder

    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "suite.yaml").write_text(suite_builder.spec_yaml(doc))
    (tmp_path / "run" / "cases.csv").write_text(suite_builder.cases_csv(doc))
    assert load_spec(tmp_path / "run" / "suite.yaml").n_tests == 20
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "dbpa_core.cli",
            "audit",
            str(tmp_path / "run" / "suite.yaml"),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    cli = json.loads((out / "results.json").read_text())
    assert [(d["perturbation"], d["significant"]) for d in cli["pooled"]] == [
        (d["perturbation"], d["significant"]) for d in summary["pooled"]
    ]
    assert [d["p_value"] for d in cli["pooled"]] == pytest.approx([d["p_value"] for d in summary["pooled"]])


def test_reading_cases():
    from ui.suite_builder import CasesError, parse_pasted, read_cases

    df = parse_pasted("name,age\nJohn,70\nMary,58\n")
    assert list(df.columns) == ["id", "name", "age"] and list(df["id"]) == ["1", "2"]
    df = read_cases("c.jsonl", b'{"id": "a", "age": 3}\n\n{"id": "b", "age": 4}\n')
    assert list(df["id"]) == ["a", "b"] and list(df["age"]) == ["3", "4"]
    with pytest.raises(CasesError, match=r"c\.jsonl, line 2: not valid JSON"):
        read_cases("c.jsonl", b'{"id": "a"}\n{oops\n')
    with pytest.raises(CasesError, match="row 3: more cells than the header"):
        parse_pasted("a,b\n1,2\n1,2,3\n")
    with pytest.raises(CasesError, match="the column 'a' appears twice"):
        parse_pasted("a,a\n1,2\n")
    with pytest.raises(CasesError, match="not UTF-8"):
        read_cases("c.csv", b"\xff\xfe\x00a")


def test_reading_cases_from_a_spreadsheet():
    """An .xlsx upload (the first sheet): numbers read as the text a person typed, empty
    cells as empty text; a file that is not a spreadsheet says so in one line."""
    import openpyxl

    from ui.suite_builder import XLSX, CasesError, read_cases

    assert XLSX  # the app extra installs openpyxl
    book = openpyxl.Workbook()
    sheet = book.active
    for row in (["name", "age", "note"], ["John", 70, "smoker"], ["Mary", 58, None]):
        sheet.append(row)
    book.create_sheet("other").append(["ignored"])
    buf = io.BytesIO()
    book.save(buf)
    df = read_cases("Vignettes.XLSX", buf.getvalue())
    assert list(df.columns) == ["id", "name", "age", "note"]
    assert df.to_dict("records") == [
        {"id": "1", "name": "John", "age": "70", "note": "smoker"},
        {"id": "2", "name": "Mary", "age": "58", "note": ""},
    ]
    with pytest.raises(CasesError, match=r"^cases\.xlsx: not a readable spreadsheet"):
        read_cases("cases.xlsx", b"id,name\n1,John\n")


def test_the_spec_it_writes_reads_back(tmp_path):
    from ui.suite_builder import cases_csv, perturbation_entries, spec_yaml, unused_fields

    perts = pd.DataFrame(
        [
            {"name": "renamed", "kind": "set", "value": "name=Ahmed; age=80", "role": "control"},
            {"name": "polite", "kind": "suffix", "value": "Please.", "role": ""},
        ]
    )
    entries = perturbation_entries(perts)
    assert entries[0] == {"name": "renamed", "set": {"name": "Ahmed", "age": "80"}, "role": "control"}
    assert entries[1] == {"name": "polite", "suffix": "Please."}
    doc = {
        "name": "s",
        "samples": 3,
        "model": {"backend": "local"},
        "cases": [{"id": "1", "name": "John", "age": "70", "note": "x"}],
        "base": {"prompt": "{name} is {age}."},
        "perturbations": entries,
    }
    assert unused_fields(doc) == ["note"]
    (tmp_path / "suite.yaml").write_text(spec_yaml(doc))
    (tmp_path / "cases.csv").write_text(cases_csv(doc))
    assert yaml.safe_load(spec_yaml(doc))["cases"] == {"file": "cases.csv"}
    spec = load_spec(tmp_path / "suite.yaml")
    assert [c.id for c in spec.cases] == ["1"] and spec.perturbations[1].suffix == "Please."
    assert case_spec(spec, spec.cases[0]).perturbations[0].prompt == "Ahmed is 80."


def test_the_batterys_attacks_as_perturbations_read_back(tmp_path):
    """A typo preset in the table -> the spec's ``attack:`` -> the YAML that ``dbpa audit``
    reads -> the same rows; each case's prompt attacked with its own seed."""
    from ui.suite_builder import attack_entry, attack_rows, perturbation_entries, perturbation_rows, spec_yaml

    rows = attack_rows("char", 0.25, seed=7) + attack_rows("visual", 0.5, role="target")
    assert [r["name"] for r in rows] == ["typos ρ=0.25", "homoglyphs ρ=0.5"]
    entries = perturbation_entries(pd.DataFrame(rows))
    assert entries[0] == {
        "name": "typos ρ=0.25",
        "attack": {"level": "char", "rho": 0.25, "seed": 7},
        "role": "control",
    }
    assert attack_entry("visual; rho=x") == {"level": "visual", "rho": "x"}  # the spec check names it
    doc = {
        "name": "s",
        "model": {"backend": "local"},
        "cases": [{"id": "a", "name": "John"}, {"id": "b", "name": "John"}],
        "base": {"prompt": "{name} has chest pain and shortness of breath. What should {name} do?"},
        "perturbations": entries,
    }
    (tmp_path / "suite.yaml").write_text(spec_yaml(doc))
    (tmp_path / "cases.csv").write_text("id,name\na,John\nb,John\n")
    spec = load_spec(tmp_path / "suite.yaml")
    assert perturbation_rows(spec) == rows
    a, b = (case_spec(spec, c).perturbations[0].prompt for c in spec.cases)
    base = case_spec(spec, spec.cases[0]).base_prompt
    assert a != base and b != base and a != b  # attacked, a draw per case
    assert case_spec(spec, spec.cases[0]).perturbations[0].prompt == a  # seeded: the same again
    with pytest.raises(SpecError, match=r"attack\.rho must be a number, got 'x'"):
        parse_spec(
            {
                **doc,
                "perturbations": perturbation_entries(pd.DataFrame([{**rows[0], "value": "char, rho=x"}])),
            }
        )


def test_the_recorded_suite_shows_at_once_in_demo_mode(make_app, monkeypatch):
    """Demo mode, nothing loaded: the example suite's recorded result is drawn on the first
    view (its verdict in words, the heat map, one case's answers), labelled as recorded;
    with the recording's settings it is current, and Run suite replays it without a call."""
    from dbpa_core.backends import local

    from .conftest import DEMO

    monkeypatch.setenv("DBPA_REPLAY_FILE", DEMO)
    loaded = dict(local._LOADED)
    at = make_app(models=None, page=SUITE)
    assert not at.exception, at.exception
    assert not errors(at), errors(at)
    said = [plain(i.value) for i in at.info]
    assert any(s.startswith("**Recorded result**") and "k = 5" in s for s in said), said
    assert any("perturbations change the answers across the cases" in s for s in said), said
    assert len(at.get("plotly_chart")) == 1
    assert any("base answer" in d.value.columns for d in at.dataframe)  # the side-by-side answers
    assert local._LOADED == loaded  # no model loaded
    # the sidebar's k = 20 is not the recording's: marked, and one click fixes it
    assert any("Outdated" in plain(w.value) for w in at.warning)
    at.button(key="suite_rec_settings").click().run()
    assert at.session_state["w_samples"] == 5
    assert not any("Outdated" in plain(w.value) for w in at.warning), [w.value for w in at.warning]
    at.button(key="suite_run").click().run()
    assert not at.exception, at.exception
    assert not errors(at), errors(at)
    summary = at.session_state["results"]["suite"]["suite"]
    recorded = json.loads((Path(DEMO).parent / "demo_suite.json").read_text())
    assert local._LOADED == loaded  # replayed: no model loaded
    assert len(summary["answers"]) == len(recorded["answers"])
    assert sorted(a["response"] for a in summary["answers"]) == sorted(
        a["response"] for a in recorded["answers"]
    )


def test_a_reload_reopens_the_suite_and_says_its_run_did_not_finish(make_app, replay):
    """The suite on screen survives a reload (a fresh session); a run that did not finish
    (stopped, or the tab reloaded while it ran) is named, with what it cached."""
    from ui import suite_builder

    model = {"backend": "replay", "file": replay, "label": "recorded"}
    at = make_app(models=[model], page=SUITE, w_samples=6, w_embedder="rouge1")
    at.text_area(key="suite_paste").set_value(PASTED).run()
    at.button(key="suite_paste_use").click().run()
    at.text_area(key="w_suite_base").set_value(BASE).run()
    doc = at.session_state["_suite_doc"]
    assert suite_builder.read_draft()["doc"] == doc and suite_builder.read_draft()["status"] is None
    suite_builder.save_draft(doc, status=suite_builder.RUNNING)  # what a run that never ended leaves
    again = make_app(models=[model], page=SUITE, w_samples=6, w_embedder="rouge1")  # a reload
    assert list(again.session_state["_suite_cases"]["id"]) == ["c1", "c2", "c3", "c4", "c5"]
    assert again.text_area(key="w_suite_base").value == BASE
    said = [plain(i.value) for i in again.info]
    assert any("did not finish" in s and "Run suite" in s for s in said), said
    # another suite on screen: not that run's
    again.text_area(key="w_suite_base").set_value(BASE + " Briefly.").run()
    assert not any("did not finish" in plain(i.value) for i in again.info)
    # a run that finishes clears it
    again.text_area(key="w_suite_base").set_value(BASE).run()
    suite_builder.save_draft(again.session_state["_suite_doc"], status=suite_builder.RUNNING)
    again.run()
    assert any("did not finish" in plain(i.value) for i in again.info)
    again.button(key="suite_pert_clear").click().run()
    again.multiselect(key="suite_personas").set_value(["comedian"]).run()
    again.button(key="suite_add_personas").click().run()
    suite_builder.save_draft(again.session_state["_suite_doc"], status=suite_builder.RUNNING)
    again.button(key="suite_run").click().run()
    assert not errors(again), errors(again)
    assert suite_builder.read_draft()["status"] == suite_builder.DONE
    assert not any("did not finish" in plain(i.value) for i in again.info)


QUESTION = "Does the answer recommend a statin?"


def test_attack_preset_and_a_judge_check_on_the_page(make_app, replay):
    """The battery's typo attack added from the presets shows in one case's prompts; a judge
    row in the checks grid asks the judge model picked under it (here the recorded model,
    whose replies to the judge are recorded too): the preview marks it as needing a model
    call, and the run grades every answer with it."""
    from dbpa_core.checks import JUDGE_PROMPT

    with open(replay, "a") as f:  # the judge's replies: yes for advice, no for jokes
        for a in CALM + JOKE:
            prompt = JUDGE_PROMPT.format(answer=a, question=QUESTION)
            f.write(json.dumps({"prompt": prompt, "response": "yes" if a in CALM else "no"}) + "\n")
    model = {"backend": "replay", "file": replay, "label": "recorded"}
    at = make_app(
        models=[model],
        page=SUITE,
        w_samples=6,
        w_permutations=200,
        w_embedder="rouge1",
        checks_table=pd.DataFrame(
            [{"name": "recommends a statin", "kind": "judge", "value": QUESTION, "all": False}]
        ).astype({"all": "boolean"}),
    )
    at.text_area(key="suite_paste").set_value(PASTED).run()
    at.button(key="suite_paste_use").click().run()
    at.text_area(key="w_suite_base").set_value(BASE).run()
    at.button(key="suite_pert_clear").click().run()
    # the typo preset: one perturbation, each case's prompt attacked
    at.selectbox(key="suite_attack_level").set_value("char").run()
    at.slider(key="suite_attack_rho").set_value(0.5).run()
    at.button(key="suite_add_attack").click().run()
    assert not errors(at), errors(at)
    perts = at.session_state["_suite_perts"]
    assert perts.to_dict("records") == [
        {"name": "typos ρ=0.5", "kind": "attack", "value": "char, rho=0.5, seed=0", "role": "control"}
    ]
    base = "John is 70, smoker: yes. Should John take a statin?"
    shown = [c.value for c in at.code]
    assert base in shown and len(shown) == 2 and shown[1] != base
    # the judge: asked of the model picked under the grid, marked in the preview
    assert at.selectbox(key="w_judge_model").value == "recorded"
    at.text_area(key="suite_check_sample").set_value("Yes, a statin is advised.").run()
    preview = next(d.value for d in at.dataframe if "recommends a statin" in d.value.columns)
    assert preview["recommends a statin"].str.startswith("needs a model call").all()
    # run with the personas the recording answers
    at.button(key="suite_pert_clear").click().run()
    at.multiselect(key="suite_personas").set_value(["comedian"]).run()
    at.button(key="suite_add_personas").click().run()
    at.button(key="suite_run").click().run()
    assert not at.exception, at.exception
    assert not errors(at), errors(at)
    summary = at.session_state["results"]["suite"]["suite"]
    rows = [c for c in summary["checks"] if c["check"] == "recommends a statin"]
    assert len(rows) == 5  # one a case
    assert {(r["base_count"], r["base_n"], r["count"], r["n"]) for r in rows} == {(6, 6, 0, 6)}, rows[0]
    check = summary["spec"]["checks"][0]
    assert check["judge"]["question"] == QUESTION and check["judge"]["model"]["backend"] == "replay"
