"""Build specs from the form, estimate, and run audits with progress bars, a stop
button and short, actionable error messages (never a traceback)."""

from __future__ import annotations

import json
import logging
import os
import traceback
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from dbpa_core.audit import AuditResult, run_audit
from dbpa_core.backends import (
    AuthError,
    BackendError,
    ServerUnavailableError,
)
from dbpa_core.cache import CacheError
from dbpa_core.runs import estimate as runs_estimate
from dbpa_core.sampling import Progress, RunCancelled, stop_when
from dbpa_core.spec import AuditSpec, SpecError, model_label, parse_spec, spec_notes, spec_warnings

from . import state
from .export import RunMeta

log = logging.getLogger("dbpa.dashboard")
# in the order their bars are stacked
STAGE_TEXT = {
    "loading": "Loading the model",
    "sampling": "Sampling responses",
    "loading embedder": "Loading the embedder",
    "embedding": "Embedding responses",
    "testing": "Running permutation tests",
    # the robustness battery (dbpa_core.attacks.battery)
    "answering": "Answering the items",
    "rti": "RTI: raising ρ until answers change",
    "patterns": "Tagging the attacked words",
    "phrases": "Phrase types and the random forest",
    # simulator fidelity (dbpa_core.fidelity)
    "simulating": "Simulating respondents",
    "analysis": "Computing the curves",
}


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


def build_spec(
    *,
    base_prompt: str,
    perturbations: Sequence[dict] | None = None,
    models: Sequence[dict] | None = None,
    model: dict | None = None,
    overrides: dict | None = None,
    name: str = "audit",
) -> AuditSpec:
    """A validated spec from dashboard values (raises SpecError with a readable message).
    ``name`` is the page's default audit name; the sidebar's audit name wins when given."""
    problem = state.number_problem()
    if problem:
        raise SpecError(problem.removesuffix("."))
    if not str(base_prompt or "").strip():
        raise SpecError("the prompt is empty: write the question the model should answer")
    s = state.settings()
    s.update(overrides or {})
    data: dict[str, Any] = {k: v for k, v in s.items()}
    data["name"] = str(st.session_state.get("w_audit_name") or "").strip() or name
    data["base"] = {"prompt": base_prompt}
    if models is not None:
        data["models"] = [dict(m) for m in models]
    else:
        data["model"] = dict(model or st.session_state["models"][0])
        data["perturbations"] = list(perturbations or [])
    return parse_spec(data, source="The form")


def friendly(exc: BaseException) -> str:
    """A short message that says what to do, as markdown: what the exception says (which
    may quote a model, a server or a name a user typed) is escaped, so it shows literally."""
    text = _md(str(exc))
    if isinstance(exc, SpecError):
        return f"Please fix the input — {_md(str(exc).replace('The form: ', ''))}."
    if isinstance(exc, AuthError):
        return (
            f"{text} On the **Settings** page, type the key into the model's key field "
            "(kept in this browser session only)."
        )
    if isinstance(exc, ServerUnavailableError):
        return f"{text} Check the base URL on the **Settings** page, or try again later."
    if isinstance(exc, CacheError):
        return f"{text} The **Settings** page can clear it."
    from dbpa_core.attacks.wordnet import WordNetMissing
    from dbpa_core.resources import MissingExtraError

    if isinstance(exc, (BackendError, WordNetMissing, MissingExtraError)):  # they say what to do
        return text
    return (
        f"Something went wrong ({type(exc).__name__}: {text}). The details are in the "
        "terminal that runs the dashboard."
    )


def replays_only(specs: Sequence[AuditSpec]) -> bool:
    """Whether every model the specs ask (their models and their checks' judges) replays a
    recording: its "calls" are answers read from a file, free and at once."""
    models = [m for s in specs for m in s.models]
    models += [c.judge_model or {} for s in specs for c in s.checks if c.model_graded]
    return bool(models) and all(m.get("backend") == "replay" for m in models)


def show_estimate(specs: Sequence[AuditSpec]) -> None:
    calls = cached = tokens = 0
    cost = 0.0
    best: int | None = None
    for spec in specs:
        t = runs_estimate(spec, cache=state.cache())["totals"]  # an audit or a suite
        calls += t["calls"]
        cached += t["cached"]
        tokens += t["input_tokens"] + t["output_tokens"]
        cost += t["cost"]
        if "sequential_best_calls" in t:  # sequential sampling: the calls at best
            best = (best or 0) + int(t["sequential_best_calls"])
    show_totals(calls, cached, tokens, cost, best=best, replay=replays_only(specs))


