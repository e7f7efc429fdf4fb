"""Demo mode's recorded runs: the default examples of the Perturbation test, Suite,
Robustness battery and Sensitivity pages run on the recorded answers and kept as a run
history of their own, ``assets/demo_runs.sqlite3`` (written by ``assets/make_demo_runs.py``).

In demo mode (``DBPA_REPLAY_FILE`` set to the recorded answers), the battery and sensitivity
pages show their default example's run at once, labelled as recorded, while their inputs
are the defaults; the History page, while the user's own history holds no run, lists the
recorded runs as examples. The dashboard reads a copy of the file made once per process in a
temporary folder: neither the file in the repository nor the user's history database is
ever written by it.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import streamlit as st

from dbpa_core.history import History, HistoryError
from dbpa_core.spec import AuditSpec

from . import demo, state
from .export import RunMeta

RECORDED = demo.ROOT / "assets" / "demo_runs.sqlite3"
MODEL = "SmolLM2-135M-Instruct"  # the embedded model, whose answers were recorded
PAGE_WORDS = {  # page key -> what its Run button is called, for the label
    "robustness": "Run battery",
    "sensitivity": "Run sensitivity study",
}


def replay_model() -> dict[str, Any]:
    """Demo mode's model: the replay of the recorded answers (a path relative to the
    repository, as ``assets/make_demo_runs.py`` records it)."""
    return {"backend": "replay", "file": "assets/demo_replay.jsonl", "name": MODEL}


def localize(spec: AuditSpec) -> AuditSpec:
    """``spec`` with the recording's replay model (kept with a relative path) pointing at the
    recorded answers on this machine, so that a recorded example loaded into a page runs on
    demo mode's own model rather than adding another."""
    from dataclasses import replace

    def here(m: dict[str, Any]) -> dict[str, Any]:
        same = m.get("backend") == "replay" and m.get("file") == replay_model()["file"]
        return {**m, "file": str(demo.RESPONSES)} if same else m

    return replace(spec, models=tuple(here(dict(m)) for m in spec.models))


def is_recorded_model(model: dict[str, Any] | None) -> bool:
    """Is ``model`` the replay of the recorded answers (``assets/demo_replay.jsonl``, read as
    the embedded model)? Only then does a recorded run answer the page's inputs."""
    if not model or model.get("backend") != "replay" or str(model.get("name") or "") != MODEL:
        return False
    try:
        return Path(str(model.get("file") or "")).resolve() == demo.RESPONSES.resolve()
    except OSError:
        return False


def default_settings() -> dict[str, Any]:
    """The sidebar's settings of a fresh session (what ``ui.state.settings`` gives then)."""
    return {**demo.default_settings(), "min_effect": None}


def sensitivity_audit() -> AuditSpec:
    """The audit the Sensitivity page examines by default in demo mode: the Perturbation
    test's default example on the recorded answers (the replay file kept relative to the
    repository, as it is recorded: parsing the spec would make it a path of this machine)."""
    from dataclasses import replace

    return replace(demo.default_spec(model=replay_model()), models=(replay_model(),))


def sensitivity_config(spec: AuditSpec) -> Any:
    """The Sensitivity page's default study of ``spec``: every distance measure, the
    audit's own embedder and MiniLM, no prompt lengths, priced for gpt-4o-mini."""
    from dbpa_core import sensitivity as sens
    from dbpa_core.measures import MEASURES

    return sens.SensitivityConfig(
        measures=sens.parse_measures(list(MEASURES)),
        embedders=sens.parse_embedders(["spec", "local"], spec),
        lengths=(),
        cost_models=("gpt-4o-mini",),
    )


def _plain(d: dict[str, Any]) -> str:
    """A spec's dict without what a recorded run may differ in: its name, the model (which
    :func:`is_recorded_model` checks) and δ (read afresh on screen)."""
    drop = {"name", "model", "models", "min_effect", "source", "description"}
    return json.dumps({k: v for k, v in d.items() if k not in drop}, sort_keys=True, default=str)


def same_inputs(page: Any, recorded: Any) -> bool:
    """Do a page's spec and a recorded run's spec (an audit's or a battery's) ask the same,
    on the recorded answers?"""
    if page is None or recorded is None:
        return False
    models = getattr(page, "models", None) or [page.model]
    return all(is_recorded_model(m) for m in models) and _plain(page.to_dict()) == _plain(recorded.to_dict())


