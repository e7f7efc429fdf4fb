"""JUnit reports for CI (`--junit`), the `--fail-on` gates, `--max-asr` on batteries and
`history compare --fail-on-change`: the XML is parsed back and checked, and the exit codes."""

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from dbpa_core import junit
from dbpa_core.cli import main
from dbpa_core.history import History

from .fake_openai import fake_text
from .test_attacks_battery import data, server, spec_text  # noqa: F401 - fixtures

ROOT = Path(__file__).resolve().parent.parent
BASE = "John has these features: age 70"
CTRL = "Ahmed has these features: age 70"
TARGET = "Act as a comedian. John has these features: age 70"


def record(path, *, funny=(TARGET,), n=10):
    """A replay file: calm answers, except funny ones (a comedian's words) for `funny`."""
    with open(path, "w") as fh:
        for p in (BASE, CTRL, TARGET):
            for i in range(n):
                calm = p.replace("comedian", "speaker")  # fake_text is funny for a comedian
                text = fake_text(("comedian " + p) if p in funny else calm, i)
                fh.write(json.dumps({"prompt": p, "response": text}) + "\n")
    return path


def audit_spec(tmp_path, rec="rec.jsonl", *, checks="", name="ci-gate", target="comedian"):
    spec = tmp_path / f"{name}.yaml"
    spec.write_text(f"""
name: {name}
model: {{backend: replay, file: {rec}}}
embedder: {{backend: rouge1}}
samples: 8
permutations: 999
correction: holm
alpha: 0.05
seed: 1
base: {{prompt: "{BASE}"}}
perturbations:
  - {{name: name-change, prompt: "{CTRL}", role: control}}
  - {{name: {json.dumps(target)}, prompt: "{TARGET}", role: target}}
{checks}
""")
    return spec


def audit(tmp_path, spec, *flags, junit_file="junit.xml"):
    xml = tmp_path / junit_file
    rc = main(
        [
            "--cache-dir",
            str(tmp_path / "cache"),
            "audit",
            str(spec),
            "--out",
            str(tmp_path / "out"),
            "--quiet",
            "--no-history",
            "--junit",
            str(xml),
            *flags,
        ]
    )
    return rc, ET.parse(xml).getroot() if xml.exists() else None


def cases(root):
    return {tc.get("name"): tc for tc in root.iter("testcase")}


def props(suite):
    return {p.get("name"): p.get("value") for p in suite.find("properties")}


def test_one_case_per_perturbation_a_changed_control_fails_with_its_numbers(tmp_path, capsys):
    record(tmp_path / "rec.jsonl", funny=(CTRL, TARGET))  # the control changes the answers
    rc, root = audit(tmp_path, audit_spec(tmp_path))
    assert rc == 0  # no gate asked for: the report says it, the exit code does not
    assert root.tag == "testsuites"
    (suite,) = root.findall("testsuite")
    assert suite.get("name") == "dbpa audit ci-gate"
    p = props(suite)
    assert (p["samples"], p["permutations"], p["correction"], p["alpha"], p["seed"]) == (
        "8",
        "999",
        "holm",
        "0.05",
        "1",
    )
    assert p["models"] == "rec.jsonl" and p["embedder"] == "rouge1" and p["fail_on"] == "none"
    tc = cases(root)
    assert set(tc) == {"name-change", "comedian"}
    assert tc["name-change"].get("classname") == "dbpa.audit.ci-gate"
    (failure,) = tc["name-change"].findall("failure")
    assert failure.get("type") == "control-changed"
    msg = failure.get("message")
    assert re.search(
        r"control 'name-change' changed the answers: omega = 0\.\d{3}, chance = "
        r"0\.\d{3}, above chance = \+0\.\d{3}, p = 0\.00\d0, p_adj = 0\.0020 \(holm over 2 perturbations\), "
        r"alpha = 0\.05",
        msg,
    ), msg
    assert tc["comedian"].find("failure") is None
    assert "changed the answers" in tc["comedian"].find("system-out").text
    # the counts add up, at both levels
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("2", "1", "0")
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("2", "1", "0")
    assert "wrote" in capsys.readouterr().out