def calls_words(cached: int, *, replay: bool) -> tuple[str, str]:
    """The calls metric's label and help: "Model calls to make", or for models that only
    replay a recording "Recorded answers to read" (nothing is called)."""
    if replay:
        return "Recorded answers to read", (
            f"Replay models call nothing: their answers come from the recording, free and at once; "
            f"{cached:,} are already cached"
        )
    return "Model calls to make", f"{cached:,} responses are already cached"


def show_totals(
    calls: int, cached: int, tokens: int, cost: float, *, best: int | None = None, replay: bool = False
) -> None:
    """The estimate's three numbers: calls to make, tokens, cost (with sequential sampling,
    ``best``: the calls when every test stops at the first look). ``replay``: every model
    replays a recording, so its calls are answers read from the file."""
    c1, c2, c3 = st.columns(3)
    what, why = calls_words(cached, replay=replay)
    if best is None:
        c1.metric(what, f"{calls:,}", help=why)
    else:
        c1.metric(
            f"{what} (at most)",
            f"{calls:,}",
            help=f"Sequential sampling: {best:,} if every test stops at the first look, {calls:,} if "
            f"every test runs to the last. {why}. Tokens and cost are the most.",
        )
    c2.metric(
        "Tokens (upper bound)", f"{tokens:,}", help="~4 characters per token; output counted at max tokens"
    )
    c3.metric("Estimated cost", f"${cost:,.4f}", help="local and replay models cost nothing")


Task = Callable[[Callable[[Progress], None]], Any]


def stop_check() -> Callable[[], bool]:
    """A ``should_stop`` for the sampler, for the script run that calls it: True once Stop
    (or any other control) was pressed, i.e. Streamlit holds a rerun or stop request for
    this run, or once the browser tab that started the run is gone (closed or reloaded:
    Streamlit keeps running a disconnected session's script). The sampler then cancels
    what is in flight (a local model between decoding steps, a server's requests
    abandoned) and gives up its claims at once, so the next run never waits for it.

    Safe to call from any thread (a backend may poll it from its own)."""
    try:
        from streamlit.runtime import Runtime
        from streamlit.runtime.scriptrunner_utils.script_requests import ScriptRequestType
        from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx
    except ImportError:  # another Streamlit: the script's own yield points stop it
        return lambda: False
    ctx = get_script_run_ctx(suppress_warning=True)
    if ctx is None:
        return lambda: False
    requests, session = getattr(ctx, "script_requests", None), ctx.session_id

    def should_stop() -> bool:
        if getattr(requests, "_state", ScriptRequestType.CONTINUE) != ScriptRequestType.CONTINUE:
            return True
        try:
            return Runtime.exists() and not Runtime.instance().is_active_session(session)
        except Exception:  # noqa: BLE001 - no runtime (AppTest): never stop on its account
            return False

    return should_stop


def run_tasks(tasks: Sequence[tuple[str, Task]], *, key: str, panel: Any = None) -> dict[str, Any] | None:
    """Run tasks one after the other with a progress bar per stage and a stop button.

    A task is ``fn(progress) -> result``; it reports :class:`Progress` objects and
    every stage gets its own bar as it first reports. Everything sampled is cached
    the moment it arrives (see :mod:`dbpa_core.sampling`), so pressing Stop (or
    leaving the page) loses nothing: Run again resumes where it stopped.
    Returns ``{task name: result}``, or None when stopped or failed (the reason
    is shown as one short message, in ``panel`` when given).
    """
    running_key = f"_{key}_running"
    st.session_state[running_key] = True
    # stop button, job caption and bars: all cleared when the run ends
    panel = panel if panel is not None else st.empty()
    box = panel.container()
    stop_col, info_col = box.columns([1, 4])
    stop_col.button(
        "Stop",
        key=f"{key}_stop",
        icon=":material/stop_circle:",
        help="Stops within a second or two; every finished response stays cached.",
    )
    info = info_col.empty()
    bars: dict[str, Any] = {}
    results: dict[str, Any] = {}
    slots = {stage: box.empty() for stage in STAGE_TEXT}  # bars stack in stage order

    def progress(p: Progress) -> None:
        text = progress_text(p)
        if p.stage not in bars:
            bars[p.stage] = (slots.get(p.stage) or box.empty()).progress(0.0)
        bars[p.stage].progress(max(0.0, p.fraction), text=text)

    message = None
    try:
        with stop_when(stop_check()):  # every sampler of the tasks stops on Stop
            for j, (name, task) in enumerate(tasks):
                info.caption(f"Job {j + 1} of {len(tasks)}: {name}" if len(tasks) > 1 else name)
                results[name] = task(progress)
        st.session_state[running_key] = False
    except RunCancelled as exc:
        # the flag stays set: the next script run says that this one was stopped
        message = ("warning", str(exc))
    except Exception as exc:  # noqa: BLE001 - shown as a short message, logged in full
        st.session_state[running_key] = False
        log.error("run failed:\n%s", traceback.format_exc())
        message = ("error", friendly(exc))
    finally:
        panel.empty()
    if message is not None:
        # in the panel's place, so the elements below keep their positions (a tab that
        # is open stays open)
        kind, text = message
        if kind == "error":
            panel.error(text, icon=":material/error:")
        else:
            panel.warning(text)
        return None
    return results


