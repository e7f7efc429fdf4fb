"""Landing page: does a perturbation change what the model says?"""

import pandas as pd
import streamlit as st

from ui import checks_view, demo, presets, runner, specfile, verdicts, views, widgets

KEY = "landing"
widgets.page_setup()
verdict = widgets.page_intro(
    "Does a perturbation change what the model says?",
    "The model answers the base prompt and each perturbed prompt "
    "<i>k</i> times. If the perturbed answers differ from the base answers by more than the "
    "base answers differ among themselves, the permutation test flags it. Prefilled with the "
    "paper's example: a NICE cardiovascular question and eight personas.",
)

widgets.base_prompt_input()
st.markdown(
    "**Perturbations** — a *prefix* is put before the base prompt; a full *prompt* "
    "replaces it. Role: *control* should not change the answer, *target* should."
)
table = st.session_state["perturbations"]
edited = st.data_editor(
    table,
    key=f"pert_editor_{st.session_state['perturbations_version']}",
    num_rows="dynamic",
    hide_index=True,
    height=widgets.table_height(len(table) + 1),
    column_config={
        "name": st.column_config.TextColumn("name", required=True),
        "prefix": st.column_config.TextColumn("prefix", width="medium"),
        "prompt": st.column_config.TextColumn("prompt (replaces the base)", width="large"),
        "role": st.column_config.SelectboxColumn("role", options=["", "control", "target"]),
    },
)
if not edited.equals(table):
    st.session_state["perturbations"] = edited.reset_index(drop=True)
    st.session_state["perturbations_version"] += 1


def _add_rows(rows):
    """Append rows, skipping names already in the table (a duplicate name is an error)."""
    df = st.session_state["perturbations"]
    have = {str(n).strip() for n in df["name"].fillna("")}
    new = [r for r in rows if r["name"].strip() not in have]
    skipped = [r["name"] for r in rows if r["name"].strip() in have]
    if skipped:
        st.session_state["_landing_add_note"] = (
            "Already in the table, not added again: " + ", ".join(skipped) + "."
        )
    if new:
        st.session_state["perturbations"] = pd.concat([df, pd.DataFrame(new)], ignore_index=True)
        st.session_state["perturbations_version"] += 1


with st.expander("Quick add: personas and covariate changes"):
    c1, c2 = st.columns(2)
    with c1:
        picked = st.multiselect("Persona presets", presets.PERSONAS, key="landing_personas")
        custom = st.text_input(
            "Custom personas (comma-separated)", key="landing_custom", placeholder="pharmacist, pirate"
        )
        if st.button("Add personas", key="landing_add_personas"):
            names = list(dict.fromkeys(picked + [c.strip() for c in custom.split(",") if c.strip()]))
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
                _add_rows([{"name": f"{field}: {value}", "prefix": "", "prompt": prompt, "role": role}])
                st.rerun()
        else:
            st.caption("Write fields as `Name: value` in the base prompt to edit them here.")
    note = st.session_state.pop("_landing_add_note", None)
    if note:
        st.info(widgets.md_escape(note))

models = runner.model_options()
model_name = widgets.pick_model(
    "Model",
    "w_landing_model",
    list(models),
    help="Add OpenAI-compatible, Hugging Face or replay models in Settings.",
)

checks = checks_view.checks_editor(key=KEY)
sequential = widgets.sequential_toggle("w_landing_sequential")
try:
    spec = runner.build_spec(
        base_prompt=st.session_state["w_base_prompt"],
        perturbations=runner.perturbation_entries(st.session_state["perturbations"]),
        model=models.get(model_name),
        name="perturbation-test",
        overrides={**checks, **({"sequential_sampling": True} if sequential else {})},
    )
except Exception as exc:  # noqa: BLE001
    spec = None
    st.error(runner.friendly(exc), icon=":material/edit_note:")
specfile.spec_section({model_name: spec} if spec else None, key=KEY)
# first start: the recorded result of the default example, at once (Run samples afresh)
demo.offer(
    spec, key=KEY, job=model_name, signature=runner.specs_signature({model_name: spec}) if spec else None
)
results = runner.run_section({model_name: spec} if spec else None, key=KEY, label="Run audit")
results = views.with_current_delta(KEY, results)  # δ re-reads, never reruns
widgets.say_verdict(
    verdict,
    verdicts.summary_sentence(next(iter(results.values()))) if results else None,
    waiting="No verdict yet: press **Run audit** below to ask the model and test each perturbation.",
)
if results:
    job, result = next(iter(results.items()))
    st.divider()
    if note := demo.label(KEY):
        st.info(note, icon=":material/history:")
    views.perturbation_view(result, key=KEY, meta=runner.run_meta(KEY), job=job)
