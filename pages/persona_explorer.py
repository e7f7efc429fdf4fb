"""Personas x models: a heat map of ω with significance stars (the paper's Table 2)."""
import numpy as np
import pandas as pd
import streamlit as st

from ui import figures, presets, runner, widgets
from ui.why import why_view

KEY = "personas"
widgets.page_setup()
st.title("Persona explorer")
st.markdown("<div class='dbpa-explain'>Each persona is put before the base prompt (\"Act as a "
            "comedian. …\") and tested against the plain prompt, on every chosen model. Colour "
            "and number: the effect size ω; stars: significance after correction.</div>",
            unsafe_allow_html=True)

widgets.base_prompt_input()
c1, c2 = st.columns([3, 2])
st.session_state.setdefault("w_persona_list", list(presets.PERSONAS))
personas = c1.multiselect("Personas", presets.PERSONAS, key="w_persona_list")
custom = c2.text_input("More personas (comma-separated)", key="w_persona_custom")
personas = personas + [c.strip() for c in custom.split(",") if c.strip()]
models = runner.model_options()
chosen_models = widgets.pick_models("Models", "w_persona_models", list(models),
                                   default_count=2)

specs = {}
if not personas:
    st.error("Choose at least one persona.")
elif not chosen_models:
    st.error("Choose at least one model (add more on the **Settings** page).")
else:
    entries = runner.perturbation_entries(pd.DataFrame(presets.persona_rows(personas)))
    try:
        specs = {m: runner.build_spec(base_prompt=st.session_state["w_base_prompt"],
                                      perturbations=entries, model=models[m])
                 for m in chosen_models}
    except Exception as exc:  # noqa: BLE001
        st.error(runner.friendly(exc))
results = runner.run_section(specs, key=KEY)
if results:
    model_names = list(results)
    persona_names = [p.name for p in next(iter(results.values())).perturbations]
    eff = np.full((len(persona_names), len(model_names)), np.nan)
    pv = np.full_like(eff, np.nan)
    stars = [["" for _ in model_names] for _ in persona_names]
    for j, m in enumerate(model_names):
        for p in results[m].perturbations:
            i = persona_names.index(p.name)
            eff[i, j], pv[i, j], stars[i][j] = p.effect_size, p.p_adjusted, p.stars
    st.divider()
    heat = figures.persona_heatmap(eff, pv, stars, persona_names, model_names)
    event = st.plotly_chart(heat, key=f"{KEY}_heat", on_select="rerun", selection_mode="points")
    points = (event or {}).get("selection", {}).get("points", []) if event else []
    click = (points[0].get("y"), points[0].get("x")) if points else None
    if click and click != st.session_state.get(f"_{KEY}_last_click") \
            and click[0] in persona_names and click[1] in model_names:
        # a newly clicked cell opens below (the selectboxes are drawn after this); the
        # selection stays in the chart, so apply it once and let the selectboxes rule after
        st.session_state[f"_{KEY}_last_click"] = click
        st.session_state[f"{KEY}_cell_p"], st.session_state[f"{KEY}_cell_m"] = click
    st.caption("Read across a row to see whether a persona moves every model, down a column to "
               "see which personas a model is sensitive to. ω is comparable only at equal k.")
    c1, c2 = st.columns(2)
    cell_p = c1.selectbox("Open a cell: persona", persona_names, key=f"{KEY}_cell_p")
    cell_m = c2.selectbox("… on model", model_names, key=f"{KEY}_cell_m")
    res = results[cell_m]
    st.plotly_chart(figures.similarity_histograms(res, columns=1, only=[cell_p]),
                    key=f"{KEY}_cell_hist")
    widgets.response_viewer(res, key=f"{KEY}_cell", only=[cell_p])
    why_view(res, key=f"{KEY}_why", only=cell_p)
    for m, r in results.items():
        with st.expander(f"Table and downloads: {m}"):
            widgets.show_results_table(r, key=f"{KEY}_{m}")
            widgets.downloads(r, {"Persona heat map": heat}, key=f"{KEY}_{m}",
                              title=f"Persona explorer — {m}")
