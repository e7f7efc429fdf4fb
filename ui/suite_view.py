"""The Suite page's parts: open a suite spec (with its cases file), run it in the
background (the shared run section: progress, Stop, the history), and show a suite's
pooled table, its cases x perturbations heat map and one cell's numbers.

A suite's results are its summary (what ``results.json`` holds: ``spec``, ``tests``,
``pooled``, ``usage``, ...), so a run made here, one recorded from ``dbpa audit`` and
one reopened from History are drawn alike.
"""

from __future__ import annotations

import io
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from dbpa_core.runs import SuiteRun
from dbpa_core.spec import AuditSpec, SpecError, model_label, parse_spec
from dbpa_core.types import jsonable

from . import runner, state, suite_figures, widgets
from .figures import fmt_p
from .widgets import md_escape

KEY = "suite"  # the page's key for results, the history and its widgets
SPEC_TYPES = (".yaml", ".yml")


# --------------------------------------------------------------------------- opening
def open_files() -> None:
    """The uploader's callback: one spec (YAML) and the cases file it names, if any."""
    ss = st.session_state
    files = ss.get(f"{KEY}_up") or []
    if not files:
        return
    specs = [f for f in files if f.name.lower().endswith(SPEC_TYPES)]
    if len(specs) != 1:
        ss["_suite_note"] = (
            "error",
            "Upload one spec file (YAML), with the cases file it "
            f"names (CSV or JSONL) if it has one: got {len(specs)} specs.",
        )
        return
    up = specs[0]
    error = ""
    try:
        text = up.getvalue().decode("utf-8")
        with tempfile.TemporaryDirectory() as folder:
            try:
                spec = parse_spec(_with_uploaded_cases(text, files, Path(folder)), source=up.name)
            except SpecError as exc:  # named as uploaded, not by the folder it was saved in
                error = str(exc).replace(str(Path(folder)) + os.sep, "")
    except UnicodeDecodeError:
        ss["_suite_note"] = ("error", f"{md_escape(up.name)} is not UTF-8 text.")
        return
    if error:
        hint = (
            " Upload the cases file together with the spec." if len(files) == 1 and "cases" in error else ""
        )
        ss["_suite_note"] = ("error", md_escape(error) + hint)
        return
    if not spec.cases:
        ss["_suite_note"] = (
            "error",
            f"{md_escape(up.name)} has no `cases:`: open it on the "
            "**Perturbation test** page (a spec of one base prompt).",
        )
        return
    from . import specfile

    notes = specfile.apply_spec(spec, "suite")  # the builder, the sidebar and the model
    ss["_suite_note"] = (
        "success",
        f"Opened **{md_escape(spec.name)}**: {len(spec.cases)} cases"
        f" x {len(spec.perturbations)} perturbations = {spec.n_tests} tests, in the tables "
        "below; its settings are in the sidebar." + "".join(" " + md_escape(n) for n in notes),
    )


def _with_uploaded_cases(text: str, files, folder: Path) -> str | dict:
    """The spec, its ``cases: {file: NAME}`` pointed at the uploaded file of that name (saved
    in ``folder``); other paths (a replay file, a model folder) are read from the dashboard's
    folder, as when any spec is opened here."""
    import yaml

    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError:
        return text  # parse_spec says where the YAML is wrong
    cases = doc.get("cases") if isinstance(doc, dict) else None
    if not (isinstance(cases, dict) and isinstance(cases.get("file"), str)):
        return text
    uploaded = {f.name: f for f in files if not f.name.lower().endswith(SPEC_TYPES)}
    match = uploaded.get(Path(cases["file"]).name)
    if match is None:
        return text
    path = folder / Path(match.name).name
    path.write_bytes(match.getvalue())
    return {**doc, "cases": {**cases, "file": str(path)}}


def note() -> None:
    """What the last opening said (once)."""
    said = st.session_state.pop("_suite_note", None)
    if said:
        kind, text = said
        getattr(st, kind)(text)


def recorded_suites() -> dict[int, str]:
    """The suite runs in the history: {run id: a line that describes it}, newest first."""
    try:
        h = state.history()
        runs = h.list()
        extras = h.extras([r.id for r in runs])
    except Exception:  # noqa: BLE001 - no history: nothing to open
        return {}
    return {
        r.id: f"#{r.id} · {r.created_at:%Y-%m-%d %H:%M} · {r.title} · "
        f"{', '.join(r.models)} · {r.n_tests} tests"
        for r in runs
        if extras.get(r.id, {}).get("kind") == "suite"
    }