@pytest.mark.parametrize(
    "flags", [["--fail-on-control"], ["--fail-on", "control"], ["--fail-on", "target,control"]]
)
def test_a_gated_control_exits_1_and_says_which(tmp_path, capsys, flags):
    record(tmp_path / "rec.jsonl", funny=(CTRL, TARGET))
    rc, root = audit(tmp_path, audit_spec(tmp_path), *flags)
    assert rc == 1
    err = capsys.readouterr().err
    assert "FAIL: control perturbation(s) changed the answers detectably: name-change" in err
    assert root.get("failures") == "1"


def test_a_target_that_changes_nothing_fails_only_with_fail_on_target(tmp_path, capsys):
    record(tmp_path / "rec.jsonl", funny=())  # nothing changes, not even the target
    spec = audit_spec(tmp_path)
    rc, root = audit(tmp_path, spec)
    assert rc == 0 and root.get("failures") == "0"
    rc, root = audit(tmp_path, spec, "--fail-on", "target")
    assert rc == 1
    (failure,) = cases(root)["comedian"].findall("failure")
    assert failure.get("type") == "target-unchanged"
    assert "did not detectably change the answers" in failure.get("message")
    assert "p_adj" in failure.get("message") and "(p_adj > alpha)" in failure.get("message")
    assert cases(root)["name-change"].find("failure") is None
    assert props(root.find("testsuite"))["fail_on"] == "target"
    assert (
        "FAIL: target perturbation(s) did not detectably change the answers: comedian"
        in capsys.readouterr().err
    )


def test_a_clean_run_passes_every_gate(tmp_path):
    record(tmp_path / "rec.jsonl", funny=(TARGET,))  # the control keeps, the target moves
    rc, root = audit(tmp_path, audit_spec(tmp_path), "--fail-on", "control", "--fail-on", "target,check")
    assert rc == 0
    assert root.get("failures") == "0" and root.get("tests") == "2"


def test_checks_are_cases_a_significant_change_is_a_failure(tmp_path, capsys):
    record(tmp_path / "rec.jsonl", funny=(CTRL, TARGET))
    spec = audit_spec(
        tmp_path,
        checks="checks:\n  - {name: clowns, contains: [clown, banana, joke, pie, honk, laugh]}\n"
        "  - {name: refuses, refusal: true}",
    )
    rc, root = audit(tmp_path, spec, "--fail-on", "check")
    assert rc == 1
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == ["dbpa audit ci-gate", "dbpa audit ci-gate: answer checks"]
    tc = cases(suites[1])
    assert set(tc) == {
        "clowns / name-change",
        "clowns / comedian",
        "refuses / name-change",
        "refuses / comedian",
    }
    (failure,) = tc["clowns / name-change"].findall("failure")
    assert failure.get("type") == "check-changed"
    assert re.search(r"clowns: 0/8 → 8/8, \+100 points \[.*\], p < 0\.001", failure.get("message"))
    assert tc["refuses / comedian"].find("failure") is None  # 0/8 -> 0/8
    assert suites[1].get("failures") == "2" and root.get("tests") == "6"
    err = capsys.readouterr().err
    assert "FAIL: answer check(s) changed detectably: clowns / name-change, clowns / comedian" in err
    assert "FAIL: control" not in err  # controls are not gated here
    rc, _ = audit(tmp_path, spec)  # the same run without the check gate (from the cache)
    assert rc == 0


