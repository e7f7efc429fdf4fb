"""Record assets/demo_runs.sqlite3: the dashboard's default examples run on the recorded
answers (``assets/demo_replay.jsonl``, no model loaded), kept as a run history of their own.

    .venv/bin/python assets/make_demo_runs.py

It holds four runs, each made exactly as the page makes it with its defaults, in demo mode:

* the Perturbation test's default audit (the landing page's recorded result, ``ui/demo.py``),
* the Suite page's example suite (``assets/demo_suite.json``, ``ui/suite_demo.py``),
* the Robustness battery page's default battery, and
* the Sensitivity page's default study of the Perturbation test's default audit (every
  distance measure, MiniLM, priced for gpt-4o-mini).

The battery and sensitivity pages show their run at once in demo mode, and the History page,
in demo mode with no runs of the user's, lists all four as recorded examples
(``ui/demo_runs.py``); the dashboard reads a copy of the file, never the file itself, and
never writes them into the user's history. The runs are rebuilt from the recorded answers,
so this script needs no model: only MiniLM (shipped in a wheel) for the sensitivity study.
Run it again after ``assets/make_demo_replay.py`` re-records answers, or when a result's
layout changes (``tests/app/test_demo_runs.py`` fails until then).
"""

from __future__ import annotations

import os
import sqlite3
import sys
import tempfile
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DST = Path(__file__).with_name("demo_runs.sqlite3")


def main() -> int:
    os.chdir(ROOT)  # the replay model's file is kept relative: assets/demo_replay.jsonl
    from streamlit import logger

    logger.set_log_level("error")  # ui's modules import streamlit: no runtime is needed here

    from dbpa_core import sensitivity as sens
    from dbpa_core.cache import Cache
    from dbpa_core.history import History
    from dbpa_core.runs import as_run
    from ui import battery, demo, demo_runs, suite_demo

    rec = demo.load_recording()
    suite = suite_demo.recording()
    if rec is None or suite is None:
        raise SystemExit("the recorded answers are missing: run assets/make_demo_replay.py first")
    when = datetime.fromisoformat(rec.date).replace(hour=12, tzinfo=UTC)
    model = demo_runs.replay_model()
    # on the replay, as demo mode, its file kept relative (the Sensitivity page's audit is it)
    landing = demo.recorded_result(demo_runs.sensitivity_audit(), rec)
    assert landing is not None, "the landing example is not fully recorded"

    with tempfile.TemporaryDirectory() as tmp:
        cache = Cache(Path(tmp) / "cache")

        def progress(p) -> None:
            print(f"  {p.stage} {p.done}/{p.total} {p.detail}", flush=True)

        print("battery: the page's default on the recorded answers", flush=True)
        bat_spec = battery.build_spec(dict(battery.DEFAULTS), demo_runs.default_settings(), model)
        bat_spec = replace(bat_spec, model=model)  # its file kept relative, as the audits'
        bat = battery.task(bat_spec, cache, {})(progress)
        print("sensitivity: the page's default study of the landing audit", flush=True)
        sens_spec = demo_runs.sensitivity_audit()
        study = sens.run_sensitivity(
            sens_spec, demo_runs.sensitivity_config(sens_spec), cache=cache, progress=progress
        )

        # dated as the answers were recorded (the results' files are named after it)
        bat, study = replace(bat, created_at=when), replace(study, created_at=when)
        db = Path(tmp) / "runs.sqlite3"
        h = History(db)
        runs = [
            ("sensitivity", {"sensitivity": study}, "Sensitivity study"),
            ("robustness", {"battery": bat}, "Robustness battery"),
            ("suite", suite, "Suite of cases: clinical vignettes"),
            ("landing", {demo_runs.MODEL: landing}, "Perturbation test"),
        ]
        for i, (page, results, title) in enumerate(runs):
            run = as_run(results, title=title)
            run.title = title
            # the Perturbation test's audit last: the newest, whose verdict the History page says
            run_id = h.record_run(run, source="dashboard", page=page, created_at=when.replace(minute=i))
            print(f"run {run_id}: {page} ({run.kind})")
        con = sqlite3.connect(db)
        with con:  # who recorded them, and where, is not the examples' business
            con.execute("UPDATE runs SET user_name = NULL, host_name = NULL")
        con.execute("VACUUM")
        con.close()
        DST.write_bytes(db.read_bytes())
    print(f"wrote {DST} ({DST.stat().st_size // 1024} KiB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
