"""`dbpa report`: one document with every verdict of recorded runs of each kind.

The runs are made here by the functions the CLI uses (an audit of the replay spec with
answer checks, a robustness battery against a rule-based model, a fidelity analysis of the
built-in sample, a sensitivity study on the replay answers) and recorded in a temporary
history; the report's HTML is parsed back and every verdict looked for, the checksum
recomputed from the history, a hostile run name stays text, an unknown run is one line
and exit 2, and (browser) Chromium prints the PDF.
"""

import csv
import dataclasses
import hashlib
import json
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from dbpa_core.cli import main
from dbpa_core.history import History

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "examples" / "replay_checks.yaml"
HOSTILE = "<script>alert('x')</script> & <b>bold</b>"


class Tables(HTMLParser):
    """The text of every table cell by table id, and the code element with id=checksum."""

    def __init__(self):
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.codes: dict[str, str] = {}
        self._table = self._row = self._cell = self._code = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table":
            self._table = self.tables.setdefault(a.get("id") or f"t{len(self.tables)}", [])
        elif tag == "tr" and self._table is not None:
            self._row = []
            self._table.append(self._row)
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []
        elif tag == "code" and a.get("id"):
            self._code = (a["id"], [])

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "table":
            self._table = None
        elif tag == "code" and self._code:
            self.codes[self._code[0]] = "".join(self._code[1])
            self._code = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)
        if self._code:
            self._code[1].append(data)


def parse(path) -> Tables:
    t = Tables()
    t.feed(Path(path).read_text(encoding="utf-8"))
    return t


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Recorded runs of each kind in one history: {kind: run id} and the audit's files."""
    import os

    from dbpa_core.attacks.battery import run_battery
    from dbpa_core.attacks.spec import parse_attack_spec
    from dbpa_core.cache import Cache
    from dbpa_core.fidelity.analysis import run_fidelity
    from dbpa_core.fidelity.data import load_data
    from dbpa_core.sensitivity import SensitivityConfig, run_sensitivity
    from dbpa_core.spec import load_spec

    from .rule_model import passages_model, write_items

    tmp = tmp_path_factory.mktemp("report")
    home, cache = tmp / "home", tmp / "cache"
    old = os.environ.get("DBPA_HOME")
    os.environ["DBPA_HOME"] = str(home)
    try:
        out = tmp / "audit"
        assert main(["--cache-dir", str(cache), "--quiet", "audit", str(SPEC), "--out", str(out)]) == 0
        h = History()
        [audit] = [r.id for r in h.list()]
        # the same audit under a hostile name, its first perturbation marked a control
        audits = h.get(audit).audits
        job, result = next(iter(audits.items()))
        first = dataclasses.replace(result.perturbations[0], role="control")
        result = dataclasses.replace(result, perturbations=(first, *result.perturbations[1:]))
        hostile = h.record({job: result}, source="cli", title=HOSTILE)
        items = write_items(tmp / "items.jsonl")
        with passages_model() as srv:
            spec = parse_attack_spec(
                f'model: {{backend: openai, name: rule-model, base_url: "{srv.base_url}", '
                f"max_retries: 0}}\ndata: {items}\nattacks: [{{level: char, rho: [1.0]}}]\n"
            )
            battery = run_battery(spec, cache=Cache(cache))
        b_id = h.record_result(
            "battery", {"battery": battery}, title="rule battery", models=["rule-model"], source="cli"
        )
        fid = run_fidelity(load_data("sample"))
        f_id = h.record_result(
            "fidelity",
            {"fidelity": fid},
            title="sample fidelity",
            models=[s.name for s in fid.simulators],
            source="cli",
        )
        sens = run_sensitivity(load_spec(SPEC), SensitivityConfig(measures=("jsd",)), cache=Cache(cache))
        s_id = h.record_result(
            "sensitivity", {"sensitivity": sens}, title="replay sensitivity", models=["demo"], source="cli"
        )
        yield {
            "audit": audit,
            "hostile": hostile,
            "battery": b_id,
            "fidelity": f_id,
            "sensitivity": s_id,
            "out": out,
            "tmp": tmp,
            "results": {"battery": battery, "fidelity": fid, "sensitivity": sens},
        }
    finally:
        if old is None:
            os.environ.pop("DBPA_HOME", None)
        else:
            os.environ["DBPA_HOME"] = old


@pytest.fixture(scope="module")
def report(runs):
    path = runs["tmp"] / "audit-file.html"
    ids = [runs[k] for k in ("audit", "battery", "fidelity", "sensitivity")]
    assert dbpa(runs, *map(str, ids), "--out", str(path)) == 0
    return path


