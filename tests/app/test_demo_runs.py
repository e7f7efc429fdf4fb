"""Issue 33, item 7: in demo mode the Robustness battery, Sensitivity and History pages show
a recorded result at once (``assets/demo_runs.sqlite3``, written by
``assets/make_demo_runs.py``; ``ui/demo_runs.py``): the verdict in words first, labelled
*Recorded result*; History lists the recorded runs as examples, never in the user's history."""

import hashlib
import shutil
from dataclasses import replace

import pytest

from dbpa_core.history import History
from ui import demo, demo_runs
from ui.widgets import VERDICT_ICON

from .conftest import DEMO, plain

pytestmark = pytest.mark.slow  # AppTests of whole pages (the battery's takes ~40 s here)
MODEL = {
    "backend": "replay",
    "file": DEMO,
    "name": demo_runs.MODEL,
    "label": "SmolLM2-135M-Instruct (recorded)",
}


@pytest.fixture
def demo_mode(monkeypatch):
    monkeypatch.setenv("DBPA_REPLAY_FILE", DEMO)


def _verdict(at) -> str:
    (said,) = [i for i in at.info if i.icon == VERDICT_ICON]
    return plain(said.value)


def _labelled(at) -> bool:
    return any(plain(i.value).startswith("Recorded result, shown at once") for i in at.info) or any(
        i.value.startswith("**Recorded result**, shown at once") for i in at.info
    )


def _digest() -> str:
    return hashlib.sha256(demo_runs.RECORDED.read_bytes()).hexdigest()


def test_the_recorded_runs_are_the_pages_defaults(tmp_path):
    """What the script recorded is what each page builds from its defaults in demo mode (so
    the pages offer it), and every recorded result reads back (a change of a result's layout
    fails here: run assets/make_demo_runs.py again)."""
    from ui import battery

    copy = tmp_path / "runs.sqlite3"
    shutil.copyfile(demo_runs.RECORDED, copy)
    assert demo_runs.RECORDED.stat().st_size < 1024 * 1024  # a small file
    h = History(copy)
    runs = {r.page: r for r in h.list()}
    assert list(runs) == ["landing", "suite", "robustness", "sensitivity"]  # newest first
    results = {page: h.result(r.id)[1] for page, r in runs.items() if page != "landing"}
    bat = results["robustness"]["battery"]
    page_spec = battery.build_spec(dict(battery.DEFAULTS), demo_runs.default_settings(), MODEL)
    assert demo_runs.same_inputs(page_spec, bat.spec)
    assert not demo_runs.same_inputs(
        battery.build_spec(dict(battery.DEFAULTS, w_bat_orders=2), demo_runs.default_settings(), MODEL),
        bat.spec,
    )
    study = results["sensitivity"]["sensitivity"]
    assert demo_runs.same_inputs(demo.default_spec(model=MODEL), study.spec)
    assert demo_runs.sensitivity_audit().to_dict() == study.spec.to_dict()
    assert study.config == demo_runs.sensitivity_config(study.spec)
    # only the replay of the recording answers them: not the embedded model, not another file
    assert not demo_runs.same_inputs(replace(page_spec, model={"backend": "local"}), bat.spec)
    assert not demo_runs.is_recorded_model({**MODEL, "file": str(tmp_path / "other.jsonl")})
    assert runs["landing"].n_tests == 8 and results["suite"]["suite"]["pooled"]


def test_outside_demo_mode_there_are_no_recorded_runs(monkeypatch, tmp_path):
    monkeypatch.delenv("DBPA_REPLAY_FILE", raising=False)
    assert demo_runs.history() is None
    other = tmp_path / "mine.jsonl"  # demo mode on other recorded answers: not these examples
    shutil.copyfile(DEMO, other)
    monkeypatch.setenv("DBPA_REPLAY_FILE", str(other))
    assert demo_runs.history() is None
    monkeypatch.setenv("DBPA_REPLAY_FILE", DEMO)
    assert demo_runs.history() is not None


