"""``dbpa scan MODEL_SPEC --out DIR``: offline, on the embedded model's recorded demo answers
(assets/demo_replay.jsonl, recorded by assets/make_demo_replay.py with the scan's prompts)."""

import contextlib
import io
import json
import os
from pathlib import Path

import pytest
import yaml

from dbpa_core.cli import main, scan
from dbpa_core.history import History

from .test_report import parse

ROOT = Path(__file__).resolve().parent.parent
DEMO = str(ROOT / "assets" / "demo_replay.jsonl")
RECORDED = {"backend": "replay", "file": DEMO, "name": "SmolLM2-135M-Instruct"}
DEMO_MODEL = str(ROOT / "examples" / "model_recorded.yaml")


def verdict_rows(path):
    rows = parse(path).tables["verdicts"]
    return [dict(zip(rows[0], r, strict=True)) for r in rows[1:]]


@pytest.fixture(scope="module")
def scanned(tmp_path_factory):
    """One scan of the recorded model (examples/model_recorded.yaml), an estimate before it
    and one after it."""
    tmp = tmp_path_factory.mktemp("scan")
    model = DEMO_MODEL
    assert scan.read_model(model) == RECORDED  # its replay file, found from its folder
    old = os.environ.get("DBPA_HOME")
    home, cache, out = tmp / "home", tmp / "cache", tmp / "out"
    common = ["--home", str(home), "--cache-dir", str(cache), "scan", model]
    runs = {}
    try:
        for name, extra in (
            ("before", ["--estimate"]),
            ("scan", ["--out", str(out), "--embedder", "rouge1", "--quiet"]),
            ("after", ["--estimate"]),
        ):
            buf, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(err):
                rc = main(common + extra)
            runs[name] = (rc, buf.getvalue(), err.getvalue())
            if name == "before":  # the estimate wrote nothing and recorded nothing
                assert not out.exists()
                assert History(home / "history.sqlite3").list() == []
        history = History(home / "history.sqlite3")
        yield {"runs": runs, "out": out, "history": history, "home": home, "cache": cache}
    finally:
        if old is None:
            os.environ.pop("DBPA_HOME", None)
        else:
            os.environ["DBPA_HOME"] = old


def test_the_scan_runs_offline_and_writes_one_report(scanned):
    rc, stdout, _ = scanned["runs"]["scan"]
    assert rc == 0, scanned["runs"]["scan"]
    out = scanned["out"]
    for f in (
        "report.html",
        "audit/results.json",
        "audit/checks.csv",
        "audit/responses.jsonl",
        "battery/results.json",
        "battery/attacked.jsonl",
    ):
        assert (out / f).is_file(), f
    assert f"wrote {out / 'report.html'}" in stdout


def test_the_history_holds_both_runs(scanned):
    h = scanned["history"]
    runs = sorted(h.list(), key=lambda r: r.id)
    assert [r.id for r in runs] == [1, 2]
    assert [r.source for r in runs] == ["cli", "cli"]
    assert all(r.title.startswith("scan of SmolLM2-135M-Instruct: ") for r in runs)
    assert h.extras([2])[2]["kind"] == "battery" and 1 not in h.extras([1])
    audit = next(iter(h.get(1).audits.values()))
    names = [p.name for p in audit.perturbations]
    assert names == [*scan.PERSONAS, "name: Ahmed", "name: Peter", "name: Wei", scan.SAME_PROMPT]
    assert {p.role for p in audit.perturbations[:8]} == {"target"}
    assert {p.role for p in audit.perturbations[8:]} == {"control"}
    assert [c.name for c in audit.spec.checks] == ["refuses", "length"]
    assert audit.spec.samples == 20 and audit.spec.embedder == {"backend": "rouge1"}
    assert h.get(1).out_dir == str(scanned["out"].absolute() / "audit")
    assert "recorded as runs 1 (audit) and 2 (battery)" in scanned["runs"]["scan"][1]