def dbpa(runs, *args) -> int:
    """``dbpa --home HOME report ARGS``: the runs' history."""
    return main(["--home", str(runs["tmp"] / "home"), "report", *args])


def verdict_rows(path):
    rows = parse(path).tables["verdicts"]
    return [dict(zip(rows[0], r, strict=True)) for r in rows[1:]]


def test_every_audit_verdict_and_answer_check_is_on_the_summary(runs, report):
    rows = [r for r in verdict_rows(report) if r["run"] == str(runs["audit"])]
    written = json.loads((runs["out"] / "results.json").read_text())
    for p in written["perturbations"]:
        [row] = [r for r in rows if r["kind"] == "audit" and r["what"] == p["name"]]
        word = "changed the answers" if p["significant"] else "no detectable change"
        assert row["outcome"].startswith(word)
        assert f"{p['effect_above_chance']:+.3f}" in row["outcome"]
    # every check the audit wrote to checks.csv, with the same numbers (from the answers kept)
    with open(runs["out"] / "checks.csv", encoding="utf-8") as f:
        checks = list(csv.DictReader(f))
    assert checks
    outcomes = {(r["what"], r["outcome"]) for r in rows if r["kind"] == "answer check"}
    assert outcomes == {(f"{c['check']} / {c['perturbation']}", c["text"]) for c in checks}


def test_battery_fidelity_and_sensitivity_verdicts_are_on_the_summary(runs, report):
    rows = verdict_rows(report)
    battery = runs["results"]["battery"]
    b = [r for r in rows if r["run"] == str(runs["battery"])]
    clean = battery.clean()
    assert any(r["what"] == "clean error rate" and f"ER {clean.er.value:.3f}" in r["outcome"] for r in b)
    for a in battery.attacks():
        assert any(
            r["what"] == f"{a.attack} rho={a.rho:g}"
            and f"attack success rate {a.asr.value:.3f}" in r["outcome"]
            for r in b
        )
    fid = runs["results"]["fidelity"]
    f = [r["outcome"] for r in rows if r["run"] == str(runs["fidelity"])]
    assert fid.guarantee_text() in f
    assert fid.comparisons and all(c.sentence() in f for c in fid.comparisons)
    sens = runs["results"]["sensitivity"]
    s = {r["what"]: r["outcome"] for r in rows if r["run"] == str(runs["sensitivity"])}
    for v in sens.verdicts():
        assert s[v["perturbation"]].startswith("holds" if v["holds"] else "DEPENDS")
    kinds = {r["kind"] for r in rows}
    assert {"audit", "answer check", "battery", "fidelity", "sensitivity"} <= kinds


def test_settings_versions_dates_and_one_section_per_run(runs, report):
    t = parse(report)
    facts = {r[0]: r[1] for r in t.tables["facts"]}
    assert "0." in facts["tool versions"] and "UTC" in facts["dates"]
    assert "demo_replay.jsonl answered as replay" in facts["model versions"]
    settings = t.tables["settings"]
    audit_row = next(r for r in settings if r[0] == str(runs["audit"]))
    assert "samples = 20" in audit_row[-1] and "correction = holm" in audit_row[-1]
    # settings as a reader writes them (not a Python dict), verdicts in the words used everywhere
    assert "{'" not in audit_row[-1] and "embedder = backend: " in audit_row[-1], audit_row[-1]
    html = report.read_text(encoding="utf-8")
    assert "not significant" not in html and "<td>detectable</td>" in html
    for k in ("audit", "battery", "fidelity", "sensitivity"):
        assert html.count(f'id="run-{runs[k]}"') == 1


def _lines(h: History, run_id: int) -> list[str]:
    """The report's documented response lines, rebuilt from the history on their own."""
    run = h.get(run_id)
    out = []
    for job, r in run.audits.items():
        for a in (r.base, *r.arms):
            out += [
                json.dumps(
                    {"arm": a.arm.name, "index": i, "part": job, "response": t, "run": run_id},
                    ensure_ascii=False,
                    sort_keys=True,
                )
                for i, t in enumerate(a.texts)
            ]
    if not run.audits:
        _, result = h.result(run_id)
        for part, value in result.items():
            for i, rec in enumerate(getattr(value, "records", ())):
                out.append(
                    json.dumps(
                        {
                            "arm": f"{rec.query.base.id}/{rec.query.name}",
                            "index": i,
                            "part": part,
                            "response": rec.response,
                            "run": run_id,
                        },
                        ensure_ascii=False,
                        sort_keys=True,
                    )
                )
    return out


