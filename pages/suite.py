"""Suite: one spec, many cases — every case x perturbation tested, corrected across the
suite, and a pooled verdict per perturbation (see ui/suite_view.py)."""

import streamlit as st

from ui import runner, suite_view, widgets
from ui.suite_view import KEY

widgets.page_setup(settings="none")
if goto := st.session_state.pop("_suite_goto", None):  # a case opened as a plain audit
    st.switch_page(goto)
st.title("Suite of cases")
ss = st.session_state
st.markdown(
    "<div class='dbpa-explain'>A spec with <code>cases:</code> audits many cases at "
    "once (patient vignettes, loan applications): each case x perturbation is one "
    "test, the tests are corrected together, and each perturbation gets a pooled "
    "verdict across the cases, its mean effect above chance and the share of cases it "
    "changes. Open a suite spec with its cases file and run it here, open a recorded "
    "suite run, or run it from a terminal: <code>dbpa audit SPEC --out DIR</code> "
    "(recorded in History too).</div>",
    unsafe_allow_html=True,
)

c1, c2 = st.columns(2)
with c1:
    st.file_uploader(
        "Open a suite spec (YAML) with its cases file (CSV or JSONL)",
        type=["yaml", "yml", "csv", "jsonl"],
        accept_multiple_files=True,
        key=f"{KEY}_up",
        on_change=suite_view.open_files,
    )
with c2:
    recorded = suite_view.recorded_suites()
    if recorded:
        pick = st.selectbox(
            "Or open a recorded suite run", list(recorded), format_func=recorded.get, key=f"{KEY}_recorded"
        )
        st.button(
            "Open this run",
            key=f"{KEY}_open",
            icon=":material/history:",
            on_click=suite_view.open_recorded,
            args=(pick,),
        )
    else:
        st.caption(
            "No suite run recorded yet: a suite run here or with `dbpa audit` is listed here and in History."
        )
suite_view.note()

spec = ss.get("_suite_spec")
if spec is not None:
    st.caption(
        f"Ready: **{widgets.md_escape(spec.name)}**, {len(spec.cases)} cases x "
        f"{len(spec.perturbations)} perturbations = {spec.n_tests} tests, k = "
        f"{spec.samples}, B = {spec.permutations}, correction {spec.correction} "
        "(the spec's settings; the sidebar's do not apply to a suite)."
    )
    runner.task_section(
        {KEY: suite_view.suite_task(spec)},
        key=KEY,
        label="Run suite",
        signature=suite_view.signature(spec),
        before=lambda: suite_view.show_estimate(spec),
        on_done=lambda out: suite_view.record(out, spec),
    )

results = ss.get("results", {}).get(KEY)
if results and KEY in results:
    meta = runner.run_meta(KEY)
    if meta.run_id is not None:
        st.caption(f":material/history: Run #{meta.run_id} in History, {meta.created_at:%Y-%m-%d %H:%M} UTC.")
    st.divider()
    suite_view.show(results[KEY])
elif spec is None:
    st.info(
        "Open a suite spec (or a recorded suite run) to begin, or the example: eight patient "
        "vignettes (`dbpa examples` copies it, `suite_vignettes.yaml` with its `vignettes.csv`, "
        "into a folder)."
    )
    st.button("Open the example suite", key=f"{KEY}_example", on_click=suite_view.open_example)
