"""A suite of cases in the run history: `dbpa audit` records it, `History` reads back its
tests and pooled tables and settings, `dbpa history` lists and shows it, and the list's
control gate comes from the pooled verdicts (on the SQLite file and on PostgreSQL)."""

import json

import pytest

from dbpa_core.cli import main
from dbpa_core.history import History, HistoryError, where_responses_live

from .fake_openai import FakeOpenAI
from .test_suite import suite_yaml, write_cases


def test_a_suite_audit_is_recorded_listed_and_shown(tmp_path, capsys, history_store):
    write_cases(tmp_path, 3)
    with FakeOpenAI(models=("fake-model", "fake-embed")) as srv:
        spec = suite_yaml(srv.base_url).replace("seed: 3", "seed: 3\nname: vignettes")
        (tmp_path / "s.yaml").write_text(spec.replace("role: target", "role: control"))
        rc = main(
            [
                "--cache-dir",
                str(tmp_path / "cache"),
                "audit",
                str(tmp_path / "s.yaml"),
                "--out",
                str(tmp_path / "out"),
                "--quiet",
            ]
        )
    captured = capsys.readouterr()
    assert rc == 0
    assert "not recorded" not in captured.err
    assert "recorded as run 1" in captured.out
    written = json.loads((tmp_path / "out" / "results.json").read_text())

    h = History()
    [summary] = h.list()
    assert summary.title == "vignettes" and summary.source == "cli"
    assert summary.n_tests == 6
    assert summary.n_significant == sum(t["significant"] for t in written["tests"])
    # the comedian (now a control) changes the answers across the cases: the gate fails
    assert summary.failed_controls == ("comedian",) and summary.control_gate == "fail"
    assert summary.models == ("fake-model",)
    assert summary.base_prompt.startswith("{name} is {age}")
    assert h.extras([1])[1]["kind"] == "suite"
    assert [r.id for r in h.list(model="FAKE-mod")] == [1] and h.list(model="gpt") == []
    assert "3 cases x 2 perturbations" in h.extras([1])[1]["headline"]

    back = h.suite(1)
    assert back["tests"] == written["tests"] and back["pooled"] == written["pooled"]
    assert back["spec"]["cases"] == written["spec"]["cases"]
    run = h.get(1)
    assert run.settings["samples"] == 6 and run.settings["correction"] == "bh"
    assert run.out_dir == str(tmp_path / "out") and run.audits == {}
    # a suite keeps numbers per test: its responses are in responses.jsonl and the cache
    assert (
        where_responses_live(run) == f"{tmp_path / 'out' / 'responses.jsonl'}; the cache {tmp_path / 'cache'}"
    )

    assert main(["history"]) == 0
    listing = capsys.readouterr().out
    assert "vignettes" in listing and "FAIL" in listing
    assert main(["history", "show", "1"]) == 0
    shown = capsys.readouterr().out
    assert "suite of cases of fake-model: 3 cases x 2 perturbations, " in shown
    assert "6 tests, one per case x perturbation" in shown
    assert "comedian (control)" in shown and "renamed" in shown
    assert "CONTROL GATE: FAIL" in shown
    # the suite's answers are kept with it (3 cases x 3 arms x k = 6)
    assert "in the history database" in shown and "(54 answers)" in shown
    assert main(["history", "show", "1", "--json"]) == 0
    as_json = json.loads(capsys.readouterr().out)
    assert as_json["suite"]["pooled"] == written["pooled"]


def test_no_history_and_a_suite_that_is_not_one(tmp_path, capsys):
    write_cases(tmp_path, 2)
    with FakeOpenAI(models=("fake-model", "fake-embed")) as srv:
        (tmp_path / "s.yaml").write_text(suite_yaml(srv.base_url))
        assert (
            main(
                [
                    "--cache-dir",
                    str(tmp_path / "cache"),
                    "audit",
                    str(tmp_path / "s.yaml"),
                    "--out",
                    str(tmp_path / "out"),
                    "--quiet",
                    "--no-history",
                ]
            )
            == 0
        )
    capsys.readouterr()
    h = History()
    assert h.list() == []
    other = h.record_result("sensitivity", {}, title="s", models=[])
    with pytest.raises(HistoryError, match="not a suite"):
        h.suite(other)
