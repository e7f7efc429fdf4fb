"""Personas x models: a heat map of ω above chance with significance (the paper's Table 2)."""

import pandas as pd
import streamlit as st

from ui import checks_view, presets, runner, specfile, views, widgets

KEY = "personas"
widgets.page_setup()
st.title("Persona explorer")
st.markdown(
    "<div class='dbpa-explain'>Each persona is put before the base prompt (\"Act as a "
    'comedian. …") and tested against the plain prompt, on every chosen model. Colour '
    "and number: how far the persona moves the answers beyond chance; grey: not "
    "significant after correction.</div>",
    unsafe_allow_html=True,
)

widgets.base_prompt_input()
c1, c2 = st.columns([3, 2])
st.session_state.setdefault("w_persona_list", list(presets.PERSONAS))
personas = c1.multiselect("Personas", presets.PERSONAS, key="w_persona_list")
custom = c2.text_input("More personas (comma-separated)", key="w_persona_custom")
personas = list(dict.fromkeys(personas + [c.strip() for c in custom.split(",") if c.strip()]))
models = runner.model_options()
chosen_models = widgets.pick_models("Models", "w_persona_models", list(models), default_count=1)

checks = checks_view.checks_editor(key=KEY)
specs = {}
if not personas:
    st.error("Choose at least one persona.")
elif not chosen_models:
    st.error("Choose at least one model (add more on the **Settings** page).")
else:
    entries = runner.perturbation_entries(pd.DataFrame(presets.persona_rows(personas)))
    try:
        specs = {
            m: runner.build_spec(
                base_prompt=st.session_state["w_base_prompt"],
                perturbations=entries,
                model=models[m],
                name="persona-explorer",
                overrides=checks,
            )
            for m in chosen_models
        }
    except Exception as exc:  # noqa: BLE001
        st.error(runner.friendly(exc))
specfile.spec_section(specs, key=KEY)
results = runner.run_section(specs, key=KEY)
results = views.with_current_delta(KEY, results)  # δ re-reads, never reruns
if results:
    st.divider()
    views.persona_view(results, key=KEY, meta=runner.run_meta(KEY))
