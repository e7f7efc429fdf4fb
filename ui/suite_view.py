"""The Suite page's parts: open a suite spec (with its cases file), run it in the
background (the shared run section: progress, Stop, the history), and show a suite's
pooled table, its cases x perturbations heat map and one cell's numbers.

A suite's results are its summary (what ``results.json`` holds: ``spec``, ``tests``,
``pooled``, ``usage``, ...), so a run made here, one recorded from ``dbpa audit`` and
one reopened from History are drawn alike.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from dbpa_core.spec import AuditSpec, SpecError, model_label, parse_spec
from dbpa_core.types import _jsonable

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
    ss["_suite_spec"] = spec
    ss["_suite_note"] = (
        "success",
        f"Opened **{md_escape(spec.name)}**: {len(spec.cases)} cases"
        f" x {len(spec.perturbations)} perturbations = {spec.n_tests} tests.",
    )


EXAMPLE = "suite_vignettes.yaml"


def open_example() -> None:
    """The button's callback: the suite example shipped with dbpa (eight vignettes from its
    ``vignettes.csv``), from the repository's or the installed package's examples."""
    from dbpa_core.resources import examples_dir
    from dbpa_core.spec import load_spec

    ss = st.session_state
    try:
        spec = load_spec(examples_dir() / EXAMPLE)
    except (SpecError, OSError) as exc:
        ss["_suite_note"] = ("error", md_escape(str(exc)))
        return
    ss["_suite_spec"] = spec
    ss["_suite_note"] = (
        "success",
        f"Opened the example **{md_escape(spec.name)}**: {len(spec.cases)} cases"
        f" x {len(spec.perturbations)} perturbations = {spec.n_tests} tests "
        "(`dbpa examples` copies it and its cases file into a folder).",
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
    """What identifies a suite's inputs (the history keeps the same for each suite run)."""
    return json.dumps(_jsonable(spec.to_dict()), sort_keys=True, default=str)


def suite_task(spec: AuditSpec):
    """A task for :func:`ui.runner.task_section`: the suite on the session's cache and keys;
    it returns the suite's summary (the responses stay in the cache)."""
    from dbpa_core.suite import run_suite

    return lambda progress: run_suite(
        spec, cache=state.cache(), progress=progress, api_keys=st.session_state["api_keys"]
    ).to_dict()


def record(out: dict[str, Any], spec: AuditSpec) -> int | None:
    """Record a finished suite in the history (a rerun all from the cache is not recorded
    again: the results point at the first run)."""
    summary = out[KEY]
    usage = summary.get("usage") or {}
    fresh = int(usage.get("calls", 0)) + int(usage.get("embeddings_computed", 0))
    fp = runner.fingerprint(KEY, signature(spec))
    return runner._save_run(
        KEY,
        fp,
        fresh,
        lambda h: h.record_suite(
            summary,
            source="dashboard",
            page=KEY,
            title=spec.name,
            fingerprint=fp,
            cache_dir=st.session_state.get("cache_dir"),
        ),
    )


def show_estimate(spec: AuditSpec) -> None:
    from dbpa_core.suite import estimate_suite

    t = estimate_suite(spec, cache=state.cache())["totals"]
    runner.show_totals(
        int(t.get("calls", 0)),
        int(t.get("cached", 0)),
        int(t.get("input_tokens", 0) + t.get("output_tokens", 0)),
        float(t.get("cost", 0.0)),
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


def show(summary: dict[str, Any], *, title: str = "") -> None:
    """A suite's results: sizes, the pooled table, the heat map and one cell's numbers."""
    tests, pooled = summary.get("tests") or [], summary.get("pooled") or []
    spec = summary.get("spec") or {}
    models = ", ".join(model_label(m) for m in spec.get("models") or ())
    st.markdown(
        f"**{md_escape(title or spec.get('name', 'suite'))}** — "
        f"{summary.get('cases', 0)} cases x {len(pooled)} perturbations = "
        f"{len(tests)} tests of {md_escape(models)}, corrected together "
        f"({md_escape(summary.get('correction'))}, α = {summary.get('alpha')}); "
        f"k = {spec.get('samples')}, B = {spec.get('permutations')}."
    )
    for w in summary.get("warnings") or ():
        st.warning(md_escape(w), icon=":material/warning:")
    if not tests:
        st.info("This suite holds no tests.")
        return
    st.subheader("Pooled over the cases")
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
    st.plotly_chart(
        suite_figures.heatmap(tests, selected=(case, pert), correction=str(summary.get("correction") or "")),
        key=f"{KEY}_heatmap",
    )
    st.selectbox("Open one cell (case · perturbation)", options, key=f"{KEY}_cell")
    show_cell(cells[(case, pert)], summary)
    st.download_button(
        "Results (JSON)",
        lambda: json.dumps(summary, indent=2, ensure_ascii=False),
        "results.json",
        "application/json",
        key=f"{KEY}_dl_json",
        on_click="ignore",
        icon=":material/data_object:",
    )


def spec_of(summary: dict[str, Any]) -> AuditSpec | None:
    """The suite's spec rebuilt from its summary (None when it cannot be)."""
    from dataclasses import replace

    from dbpa_core.history import _spec

    try:
        spec = _spec(summary["spec"])
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
