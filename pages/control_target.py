"""Control vs target perturbations: the control gate, and ROC over α per model (the paper's
Figures 1-2)."""

import streamlit as st

from ui import checks_view, presets, runner, specfile, views, widgets

KEY = "roc"
widgets.page_setup()
st.title("Control vs target")
st.markdown(
    "<div class='dbpa-explain'>Controls should not change the answer (a new name), "
    "targets should (a risk factor that changes the guideline). A robust model leaves "
    "every control alone — any significant control fails the gate — and a good test "
    "flags the targets: its ROC curve over the significance level α hugs the top-left "
    "corner.</div>",
    unsafe_allow_html=True,
)

st.session_state.setdefault("roc_table", presets.control_target_table())
st.session_state.setdefault("roc_table_version", 0)
widgets.base_prompt_input()
table = st.session_state["roc_table"]
edited = st.data_editor(
    table,
    key=f"roc_editor_{st.session_state['roc_table_version']}",
    num_rows="dynamic",
    hide_index=True,
    height=widgets.table_height(len(table) + 1),
    column_config={
        "role": st.column_config.SelectboxColumn("role", options=["control", "target"], required=True)
    },
)
if not edited.equals(table):
    st.session_state["roc_table"] = edited.reset_index(drop=True)
    st.session_state["roc_table_version"] += 1
models = runner.model_options()
chosen = widgets.pick_models("Models", "w_roc_models", list(models), default_count=1)

checks = checks_view.checks_editor(key=KEY)
entries = runner.perturbation_entries(st.session_state["roc_table"])
roles = {e.get("role") for e in entries}
specs = {}
if not {"control", "target"} <= roles:
    st.error("Mark at least one perturbation as **control** and one as **target**.")
elif not chosen:
    st.error("Choose at least one model.")
else:
    try:
        specs = {
            m: runner.build_spec(
                base_prompt=st.session_state["w_base_prompt"],
                perturbations=entries,
                model=models[m],
                name="control-vs-target",
                overrides=checks,
            )
            for m in chosen
        }
    except Exception as exc:  # noqa: BLE001
        st.error(runner.friendly(exc))
specfile.spec_section(specs, key=KEY)
results = runner.run_section(specs, key=KEY)
results = views.with_current_delta(KEY, results)  # δ re-reads, never reruns
if results:
    st.divider()
    views.control_target_view(results, key=KEY, meta=runner.run_meta(KEY))
