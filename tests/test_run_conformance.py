"""Every kind of run x every output: each cell works, or refuses in one line saying why.

The kinds (an audit, a suite of cases, a robustness battery, a fidelity analysis of a file
and a fidelity simulation, a sensitivity study, a scan) are made once, on replay files and
small fake servers; each output reads them only through :mod:`dbpa_core.runs`:

* history: recorded, read back with the same headline and verdicts, shown by
  ``dbpa history show`` with its headline;
* report: every verdict on the summary page, the checksum over the answers shown (or the
  one line saying why a run shows none);
* JUnit: one test case per verdict, never an empty report;
* the gates: ``--fail-on control|target|check`` give the same failures through the run
  and through its JUnit report, and ``--fail-on-control`` is ``--fail-on control``;
* exports: the run's files, none empty;
* the dashboard: the page it reopens on, or the line saying why it does not.
"""

import html
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from dbpa_core import junit
from dbpa_core.cli import main
from dbpa_core.history import History
from dbpa_core.runs import RunRefused, ScanRun, as_run, checksum, gate_failures

from .fake_openai import FakeOpenAI
from .test_junit import CTRL, TARGET, audit_spec, record
from .test_suite import suite_yaml, write_cases

KINDS = ("audit", "suite", "battery", "fidelity", "simulation", "sensitivity", "scan")


def _one_line(text: str) -> bool:
    return bool(text.strip()) and "\n" not in text.strip()


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """{kind: RunResult} and {kind: recorded run ids}, in one history."""
    from dbpa_core.attacks.battery import run_battery
    from dbpa_core.attacks.spec import parse_attack_spec
    from dbpa_core.audit import run_audit
    from dbpa_core.cache import Cache
    from dbpa_core.fidelity.analysis import run_fidelity
    from dbpa_core.fidelity.data import load_data
    from dbpa_core.fidelity.simulate import load_simulation_spec, run_simulation_spec
    from dbpa_core.sensitivity import SensitivityConfig, run_sensitivity
    from dbpa_core.spec import load_spec
    from dbpa_core.suite import run_suite

    from .rule_model import passages_model, write_items
    from .survey_model import SurveyModel
    from .test_fidelity_simulate import SURVEY
    from .test_sensitivity import MODELS
    from .test_sensitivity import spec_text as sensitivity_spec

    tmp = tmp_path_factory.mktemp("conformance")
    cache = Cache(tmp / "cache")
    old = os.getcwd()
    os.chdir(tmp)  # the specs name their files relative to here
    try:
        runs, specs = {}, {}
        # an audit whose control changes the answers, with an answer check that changes too
        record(tmp / "rec.jsonl", funny=(CTRL, TARGET))
        spec = audit_spec(
            tmp, checks="checks:\n  - {name: clowns, contains: [clown, banana, joke, pie, honk]}"
        )
        specs["audit"] = load_spec(spec)
        runs["audit"] = as_run(run_audit(specs["audit"], cache=cache))
        # a suite of three cases, its comedian a control (it changes the answers)
        write_cases(tmp, 3)
        with FakeOpenAI(models=("fake-model", "fake-embed")) as srv:
            text = suite_yaml(
                srv.base_url, extra="name: vignettes\nchecks:\n  - {name: refuses, refusal: true}"
            )
            (tmp / "s.yaml").write_text(text.replace("role: target", "role: control"))
            specs["suite"] = load_spec(tmp / "s.yaml")
            with open(tmp / "suite.jsonl", "w", encoding="utf-8") as fh:
                suite = run_suite(specs["suite"], cache=cache, responses=fh)
            suite.responses_file = str(tmp / "suite.jsonl")
            runs["suite"] = as_run(suite)
        # a robustness battery against a rule-based model
        items = write_items(tmp / "items.jsonl")
        with passages_model() as srv:
            battery_spec = parse_attack_spec(
                f'name: rules\nmodel: {{backend: openai, name: rule-model, base_url: "{srv.base_url}", '
                f"max_retries: 0}}\ndata: {items}\nattacks: [{{level: char, rho: [1.0]}}]\n"
            )
            runs["battery"] = as_run(run_battery(battery_spec, cache=cache), title="rules")
        specs["battery"] = battery_spec
        # fidelity: the built-in sample (a file), and a simulation on a survey model
        specs["fidelity"] = load_data("sample")
        runs["fidelity"] = as_run({"analysis": run_fidelity(specs["fidelity"])}, title="sample fidelity")
        (tmp / "survey.csv").write_text(SURVEY)
        with SurveyModel() as srv:
            (tmp / "sim.yaml").write_text(
                f"name: pets\ndata: survey.csv\nmodels:\n  - {{backend: openai, name: survey-model, "
                f'base_url: "{srv.base_url}", label: survey, max_retries: 0}}\nsamples: 4\n'
            )
            specs["simulation"] = load_simulation_spec(tmp / "sim.yaml")
            sim = run_simulation_spec(specs["simulation"], cache=cache)
        runs["simulation"] = as_run({"simulation": sim, "analysis": run_fidelity(sim.data)}, title="pets")
        # a sensitivity study
        with FakeOpenAI(models=MODELS) as srv:
            (tmp / "sens.yaml").write_text(sensitivity_spec(srv))
            specs["sensitivity"] = load_spec(tmp / "sens.yaml")
            sens = run_sensitivity(specs["sensitivity"], SensitivityConfig(measures=("jsd",)), cache=cache)
        runs["sensitivity"] = as_run({"sensitivity": sens}, title="sens")
        runs["scan"] = ScanRun("scan", parts=(runs["audit"], runs["battery"]))
        specs["scan"] = (specs["audit"], specs["battery"])
    finally:
        os.chdir(old)
    h = History(tmp / "home" / "history.sqlite3")
    ids = {}
    for kind, run in runs.items():
        parts = run.parts if kind == "scan" else (run,)
        ids[kind] = [h.record_run(p, source="cli", out_dir=tmp / "out" / kind) for p in parts]
    return {
        "runs": runs,
        "specs": specs,
        "cache": cache,
        "ids": ids,
        "history": h,
        "home": tmp / "home",
        "tmp": tmp,
    }