def progress_text(p: Progress) -> str:
    """The line under a progress bar: 'Embedding responses: 64/180'; while a local model
    decodes, the bar goes by tokens and the line says the same share: 'Sampling responses:
    26 % (6 of 180 answers complete) — 3,456 tokens, 250 tokens/s, about 1 min 40 s left';
    a loading stage says what it does ('Loading the model: converting the embedded model
    (once, ~40 s)')."""
    name = STAGE_TEXT.get(p.stage, p.stage.capitalize())
    if p.stage.startswith("loading") and p.detail:
        return f"{name}: {p.detail}"
    detail = f" — {p.detail}" if p.detail else ""
    if p.tokens_expected:  # the bar goes by tokens: the line says the bar's own share
        return f"{name}: {int(100 * p.fraction)} % ({p.done} of {p.total} answers complete){detail}"
    return f"{name}: {p.done}/{p.total}{detail}"


def audit_task(spec: AuditSpec) -> Task:
    """A task that runs one audit on the session's cache and keys."""
    return lambda progress: run_audit(
        spec, cache=state.cache(), progress=progress, api_keys=st.session_state["api_keys"]
    )


def run_jobs(jobs: Sequence[tuple[str, AuditSpec]], *, key: str) -> dict[str, AuditResult] | None:
    """Run audits one after the other (see :func:`run_tasks`)."""
    return run_tasks([(name, audit_task(spec)) for name, spec in jobs], key=key)


def task_section(
    tasks: dict[str, Task] | None,
    *,
    key: str,
    label: str = "Run",
    before: Callable[[], None] | None = None,
    signature: str | None = None,
    on_done: Callable[[dict[str, Any]], Any] | None = None,
) -> dict[str, Any] | None:
    """Run button, progress and stop for any capability's page.

    ``tasks`` maps a job name to ``fn(progress) -> result`` (``None`` or empty when
    the form has an error, which the page has shown); ``before`` draws what goes
    above the button (e.g. an estimate of the calls). Returns the page's last
    results, kept in the session so that they survive page switches.

    ``signature`` is a string that changes whenever the inputs change (e.g. the specs as
    JSON): results made from other inputs, or followed by a failed or stopped run, are
    marked *outdated* above them (see :func:`outdated`). ``on_done(results)`` is called
    once after a successful run (e.g. to record it in the history); what it returns is
    kept as the run's ``record``. Every element here is drawn on every rerun, in the same
    order, so widgets and open tabs below keep their identity when a run ends.
    """
    ss = st.session_state
    meta_all = ss.setdefault("results_meta", {})
    notice = st.empty()
    if interrupted(key):
        notice.info(
            "The last run was stopped. Every response received is cached: press "
            f"**{label}** to resume where it stopped."
        )
        if key in ss["results"]:  # the results below are not that run's
            meta_all.setdefault(key, {})["failed"] = datetime.now(UTC)
    above = st.empty()  # what goes above the button, redrawn after a run (the estimate)
    if tasks and before is not None:
        with above.container():
            before()
    clicked = st.button(
        label, type="primary", key=f"{key}_run", disabled=not tasks, icon=":material/play_arrow:"
    )
    panel = st.empty()
    if clicked and tasks:
        save_unfinished(key)  # a reload after Stop shows this form again, and says so
        out = run_tasks(list(tasks.items()), key=key, panel=panel)
        if not ss.get(f"_{key}_running"):  # finished or failed (not stopped)
            clear_unfinished()
        if out:
            ss["results"][key] = out
            meta = {"signature": signature, "failed": None, "run": RunMeta(created_at=datetime.now(UTC))}
            meta_all[key] = meta
            if on_done is not None:
                meta["record"] = on_done(out)
            elif key in RESULT_PAGES:  # a battery, a fidelity simulation, a sensitivity study
                meta["record"] = record_result(out, key=key, signature=signature)
        elif key in ss["results"]:
            meta_all.setdefault(key, {})["failed"] = datetime.now(UTC)
        if before is not None:  # what the run cached is no longer to be called
            with above.container():
                before()
    results = ss["results"].get(key)
    marker = st.empty()
    if results:
        why = outdated(key, signature, form_ok=bool(tasks))
        if why:
            marker.warning(why, icon=":material/history:")
        elif rerun_of := meta_all.get(key, {}).get("rerun_of"):
            marker.caption(
                f":material/history: The same inputs as run #{rerun_of}, every "
                "answer from the cache: the same run, not recorded again (History "
                f"shows run #{rerun_of})."
            )
    return results