def test_the_report_lists_every_parts_verdict(scanned):
    rows = verdict_rows(scanned["out"] / "report.html")
    audit = json.loads((scanned["out"] / "audit" / "results.json").read_text())
    a = [r for r in rows if r["run"] == "1"]
    for p in audit["perturbations"]:  # every perturbation with its role and numbers
        [row] = [r for r in a if r["kind"] == "audit" and r["what"] == f"{p['name']} ({p['role']})"]
        word = "changed the answers" if p["significant"] else "no detectable change"
        assert row["outcome"].startswith(word) and f"{p['effect_above_chance']:+.3f}" in row["outcome"]
    [gate] = [r for r in a if r["kind"] == "control gate"]
    assert gate["what"] == "4 control(s)"
    checks = [r for r in a if r["kind"] == "answer check"]
    assert len(checks) == 2 * 12 == len(audit["checks"])
    assert {r["what"].split(" / ")[0] for r in checks} == {"refuses", "length"}
    battery = json.loads((scanned["out"] / "battery" / "results.json").read_text())
    b = {r["what"]: r["outcome"] for r in rows if r["run"] == "2"}
    assert b["clean error rate"].startswith(f"ER {battery['clean']['er']:.3f}")
    attacks = [r for r in battery["attacks"] if r["dataset"] == "all"]
    assert len(attacks) == 7 and all(
        b[f"{x['attack']} rho={x['rho']:g}"].startswith(f"attack success rate {x['asr']:.3f}")
        for x in attacks
    )
    assert "RTI replace" in b
    # the recorded SmolLM2 answers: every persona moves them, no control does
    sig = {p["name"]: p["significant"] for p in audit["perturbations"]}
    assert all(sig[p] for p in scan.PERSONAS)
    assert gate["outcome"] == "passed: no control changed the answers"
    # the terminal summary names the same parts
    stdout = scanned["runs"]["scan"][1]
    assert "(run 1):" in stdout and "(run 2):" in stdout and "control gate, 4 control(s)" in stdout
    assert "answer checks (refuses, length): 0 of 24" in stdout


def test_the_estimate_counts_every_part_and_calls_nothing(scanned):
    rc, before, _ = scanned["runs"]["before"]
    assert rc == 0
    from dbpa_core.runs import estimate

    _, battery = scan.build_specs(RECORDED)

    n_battery = estimate(battery)["calls"]
    lines = before.splitlines()
    [a] = [x for x in lines if x.startswith("audit: 13 prompts x k = 20")]
    [b] = [x for x in lines if x.startswith("battery: 8 items")]
    assert a.split()[7:9] == ["260", "0"]  # calls, cached
    assert b.split()[6:8] == [str(n_battery), "0"]
    assert f"total: 2 parts, {260 + n_battery} calls (0 cached)" in before
    # after the scan the audit's answers are cached: nothing left to call for it
    rc, after, _ = scanned["runs"]["after"]
    [a] = [x for x in after.splitlines() if x.startswith("audit:")]
    assert rc == 0 and a.split()[7:9] == ["0", "260"]