# --------------------------------------------------------------------------- history
@pytest.mark.parametrize("kind", KINDS)
def test_history_records_reads_back_and_shows_every_kind(made, kind, capsys):
    run, h = made["runs"][kind], made["history"]
    if kind == "scan":  # recorded as its parts, each its own run; as one run it says why
        with pytest.raises(RunRefused) as why:
            h.record_run(run, source="cli")
        assert _one_line(str(why.value)) and "parts" in str(why.value)
    for run_id, part in zip(made["ids"][kind], getattr(run, "parts", (run,)), strict=True):
        back = h.load_run(run_id)
        assert back.kind == part.kind and back.headline() == part.headline()
        assert [v.outcome for v in back.verdicts()] == [v.outcome for v in part.verdicts()]
        assert len(back.answers()) == len(part.answers())
        assert h.extras([run_id]).get(run_id, {}).get("headline", back.headline()) == back.headline()
        assert main(["--home", str(made["home"]), "history", "show", str(run_id)]) == 0
        shown = capsys.readouterr().out
        assert back.headline() in shown
        if back.answers():
            assert f"({len(back.answers())} answers)" in shown  # kept with the run


# --------------------------------------------------------------------------- report
@pytest.mark.parametrize("kind", KINDS)
def test_the_report_shows_every_verdict_and_checksums_the_answers_shown(made, kind):
    from dbpa_core.report import build_report, collect

    ids = made["ids"][kind]
    page = build_report(ids, history=made["history"])
    assert "These runs hold no verdicts" not in page
    text = html.unescape(page)
    for v in made["runs"][kind].verdicts():
        assert v.outcome in text, v
    sections = collect(ids, history=made["history"])
    answers = [
        a.line(i) for i, sec in zip(ids, sections, strict=True) for a in made["history"].load_run(i).answers()
    ]
    assert checksum(answers) in page
    for i, sec in zip(ids, sections, strict=True):
        run = made["history"].load_run(i)
        assert len(sec.responses) == len(run.answers())
        if not run.answers():  # no answers: one line says why
            assert any(n.startswith("No answers shown:") for n in sec.notes), sec.notes
        for a in run.answers()[:20]:  # each answer under its prompt, newlines kept
            assert a.prompt in text
    if kind == "suite":
        for table in ("suite-pooled", "suite-heat", "suite-tests", "suite-checks", "suite-prompts"):
            assert f'id="{table}"' in page
        assert "✓ refuses" in page or "✗ refuses" in page  # every answer marked with its checks