def open_recorded(run_id: int) -> None:
    """A button callback: a recorded suite run as the page's results."""
    try:
        h = state.history()
        kind, results = h.result(run_id)
        run = h.get(run_id)
    except Exception as exc:  # noqa: BLE001 - one line, the page stays as it is
        st.session_state["_suite_note"] = ("error", md_escape(str(exc)))
        return
    runner.reopen(kind, run_id, run.summary.created_at, results, run.settings)


# --------------------------------------------------------------------------- running
def signature(spec: AuditSpec) -> str:
    """What identifies a suite's inputs (the history keeps the same for each suite run):
    everything but its name and description, which change no answer and no number."""
    d = {k: v for k, v in spec.to_dict().items() if k not in ("name", "description")}
    return json.dumps(jsonable(d), sort_keys=True, default=str)


ANSWER_KEYS = ("case", "arm", "role", "prompt", "system_prompt", "index", "response")


def run_with_answers(spec: AuditSpec, **kwargs: Any) -> dict[str, Any]:
    """Run a suite (``kwargs``: :func:`dbpa_core.suite.run_suite`'s) and return its summary
    with its answers under ``"answers"`` (case, arm, role, sample index, response), for
    the page's side-by-side view of one case."""
    from dbpa_core.suite import run_suite

    buf = io.StringIO()
    summary = run_suite(spec, responses=buf, **kwargs).to_dict()
    summary["answers"] = [
        {k: row.get(k) for k in ANSWER_KEYS}
        for row in (json.loads(line) for line in buf.getvalue().splitlines() if line.strip())
    ]
    return summary


def suite_task(spec: AuditSpec, doc: dict[str, Any] | None = None):
    """A task for :func:`ui.runner.task_section`: the suite on the session's cache and keys;
    it returns the suite's summary with its answers. With ``doc`` (the builder's suite),
    the run's state is kept in the draft, so that a reload says when it did not finish."""
    from . import suite_builder

    def task(progress):
        if doc is not None:
            suite_builder.save_draft(doc, status=suite_builder.RUNNING)
        out = run_with_answers(
            spec, cache=state.cache(), progress=progress, api_keys=st.session_state["api_keys"]
        )
        if doc is not None:
            suite_builder.save_draft(doc, status=suite_builder.DONE)
        return out

    return task


def unfinished_note(doc: dict[str, Any], slot: Any) -> None:
    """In ``slot``: says so when this suite's last run did not finish (stopped, or the page
    reloaded while it ran), also in a new session: what it received is cached, Run goes
    on. Called again after the run section, it clears what a finished run made untrue."""
    from . import suite_builder

    started = suite_builder.unfinished(doc)
    if started and not st.session_state.get(f"_{KEY}_running"):  # else the run section says it
        slot.info(
            f"The run of this suite started {started.replace('T', ' ')} UTC did not finish "
            "(it was stopped, or the page was reloaded while it ran). Every answer it "
            "received is cached (counted below): press **Run suite** to go on from there.",
            icon=":material/pause_circle:",
        )
    else:
        slot.empty()


def record(out: dict[str, Any], spec: AuditSpec) -> int | None:
    """Record a finished suite in the history (a rerun all from the cache is not recorded
    again: the results point at the first run)."""
    from dbpa_core.runs import as_run

    summary = out[KEY]
    usage = summary.get("usage") or {}
    fresh = int(usage.get("calls", 0)) + int(usage.get("embeddings_computed", 0))
    fp = runner.fingerprint(KEY, signature(spec))
    return runner.save_run(
        KEY,
        fp,
        fresh,
        lambda h: h.record_run(
            as_run(summary, title=spec.name),
            source="dashboard",
            page=KEY,
            fingerprint=fp,
            cache_dir=st.session_state.get("cache_dir"),
        ),
    )


def duration_line(spec: AuditSpec, calls: int) -> str:
    """How long the calls may take on this machine (a local model's time per answer, as
    measured on its last run here), in words."""
    if calls == 0:
        return "Duration: seconds (every answer is cached)."
    from dbpa_core.runs import duration_lines, requests

    lines = duration_lines(requests(spec), state.cache())  # what the suite declares it asks
    line = lines[0] if lines else None
    if line is None:
        return "Duration: as fast as the model's server answers (the progress bar says the time left)."
    return line[0].upper() + line[1:] + "."


