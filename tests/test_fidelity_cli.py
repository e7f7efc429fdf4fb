"""``dbpa fidelity`` end to end: the files it writes, the table it prints, every bad input
as one line with exit code 2 (no traceback, in a real process too), and --simulate
against the rule-based survey respondent (a rerun makes no call)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dbpa_core.cli import main

from .survey_model import SurveyModel
from .test_fidelity_simulate import SURVEY

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = str(ROOT / "assets" / "fidelity_sample.csv")


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DBPA_CACHE_DIR", str(tmp_path / "cache"))


def test_writes_the_files_and_prints_the_table(tmp_path, capsys):
    out = tmp_path / "out"
    rc = main(["fidelity", SAMPLE, "--loss", "tv", "--gamma", "0.5", "--eta", "0.05", "--out", str(out)])
    printed = capsys.readouterr()
    assert rc == 0, printed.err
    assert sorted(p.name for p in out.iterdir()) == [
        "comparisons.csv",
        "fidelity.csv",
        "fidelity.json",
        "report.html",
    ]
    doc = json.loads((out / "fidelity.json").read_text())
    sims = {s["name"]: s for s in doc["simulators"]}
    assert list(sims) == ["sim-close", "sim-biased", "sim-flat", "uniform"]
    assert len(sims["uniform"]["discrepancies"]) == 40
    assert sims["sim-close"]["auc_cal"] < sims["sim-biased"]["auc_cal"]
    pair = next(c for c in doc["comparisons"] if (c["first"], c["second"]) == ("sim-close", "sim-biased"))
    assert pair["u_hat"] <= 0 and pair["verdict"] == "first"
    assert (
        "sim-close is at least as good as sim-biased on at least 90 % of these questions "
        "(worst case over their confidence sets); for new questions like these, "
        "guaranteed on at least 13 %."
    ) in printed.out
    assert "AUC_cal" in printed.out and "wrote" in printed.out


def test_sample_keyword_and_values_data(tmp_path, capsys):
    assert main(["fidelity", "sample", "--out", str(tmp_path / "a"), "--no-band"]) == 0
    doc = json.loads((tmp_path / "a" / "fidelity.json").read_text())
    assert doc["simulators"][0]["band"] is None
    values = str(ROOT / "assets" / "fidelity_sample_values.csv")
    assert (
        main(["fidelity", values, "--loss", "squared", "--bounds", "0,10", "--out", str(tmp_path / "b")]) == 0
    )
    doc = json.loads((tmp_path / "b" / "fidelity.json").read_text())
    assert doc["settings"]["bounds"] == [0.0, 10.0] and doc["kind"] == "values"


@pytest.mark.parametrize(
    "args, message",
    [
        (["fidelity", "--out", "X"], "give a data file (or 'sample'), or --simulate SPEC.yaml"),
        (["fidelity", "missing.csv", "--out", "X"], "missing.csv: no such file"),
        (["fidelity", SAMPLE, "--gamma", "1.5", "--out", "X"], "`gamma` must lie in (0, 1)"),
        (["fidelity", SAMPLE, "--eta", "0", "--out", "X"], "`eta` must lie in (0, 1)"),
        (["fidelity", SAMPLE, "--loss", "kl", "--out", "X"], "gives option"),
        (
            ["fidelity", str(ROOT / "assets" / "fidelity_sample_values.csv"), "--loss", "tv", "--out", "X"],
            "compares distributions over options",
        ),
        (["fidelity", SAMPLE, "--bounds", "ten", "--out", "X"], "--bounds must be two numbers a,b"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err and err.startswith("error: ") and err.count("\n") == 1
    assert not (tmp_path / "X").exists() or not any((tmp_path / "X").iterdir())


def test_real_given_as_shares_is_one_line_with_the_fix(tmp_path, capsys):
    """QA M4: shares in `real` were read as one respondent per question, silently."""
    f = tmp_path / "real_fraction.csv"
    f.write_text("scenario,option,real,sim\nq1,A,0.6,3\nq1,B,0.4,4\nq2,A,0.7,1\nq2,B,0.3,2\n")
    assert main(["fidelity", str(f), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith(f"error: {f}, lines 2-3: the real answers of scenario 'q1' look like shares")
        and "must hold counts" in err
        and err.count("\n") == 1
    )


def test_malformed_csv_names_the_line(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("scenario,option,real,sim\na,x,1,1\na,y,-2,1\nb,x,1,1\nb,y,1,1\n")
    assert main(["fidelity", str(bad), "--out", str(tmp_path / "o")]) == 2
    assert f"error: {bad}, line 3: negative count -2 in column 'real'" in capsys.readouterr().err


def test_out_that_is_a_file(tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    assert main(["fidelity", SAMPLE, "--out", str(tmp_path / "f")]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err


def test_no_traceback_in_a_real_process(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("scenario,option,real\na,x,0\na,y,0\nb,x,1\nb,y,1\n")
    proc = subprocess.run(
        [sys.executable, "-m", "dbpa_core.cli", "fidelity", str(bad), "--out", str(tmp_path / "o")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().endswith("the real counts of scenario 'a' are all zero.")


def test_simulate_then_analyse_and_rerun_for_free(tmp_path, capsys):
    (tmp_path / "survey.csv").write_text(SURVEY)
    with SurveyModel() as srv:
        spec = tmp_path / "sim.yaml"
        spec.write_text(f"""