def test_the_checksum_is_the_sha256_of_the_responses(runs, report):
    h = History(runs["tmp"] / "home" / "history.sqlite3")
    lines = [line for k in ("audit", "battery", "fidelity", "sensitivity") for line in _lines(h, runs[k])]
    assert len(lines) == 80 + len(runs["results"]["battery"].records)
    expected = hashlib.sha256("".join(x + "\n" for x in lines).encode()).hexdigest()
    assert parse(report).codes["checksum"] == expected
    # a changed answer changes it
    tampered = [lines[0].replace('"response": "', '"response": "X', 1)] + lines[1:]
    assert hashlib.sha256("".join(x + "\n" for x in tampered).encode()).hexdigest() != expected


def test_a_hostile_run_name_is_text(runs, capsys):
    path = runs["tmp"] / "hostile.html"
    assert dbpa(runs, str(runs["hostile"]), "--out", str(path)) == 0
    html = path.read_text(encoding="utf-8")
    assert "<script>alert" not in html and "<b>bold</b>" not in html
    assert "&lt;script&gt;alert(" in html
    assert HOSTILE in {r[1] for r in parse(path).tables["settings"]}  # as text


def test_a_control_that_changed_the_answers_fails_the_gate(runs):
    path = runs["tmp"] / "gate.html"
    assert dbpa(runs, str(runs["hostile"]), "--out", str(path), "--title", "Q4 <i>file</i>") == 0
    assert "<title>Q4 &lt;i&gt;file&lt;/i&gt;</title>" in path.read_text(encoding="utf-8")
    rows = verdict_rows(path)
    [gate] = [r for r in rows if r["kind"] == "control gate"]
    assert gate["outcome"] == "failed: doctor changed the answers"
    assert 'class="flag-fail"' in path.read_text(encoding="utf-8")
    [row] = [r for r in rows if r["what"] == "doctor (control)"]
    assert row["outcome"].startswith("changed the answers")


def test_an_unknown_run_is_one_line_and_exit_2(runs, capsys):
    path = runs["tmp"] / "none.html"
    assert dbpa(runs, str(runs["audit"]), "987654", "--out", str(path)) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "987654" in err and "Traceback" not in err
    assert not path.exists()
    assert dbpa(runs, str(runs["audit"]), "--out", str(runs["tmp"] / "x.docx")) == 2
    assert ".html or a .pdf" in capsys.readouterr().err


def test_no_chromium_is_one_line(runs, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(runs["tmp"]))
    monkeypatch.delenv("DBPA_CHROMIUM", raising=False)
    path = runs["tmp"] / "no.pdf"
    assert dbpa(runs, str(runs["audit"]), "--out", str(path)) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: Chromium is not installed") and "\n" not in err
    assert not path.exists()


@pytest.mark.browser
def test_the_pdf_is_printed_by_chromium(runs):
    if shutil.which("chromium") is None:
        pytest.skip("no chromium here")
    path = runs["tmp"] / "audit-file.pdf"
    ids = [runs[k] for k in ("audit", "battery", "fidelity", "sensitivity")]
    assert dbpa(runs, *map(str, ids), "--out", str(path)) == 0
    data = path.read_bytes()
    assert data.startswith(b"%PDF-") and len(data) > 10_000
    if shutil.which("pdftoppm"):
        png = runs["tmp"] / "page1"
        subprocess.run(
            ["pdftoppm", "-png", "-r", "60", "-f", "1", "-l", "1", "-singlefile", str(path), str(png)],
            check=True,
            timeout=120,
        )
        assert (runs["tmp"] / "page1.png").stat().st_size > 5_000


@pytest.mark.browser
@pytest.mark.slow
def test_the_report_button_in_history_downloads_the_report(runs):
    from .app.browser_support import dashboard, launch, require_browser, shots

    sync = require_browser()
    newest = runs["sensitivity"]
    with (
        dashboard(runs["tmp"] / "dash", DBPA_HOME=str(runs["tmp"] / "home")) as url,
        sync.sync_playwright() as p,
    ):
        browser = launch(p)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1800})
            page.goto(f"{url}/history", wait_until="networkidle")
            page.get_by_text("Report for the audit file").wait_for(timeout=120_000)
            page.wait_for_timeout(1500)
            button = page.get_by_role("button", name="Report")
            button.scroll_into_view_if_needed()
            page.screenshot(path=str(shots() / "report-history-button.png"), full_page=True)
            with page.expect_download(timeout=120_000) as got:
                button.click()
            saved = runs["tmp"] / "downloaded.html"
            got.value.save_as(saved)
            name = got.value.suggested_filename
        finally:
            browser.close()
    assert name == f"dbpa-report_runs-{newest}.html"
    rows = verdict_rows(saved)
    assert rows and {r["run"] for r in rows} == {str(newest)}


