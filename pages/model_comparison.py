"""Reference-model distance: how far is each model's answer distribution from a reference's?"""
import streamlit as st

from ui import figures, runner, widgets
from ui.why import why_view

KEY = "models"
widgets.page_setup()
st.title("Model comparison")
st.markdown("<div class='dbpa-explain'>Every model answers the same prompt <i>k</i> times; "
            "each is tested against the reference model. ω is the distance of its answers from "
            "the reference's, the stars say whether that distance exceeds sampling noise "
            "(the paper's Figure 3).</div>", unsafe_allow_html=True)

st.session_state.setdefault("w_models_prompt", "Explain in three sentences what a statin does.")
st.text_area("Prompt", key="w_models_prompt", height=80)
models = runner.model_options()
names = list(models)
if len(names) < 2:
    st.info("Only one model is configured. Add models on the **Settings** page — an "
            "OpenAI-compatible server, a Hugging Face folder, a replay file, or the local model "
            "at another temperature.")
    if st.button("Add the local model at temperature 1.2 and 0.4", key="models_add_variants"):
        st.session_state["models"] += [{"backend": "local", "temperature": 1.2},
                                       {"backend": "local", "temperature": 0.4}]
        st.rerun()
c1, c2 = st.columns([1, 2])
with c1:
    reference = widgets.pick_model("Reference model", "w_models_reference", names)
with c2:
    others = widgets.pick_models("Compared models", "w_models_others",
                                 [n for n in names if n != reference], default_count=4)

spec = None
if others:
    try:
        spec = runner.build_spec(base_prompt=st.session_state["w_models_prompt"],
                                 models=[models[reference]] + [models[o] for o in others])
    except Exception as exc:  # noqa: BLE001
        st.error(runner.friendly(exc))
elif len(names) >= 2:
    st.error("Choose at least one model to compare with the reference.")
results = runner.run_section({"model comparison": spec} if spec else None, key=KEY)
result = results["model comparison"] if results else None
if result is not None:
    st.divider()
    bar = figures.model_distance_figure(result)
    st.plotly_chart(bar, key=f"{KEY}_bar")
    st.caption("Orange bars: significantly different from the reference after correction; "
               "grey: not shown to differ with this k.")
    widgets.show_results_table(result, key=KEY)
    hist = figures.similarity_histograms(result)
    st.plotly_chart(hist, key=f"{KEY}_hist")
    widgets.response_viewer(result, key=KEY)
    why_view(result, key=f"{KEY}_why")
    widgets.downloads(result, {"Distance from the reference": bar, "Histograms": hist},
                      key=KEY, title="Model comparison")