name: pets
data: survey.csv
models:
  - {{backend: openai, name: survey-model, base_url: "{srv.base_url}", label: survey, max_retries: 0}}
samples: 8
persona: {{Country: Atlantis}}
loss: absolute
""")
        assert main(["fidelity", "--simulate", str(spec), "--estimate"]) == 0
        assert "24 answers (3 questions x 1 model(s) x 8): 0 cached, 24 calls" in capsys.readouterr().out
        assert srv.requests == 0
        out = tmp_path / "out"
        assert main(["fidelity", "--simulate", str(spec), "--out", str(out), "--quiet"]) == 0
        printed = capsys.readouterr().out
        assert srv.requests == 24 and "24 new calls" in printed and "unparsed answers: survey" in printed
        assert {"data.csv", "answers.jsonl", "fidelity.json"} <= {p.name for p in out.iterdir()}
        doc = json.loads((out / "fidelity.json").read_text())
        assert doc["settings"]["loss"] == "absolute"
        assert [s["name"] for s in doc["simulators"]] == ["survey", "uniform"]
        lines = (out / "answers.jsonl").read_text().splitlines()
        assert len(lines) == 24 and "Country: Atlantis" in json.loads(lines[0])["prompt"]
        # the written data are readable by dbpa fidelity itself
        assert main(["fidelity", str(out / "data.csv"), "--out", str(tmp_path / "again")]) == 0
        capsys.readouterr()
        assert main(["fidelity", "--simulate", str(spec), "--out", str(out), "--quiet"]) == 0
        assert "0 new calls, 24 answers from the cache" in capsys.readouterr().out
        assert srv.requests == 24


def test_simulate_spec_error_and_server_down(tmp_path, capsys):
    spec = tmp_path / "s.yaml"
    spec.write_text("data: sample\nsamples: -1\n")
    assert main(["fidelity", "--simulate", str(spec), "--out", str(tmp_path / "o")]) == 2
    assert f"{spec}, line 2: samples must be >= 1" in capsys.readouterr().err
    with SurveyModel() as srv:
        url = srv.base_url
    spec.write_text(
        f"data: sample\nlimit: 2\nsamples: 1\nmodel: {{backend: openai, name: survey-model, "
        f"base_url: '{url}', max_retries: 0, timeout: 2}}\n"
    )
    assert main(["fidelity", "--simulate", str(spec), "--out", str(tmp_path / "o")]) == 3
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err


def test_gamma_below_one_half_states_no_guarantee(tmp_path, capsys):
    """QA M2: with γ < ½ the CLI, fidelity.json and report.html state no guarantee."""
    out = tmp_path / "g"
    assert main(["fidelity", "sample", "--gamma", "0.3", "--out", str(out)]) == 0
    printed = capsys.readouterr()
    assert "with probability" not in printed.out
    assert "No guarantee: with γ = 0.3 < ½" in printed.out
    assert "guaranteed on at least" not in printed.out
    doc = json.loads((out / "fidelity.json").read_text())
    assert doc["guarantee"]["level"] is None and "γ = 0.3 < ½" in doc["guarantee"]["reason"]
    assert not any(c["guaranteed"] for c in doc["comparisons"])
    html = (out / "report.html").read_text()
    assert "with probability" not in html and "No guarantee: with γ = 0.3 &lt; ½" in html


def test_baseline_flags(tmp_path, capsys):
    """--baseline exact / --baseline-k / --seed reach the analysis and the files say which
    baseline was used; a bad k is one line with exit code 2."""
    rc = main(["fidelity", SAMPLE, "--baseline", "exact", "--out", str(tmp_path / "a"), "--quiet"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    doc = json.loads((tmp_path / "a" / "fidelity.json").read_text())
    assert doc["settings"]["baseline"] == {"kind": "exact", "k": None, "seed": 0}
    assert "Baseline: the exact uniform distribution" in out.out
    rc = main(
        ["fidelity", SAMPLE, "--baseline-k", "25", "--seed", "3", "--out", str(tmp_path / "b"), "--quiet"]
    )
    assert rc == 0
    doc = json.loads((tmp_path / "b" / "fidelity.json").read_text())
    assert doc["settings"]["baseline"]["k"] == [25] * 40 and doc["settings"]["baseline"]["seed"] == 3
    assert "k = 25 answers per question" in doc["baseline"]
    capsys.readouterr()
    rc = main(["fidelity", SAMPLE, "--baseline-k", "0", "--out", str(tmp_path / "c")])
    err = capsys.readouterr().err
    assert rc == 2 and err.strip() == "error: `baseline_k` must be a whole number >= 1, got 0."