def test_the_battery_shows_its_recorded_run_until_the_inputs_change(make_app, demo_mode):
    at = make_app(models=None, page="pages/robustness.py", w_samples=20, w_permutations=2000)
    assert not at.exception, at.exception
    assert _verdict(at).startswith("Clean: 7 of 8 items wrong")
    assert _labelled(at)
    assert at.session_state["results_meta"]["robustness"]["run"].source == "recorded"
    at.number_input(key="w_bat_orders").set_value(2).run()  # other inputs: not the recording's
    assert not at.exception, at.exception
    assert _verdict(at).startswith("No verdict yet: press **Run battery**")
    assert not _labelled(at)


def test_the_sensitivity_study_shows_its_recorded_run(make_app, demo_mode):
    at = make_app(models=None, page="pages/sensitivity.py", w_samples=20, w_permutations=2000)
    assert not at.exception, at.exception
    assert _verdict(at) == "8 of 8 verdicts hold in every setting tried."
    assert _labelled(at)
    table = at.dataframe[0].value  # the verdict table: one row per perturbation
    assert list(table.columns)[:4] == ["perturbation", "role", "audit", "verdict"] and len(table) == 8
    # the replay model's answers are read from the recording: not "model calls to make"
    assert "Recorded answers to read" in [m.label for m in at.metric]
    at.multiselect(key="w_sens_measures").set_value(["jsd"]).run()
    assert _verdict(at).startswith("No verdict yet")


def test_the_recording_names_no_folder_of_the_machine_that_made_it(tmp_path):
    """Every model the recorded runs name reads its file relative to the repository: an
    absolute path is a folder of the machine that ran the script (it broke in every other
    checkout, and a pip user's)."""
    import re
    import sqlite3

    con = sqlite3.connect(f"file:{demo_runs.RECORDED}?mode=ro", uri=True)
    cells = [
        v
        for (table,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        for row in con.execute(f"SELECT * FROM {table}")  # the file's own tables
        for v in row
        if isinstance(v, str)
    ]
    con.close()
    files = [f for v in cells for f in re.findall(r'"file": "([^"]*)"', v)]
    # and in the stored results themselves (compressed, so read back): their specs' models
    copy = tmp_path / "runs.sqlite3"
    shutil.copyfile(demo_runs.RECORDED, copy)
    h = History(copy)
    for run in h.list():
        kept = h.get(run.id).audits or h.result(run.id)[1]  # an audit, else another kind
        for result in kept.values():
            spec = getattr(result, "spec", None) or (result.get("spec") if isinstance(result, dict) else None)
            if isinstance(spec, dict):  # a suite keeps its spec as a dict
                models = spec.get("models") or ()
            else:  # an audit's models, a battery's one model
                models = getattr(spec, "models", None) or (getattr(spec, "model", None),)
            files += [m["file"] for m in models if isinstance(m, dict) and "file" in m]
    assert files and set(files) == {"assets/demo_replay.jsonl"}


def test_history_lists_the_recorded_examples_and_writes_nothing(make_app, demo_mode):
    before = _digest()
    at = make_app(models=None, page="pages/history.py")
    assert not at.exception, at.exception
    assert _verdict(at).startswith(
        "Recorded examples: 4 runs listed below. The latest, #4 (Perturbation test"
    )
    assert any(i.value.startswith("**Recorded examples, not your history**") for i in at.info)
    assert any("cannot be deleted" in c.value for c in at.caption)
    # each recorded example opens: the battery on its own page, with all its charts
    at.selectbox(key="hist_open").set_value(2).run()
    assert not at.exception, at.exception
    assert "Open on the Robustness battery page" in at.button(key="hist_reopen").label
    # ... and the audit loads into its page on demo mode's own model (none is added)
    models = list(at.session_state["models"])
    at.selectbox(key="hist_open").set_value(4).run()
    at.button(key="hist_load").click().run()
    assert not at.exception, at.exception
    assert at.session_state["models"] == models
    assert at.session_state["w_landing_model"] == "SmolLM2-135M-Instruct (recorded)"
    assert History().list() == []  # the user's history: still empty
    assert _digest() == before  # the file in the repository: untouched


def test_history_shows_the_users_own_runs_once_there_are_any(make_app, demo_mode, tmp_path):
    from dbpa_core.runs import as_run
    from ui import suite_demo

    History().record_run(as_run(suite_demo.recording(), title="my suite"), source="cli")
    at = make_app(models=None, page="pages/history.py")
    assert not at.exception, at.exception
    assert _verdict(at).startswith("1 run listed below.")
    assert not any("Recorded examples" in i.value for i in at.info)