@pytest.mark.parametrize(
    "given,words",
    [
        ("no-such-model.yaml", "MODEL_SPEC 'no-such-model.yaml': no such file"),
        ("gpt-4o-mini", "no such file; give a YAML or JSON file with one model entry"),
        ("{backend: nope}", "model.backend must be one of local, openai, hf, replay"),
        ("{backend: replay, file: missing.jsonl}", "replay file 'missing.jsonl' does not exist"),
        ("{backend: openai}", "missing model.name"),
        ("{backend: local", "not valid YAML"),
    ],
)
def test_a_bad_model_spec_is_one_line_and_exit_2(tmp_path, capsys, given, words):
    out = tmp_path / "out"
    assert main(["--cache-dir", str(tmp_path / "c"), "scan", given, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: ") and words in err, err
    assert "Traceback" not in err and not out.exists()
    assert History().list() == []


def test_a_model_file_is_read_as_a_spec_reads_it(tmp_path, capsys):
    (tmp_path / "m.yaml").write_text("backend: replay\nbakend: x\n")
    assert main(["scan", str(tmp_path / "m.yaml"), "--estimate"]) == 2
    err = capsys.readouterr().err
    assert "m.yaml, line 2: unknown key 'bakend'" in err and "did you mean 'backend'" in err
    (tmp_path / "list.json").write_text("[1, 2]")
    assert main(["scan", str(tmp_path / "list.json"), "--estimate"]) == 2
    assert "list.json: a model entry is a mapping such as" in capsys.readouterr().err
    (tmp_path / "two.yaml").write_text(yaml.safe_dump({"models": [RECORDED, RECORDED]}))
    assert main(["scan", str(tmp_path / "two.yaml"), "--estimate"]) == 2
    assert "a scan audits one model" in capsys.readouterr().err
    # a spec's model entry, with a replay file relative to the spec's folder
    (tmp_path / "rec.jsonl").write_text(Path(DEMO).read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "spec.yaml").write_text("model: {backend: replay, file: rec.jsonl}\nsamples: 5\n")
    assert scan.read_model(str(tmp_path / "spec.yaml")) == {
        "backend": "replay",
        "file": str(tmp_path / "rec.jsonl"),
    }
    assert scan.read_model('{"backend": "local"}') == {"backend": "local"}  # JSON too
    assert main(["scan", "{backend: local}", "--samples", "1", "--estimate"]) == 2
    assert "samples must be >= 2" in capsys.readouterr().err
    assert main(["scan", "{backend: local}", "--embedder", "nope", "--estimate"]) == 2
    assert "--embedder: unknown embedder 'nope'" in capsys.readouterr().err


def test_without_wordnet_the_battery_only_deletes_words():
    from dbpa_core.attacks.battery import needs_wordnet

    _, full = scan.build_specs({"backend": "local"}, wordnet=True)
    _, lean = scan.build_specs({"backend": "local"}, wordnet=False)
    assert needs_wordnet(full) and not needs_wordnet(lean)
    assert [a.op for a in lean.attacks if a.level == "word"] == ["delete"]
    assert lean.rti == ("delete",) and len(lean.attacks) == len(full.attacks)


def test_an_out_that_is_a_file_stops_before_any_call(tmp_path, capsys):
    (tmp_path / "out").write_text("")
    assert main(["--cache-dir", str(tmp_path / "c"), "scan", DEMO_MODEL, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines()[-1] == f"error: --out {tmp_path / 'out'}: is a file, not a folder."
    assert History().list() == [] and not (tmp_path / "c").exists()


def test_a_history_that_cannot_be_written_keeps_the_results(scanned, tmp_path, capsys, monkeypatch):
    """The report is built from the history: without one the scan says so in one line
    (exit 2), and each part's files are written all the same."""
    (tmp_path / "home").write_text("")  # DBPA_HOME is a file
    monkeypatch.setenv("DBPA_HOME", str(tmp_path / "home"))
    out = tmp_path / "out"
    assert (
        main(
            [
                "--cache-dir",
                str(scanned["cache"]),
                "scan",
                DEMO_MODEL,
                "--out",
                str(out),
                "--embedder",
                "rouge1",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert (
        err.startswith("error: the runs could not be recorded in the history, so there is no report")
        and str(out / "audit") in err
    )
    assert (out / "audit" / "results.json").is_file()
    assert (out / "battery" / "results.json").is_file() and not (out / "report.html").exists()


def test_a_replay_file_without_the_scans_prompts_stops_before_anything_runs(tmp_path, capsys):
    """The demo's T=1.2 variant recorded the personas only: the scan names the shortfall in
    one line (exit 2) before any part runs; --estimate counts and notes it."""
    hot = json.dumps(dict(RECORDED, name="SmolLM2-135M-Instruct T=1.2"))
    out = tmp_path / "out"
    assert main(["--cache-dir", str(tmp_path / "c"), "scan", hot, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "holds too few recorded answers for" in err
    from dbpa_core.attacks.battery import battery_requests
    from dbpa_core.audit import build_arms

    audit, battery = scan.build_specs(RECORDED)
    prompts = {r.prompt for r in battery_requests(battery)} | {a.prompt for a in build_arms(audit)}
    assert f"of the {len(prompts)} prompts a scan sends" in err and not out.exists()
    assert History().list() == []
    assert main(["--cache-dir", str(tmp_path / "c"), "scan", hot, "--estimate"]) == 0
    assert "note: the replay file" in capsys.readouterr().err
    assert scan.replay_shortfall(audit, battery) is None  # the recorded model holds them all


def test_one_time_left_for_the_whole_scan():
    """The battery's sampler calls (and the audit's) each know only their own time left:
    the scan passes their reports on without it, and one 'scan' bar counts the answers of
    both parts with the time left for the whole scan (17 of 100 answers in 20 s: 98 s)."""
    from dbpa_core.cli.scan import WholeScan
    from dbpa_core.sampling import Progress

    now = [0.0]
    seen: list[Progress] = []
    whole = WholeScan(100, clock=lambda: now[0])
    whole.bars = seen.append
    whole(Progress("sampling", 0, 60, "audit: 0 tokens, estimating the time left"))
    now[0] = 10.0
    whole(Progress("sampling", 10, 60, "1,204 tokens, 52 tokens/s, about 4 min left"))
    assert seen[-2].detail == "1,204 tokens, 52 tokens/s" and seen[-2].eta_s is None
    whole.next_part()  # the audit's 10 answers are done; the battery's calls start again at 0
    now[0] = 15.0
    whole(Progress("sampling", 5, 30, "about 10 s left"))
    now[0] = 20.0
    whole(Progress("sampling", 2, 10, "about 3 s left"))  # the battery's next call
    scan = seen[-1]
    assert (scan.stage, scan.done, scan.total) == ("scan", 17, 100)
    assert scan.detail == "about 1.6 min left for the whole scan"  # (100 - 17) / (17 / 20 s)
    assert not any("about" in p.detail and p.stage != "scan" for p in seen)