# --------------------------------------------------------------------------- JUnit and gates
@pytest.mark.parametrize("kind", KINDS)
def test_junit_has_one_case_per_verdict_and_never_is_empty(made, kind, tmp_path):
    run = made["runs"][kind]
    path = junit.write_junit(tmp_path / "j.xml", junit.run_suites(run, fail_on=frozenset({"control"})))
    root = ET.parse(path).getroot()
    n = sum(1 for v in run.verdicts() if v.kind != "info")
    assert n > 0 and int(root.get("tests")) == n
    for tc in root.iter("testcase"):
        assert tc.get("name")
    for f in root.iter("failure"):
        assert "p = 0.0010" not in f.get("message")  # written as the CLI writes p


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("gate", ["control", "target", "check"])
def test_fail_on_is_the_same_through_the_run_and_its_junit(made, kind, gate):
    run = made["runs"][kind]
    fail_on = junit.parse_fail_on([gate])
    by_run = {v.name for v in gate_failures(run, fail_on)}
    names = {
        c.name.split(" / ")[-1] if c.name.count(" / ") > (c.failure_type == "check-changed") else c.name
        for c in junit.gate_failures(junit.run_suites(run, fail_on=fail_on), fail_on)
    }
    assert len(by_run) == len(names)
    if gate == "control":
        assert junit.parse_fail_on([], fail_on_control=True) == fail_on
    if (kind in ("audit", "scan") and gate in ("control", "check")) or (kind, gate) == ("suite", "control"):
        assert by_run, f"{kind}: its changed {gate} must fail --fail-on {gate}"


# --------------------------------------------------------------------------- exports, dashboard
@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_writes_its_files(made, kind, tmp_path):
    paths = made["runs"][kind].write(tmp_path / "out")
    assert paths
    for p in paths:
        assert Path(p).stat().st_size > 0, p


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_reopens_on_the_dashboard_or_says_why(made, kind):
    for run_id in made["ids"][kind]:
        run = made["history"].load_run(run_id)
        why = run.refusals.get("dashboard")
        if why:
            assert _one_line(why)
        else:  # an audit reopens on the History page itself, every other kind on its page
            assert run.audit_results() is not None or run.page


# --------------------------------------------------------------------------- the CLI
def test_a_suite_through_junit_and_every_gate_from_the_cli(tmp_path, capsys):
    write_cases(tmp_path, 3)
    with FakeOpenAI(models=("fake-model", "fake-embed")) as srv:
        (tmp_path / "s.yaml").write_text(
            suite_yaml(srv.base_url, extra="checks:\n  - {name: refuses, refusal: true}").replace(
                "role: target", "role: control"
            )
        )

        def audit(*flags):
            xml = tmp_path / "j.xml"
            rc = main(
                [
                    "--home",
                    str(tmp_path / "home"),
                    "--cache-dir",
                    str(tmp_path / "c"),
                    "audit",
                    str(tmp_path / "s.yaml"),
                    "--out",
                    str(tmp_path / "o"),
                    "--quiet",
                    "--junit",
                    str(xml),
                    *flags,
                ]
            )
            return rc, ET.parse(xml).getroot()

        rc, root = audit()
        assert rc == 0
        names = [s.get("name") for s in root.findall("testsuite")]
        assert any(n.endswith(": each case") for n in names) and any(
            n.endswith(": pooled over the cases") for n in names
        )
        assert any(n.endswith(": answer checks") for n in names)
        cases = {tc.get("name") for tc in root.iter("testcase")}
        assert {f"case p{i} / comedian" for i in range(3)} <= cases and "comedian" in cases
        assert any(c.startswith("refuses / ") or "/ refuses /" in c for c in cases)
        codes = {tuple(f): audit(*f)[0] for f in (["--fail-on-control"], ["--fail-on", "control"])}
        assert set(codes.values()) == {1}
        assert audit("--fail-on", "target")[0] == 0  # no target in this suite
    err = capsys.readouterr().err
    assert "FAIL: control perturbation(s) changed the answers detectably: comedian" in err


