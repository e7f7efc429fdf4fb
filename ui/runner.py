"""Build specs from the form, estimate, and run audits with progress bars, a stop
button and short, actionable error messages (never a traceback)."""
from __future__ import annotations

import logging
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd
import streamlit as st

from dbpa_core.audit import AuditResult, estimate, run_audit
from dbpa_core.backends import (
    AuthError,
    BackendError,
    ModelNotFoundError,
    PromptTooLongError,
    ServerUnavailableError,
)
from dbpa_core.sampling import Progress, RunCancelled
from dbpa_core.spec import AuditSpec, SpecError, model_label, parse_spec

from . import state

log = logging.getLogger("dbpa.dashboard")
STAGE_TEXT = {"sampling": "Sampling responses", "embedding": "Embedding responses",
              "testing": "Running permutation tests",
              # the robustness battery (dbpa_core.attacks.battery)
              "answering": "Answering the items", "rti": "RTI: raising ρ until answers change",
              "patterns": "Tagging the attacked words"}


def perturbation_entries(df: pd.DataFrame) -> list[dict[str, Any]]:
    """Rows of the perturbation table -> spec entries (empty rows are skipped)."""
    out = []
    for _, row in df.fillna("").iterrows():
        name = str(row.get("name", "")).strip()
        prefix = str(row.get("prefix", "")).strip()
        prompt = str(row.get("prompt", "")).strip()
        role = str(row.get("role", "")).strip().lower() or None
        if not (name or prefix or prompt):
            continue
        entry: dict[str, Any] = {"name": name or None, "role": role}
        if prompt:
            entry["prompt"] = prompt
        else:
            entry["prefix"] = prefix
        out.append(entry)
    return out


def build_spec(*, base_prompt: str, perturbations: Sequence[dict] | None = None,
               models: Sequence[dict] | None = None, model: dict | None = None,
               overrides: dict | None = None) -> AuditSpec:
    """A validated spec from dashboard values (raises SpecError with a readable message)."""
    s = state.settings()
    s.update(overrides or {})
    data: dict[str, Any] = {k: v for k, v in s.items()}
    data["base"] = {"prompt": base_prompt}
    if models is not None:
        data["models"] = [dict(m) for m in models]
    else:
        data["model"] = dict(model or st.session_state["models"][0])
        data["perturbations"] = list(perturbations or [])
    return parse_spec(data, source="The form")


def friendly(exc: BaseException) -> str:
    """A short message that says what to do."""
    if isinstance(exc, SpecError):
        return f"Please fix the input — {str(exc).replace('The form: ', '')}."
    if isinstance(exc, AuthError):
        return f"{exc} Open **Settings** to enter or correct the key."
    if isinstance(exc, ServerUnavailableError):
        return f"{exc} Check the base URL on the **Settings** page, or try again later."
    if isinstance(exc, (ModelNotFoundError, PromptTooLongError)):
        return str(exc)
    if isinstance(exc, BackendError):
        return str(exc)
    from dbpa_core.attacks.wordnet import WordNetMissing

    if isinstance(exc, WordNetMissing):  # says what to install
        return str(exc)
    return (f"Something went wrong ({type(exc).__name__}: {exc}). The details are in the "
            "terminal that runs the dashboard.")


def show_estimate(specs: Sequence[AuditSpec]) -> None:
    calls = cached = tokens = 0
    cost = 0.0
    for spec in specs:
        t = estimate(spec, cache=state.cache())["totals"]
        calls += t["calls"]
        cached += t["cached"]
        tokens += t["input_tokens"] + t["output_tokens"]
        cost += t["cost"]
    c1, c2, c3 = st.columns(3)
    c1.metric("Model calls to make", f"{calls:,}", help=f"{cached:,} responses are already cached")
    c2.metric("Tokens (upper bound)", f"{tokens:,}",
              help="~4 characters per token; output counted at max tokens")
    c3.metric("Estimated cost", f"${cost:,.4f}", help="local and replay models cost nothing")


Task = Callable[[Callable[[Progress], None]], Any]