def show_estimate(spec: AuditSpec) -> None:
    """Calls, tokens, cost, the time they may take, and the smallest p each test can reach
    at this k and correction."""
    from dbpa_core.reach import reachability
    from dbpa_core.runs import estimate

    est = estimate(spec, cache=state.cache())
    t = est["totals"]
    calls = int(t.get("calls", 0))
    runner.show_totals(
        calls,
        int(t.get("cached", 0)),
        int(t.get("input_tokens", 0) + t.get("output_tokens", 0)),
        float(t.get("cost", 0.0)),
        best=int(t["sequential_best_calls"]) if "sequential_best_calls" in t else None,
        replay=runner.replays_only([spec]),
    )
    pilot = (est.get("sequential") or {}).get("pilot")
    if pilot:  # cached rounds of this suite: what they decided and the calls still to make
        from dbpa_core.cli.estimate import pilot_line

        st.caption(md_escape(f"Sequential sampling: {pilot_line(pilot)}."))
    reach = reachability(spec)
    st.caption(
        md_escape(duration_line(spec, calls))
        + f" {len(spec.cases)} cases x {len(spec.perturbations)} perturbations = {spec.n_tests} "
        f"tests, corrected together ({md_escape(spec.correction)}, α = {spec.alpha:g})."
    )
    lines = reach.lines()
    text = "  \n".join(md_escape(x) for x in lines)
    if not reach.testable:
        st.warning(
            "**Not every result can be significant at these settings.**  \n" + text, icon=":material/warning:"
        )
    elif lines:
        st.caption("Can a result be significant here? The smallest p each test can reach:  \n" + text)