def outdated(key: str, signature: str | None = None, *, form_ok: bool = True) -> str | None:
    """Why the results of ``key`` no longer match the inputs on screen (None if they do).

    The inputs changed since the run (``signature`` differs from the one stored by
    :func:`task_section`, or the form now has an error: ``form_ok`` False), or a later run
    failed or was stopped.
    """
    meta = st.session_state.get("results_meta", {}).get(key)
    if not meta or key not in st.session_state.get("results", {}):
        return None
    run: RunMeta | None = meta.get("run")
    when = f" of {run.created_at:%H:%M} UTC" if run else ""
    recorded = meta.get("recorded")
    if not form_ok or signature != meta.get("signature"):
        changed = _changed_inputs(meta.get("signature"), signature)
        source = f"the recording of {recorded.get('recorded')}" if recorded else f"the run{when}"
        return (
            f"**Outdated:** the results below are from {source}; the inputs have "
            f"changed since{changed}. Press Run to update them."
        )
    if meta.get("failed"):
        source = f"the recording of {recorded.get('recorded')}" if recorded else f"the earlier run{when}"
        return f"**The last run did not finish.** The results below are from {source}, with the same inputs."
    return None


def is_outdated(key: str) -> bool:
    """True while :func:`task_section` marks ``key``'s results as outdated."""
    return st.session_state.get("results_meta", {}).get(key, {}).get("_outdated", False)


def _changed_inputs(old: str | None, new: str | None) -> str:
    """' (k, base prompt, ...)': which spec fields differ between two signatures."""
    if not old or not new:
        return ""
    try:
        a, b = json.loads(old), json.loads(new)
    except ValueError:
        return ""
    if not all(isinstance(x, dict) and all(isinstance(v, dict) for v in x.values()) for x in (a, b)):
        return ""  # not an object of jobs: outdated all the same, without naming fields
    fields: list[str] = []
    if list(a) != list(b):
        fields.append("jobs")
    for job in set(a) & set(b):
        for k in sorted(set(a[job]) | set(b[job])):
            if a[job].get(k) != b[job].get(k) and k not in fields:
                fields.append(k)
    names = {"samples": "k", "permutations": "B", "base": "prompt", "models": "model"}
    shown = [names.get(f, f) for f in fields]
    return f" ({', '.join(shown)})" if shown else ""


def show_spec_warnings(specs: Sequence[AuditSpec]) -> None:
    """What the settings cannot show (no result can be significant at this k, a
    perturbation equal to the base) as warnings above the Run button; which stars
    are out of reach as a quieter note."""
    warned: list[str] = []
    noted: list[str] = []
    for spec in specs:
        warned += [w for w in spec_warnings(spec) if w not in warned]
        noted += [n for n in spec_notes(spec) if n not in noted]
    for w in warned:
        st.warning(w, icon=":material/warning:")
    for n in noted:
        st.caption(f":material/info: {n}")