def run_tasks(tasks: Sequence[tuple[str, Task]], *, key: str) -> dict[str, Any] | None:
    """Run tasks one after the other with a progress bar per stage and a stop button.

    A task is ``fn(progress) -> result``; it reports :class:`Progress` objects and
    every stage gets its own bar as it first reports. Everything sampled is cached
    the moment it arrives (see :mod:`dbpa_core.sampling`), so pressing Stop (or
    leaving the page) loses nothing: Run again resumes where it stopped.
    Returns ``{task name: result}``, or None when stopped or failed (the reason
    is shown as one short message).
    """
    running_key = f"_{key}_running"
    st.session_state[running_key] = True
    panel = st.empty()  # stop button, job caption and bars: all cleared when the run ends
    box = panel.container()
    stop_col, info_col = box.columns([1, 4])
    stop_col.button("Stop", key=f"{key}_stop", icon=":material/stop_circle:",
                    help="Stops after the current call; what is done stays cached.")
    info = info_col.empty()
    bars: dict[str, Any] = {}
    results: dict[str, Any] = {}

    def progress(p: Progress) -> None:
        frac = p.done / p.total if p.total else 1.0
        detail = f" — {p.detail}" if p.detail else ""
        text = f"{STAGE_TEXT.get(p.stage, p.stage.capitalize())}: {p.done}/{p.total}{detail}"
        if p.stage not in bars:
            bars[p.stage] = box.progress(0.0)
        bars[p.stage].progress(min(1.0, max(0.0, frac)), text=text)

    try:
        for j, (name, task) in enumerate(tasks):
            info.caption(f"Job {j + 1} of {len(tasks)}: {name}" if len(tasks) > 1 else name)
            results[name] = task(progress)
    except RunCancelled as exc:
        st.warning(str(exc))
        return None
    except Exception as exc:  # noqa: BLE001 - shown as a short message, logged in full
        log.error("run failed:\n%s", traceback.format_exc())
        st.error(friendly(exc), icon=":material/error:")
        return None
    finally:
        st.session_state[running_key] = False
        panel.empty()
    return results


def audit_task(spec: AuditSpec) -> Task:
    """A task that runs one audit on the session's cache and keys."""
    return lambda progress: run_audit(spec, cache=state.cache(), progress=progress,
                                      api_keys=st.session_state["api_keys"])


def run_jobs(jobs: Sequence[tuple[str, AuditSpec]], *, key: str) -> dict[str, AuditResult] | None:
    """Run audits one after the other (see :func:`run_tasks`)."""
    return run_tasks([(name, audit_task(spec)) for name, spec in jobs], key=key)


def task_section(tasks: dict[str, Task] | None, *, key: str, label: str = "Run",
                 before: Callable[[], None] | None = None) -> dict[str, Any] | None:
    """Run button, progress and stop for any capability's page.

    ``tasks`` maps a job name to ``fn(progress) -> result`` (``None`` or empty when
    the form has an error, which the page has shown); ``before`` draws what goes
    above the button (e.g. an estimate of the calls). Returns the page's last
    results, kept in the session so that they survive page switches.
    """
    if interrupted(key):
        st.info("The last run was stopped. Every response received is cached: press "
                f"**{label}** to resume where it stopped.")
    if tasks and before is not None:
        before()
    if st.button(label, type="primary", key=f"{key}_run", disabled=not tasks,
                 icon=":material/play_arrow:"):
        out = run_tasks(list(tasks.items()), key=key)
        if out:
            st.session_state["results"][key] = out
    return st.session_state["results"].get(key)


def run_section(specs: dict[str, AuditSpec] | None, *, key: str,
                label: str = "Run") -> dict[str, AuditResult] | None:
    """Estimate, Run button, progress and stop for the audit pages (see
    :func:`task_section`); ``specs`` maps a job name to its spec."""
    tasks = {name: audit_task(spec) for name, spec in specs.items()} if specs else None
    return task_section(tasks, key=key, label=label,
                        before=lambda: show_estimate(list(specs.values())))


def interrupted(key: str) -> bool:
    """True once after a run of ``key`` was stopped (by Stop or by leaving the page)."""
    running_key = f"_{key}_running"
    if st.session_state.get(running_key):
        st.session_state[running_key] = False
        return True
    return False


def model_options() -> dict[str, dict]:
    """Configured models by display label."""
    return {model_label(m): m for m in st.session_state["models"]}