@st.cache_resource(show_spinner=False, max_entries=1)
def _copy(mtime: float) -> str | None:
    """The recorded runs copied into a temporary folder (this process's own)."""
    folder = tempfile.mkdtemp(prefix="dbpa-demo-runs-")
    dst = Path(folder) / "demo_runs.sqlite3"
    try:
        shutil.copyfile(RECORDED, dst)
    except OSError:
        return None
    return str(dst)


def demo_of_recording() -> bool:
    """Is the dashboard in demo mode on the recorded answers (``DBPA_REPLAY_FILE`` is
    ``assets/demo_replay.jsonl``)? Another replay file answers other prompts: no examples."""
    replay = state.demo_file()
    try:
        return bool(replay) and Path(str(replay)).resolve() == demo.RESPONSES.resolve()
    except OSError:
        return False


def history() -> History | None:
    """The recorded runs, as a :class:`~dbpa_core.history.History` over a copy of
    ``assets/demo_runs.sqlite3`` (None outside demo mode on the recorded answers, or when the
    file is missing)."""
    if not demo_of_recording():
        return None
    try:
        path = _copy(RECORDED.stat().st_mtime)
    except OSError:
        return None
    return History(path) if path else None


def _recorded_run(page: str) -> tuple[int, Any, Any] | None:
    """``(run id, created at, results)`` of the recorded run of ``page``, or None (read once
    per process: every page view asks while it holds no results of its own)."""
    if not demo_of_recording():
        return None
    try:
        got = _read_run(page, RECORDED.stat().st_mtime)
    except OSError:
        return None
    if got is None:
        return None
    run_id, created_at, results = got
    return run_id, created_at, dict(results) if isinstance(results, dict) else results  # the session's own


@st.cache_resource(show_spinner=False, max_entries=4)
def _read_run(page: str, mtime: float) -> tuple[int, Any, Any] | None:
    h = history()
    if h is None:
        return None
    try:
        run = next((r for r in h.list() if r.page == page), None)
        if run is None:
            return None
        _kind, results = h.result(run.id)
    except HistoryError:
        return None
    return run.id, run.created_at, results


def offer(key: str, job: str, spec: Any, *, matches: Callable[[Any, Any], bool]) -> None:
    """In demo mode, while ``key``'s page holds no results of its own, put its recorded run
    in them when ``matches(page spec, recorded result)`` says the page asks what it answers;
    a recorded result whose inputs are no longer on screen is taken away again (the page
    then waits for Run, as on a first visit outside demo mode)."""
    ss = st.session_state
    meta = ss["results_meta"].get(key) or {}
    if key in ss["results"]:
        if meta.get("recorded") and meta["recorded"].get("demo_run"):
            result = (ss["results"][key] or {}).get(job)
            if result is None or not matches(spec, result):
                ss["results"].pop(key, None)
                ss["results_meta"].pop(key, None)
        return
    if spec is None:
        return
    got = _recorded_run(key)
    if got is None:
        return
    run_id, created_at, results = got
    result = results.get(job) if isinstance(results, dict) else None
    if result is None or not matches(spec, result):
        return
    ss["results"][key] = results
    ss["results_meta"][key] = {
        "signature": None,
        "failed": None,
        "run": RunMeta(created_at=created_at, source="recorded"),
        "recorded": {"model": MODEL, "recorded": f"{created_at:%Y-%m-%d}", "demo_run": run_id},
    }


def label(key: str) -> str | None:
    """The words that say ``key``'s results are demo mode's recorded run (None for a run's)."""
    meta = st.session_state.get("results_meta", {}).get(key) or {}
    rec = meta.get("recorded") or {}
    if not rec.get("demo_run"):
        return None
    return (
        f"**Recorded result**, shown at once: this page's default example run on the answers "
        f"of **{rec.get('model')}** recorded with the embedded model on {rec.get('recorded')} "
        f"(`assets/demo_replay.jsonl`). Press **{PAGE_WORDS.get(key, 'Run')}** to run it again "
        "on those answers here; change the inputs to run something else on them."
    )


HISTORY_NOTE = (
    "**Recorded examples, not your history**: demo mode lists the runs of the default "
    "examples made on the recorded answers, so that every view of this page can be shown. "
    "They are read from a copy of `assets/demo_runs.sqlite3` and never written into your "
    "history; your own runs replace them here once you run anything."
)