def test_model_graded_checks_come_from_the_cache_or_are_named(tmp_path, monkeypatch):
    from .judge_model import KEY, KEY_ENV, JudgeServer, judge_check_yaml

    monkeypatch.setenv(KEY_ENV, KEY)
    home, cache, out = tmp_path / "home", tmp_path / "cache", tmp_path / "out"
    with JudgeServer() as srv:
        spec = tmp_path / "judged.yaml"
        text = SPEC.read_text().replace("../assets/", str(ROOT / "assets") + "/")
        spec.write_text(text.replace("checks:\n", "checks:\n" + judge_check_yaml(srv, "  "), 1))
        assert (
            main(
                [
                    "--home",
                    str(home),
                    "--cache-dir",
                    str(cache),
                    "--quiet",
                    "audit",
                    str(spec),
                    "--out",
                    str(out),
                ]
            )
            == 0
        )
        asked = srv.requests
    with open(out / "checks.csv", encoding="utf-8") as f:
        written = {(c["check"], c["perturbation"]): c["text"] for c in csv.DictReader(f)}
    assert any(c == "recommends a statin" for c, _ in written)
    report = tmp_path / "r.html"
    assert main(["--home", str(home), "report", "1", "--out", str(report)]) == 0
    assert srv.requests == asked  # nothing asked again (and the server is gone)
    rows = [r for r in verdict_rows(report) if r["kind"] == "answer check"]
    assert {(r["what"], r["outcome"]) for r in rows} == {(f"{c} / {p}", t) for (c, p), t in written.items()}
    # without the cache the judge's check is named, not guessed
    shutil.rmtree(cache)
    assert main(["--home", str(home), "report", "1", "--out", str(report)]) == 0
    assert not cache.exists()
    html = report.read_text(encoding="utf-8")
    assert "Model-graded checks (recommends a statin)" in html
    rows = [r for r in verdict_rows(report) if r["kind"] == "answer check"]
    assert rows and not any("recommends a statin" in r["what"] for r in rows)


def test_a_dashboard_simulation_shows_its_answers_and_its_error(tmp_path):
    from dbpa_core.fidelity.simulate import SimulatedAnswer, SimulationResult

    h = History(tmp_path / "home" / "history.sqlite3")
    answer = SimulatedAnswer("q1", "sim <a>", 0, "Which?", "I'd say <b>B</b>", None, "none")
    sim = SimulationResult(
        None,
        (answer,),
        {},
        {"sim <a>": {"q1": 1}},
        ("sim <a>",),
        1,
        error="fewer than 2 questions got a readable answer",
    )
    run_id = h.record_result("fidelity", {"simulation": sim}, title="sim", models=["sim <a>"])
    path = tmp_path / "sim.html"
    assert main(["--home", str(tmp_path / "home"), "report", str(run_id), "--out", str(path)]) == 0
    rows = {r["what"]: r["outcome"] for r in verdict_rows(path)}
    assert rows["simulated answers of sim <a>"] == "0 read, 1 unreadable"
    assert rows["analysis"] == "fewer than 2 questions got a readable answer"
    line = (
        json.dumps(
            {
                "arm": "sim <a>/q1",
                "index": 0,
                "part": "simulation",
                "response": "I'd say <b>B</b>",
                "run": run_id,
            },
            ensure_ascii=False,
            sort_keys=True,
        )
        + "\n"
    )
    assert parse(path).codes["checksum"] == hashlib.sha256(line.encode()).hexdigest()
    assert "<b>B</b>" not in path.read_text(encoding="utf-8")


def test_a_setting_is_written_as_a_reader_writes_it():
    from dbpa_core.render import short

    assert short({"backend": "local"}) == "backend: local"
    assert short({"backend": "openai", "name": "m", "extra": {"a": 1}, "none": None}) == (
        "backend: openai, name: m, extra: (a: 1)"
    )
    assert short(["a", "b"]) == "a, b" and short(0.5) == "0.5"
    assert short("x" * 200).endswith("…") and len(short("x" * 200)) == 160
