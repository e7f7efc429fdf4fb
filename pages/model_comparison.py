"""Reference-model distance: how far is each model's answer distribution from a reference's?"""

import streamlit as st

from ui import checks_view, presets, runner, specfile, state, views, widgets

KEY = "models"
widgets.page_setup()
st.title("Model comparison")
st.markdown(
    "<div class='dbpa-explain'>Every model answers the same prompt <i>k</i> times; "
    "each is tested against the reference model. The bar is how far its answers sit "
    "from the reference's beyond what chance gives; the stars say whether that "
    "distance exceeds sampling noise (the paper's Figure 3). Prefilled with the "
    "embedded model at three temperatures.</div>",
    unsafe_allow_html=True,
)

st.session_state.setdefault("w_models_prompt", presets.MODELS_PROMPT)
st.text_area("Prompt", key="w_models_prompt", height=80)
models = runner.model_options()
names = list(models)
if len(names) < 2:
    st.info(
        "Only one model is configured. Add models on the **Settings** page — an "
        "OpenAI-compatible server, a Hugging Face folder, a replay file, or the local model "
        "at another temperature."
    )
    if st.button("Add the model at temperature 1.2 and 0.4", key="models_add_variants"):
        added = [m for m in state.default_models()[1:] if m not in st.session_state["models"]]
        st.session_state["models"] += added
        st.session_state["w_models_others"] = list(runner.model_options())[1:]
        state.save_models()
        st.rerun()
c1, c2 = st.columns([1, 2])
with c1:
    reference = widgets.pick_model("Reference model", "w_models_reference", names)
with c2:
    others = widgets.pick_models(
        "Compared models", "w_models_others", [n for n in names if n != reference], default_count=4
    )

checks = checks_view.checks_editor(key=KEY)
spec = None
if others:
    try:
        spec = runner.build_spec(
            base_prompt=st.session_state["w_models_prompt"],
            models=[models[reference]] + [models[o] for o in others],
            name="model-comparison",
            overrides=checks,
        )
    except Exception as exc:  # noqa: BLE001
        st.error(runner.friendly(exc))
elif len(names) >= 2:
    st.error("Choose at least one model to compare with the reference.")
specfile.spec_section({"model comparison": spec} if spec else None, key=KEY)
results = runner.run_section({"model comparison": spec} if spec else None, key=KEY)
results = views.with_current_delta(KEY, results)  # δ re-reads, never reruns
result = results["model comparison"] if results else None
if result is not None:
    st.divider()
    views.model_comparison_view(result, key=KEY, meta=runner.run_meta(KEY))
