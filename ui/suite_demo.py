"""The Suite page's recorded result: the example suite (examples/suite_clinic.yaml)
answered by the embedded model and recorded into ``assets/demo_suite.json`` by
``assets/make_demo_replay.py --only suite``, shown at once on a first visit (and in demo
mode, with nothing loaded), labelled as a recording; Run suite samples afresh."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import streamlit as st

from dbpa_core.spec import AuditSpec

from .export import RunMeta

RECORDED = Path(__file__).resolve().parent.parent / "assets" / "demo_suite.json"
EMBEDDED = "SmolLM2-135M-Instruct"  # the embedded model, whose answers were recorded
SETTINGS = {  # sidebar widget -> the recording's spec field
    "w_samples": "samples",
    "w_permutations": "permutations",
    "w_max_tokens": "max_tokens",
    "w_temperature": "temperature",
    "w_seed": "seed",
    "w_correction": "correction",
    "w_alpha": "alpha",
}


@st.cache_data(show_spinner=False, max_entries=2)
def _load(path: str, mtime: float) -> dict[str, Any] | None:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def recording() -> dict[str, Any] | None:
    """The recorded summary (with its answers and ``recorded``), or None."""
    try:
        return _load(str(RECORDED), RECORDED.stat().st_mtime)
    except OSError:
        return None


def answers_this(model: dict[str, Any]) -> bool:
    """Is ``model`` the one whose answers were recorded: the embedded model at the spec's
    temperature, or a replay of its recorded answers (demo mode)?"""
    if model.get("backend") == "local":
        return model.get("temperature") is None and not model.get("path")
    return model.get("backend") == "replay" and str(model.get("name") or "") == EMBEDDED


def offer(spec: AuditSpec | None, *, key: str, signature) -> None:
    """Put the recording in the page's results when the page has none of its own. Its
    signature is that of the example at the recording's settings on the page's model (when
    that model is the recorded one), so that what differs from the recording on screen (the
    sidebar's k, the cases) marks it outdated."""
    ss = st.session_state
    rec = recording()
    if rec is None or key in ss["results"]:
        return
    from dataclasses import replace

    from . import suite_builder

    example = suite_builder.example_spec()
    if spec is not None and answers_this(spec.model):
        example = replace(example, models=spec.models)
    when = rec.get("recorded", {}).get("recorded") or ""
    try:
        created = datetime.fromisoformat(when).replace(tzinfo=UTC)
    except ValueError:
        created = datetime.now(UTC)
    ss["results"][key] = {key: rec}
    ss["results_meta"][key] = {
        "signature": signature(example),
        "failed": None,
        "run": RunMeta(created_at=created, source="recorded"),
        "recorded": dict(rec.get("recorded") or {}),
    }


def label(key: str) -> str | None:
    """The words that say the page's results are the recording's (None for a run's)."""
    meta = st.session_state.get("results_meta", {}).get(key) or {}
    rec = meta.get("recorded")
    if not rec:
        return None
    results = st.session_state.get("results", {}).get(key) or {}
    spec = (results.get(key) or {}).get("spec") or {}
    return (
        f"**Recorded result**, shown at once: the example suite answered by **{rec.get('model')}** "
        f"({rec.get('precision')}, k = {spec.get('samples')} answers per prompt, at most "
        f"{spec.get('max_tokens')} tokens each), recorded on {rec.get('recorded')}. "
        "Press **Run suite** to sample the answers afresh with the settings on screen."
    )


def recorded_settings() -> dict[str, Any]:
    """The sidebar values the recording was made with."""
    rec = recording() or {}
    spec = rec.get("spec") or {}
    return {w: spec[f] for w, f in SETTINGS.items() if f in spec}


def use_recorded_settings() -> None:
    """A button callback: the sidebar set to the recording's settings (for every page)."""
    from . import state

    for w, v in recorded_settings().items():
        state.remember(w, v)
