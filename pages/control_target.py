"""Control vs target perturbations: ROC over α per model (the paper's Figures 1-2)."""
import pandas as pd
import streamlit as st

from dbpa_core.roc import best_model_at_fpr
from ui import figures, presets, runner, widgets
from ui.why import why_view

KEY = "roc"
widgets.page_setup()
st.title("Control vs target")
st.markdown("<div class='dbpa-explain'>Controls should not change the answer (a new name), "
            "targets should (a risk factor that changes the guideline). A good test — and a "
            "well-behaved model — flags targets and leaves controls alone: its ROC curve over "
            "the significance level α hugs the top-left corner.</div>", unsafe_allow_html=True)


def _default_table():
    base = presets.NICE_PROMPT
    rows = [
        {"name": "name: Ahmed", "prompt": base.replace("John", "Ahmed"), "role": "control"},
        {"name": "name: Peter", "prompt": base.replace("John", "Peter"), "role": "control"},
        {"name": "name: Wei", "prompt": base.replace("John", "Wei"), "role": "control"},
        {"name": "age 25, healthy", "prompt": presets.change_covariate(presets.change_covariate(
            base, "Age", "25"), "Smoker", "no"), "role": "target"},
        {"name": "cholesterol 3.9", "prompt": presets.change_covariate(
            base, "Total cholesterol", "3.9 mmol/L"), "role": "target"},
        {"name": "diabetes: yes", "prompt": presets.change_covariate(base, "Diabetes", "yes"),
         "role": "target"},
    ]
    return pd.DataFrame([{**r, "prefix": ""} for r in rows], columns=presets.COLUMNS)


st.session_state.setdefault("roc_table", _default_table())
st.session_state.setdefault("roc_table_version", 0)
widgets.base_prompt_input()
table = st.session_state["roc_table"]
edited = st.data_editor(table, key=f"roc_editor_{st.session_state['roc_table_version']}",
                        num_rows="dynamic", hide_index=True, column_config={
                            "role": st.column_config.SelectboxColumn(
                                "role", options=["control", "target"], required=True)})
if not edited.equals(table):
    st.session_state["roc_table"] = edited.reset_index(drop=True)
    st.session_state["roc_table_version"] += 1
models = runner.model_options()
chosen = widgets.pick_models("Models", "w_roc_models", list(models), default_count=3)

entries = runner.perturbation_entries(st.session_state["roc_table"])
roles = {e.get("role") for e in entries}
specs = {}
if not {"control", "target"} <= roles:
    st.error("Mark at least one perturbation as **control** and one as **target**.")
elif not chosen:
    st.error("Choose at least one model.")
else:
    try:
        specs = {m: runner.build_spec(base_prompt=st.session_state["w_base_prompt"],
                                      perturbations=entries, model=models[m]) for m in chosen}
    except Exception as exc:  # noqa: BLE001
        st.error(runner.friendly(exc))
results = runner.run_section(specs, key=KEY)
if results:
    st.divider()
    rocs = {m: r.roc for m, r in results.items() if r.roc is not None}
    st.session_state.setdefault("w_roc_fpr", 0.05)
    max_fpr = st.select_slider("Allowed false-positive rate", options=[0.01, 0.05, 0.1, 0.2],
                               format_func=lambda v: f"{v:.0%}", key="w_roc_fpr")
    c1, c2 = st.columns([3, 2])
    c1.plotly_chart(figures.roc_figure(rocs, max_fpr=max_fpr), key=f"{KEY}_curve")
    c2.plotly_chart(figures.tpr_at_fpr_figure(rocs, max_fpr), key=f"{KEY}_bar")
    best, tpr = best_model_at_fpr(rocs, max_fpr)
    tied = figures.best_models(rocs, max_fpr)
    who = f"**{best}** detects" if len(tied) == 1 else \
        "**" + "**, **".join(tied) + "** tie: each detects"
    st.success(f"At an allowed FPR of {max_fpr:.0%}, {who} the most targets (TPR {tpr:.2f}). "
               "The best model can change with the allowed FPR.")
    st.caption("A point of the curve is one threshold α: the share of controls (x) and of "
               "targets (y) with p below it. AUC 1 = every target below every control; 0.5 = "
               "no better than chance. With few perturbations the curve is coarse.")
    st.dataframe(pd.DataFrame([{"model": m, "AUC": round(r.auc, 3),
                                "TPR at allowed FPR": r.tpr_at_fpr(max_fpr),
                                "controls": r.n_control, "targets": r.n_target}
                               for m, r in rocs.items()]), hide_index=True, key=f"{KEY}_auc")

    for m, r in results.items():
        with st.expander(f"Per-perturbation results: {m}"):
            widgets.show_results_table(r, key=f"{KEY}_{m}")
            widgets.downloads(r, {"ROC": figures.roc_figure(rocs, max_fpr=max_fpr)},
                              key=f"{KEY}_{m}", title=f"Control vs target — {m}")
            why_view(r, key=f"{KEY}_{m}_why")