def checks_preview_section(spec: AuditSpec | None, results: dict[str, Any] | None) -> None:
    """The checks on sample answers, live: the answers of the results below (the
    recording's or the last run's) and one typed here."""
    if spec is None or not spec.checks:
        return
    answers = list(((results or {}).get(KEY) or {}).get("answers") or ())
    ids = {c.id for c in spec.cases}
    answers = [a for a in answers if str(a.get("case")) in ids]  # cases of the suite on screen
    with st.expander("Preview: which sample answers pass the checks", icon=":material/fact_check:"):
        typed = st.text_area(
            "Type a sample answer (read as one of the previewed case's)", key=f"{KEY}_check_sample", height=70
        )
        shown = answers[:: max(1, len(answers) // 12)][:12]
        case = st.session_state.get(f"{KEY}_preview_case")
        df = checks_preview(spec, shown, typed, case if case in ids else None)
        if df.empty:
            st.caption("Type an answer: the checks are applied as you type. A run's answers show here too.")
        else:
            st.dataframe(df, hide_index=True, key=f"{KEY}_check_preview")
            judged = any(c.model_graded for c in spec.checks)
            st.caption(
                "✓ passes, ✗ fails, ? chooses no option clearly."
                + (
                    " A judge check needs a model call per answer: it is asked when the suite runs."
                    if judged
                    else ""
                )
                + (f" {len(shown)} of the {len(answers)} answers of the results below." if shown else "")
            )


# --------------------------------------------------------------------------- showing
def pooled_frame(pooled: list[dict[str, Any]]) -> pd.DataFrame:
    """The pooled table: one row per perturbation."""
    return pd.DataFrame(
        [
            {
                "perturbation": d["perturbation"],
                "role": d.get("role") or "",
                "cases": d["cases"],
                "p (Fisher)": d["p_value"],
                "p (adjusted)": d["p_adjusted"],
                "": d.get("stars", ""),
                "verdict": "changed" if d.get("significant") else "no change shown",
                "ω above chance (mean)": d["mean_effect_above_chance"],
                "95% interval": f"[{d['ci_low']:+.3f}, {d['ci_high']:+.3f}]",
                "discoveries": f"{d['discoveries']}/{d['cases']}",
                "share changed (est.)": f"{d['share_changed']:.0%}",
            }
            for d in pooled
        ]
    )


def show(summary: dict[str, Any], *, title: str = "", run_id: int | None = None) -> None:
    """A suite's results: its verdict in words, one line per perturbation, the pooled
    table, the cases x perturbations heat map with the checks' pass rates beside it, one
    cell's numbers and that case's answers side by side."""
    tests, pooled = summary.get("tests") or [], summary.get("pooled") or []
    spec = summary.get("spec") or {}
    models = ", ".join(model_label(m) for m in spec.get("models") or ())
    st.markdown(f"#### {md_escape(headline(summary))}")
    for line in verdict_lines(summary):
        st.markdown("- " + line)
    st.caption(
        f"**{md_escape(title or spec.get('name', 'suite'))}** — "
        f"{summary.get('cases', 0)} cases x {len(pooled)} perturbations = "
        f"{len(tests)} tests of {md_escape(models)}, corrected together "
        f"({md_escape(summary.get('correction'))}, α = {summary.get('alpha')}); "
        f"k = {spec.get('samples')}, B = {spec.get('permutations')}. A perturbation's pooled "
        "p combines its cases' p-values (Fisher), corrected across the perturbations."
    )
    for w in summary.get("warnings") or ():
        st.warning(md_escape(w), icon=":material/warning:")
    if not tests:
        st.info("This suite holds no tests.")
        return
    with st.expander("Pooled over the cases: the numbers", icon=":material/table:"):
        df = pooled_frame(pooled)
        st.dataframe(
            widgets.styled(df), hide_index=True, key=f"{KEY}_pooled", height=widgets.table_height(len(df))
        )
        st.caption(
            "p (Fisher): does the perturbation change the answers in any case (Fisher's "
            "combined test of its p-values over the cases); p (adjusted): corrected across "
            "the perturbations. ω above chance: the mean over the cases with a bootstrap "
            "interval. Discoveries: cases significant after the suite's correction; share "
            "changed: 1 − Storey's estimate of the share of unchanged cases."
        )
    st.subheader("Cases x perturbations")
    cases, perts, cells = suite_figures.grid(tests)
    options = [f"{c} · {p}" for c in cases for p in perts if (c, p) in cells]
    if st.session_state.get(f"{KEY}_cell") not in options:
        first = next((o for o, t in zip(options, tests, strict=False) if t.get("significant")), options[0])
        st.session_state[f"{KEY}_cell"] = first
    pick = st.session_state[f"{KEY}_cell"]
    case, pert = pick.split(" · ", 1) if " · " in pick else (pick, "")
    rates = pooled_checks_frame(summary)
    left, right = st.columns([3, 2] if not rates.empty else [1, 0.001])
    with left:
        st.plotly_chart(
            suite_figures.heatmap(
                tests, selected=(case, pert), correction=str(summary.get("correction") or "")
            ),
            key=f"{KEY}_heatmap",
        )
    if not rates.empty:
        with right:
            st.markdown("**Checks: share of answers that pass, over the cases**")
            st.dataframe(rates, key=f"{KEY}_check_rates")
            st.caption(
                "Base → perturbed: each arm's pass rate over every case's answers. Stars: the "
                "stratified test over the cases (exact, or Cochran–Mantel–Haenszel for large "
                "counts) after the correction across the pooled checks; their intervals are in "
                "the results (JSON). Each case's own test is in the cell below."
                if summary.get("pooled_checks")
                else "Pooled over every case's answers; each check is tested per case in the cell below."
            )
    st.selectbox("Open one cell (case · perturbation)", options, key=f"{KEY}_cell")
    show_cell(cells[(case, pert)], summary)
    side = case_answers(summary, case, pert)
    if not side.empty:
        st.markdown(f"**Case {md_escape(case)}: its answers side by side** (base and *{md_escape(pert)}*)")
        side_by_side(side, pert)
        with st.expander("The same as a table", icon=":material/table:"):
            st.dataframe(side, hide_index=True, key=f"{KEY}_side", row_height=90)
    downloads(summary, run_id=run_id)


def downloads(summary: dict[str, Any], *, run_id: int | None = None) -> None:
    """The results as JSON, and the HTML report of the run in the history."""
    c1, c2 = st.columns(2)
    c1.download_button(
        "Results (JSON)",
        lambda: json.dumps(summary, indent=2, ensure_ascii=False),
        "results.json",
        "application/json",
        key=f"{KEY}_dl_json",
        on_click="ignore",
        icon=":material/data_object:",
    )
    if run_id is not None:

        def report() -> str:
            from dbpa_core.report import build_report

            try:
                return build_report([run_id], history=state.history())
            except Exception as exc:  # noqa: BLE001 - the page says why
                from dbpa_core.report import error_page

                return error_page(str(exc))

        c2.download_button(
            "Report (HTML)",
            report,
            f"suite-run-{run_id}.html",
            "text/html",
            key=f"{KEY}_dl_report",
            on_click="ignore",
            icon=":material/description:",
            help="The run's report from the History (the same as `dbpa report RUN`).",
        )
    else:
        c2.caption("The report is made from the History: run the suite here to record it.")


def spec_of(summary: dict[str, Any]) -> AuditSpec | None:
    """The suite's spec rebuilt from its summary (None when it cannot be)."""
    from dataclasses import replace

    from dbpa_core.history import spec_from_dict

    try:
        spec = spec_from_dict(summary["spec"])
        return replace(
            spec,
            perturbations=tuple(
                replace(p, set_fields=tuple(dict(p.set_fields or {}).items())) for p in spec.perturbations
            ),
        )
    except Exception:  # noqa: BLE001 - written by another version: no drill-down button
        return None


def open_case(summary: dict[str, Any], case_id: str) -> None:
    """A button callback: one case of the suite as a plain audit in the Perturbation test
    page's form (its answers come from the cache when the suite ran here or with this
    cache)."""
    from dbpa_core.suite import case_spec

    from . import specfile

    spec = spec_of(summary)
    case = next((c for c in spec.cases if c.id == case_id), None) if spec else None
    if case is None:
        st.session_state["_suite_note"] = (
            "error",
            "This suite's spec cannot be read back: open its spec file to run one case.",
        )
        return
    one = case_spec(spec, case)
    specfile.apply_spec(one, "landing")
    state.name_page("perturbation_test", one.name)
    st.session_state["_suite_goto"] = "pages/perturbation_test.py"


def show_cell(t: dict[str, Any], summary: dict[str, Any]) -> None:
    """One case x perturbation: its ω, chance, effect, p and p adjusted, and its checks."""
    c1, c2, c3, c4, c5 = st.columns(5)
    c1.metric("ω", f"{float(t['omega']):.3f}")
    c2.metric("Chance gives", f"{float(t['chance']):.3f}")
    c3.metric("ω above chance", f"{float(t['effect_above_chance']):+.3f}")
    c4.metric("p (raw)", fmt_p(float(t["p_value"])))
    c5.metric("p (adjusted)", fmt_p(float(t["p_adjusted"])))
    st.caption(
        (
            "**Significant** after the correction across the suite."
            if t.get("significant")
            else "Not detectable after the correction across the suite."
        )
        + " The answers of this case are in the cache and in the run's "
        "responses.jsonl (`dbpa audit`), one line per answer with its case."
    )
    checks = [
        c
        for c in summary.get("checks") or ()
        if str(c.get("case")) == str(t["case"]) and c.get("perturbation") in (None, t["perturbation"])
    ]
    st.button(
        "Open this case on the Perturbation test page (its answers and histograms)",
        key=f"{KEY}_case_open",
        icon=":material/open_in_new:",
        on_click=open_case,
        args=(summary, str(t["case"])),
        help="The case becomes a plain audit of its base prompt and the suite's "
        "perturbations; run it there (the answers come from the cache). Its p-values "
        "there are corrected over that case's tests only, not across the suite.",
    )
    if checks:
        cols = ("check", "perturbation", "base", "value", "difference", "p_value", "p_adjusted")
        st.dataframe(
            pd.DataFrame([{k: c.get(k) for k in cols} for c in checks]),
            hide_index=True,
            key=f"{KEY}_cell_checks",
        )


# --------------------------------------------------------------------------- in words
def verdict_lines(summary: dict[str, Any]) -> list[str]:
    """One sentence per perturbation: does it change the answers across the cases, and
    what its role says about that (markdown)."""
    out = []
    gate = SuiteRun(summary=summary).gate()  # the gate every output reads
    for d in summary.get("pooled") or ():
        name, n, role = md_escape(d["perturbation"]), int(d["cases"]), d.get("role")
        shown = fmt_p(float(d["p_adjusted"]))
        p = f"pooled p {shown if shown.startswith('<') else '= ' + shown} after the correction"
        some = f"{d['discoveries']} of {n} cases changed on their own"
        if d.get("significant"):
            line = f":red[**{name}** changes the answers] across the {n} cases ({p}; {some})"
            if role == "control":
                line += (
                    " — a control, which should not: the model reacts to something that should not matter."
                )
            elif role == "target":
                line += " — a target, as it should."
            else:
                line += "."
        else:
            line = f":green[**{name}**: no change shown] across the {n} cases ({p}; {some})"
            if role == "target":
                line += " — a target, which should change them: the model ignores it, or k is too small."
            elif role == "control" and d["perturbation"] in gate.untestable:
                line += (
                    f" — a control, {gate.control_word(d['perturbation'])}: no pooled result "
                    "could be significant at this k, so it could not have failed (take more samples)."
                )
            elif role == "control":
                line += " — a control, as it should."
            else:
                line += "."
        out.append(line)
    return out


def headline(summary: dict[str, Any]) -> str:
    """The suite's verdict in one sentence."""
    pooled = summary.get("pooled") or []
    changed = [d["perturbation"] for d in pooled if d.get("significant")]
    bad = [d["perturbation"] for d in pooled if d.get("significant") and d.get("role") == "control"]
    missed = [d["perturbation"] for d in pooled if not d.get("significant") and d.get("role") == "target"]
    if not pooled:
        return "This suite holds no tests."
    words = (
        f"{len(changed)} of {len(pooled)} perturbations change the answers across the cases"
        + (f": {', '.join(changed)}" if changed else "")
        + "."
    )
    if bad:
        words += f" Controls that should not matter but do: {', '.join(bad)}."
    if missed:
        words += f" Targets that should matter but show no change: {', '.join(missed)}."
    return words


def check_rates(summary: dict[str, Any]) -> pd.DataFrame:
    """Each check's pass rate over every case's answers: one row for the base prompts and
    one per perturbation (the share of answers that pass, pooled over the cases)."""
    rows: dict[str, dict[str, list[int]]] = {}
    order: list[str] = ["base"]
    seen: set[tuple[str, str]] = set()
    for c in summary.get("checks") or ():
        if c.get("count") is None or c.get("n") in (None, 0):
            continue
        name, pert = str(c["check"]), str(c["perturbation"])
        if pert not in order:
            order.append(pert)
        counts = rows.setdefault(name, {})
        cell = counts.setdefault(pert, [0, 0])
        cell[0] += int(c["count"])
        cell[1] += int(c["n"])
        if (name, str(c.get("case"))) not in seen and c.get("base_count") is not None:
            seen.add((name, str(c.get("case"))))
            base = counts.setdefault("base", [0, 0])
            base[0] += int(c["base_count"])
            base[1] += int(c["base_n"])
    if not rows:
        return pd.DataFrame()
    data = {
        name: [f"{cnt[a][0] / cnt[a][1]:.0%}" if cnt.get(a, [0, 0])[1] else "" for a in order]
        for name, cnt in rows.items()
    }
    return pd.DataFrame(data, index=order).rename_axis("prompts")


def pooled_checks_frame(summary: dict[str, Any]) -> pd.DataFrame:
    """The checks pooled over the cases (the suite's ``pooled_checks``), compact enough to
    sit beside the heat map: one row per perturbation, one column per check, each cell
    "base rate → perturbed rate" and the stars of the stratified test after the correction
    (a number: the mean words). A run recorded before suites pooled their checks gets each
    arm's pass rate only (:func:`check_rates`)."""
    pooled = summary.get("pooled_checks")
    if not pooled:
        return check_rates(summary)
    cells: dict[str, dict[str, str]] = {}
    for d in pooled:
        if d.get("base") is None or d.get("value") is None:
            text = "-"
        elif d.get("numeric"):
            text = f"{d['base']:.0f} → {d['value']:.0f} words"
        else:
            text = f"{d['base']:.0%} → {d['value']:.0%}"
        cells.setdefault(str(d["perturbation"]), {})[str(d["check"])] = text + (
            f" {d['stars']}" if d.get("stars") else ""
        )
    return pd.DataFrame.from_dict(cells, orient="index").rename_axis("perturbation")


def case_checks(spec: AuditSpec | None, case: str) -> tuple:
    """The spec's checks filled for one case (its fields, each arm's options), without the
    judges (asked only when the suite runs); () when the spec or the case is unknown."""
    from dbpa_core.suite import case_spec

    found = next((c for c in spec.cases if c.id == str(case)), None) if spec is not None else None
    if found is None:
        return ()
    try:
        return tuple(c for c in case_spec(spec, found).checks if not c.model_graded)
    except Exception:  # noqa: BLE001 - a case that cannot be filled: no marks
        return ()


def mark(check, text: str, arm: str) -> str:
    """'✓ name', '✗ name', '? name' (a choice the answer does not make clearly), 'name: 42'."""
    v = check.outcome(text, arm)
    if check.numeric:
        return f"{check.name}: {v}"
    return f"{'?' if v is None else '✓' if v else '✗'} {check.name}"


def case_answers(summary: dict[str, Any], case: str, perturbation: str) -> pd.DataFrame:
    """One case's answers side by side: sample, the base answer and the perturbed one,
    each with a mark per check (empty when the run kept no answers)."""
    answers = [a for a in summary.get("answers") or () if str(a.get("case")) == str(case)]
    base = [a["response"] for a in answers if a.get("arm") == "base"]
    pert = [a["response"] for a in answers if a.get("arm") == perturbation]
    if not base and not pert:
        return pd.DataFrame()
    checks = case_checks(spec_of(summary), case)
    n = max(len(base), len(pert))
    rows = []
    for i in range(n):
        b = base[i] if i < len(base) else ""
        q = pert[i] if i < len(pert) else ""
        row: dict[str, Any] = {"sample": i + 1, "base answer": b, f"{perturbation} answer": q}
        if checks:
            row["base checks"] = " · ".join(mark(c, b, "base") for c in checks) if b else ""
            row[f"{perturbation} checks"] = " · ".join(mark(c, q, perturbation) for c in checks) if q else ""
        rows.append(row)
    return pd.DataFrame(rows)


SIDE_SHOWN = 10  # samples drawn as cards (the table below holds them all)


def side_by_side(side: pd.DataFrame, perturbation: str) -> None:
    """One case's answers as cards, base on the left and perturbed on the right, each with
    its check marks under it."""
    left, right = st.columns(2)
    left.markdown("**base**")
    right.markdown(f"**{md_escape(perturbation)}**")
    for _, row in side.head(SIDE_SHOWN).iterrows():
        for col, answer, marks in (
            (left, row["base answer"], row.get("base checks")),
            (right, row[f"{perturbation} answer"], row.get(f"{perturbation} checks")),
        ):
            box = col.container(border=True)
            box.caption(f"sample {row['sample']}" + (f" · {md_escape(marks)}" if marks else ""))
            box.markdown(md_escape(answer) if answer else "*(no answer)*")
    if len(side) > SIDE_SHOWN:
        st.caption(f"The first {SIDE_SHOWN} of {len(side)} samples; the table below holds them all.")


def checks_preview(
    spec: AuditSpec, answers: list[dict[str, Any]], typed: str = "", typed_case: str | None = None
) -> pd.DataFrame:
    """Which sample answers pass each of ``spec``'s checks, filled for each answer's case
    (the checks of the form, before any run): one row per answer (the typed one first, as
    an answer of ``typed_case``'s base prompt), a mark per check."""
    first = spec.cases[0].id if spec.cases else ""
    texts = ([(typed_case or first, "base", typed)] if typed.strip() else []) + [
        (str(a.get("case")), str(a.get("arm")), str(a.get("response") or "")) for a in answers
    ]
    judges = [c.name for c in spec.checks if c.model_graded]
    memo: dict[str, tuple] = {}
    rows = []
    for i, (case, arm, text) in enumerate(texts):
        checks = memo.setdefault(case, case_checks(spec, case))
        row: dict[str, Any] = {"answer of": "typed" if typed.strip() and i == 0 else f"{case} · {arm}"}
        row["answer"] = text[:200]
        for c in checks:
            try:
                row[c.name] = mark(c, text, arm).split(" ", 1)[0] if not c.numeric else c.outcome(text, arm)
            except ValueError:  # a choice check on an arm without options
                row[c.name] = ""
        for name in judges:
            row[name] = "needs a model call: asked when the suite runs"
        rows.append(row)
    return pd.DataFrame(rows)
