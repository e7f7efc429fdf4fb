"""Suite: many cases, the same perturbations — build the suite here (cases in a grid, a
base prompt template, presets, checks), run it, and read a verdict per perturbation pooled
over the cases (ui/suite_builder.py builds, ui/suite_view.py runs and shows)."""

import streamlit as st

from ui import checks_view, runner, suite_builder, suite_demo, suite_view, widgets
from ui.suite_view import KEY

widgets.page_setup()
if goto := st.session_state.pop("_suite_goto", None):  # a case opened as a plain audit
    st.switch_page(goto)
ss = st.session_state
st.title("Does a change to every case change what the model says?")
st.markdown(
    "<div class='dbpa-explain'>A suite asks the same question of many cases (patient "
    "vignettes, loan applications): each case's base prompt is filled from its row, every "
    "perturbation (a name swap, a persona, another age) is applied to every case, each case "
    "x perturbation is one permutation test, the tests are corrected together, and each "
    "perturbation gets one verdict pooled over the cases. Prefilled with twelve clinical "
    "vignettes; the sidebar's test settings apply.</div>",
    unsafe_allow_html=True,
)
suite_builder.init()

verdict = st.empty()  # the verdict first, in words (filled once the results below are known)

with st.expander("Open a suite spec file or a recorded suite run", icon=":material/folder_open:"):
    c1, c2 = st.columns(2)
    with c1:
        st.file_uploader(
            "A suite spec (YAML) with its cases file (CSV or JSONL)",
            type=["yaml", "yml", "csv", "jsonl"],
            accept_multiple_files=True,
            key=f"{KEY}_up",
            on_change=suite_view.open_files,
        )
    with c2:
        recorded = suite_view.recorded_suites()
        if recorded:
            pick = st.selectbox(
                "A recorded suite run", list(recorded), format_func=recorded.get, key=f"{KEY}_recorded"
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
                "No suite run recorded yet: a suite run here or with `dbpa audit` "
                "is listed here and in History."
            )
        st.button(
            "Start again from the example",
            key=f"{KEY}_example",
            icon=":material/restart_alt:",
            on_click=suite_builder.reset,
        )
suite_view.note()

suite_builder.cases_section(KEY)
suite_builder.prompt_section()
suite_builder.perturbations_section(KEY)
st.subheader("4 · Checks")
checks = checks_view.checks_editor(key=KEY)
widgets.sequential_toggle(suite_builder.SEQUENTIAL)  # written into the spec (and suite.yaml)
models = runner.model_options()
model_name = widgets.pick_model("Model", "w_suite_model", list(models), help="Add models in Settings.")
doc = suite_builder.spec_dict(model=models[model_name], checks=checks.get("checks"), name="suite")
ss["_suite_doc"] = doc  # what the downloads hold (suite.yaml, cases.csv)
try:
    spec = suite_builder.build(doc)
except Exception as exc:  # noqa: BLE001 - one line, the form stays
    spec = None
    st.error(runner.friendly(exc), icon=":material/edit_note:")
suite_builder.preview_section(spec, doc, KEY)
suite_view.checks_preview_section(spec, ss.get("results", {}).get(KEY))
suite_builder.files_section(doc, spec, KEY)

st.subheader("5 · Run")
suite_builder.save_draft(doc)  # a reload opens this suite again
unfinished = st.empty()
suite_view.unfinished_note(doc, unfinished)
suite_demo.offer(spec, key=KEY, signature=suite_view.signature)
runner.task_section(
    {KEY: suite_view.suite_task(spec, doc)} if spec else None,
    key=KEY,
    label="Run suite",
    signature=suite_view.signature(spec) if spec else None,
    before=(lambda: suite_view.show_estimate(spec)) if spec else None,
    on_done=lambda out: suite_view.record(out, spec),
)
suite_view.unfinished_note(doc, unfinished)  # a run that just finished clears it
results = ss.get("results", {}).get(KEY)
if results and KEY in results:
    st.divider()
    if note := suite_demo.label(KEY):
        st.info(note, icon=":material/history:")
        st.button(
            "Use the recording's settings in the sidebar",
            key=f"{KEY}_rec_settings",
            on_click=suite_demo.use_recorded_settings,
            help="k, B, max tokens, temperature, seed, correction and α as recorded (every page uses them).",
        )
    meta = runner.run_meta(KEY)
    if meta.run_id is not None:
        st.caption(f":material/history: Run #{meta.run_id} in History, {meta.created_at:%Y-%m-%d %H:%M} UTC.")
    suite_view.show(results[KEY], run_id=meta.run_id)
    verdict.info(suite_view.headline(results[KEY]), icon=":material/gavel:")