def test_the_report_keeps_a_prompts_newlines_and_marks_each_answer(tmp_path):
    from dbpa_core.report import build_report
    from dbpa_core.runs import SuiteRun

    spec = {
        "name": "lines",
        "models": [{"backend": "replay", "file": "r.jsonl"}],
        "checks": [{"name": "yes", "contains": ["yes"]}],
    }
    answers = [
        {
            "case": "a",
            "arm": "base",
            "role": "base",
            "prompt": "line one\nline two",
            "index": i,
            "response": t,
        }
        for i, t in enumerate(["yes\nand more", "no"])
    ]
    run = SuiteRun(
        "lines",
        summary={"spec": spec, "mode": "suite", "cases": 1, "tests": [], "pooled": []},
        stored_answers=answers,
    )
    h = History(tmp_path / "h.sqlite3")
    page = build_report([h.record_run(run, source="cli")], history=h)
    assert '<pre class="prompt">line one\nline two</pre>' in page
    assert "<pre>yes\nand more</pre>" in page
    assert "✓ yes" in page and "✗ yes" in page


# --------------------------------------------------------------------------- requests
@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_declares_its_requests(made, kind):
    """What a spec will ask, declared before the run (the Batch API job, the replay check and
    the duration estimate read it): every answer the run kept was asked for, and after the
    run the cache holds every request (the battery's RTI is an upper bound)."""
    from dbpa_core.runs import replay_need, requests, uncached

    reqs = requests(made["specs"][kind])
    if kind == "fidelity":  # a file of answers: nothing to ask
        assert reqs == ()
        return
    assert reqs and all(r.part and r.model and r.prompt for r in reqs)
    asked = {r.sample.prompt for r in reqs} | {r.prompt for r in reqs}
    answers = made["runs"][kind].answers()
    assert {a.prompt for a in answers if a.prompt} <= asked
    if kind in ("audit", "suite"):  # k answers per arm, each one request
        assert len(reqs) == len(answers)
    if kind != "battery" and kind != "scan":
        assert uncached(reqs, made["cache"]) == []
    need = replay_need(reqs)
    assert set(need) == {r.prompt for r in reqs} and min(need.values()) >= 1


def test_a_spec_no_kind_knows_is_refused_in_one_line():
    from dbpa_core.runs import requests

    with pytest.raises(RunRefused) as why:
        requests({"not": "a spec"})
    assert _one_line(str(why.value))


# --------------------------------------------------------------------------- history compare
@pytest.mark.parametrize("kind", KINDS)
def test_history_compare_goes_through_the_run_or_says_why(made, kind, capsys):
    """``history compare`` asks the run (no output tests a kind's name): a run compared
    with itself changes no verdict, or the kind refuses in one line."""
    run_id = made["ids"][kind][0]
    run = made["history"].load_run(run_id)
    try:
        cmp = run.compare(made["history"].load_run(run_id))
    except RunRefused as why:
        assert _one_line(str(why))
        assert main(["--home", str(made["home"]), "history", "compare", str(run_id), str(run_id)]) == 2
        err = capsys.readouterr().err.strip()
        assert _one_line(err) and str(why) in err
        return
    assert cmp.lines and cmp.changed == () and not cmp.settings_changed
    rc = main(
        ["--home", str(made["home"]), "history", "compare", str(run_id), str(run_id), "--fail-on-change"]
    )
    assert rc == 0 and "\n".join(cmp.lines) in capsys.readouterr().out
