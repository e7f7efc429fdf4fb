"""``dbpa attack``, ``dbpa fidelity --simulate`` and ``dbpa sensitivity`` record their runs in
the run history as the dashboard does (the same kind and result, so they reopen on its
pages); ``dbpa history show ID`` and ``dbpa report ID`` read them; ``--no-history`` skips."""

import json
import re

from dbpa_core.cli import main
from dbpa_core.history import History

from .fake_openai import FakeOpenAI
from .survey_model import SurveyModel
from .test_attacks_battery import data, server, spec_text  # noqa: F401 - fixtures
from .test_fidelity_simulate import SURVEY
from .test_sensitivity import MODELS
from .test_sensitivity import spec_text as sensitivity_spec


def recorded_id(printed: str) -> int:
    found = re.findall(r"recorded as run (\d+)", printed)
    assert len(found) == 1, printed
    return int(found[0])


def test_battery_run_is_recorded_shown_and_reported(tmp_path, server, data, capsys):  # noqa: F811
    spec = tmp_path / "battery.yaml"
    spec.write_text(
        spec_text(server, data, "attacks: [{level: char, rho: [0.5]}]", extra="name: recorded battery")
    )
    cache = str(tmp_path / "c")
    assert main(["--cache-dir", cache, "attack", str(spec), "--out", str(tmp_path / "o"), "--quiet"]) == 0
    run_id = recorded_id(capsys.readouterr().out)
    kind, results = History().result(run_id)
    assert kind == "battery" and set(results) == {"battery"}  # as the Robustness page keeps it
    assert results["battery"].clean().er.n == 6
    summary = History().get(run_id).summary
    assert (summary.source, summary.title) == ("cli", "recorded battery")
    assert History().get(run_id).out_dir == str((tmp_path / "o").resolve())
    assert main(["history", "show", str(run_id)]) == 0
    shown = capsys.readouterr().out
    assert "robustness battery of rule-model: 6 items, clean error rate" in shown
    assert main(["history", "show", str(run_id), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["kind"] == "battery" and d["source"] == "cli"
    assert main(["report", str(run_id), "--out", str(tmp_path / "r.html")]) == 0
    assert "recorded battery" in (tmp_path / "r.html").read_text()
    # --no-history: not recorded
    assert (
        main(
            [
                "--cache-dir",
                cache,
                "attack",
                str(spec),
                "--out",
                str(tmp_path / "o2"),
                "--quiet",
                "--no-history",
            ]
        )
        == 0
    )
    assert "recorded as run" not in capsys.readouterr().out
    assert [r.id for r in History().list()] == [run_id]


def test_fidelity_simulation_is_recorded(tmp_path, capsys):
    (tmp_path / "survey.csv").write_text(SURVEY)
    with SurveyModel() as srv:
        spec = tmp_path / "sim.yaml"
        spec.write_text(f"""
name: pets
data: survey.csv
models:
  - {{backend: openai, name: survey-model, base_url: "{srv.base_url}", label: survey, max_retries: 0}}
samples: 4
""")
        assert main(["fidelity", "--simulate", str(spec), "--out", str(tmp_path / "o"), "--quiet"]) == 0
    run_id = recorded_id(capsys.readouterr().out)
    kind, results = History().result(run_id)
    # the simulation as the Simulator fidelity page keys it, and its analysis
    assert kind == "fidelity" and set(results) == {"simulation", "analysis"}
    assert results["simulation"].models == ("survey",)
    assert main(["history", "show", str(run_id)]) == 0
    assert "simulator fidelity study of survey: 1 simulator, 12 answers read" in capsys.readouterr().out
    # a data file (no simulation) is recorded too, with its guarantee and comparisons
    assert main(["fidelity", "sample", "--out", str(tmp_path / "a"), "--no-band"]) == 0
    assert "recorded as run" in capsys.readouterr().out
    [csv_run] = [r for r in History().list() if r.id != run_id]
    kind, results = History().result(csv_run.id)
    assert kind == "fidelity" and set(results) == {"analysis"}
    assert csv_run.title == "fidelity of sample"
    # three simulators and the baseline they are ranked against, not "4 simulators"
    assert main(["history"]) == 0
    assert "3 simulators and the uniform baseline on 40 que" in capsys.readouterr().out
    assert main(["fidelity", "sample", "--out", str(tmp_path / "b"), "--no-band", "--no-history"]) == 0
    assert "recorded as run" not in capsys.readouterr().out


def test_sensitivity_study_is_recorded(tmp_path, capsys):
    with FakeOpenAI(models=MODELS) as srv:
        spec = tmp_path / "spec.yaml"
        spec.write_text(sensitivity_spec(srv))
        assert (
            main(
                [
                    "--cache-dir",
                    str(tmp_path / "c"),
                    "sensitivity",
                    str(spec),
                    "--measures",
                    "jsd",
                    "--embedders",
                    "spec",
                    "--out",
                    str(tmp_path / "s"),
                    "--quiet",
                ]
            )
            == 0
        )
    run_id = recorded_id(capsys.readouterr().out)
    kind, results = History().result(run_id)
    assert kind == "sensitivity" and set(results) == {"sensitivity"}
    assert main(["history", "show", str(run_id)]) == 0
    assert "sensitivity study of gpt-4o-mini: 2 comparisons" in capsys.readouterr().out
    assert main(["history"]) == 0
    assert "sensitivity" in capsys.readouterr().out
