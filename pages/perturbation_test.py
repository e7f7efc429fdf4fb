"""Landing page: does a perturbation change what the model says?"""
import streamlit as st

from ui import figures, presets, runner, widgets
from ui.why import why_view

KEY = "landing"
widgets.page_setup()
st.title("Does a perturbation change what the model says?")
st.markdown(
    "<div class='dbpa-explain'>The model answers the base prompt and each perturbed prompt "
    "<i>k</i> times. If the perturbed answers differ from the base answers by more than the "
    "base answers differ among themselves, the permutation test flags it. Prefilled with the "
    "paper's example: a NICE cardiovascular question and eight personas.</div>",
    unsafe_allow_html=True)

widgets.base_prompt_input()
st.markdown("**Perturbations** — a *prefix* is put before the base prompt; a full *prompt* "
            "replaces it. Role: *control* should not change the answer, *target* should.")
table = st.session_state["perturbations"]
edited = st.data_editor(
    table, key=f"pert_editor_{st.session_state['perturbations_version']}", num_rows="dynamic",
    hide_index=True, column_config={
        "name": st.column_config.TextColumn("name", required=True),
        "prefix": st.column_config.TextColumn("prefix", width="medium"),
        "prompt": st.column_config.TextColumn("prompt (replaces the base)", width="large"),
        "role": st.column_config.SelectboxColumn("role", options=["", "control", "target"]),
    })
if not edited.equals(table):
    st.session_state["perturbations"] = edited.reset_index(drop=True)
    st.session_state["perturbations_version"] += 1


def _add_rows(rows):
    df = st.session_state["perturbations"]
    import pandas as pd

    st.session_state["perturbations"] = pd.concat([df, pd.DataFrame(rows)], ignore_index=True)
    st.session_state["perturbations_version"] += 1


with st.expander("Quick add: personas and covariate changes"):
    c1, c2 = st.columns(2)
    with c1:
        picked = st.multiselect("Persona presets", presets.PERSONAS, key="landing_personas")
        custom = st.text_input("Custom personas (comma-separated)", key="landing_custom",
                               placeholder="pharmacist, pirate")
        if st.button("Add personas", key="landing_add_personas"):
            names = picked + [c.strip() for c in custom.split(",") if c.strip()]
            _add_rows(presets.persona_rows(names))
            st.rerun()
    with c2:
        fields = presets.covariates(st.session_state["w_base_prompt"])
        if fields:
            field = st.selectbox("Field of the base prompt", list(fields), key="landing_field")
            value = st.text_input(f"New value (now: {fields[field]})", key="landing_value")
            role = st.selectbox("Role", ["target", "control", ""], key="landing_cov_role")
            if st.button("Add covariate change", key="landing_add_cov", disabled=not value):
                prompt = presets.change_covariate(st.session_state["w_base_prompt"], field, value)
                _add_rows([{"name": f"{field}: {value}", "prefix": "", "prompt": prompt,
                            "role": role}])
                st.rerun()
        else:
            st.caption("Write fields as `Name: value` in the base prompt to edit them here.")

models = runner.model_options()
model_name = widgets.pick_model("Model", "w_landing_model", list(models),
                                help="Add OpenAI-compatible, Hugging Face or replay models "
                                "in Settings.")

try:
    spec = runner.build_spec(base_prompt=st.session_state["w_base_prompt"],
                             perturbations=runner.perturbation_entries(
                                 st.session_state["perturbations"]),
                             model=models.get(model_name))
except Exception as exc:  # noqa: BLE001
    spec = None
    st.error(runner.friendly(exc), icon=":material/edit_note:")
results = runner.run_section({model_name: spec} if spec else None, key=KEY, label="Run audit")
result = next(iter(results.values())) if results else None
if result is not None:
    st.divider()
    st.subheader("Results")
    widgets.show_results_table(result, key=KEY)
    hist = figures.similarity_histograms(result)
    emb = figures.embedding_map(result)
    tabs = st.tabs(["Similarity histograms", "Permutation test", "Embedding map", "Responses",
                    "Why"], key=f"{KEY}_tabs")  # keyed: a widget in a tab keeps its tab open
    with tabs[0]:
        st.caption("Blue: how similar the base answers are to each other (the model's own "
                   "noise, P0). Orange: how similar base answers are to perturbed ones (P1). "
                   "The further orange sits left of blue, the more the perturbation changed "
                   "the answers.")
        st.plotly_chart(hist, key=f"{KEY}_hist")
    with tabs[1]:
        names = [p.name for p in result.perturbations]
        chosen = st.selectbox("Perturbation", names, key=f"{KEY}_perm_pick")
        pert = next(p for p in result.perturbations if p.name == chosen)
        st.caption("Grey: ω for random re-labellings of the pooled answers (what chance "
                   "gives). Red: the observed ω. p is the share of grey at or beyond red.")
        st.plotly_chart(figures.permutation_figure(pert), key=f"{KEY}_perm")
    with tabs[2]:
        st.caption("Each dot is one response, placed by its embedding (two principal "
                   "components). Clouds apart from the base (diamonds) mean changed answers.")
        if emb is not None:
            st.plotly_chart(emb, key=f"{KEY}_pca")
        else:
            st.info("No embeddings with BLEU/ROUGE similarity.")
    with tabs[3]:
        widgets.response_viewer(result, key=KEY)
    with tabs[4]:
        why_view(result, key=f"{KEY}_why")
    widgets.downloads(result, {"Similarity histograms": hist, "Embedding map": emb}, key=KEY,
                      title="Perturbation test")