def run_section(
    specs: dict[str, AuditSpec] | None, *, key: str, label: str = "Run"
) -> dict[str, AuditResult] | None:
    """Estimate, Run button, progress and stop for the audit pages (see
    :func:`task_section`); ``specs`` maps a job name to its spec. Before a run, a replay
    model is checked for every prompt it must answer; after one, the run is recorded in
    the history. Results that no longer match the specs are marked outdated."""
    if specs:
        missing = replay_shortfalls(specs)
        if missing:
            st.error(missing, icon=":material/playlist_remove:")
            specs = None
    signature = specs_signature(specs) if specs else None
    tasks = {name: audit_task(spec) for name, spec in specs.items()} if specs else None

    def before() -> None:
        show_estimate(list(specs.values()))
        show_spec_warnings(list(specs.values()))

    results = task_section(
        tasks,
        key=key,
        label=label,
        signature=signature,
        before=before,
        on_done=lambda out: record(out, key=key),
    )
    meta = st.session_state["results_meta"].get(key)
    if meta is not None:
        meta["_outdated"] = bool(results) and outdated(key, signature, form_ok=bool(specs)) is not None
    return results


def specs_signature(specs: dict[str, AuditSpec]) -> str:
    # without δ (min_effect): it changes no sample, ω or p, and the results on screen are
    # read against the δ now set (views.with_current_delta), so it outdates nothing
    return json.dumps(
        {name: {k: v for k, v in s.to_dict().items() if k != "min_effect"} for name, s in specs.items()},
        sort_keys=True,
        default=str,
    )


def record(results: dict[str, Any], *, key: str) -> int | None:
    """Record a finished run in the history; a failure is a warning, never a lost result.
    A rerun of recorded inputs whose answers and embeddings all came from the cache is
    that run again: it is not recorded a second time, and the results point at the first."""
    audits = {k: v for k, v in results.items() if isinstance(v, AuditResult)}
    if not audits:
        return None
    first = next(iter(audits.values()))
    fp = fingerprint(key, specs_signature({k: v.spec for k, v in audits.items()}))
    fresh = sum(
        int(v.usage.get("calls", 0)) + int(v.usage.get("embeddings_computed", 0)) for v in audits.values()
    )

    def save(h) -> int:
        run_id = h.record(
            audits,
            source="dashboard",
            page=key,
            title=first.spec.name,
            cache_dir=st.session_state.get("cache_dir"),
        )
        h.mark(run_id, fingerprint=fp, form=form_snapshot())
        return run_id

    return save_run(key, fp, fresh, save)


# the pages whose runs are not audits: page key -> the history's kind of run
RESULT_PAGES = {"robustness": "battery", "fidelity_sim": "fidelity", "sensitivity": "sensitivity"}
# ... and which page reopens them: kind -> (page key, url path of the page)
RESULT_HOME = {
    "battery": ("robustness", "robustness"),
    "fidelity": ("fidelity_sim", "fidelity"),
    "sensitivity": ("sensitivity", "sensitivity"),
    "suite": ("suite", "suite"),
}


def record_result(results: dict[str, Any], *, key: str, signature: str | None) -> int | None:
    """Record a battery, a fidelity simulation or a sensitivity study in the history (see
    :func:`record` for reruns); its results reopen on the page (:func:`reopen`)."""
    from dbpa_core.runs import as_run

    run = as_run(results)
    run.title = str(st.session_state.get("w_audit_name") or "").strip() or run.title or run.kind
    fp = fingerprint(key, signature or json.dumps(run.settings(), sort_keys=True, default=str))

    def save(h) -> int:
        return h.record_run(
            run,
            source="dashboard",
            page=key,
            signature=signature,
            fingerprint=fp,
            cache_dir=st.session_state.get("cache_dir"),
            form=form_snapshot(),
        )

    return save_run(key, fp, run.used, save)


def save_run(key: str, fp: str, fresh: int, save: Callable[[Any], int]) -> int | None:
    """Record page ``key``'s finished run with ``save(history)`` (a rerun that made no
    ``fresh`` call or embedding is the first run with fingerprint ``fp``, shown again, not
    recorded twice); the run's id, or None with a warning when the history cannot take it."""
    try:
        h = state.history()
        run_id = h.first_run(fp) if not fresh else None
        rerun = run_id is not None
        if rerun:
            h.touch(run_id)  # a reload shows it again as the page's newest
        else:
            run_id = save(h)
    except Exception as exc:  # noqa: BLE001 - the results stay on screen either way
        log.error("history: %s", exc)
        st.warning(f"This run could not be saved in the history ({exc}).")
        return None
    meta = st.session_state["results_meta"].get(key)
    if meta is not None:
        meta["run"] = RunMeta(created_at=meta["run"].created_at, run_id=run_id)
        meta["rerun_of"] = run_id if rerun else None
    return run_id