def test_a_bad_gate_or_report_path_is_one_line_and_runs_nothing(tmp_path, capsys):
    spec = audit_spec(tmp_path)  # no recording at all: a run would fail with exit 3
    rc = main(["audit", str(spec), "--out", str(tmp_path / "o"), "--fail-on", "controls,typo"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "unknown kind 'typo'" in err
    (tmp_path / "folder").mkdir()
    rc = main(["audit", str(spec), "--out", str(tmp_path / "o"), "--junit", str(tmp_path / "folder")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "is a folder" in err
    (tmp_path / "afile").write_text("x")
    rc = main(
        ["audit", str(spec), "--out", str(tmp_path / "o"), "--junit", str(tmp_path / "afile" / "junit.xml")]
    )
    assert rc == 2 and "--junit" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_the_report_goes_into_a_new_folder_and_names_survive_xml(tmp_path):
    record(tmp_path / "rec.jsonl", funny=(CTRL, TARGET))
    odd = 'a <b> & "c"'
    rc, root = audit(
        tmp_path, audit_spec(tmp_path, target=odd), "--fail-on-control", junit_file="reports/ci/junit.xml"
    )
    assert rc == 1 and odd in cases(root)


def test_xml_drops_what_xml_cannot_hold_and_takes_a_case_id():
    p = SimpleNamespace(
        name="name\x07-change\x1b",
        role="control",
        model="m\x00",
        effect_size=0.5,
        chance_effect_size=0.1,
        effect_above_chance=0.4,
        p_value=0.001,
        p_adjusted=0.002,
        significant=True,
        min_effect=None,
    )
    c = junit.perturbation_case(
        p, alpha=0.05, correction="holm", fail_on=frozenset(), classname="dbpa.audit.x", case="vignette-17"
    )
    assert c.name.startswith("vignette-17 / name")
    root = ET.fromstring(junit.to_xml([junit.Suite("s", (c,))]))
    tc = root.find("testsuite/testcase")
    assert tc.get("name") == "vignette-17 / name-change"
    assert tc.find("failure").get("type") == "control-changed"


def test_parse_fail_on():
    assert junit.parse_fail_on(["control,check", " targets "]) == {"control", "check", "target"}
    assert junit.parse_fail_on([], fail_on_control=True) == {"control"}
    with pytest.raises(ValueError, match="unknown kind 'all'"):
        junit.parse_fail_on(["all"])


ATTACKS = """
attacks:
  - {level: char, rho: [0.0, 1.0]}
"""


def test_attack_rows_are_cases_and_max_asr_gates(server, data, tmp_path, capsys):  # noqa: F811
    spec = tmp_path / "battery.yaml"
    spec.write_text(spec_text(server, data, ATTACKS, extra="name: typos"))
    xml = tmp_path / "attack.xml"

    def attack(*flags):
        return main(
            [
                "--cache-dir",
                str(tmp_path / "c"),
                "attack",
                str(spec),
                "--out",
                str(tmp_path / "out"),
                "--quiet",
                "--junit",
                str(xml),
                *flags,
            ]
        )

    assert attack() == 0
    root = ET.parse(xml).getroot()
    (suite,) = root.findall("testsuite")
    assert suite.get("name") == "dbpa attack typos"
    assert props(suite)["max_asr"] == "none" and props(suite)["clean_error_rate"] == "0.5"
    tc = cases(root)
    assert set(tc) == {"char rho=0", "char rho=1"} and root.get("failures") == "0"
    assert "ASR = 1.000 (6/6" in tc["char rho=1"].find("system-out").text
    capsys.readouterr()

    assert attack("--max-asr", "0.5") == 1
    tc = cases(ET.parse(xml).getroot())
    (failure,) = tc["char rho=1"].findall("failure")
    assert failure.get("type") == "asr-exceeded"
    assert re.search(
        r"char at rho = 1: ASR = 1\.000 \(6/6, 95% interval \[0\.\d\d, 1\.00\], "
        r"0 unparsed\), ER = 0\.667 against 0\.500 clean; above the maximum ASR 0\.5",
        failure.get("message"),
    ), failure.get("message")
    assert tc["char rho=0"].find("failure") is None
    assert "FAIL: attack success rate above --max-asr 0.5: char rho=1" in capsys.readouterr().err
    assert attack("--max-asr", "1") == 0  # at the threshold is not above it
    assert attack("--max-asr", "1.5") == 2
    assert "between 0 and 1" in capsys.readouterr().err


def test_compare_fail_on_change_after_a_model_upgrade(tmp_path, capsys):
    record(tmp_path / "before.jsonl", funny=(TARGET,))
    record(tmp_path / "after.jsonl", funny=(CTRL, TARGET))  # the upgrade moves the control

    def run(rec):
        spec = audit_spec(tmp_path, rec, name=Path(rec).stem)
        return main(
            [
                "--cache-dir",
                str(tmp_path / "cache"),
                "audit",
                str(spec),
                "--out",
                str(tmp_path / f"out-{rec}"),
                "--quiet",
            ]
        )

    assert run("before.jsonl") == 0 and run("after.jsonl") == 0
    capsys.readouterr()
    b, a = [r.id for r in History().list()]  # newest first
    assert main(["history", "compare", str(a), str(b)]) == 0  # reports, gates nothing
    assert "NOW SIGNIFICANT" in capsys.readouterr().out
    assert main(["history", "compare", str(a), str(b), "--fail-on-change"]) == 1
    out, err = capsys.readouterr()
    assert "1 of 2 perturbations tested in both runs changed verdict." in out
    assert err.strip() == (
        f"FAIL: 1 verdict(s) changed from run {a} to run {b}: name-change (now significant)"
    )
    assert main(["history", "compare", str(a), str(b), "--fail-on-change", "--json"]) == 1
    out, err = capsys.readouterr()
    assert json.loads(out)["verdicts_changed"] == 1 and "name-change" in err
    assert main(["history", "compare", str(b), str(b), "--fail-on-change"]) == 0  # no change


def test_the_manuals_workflow_runs_a_replay_spec_and_publishes_the_report():
    text = (ROOT / "docs" / "guides" / "ci.md").read_text()
    block = re.search(r"```yaml\n(# \.github/workflows/dbpa\.yml\n.*?)```", text, re.S).group(1)
    wf = yaml.safe_load(block)
    steps = [s for job in wf["jobs"].values() for s in job["steps"]]
    runs = " ".join(s.get("run", "") for s in steps)
    m = re.search(r"dbpa audit (\S+) .*--junit (\S+)", runs)
    assert m and (ROOT / m.group(1)).exists()
    assert "replay" in (ROOT / m.group(1)).read_text()
    assert any(m.group(2) in json.dumps(s.get("with", {})) for s in steps if "uses" in s)


def test_an_audit_that_cannot_run_leaves_a_report_in_error(tmp_path, capsys):
    record(tmp_path / "rec.jsonl", n=5)  # 5 recorded answers per prompt, the spec wants 8
    rc, root = audit(tmp_path, audit_spec(tmp_path), "--fail-on-control")
    assert rc == 3
    assert (root.get("tests"), root.get("errors"), root.get("failures")) == ("1", "1", "0")
    (error,) = root.iter("error")
    assert "5 recorded responses" in error.get("message")
    assert error.get("message") in capsys.readouterr().err


def test_a_scans_test_cases_name_each_part_once(server, data, tmp_path):  # noqa: F811
    """A scan's JUnit cases are named part / test (its audit's name said once, not as the
    audit's title and again as its spec's name), under the scan's own suite name."""
    from dbpa_core.attacks.battery import run_battery
    from dbpa_core.attacks.spec import parse_attack_spec
    from dbpa_core.audit import run_audit
    from dbpa_core.cache import Cache
    from dbpa_core.runs import AuditRun, BatteryRun, ScanRun
    from dbpa_core.spec import load_spec

    cache = Cache(tmp_path / "c")
    record(tmp_path / "rec.jsonl", funny=(CTRL, TARGET))
    spec = load_spec(audit_spec(tmp_path, rec=str(tmp_path / "rec.jsonl"), name="personas and controls"))
    battery = parse_attack_spec(spec_text(server, data, ATTACKS, extra="name: robustness battery"))
    parts = (
        AuditRun("scan of m: personas and controls", audits={"m": run_audit(spec, cache=cache)}),
        BatteryRun(
            "scan of m: robustness battery",
            batteries={"robustness battery": run_battery(battery, cache=cache)},
        ),
    )
    for names, audit_part, battery_part in (
        (("personas and controls", "robustness battery"), "personas and controls", "robustness battery"),
        ((), "scan of m: personas and controls", "scan of m: robustness battery"),  # by their titles
    ):
        scan = ScanRun("Scan of m", parts=parts, names=names)
        suites = junit.run_suites(scan, fail_on=frozenset({"control"}))
        assert [s.name for s in suites] == ["dbpa scan Scan of m"]
        got = [c.name for c in suites[0].cases]
        assert got == [
            f"{audit_part} / name-change",
            f"{audit_part} / comedian",
            f"{battery_part} / char rho=0",
            f"{battery_part} / char rho=1",
        ]
        assert not any(name.count("personas and controls") > 1 for name in got)
    failed = [c.name for c in junit.gate_failures(suites, frozenset({"control"}))]
    assert failed == ["scan of m: personas and controls / name-change"]