def fingerprint(key: str, signature: str) -> str:
    """What identifies a run's inputs in the history: the page and its inputs' signature."""
    import hashlib

    return hashlib.sha256(f"{key}\n{signature}".encode()).hexdigest()


# the forms' tables (perturbation rows) kept with a run besides the w_* widget values
FORM_TABLES = ("perturbations", "roc_table")


def form_snapshot() -> dict[str, Any]:
    """The dashboard's inputs now: every remembered widget value that JSON can hold, the
    forms' tables and each page's audit name (kept with a run in the history, so that a
    reloaded dashboard shows the form its last runs were made from)."""
    ss = st.session_state
    live = {k: ss[k] for k in list(ss.keys()) if isinstance(k, str) and k.startswith("w_")}
    values = {}
    for k, v in {**ss.get("_persist", {}), **live}.items():
        plain = isinstance(v, (str, int, float, bool)) or v is None
        if plain or (isinstance(v, list) and all(isinstance(x, (str, int, float, bool)) for x in v)):
            values[k] = v
    tables = {
        t: ss[t].fillna("").to_dict("records") for t in FORM_TABLES if isinstance(ss.get(t), pd.DataFrame)
    }
    return {"values": values, "tables": tables, "names": dict(state.page_names())}


UNFINISHED_FILE = "dashboard_unfinished.json"
"""In ``$DBPA_HOME``: the form of a run that was started and did not finish (stopped, or
the tab closed), until a run finishes; a reloaded dashboard shows that form again."""


def _unfinished_path() -> Path:
    from dbpa_core.home import dbpa_home

    return dbpa_home() / UNFINISHED_FILE


def save_unfinished(key: str) -> None:
    """Keep the form of the run of page ``key`` that starts now (cleared when it finishes):
    a reload after Stop then shows the stopped run's form (its k, its models) and says
    that it was stopped. A failure to write is logged, never shown."""
    from dbpa_core.home import ensure_home

    path = _unfinished_path()
    try:
        ensure_home(path.parent)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps({"page": key, "form": form_snapshot()}, default=str), encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        log.error("could not keep the form of the run in %s: %s", path, exc)


def clear_unfinished() -> None:
    """A run finished (or failed): no stopped run to show after a reload."""
    try:
        _unfinished_path().unlink(missing_ok=True)
    except OSError as exc:
        log.error("could not remove %s: %s", _unfinished_path(), exc)


def unfinished() -> tuple[str, dict[str, Any]] | None:
    """``(page, form)`` of the run that was stopped last, or None (none, or unreadable)."""
    try:
        data = json.loads(_unfinished_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("page"), str)
        or not isinstance(data.get("form"), dict)
    ):
        return None
    return data["page"], data["form"]


def restore_session() -> None:
    """A fresh session (a reload, a new tab): the form of the newest run recorded from the
    dashboard, and each page's newest results, back from the history; then, when a run was
    stopped after those, its form, and its page says that it was stopped. Whatever cannot
    be read back is skipped (the page then starts as new)."""
    ss = st.session_state
    stopped = unfinished()
    try:
        history = state.history()
        last = history.last_runs()
    except Exception as exc:  # noqa: BLE001 - a reload must open whatever the history says
        log.error("history: %s", exc)
        last = {}
    form = next((f for _id, _kind, f in last.values() if f), None)
    if stopped is not None:
        page, form = stopped
        ss[f"_{page}_running"] = True  # its page says "The last run was stopped"
    if form:
        apply_form(form)
    for page, (run_id, kind, _form) in last.items():
        try:
            run = history.get(run_id)
            if kind != "audit":
                _kind, results = history.result(run_id)
                reopen(kind, run_id, run.summary.created_at, results, run.settings)
            elif run.audits:
                ss["results"][page] = dict(run.audits)
                ss["results_meta"][page] = {
                    "signature": specs_signature({j: a.spec for j, a in run.audits.items()}),
                    "failed": None,
                    "record": run_id,
                    "run": RunMeta(created_at=run.summary.created_at, run_id=run_id),
                }
        except Exception as exc:  # noqa: BLE001 - that page starts as new
            log.error("history: run %s not restored: %s", run_id, exc)


def apply_form(form: dict[str, Any]) -> None:
    """Put a run's kept inputs (see :func:`form_snapshot`) back into the widgets."""
    ss = st.session_state
    for k, v in (form.get("values") or {}).items():
        if isinstance(k, str) and k.startswith("w_"):
            state.remember(k, v)
    for t, rows in (form.get("tables") or {}).items():
        if t in FORM_TABLES and isinstance(rows, list):
            from . import presets

            df = pd.DataFrame(rows)
            ss[t] = (
                df[[c for c in presets.COLUMNS if c in df.columns]]
                if len(df)
                else pd.DataFrame(columns=presets.COLUMNS)
            )
            ss[f"{t}_version"] = ss.get(f"{t}_version", 0) + 1
    names = form.get("names")
    if isinstance(names, dict):
        state.page_names().update({str(k): str(v) for k, v in names.items()})
        ss.pop("_audit_name_page", None)  # the first page shown swaps its own name in
        state.remember("w_audit_name", "")


def reopen(
    kind: str, run_id: int, created_at: datetime, results: dict[str, Any], settings: dict[str, Any]
) -> str:
    """Put a recorded battery, simulation or sensitivity study back on its page, as that
    page's results (outdated there if the form differs); returns the page's url path."""
    key, url = RESULT_HOME[kind]
    ss = st.session_state
    ss.setdefault("results", {})[key] = results
    ss.setdefault("results_meta", {})[key] = {
        "signature": settings.get("signature"),
        "failed": None,
        "record": run_id,
        "run": RunMeta(created_at=created_at, run_id=run_id),
    }
    return url


def run_meta(key: str) -> RunMeta:
    """When (and as which history run) ``key``'s results were made."""
    meta = st.session_state.get("results_meta", {}).get(key) or {}
    return meta.get("run") or RunMeta()


def replay_lacking(model: dict, need: Mapping[str, int]) -> tuple[list[str], str | None]:
    """The prompts of ``need`` (prompt → answers wanted) that the replay ``model`` holds
    fewer times, in order, and None; or no prompts and a one-line message when its file
    cannot be read. The pages check this before Run."""
    from dbpa_core.backends.replay import replay_lacking as lacking

    try:
        return lacking(model, need), None
    except (OSError, BackendError) as exc:
        return [], _unreadable(model, exc)


def _unreadable(model: dict, exc: Exception) -> str:
    return f"The replay file of {_md(model_label(model))} cannot be read: {_md(exc)}"


def replay_shortfalls(specs: dict[str, AuditSpec]) -> str | None:
    """A message naming every prompt (and model) a replay file cannot answer k times, or
    None when every replay model holds what the audits need."""
    from dbpa_core.backends.replay import replay_available
    from dbpa_core.runs import replay_need, requests

    lacking: dict[str, list[str]] = {}
    for spec in specs.values():
        reqs = requests(spec)  # what the audit declares it asks, arm by arm
        for part in dict.fromkeys(r.part for r in reqs):
            own = [r for r in reqs if r.part == part]
            m = own[0].model
            if m.get("backend") != "replay":
                continue
            (prompt, n), *_ = replay_need(own).items()  # a same-prompt arm takes the next ones
            try:
                have = replay_available(m, prompt)
            except (OSError, BackendError) as exc:
                return _unreadable(dict(m), exc)
            if have < n:
                what = f"{part} ({have} recorded)" if have else part
                lacking.setdefault(model_label(m), [])
                if what not in lacking[model_label(m)]:
                    lacking[model_label(m)].append(what)
    if not lacking:
        return None
    k = next(iter(specs.values())).samples
    parts = [
        f"**{_md(m)}** lacks {len(w)} prompt{'s' if len(w) > 1 else ''}: " + ", ".join(_md(x) for x in w)
        for m, w in lacking.items()
    ]
    return (
        "The replay file does not hold k = " + str(k) + " recorded responses for every "
        "prompt of this audit — " + "; ".join(parts) + ". A replay model answers only the "
        "prompts recorded in its file: use the recorded prompts, lower k, choose another "
        "model, or record these prompts (assets/make_demo_replay.py shows how)."
    )


def _md(text: str) -> str:
    from .widgets import md_escape

    return md_escape(text)


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
