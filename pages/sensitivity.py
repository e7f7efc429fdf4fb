"""Sensitivity: does the verdict hold under other measures, embedders and prompt lengths?"""

import streamlit as st

from dbpa_core import sensitivity as sens
from dbpa_core.audit import AuditResult
from dbpa_core.measures import MEASURES
from dbpa_core.pricing import DEFAULT_PRICES
from dbpa_core.spec import model_label
from ui import demo_runs, export, runner, state, widgets
from ui import sensitivity_figures as sf

KEY = "sensitivity"
EMBEDDERS = {
    "spec": "the audit's own",
    "local": "MiniLM (local)",
    "bleu": "BLEU",
    "rouge1": "ROUGE-1",
    "rouge2": "ROUGE-2",
    "rougeL": "ROUGE-L",
    "openai": "OpenAI text-embedding-3-small",
}
widgets.page_setup()
verdict = widgets.page_intro(
    "Sensitivity: does the verdict hold?",
    "The same test, repeated on the same answers: with every "
    "distance measure, with other embedders (only new embeddings are computed), and with "
    "the prompt padded by neutral text to longer lengths (new answers, sampled once and "
    "cached) — the DBPA paper's Appendix C. A verdict that holds everywhere is one to "
    "trust; one that flips deserves a second look.",
)

# ---------------------------------------------------------------- which audit
# results are kept by each page's KEY: name the known ones after their page
titles = {
    "landing": "Perturbation test",
    "personas": "Persona explorer",
    "roc": "Control vs target",
    "models": "Model comparison",
}
sources = {
    f"{titles.get(page, page.replace('_', ' ').capitalize())}: {name}": r.spec
    for page, jobs in st.session_state["results"].items()
    if isinstance(jobs, dict)
    for name, r in jobs.items()
    if isinstance(r, AuditResult)
}
FORM = "The Perturbation test form (its current inputs)"
models = runner.model_options()
try:
    form_model = models.get(st.session_state.get("w_landing_model")) or next(iter(models.values()))
    sources[FORM] = runner.build_spec(
        base_prompt=st.session_state["w_base_prompt"],
        model=form_model,
        perturbations=runner.perturbation_entries(st.session_state["perturbations"]),
    )
except Exception as exc:  # noqa: BLE001 - the form may be incomplete: say so if chosen
    form_error = runner.friendly(exc)
else:
    form_error = None
options = list(sources) or [FORM]
picked = st.selectbox(
    "Audit to examine",
    options,
    key="w_sens_source",
    help="Any result from this session, or the Perturbation test form. The "
    "audit's own answers come from the cache.",
)
spec = sources.get(picked)
if spec is None:
    st.error(form_error or "Run an audit first, or fill in the Perturbation test page.")
else:
    st.caption(
        f"Model {widgets.md_escape(', '.join(model_label(m) for m in spec.models))} · "
        f"{len(spec.perturbations) or len(spec.models) - 1} comparisons · k = "
        f"{spec.samples}, B = {spec.permutations}, measure {spec.measure}, embedder "
        f"{sens.embedder_label(spec.embedder)}, correction {spec.correction}, "
        f"α = {spec.alpha}"
    )

# ---------------------------------------------------------------- what to vary
c1, c2 = st.columns(2)
st.session_state.setdefault("w_sens_measures", list(MEASURES))
measures = c1.multiselect("Distance measures (no new calls)", list(MEASURES), key="w_sens_measures")
st.session_state.setdefault("w_sens_embedders", ["spec", "local"])
embedders = c2.multiselect(
    "Embedders (only new embeddings)",
    list(EMBEDDERS),
    format_func=EMBEDDERS.get,
    key="w_sens_embedders",
    help="BLEU and ROUGE compare texts word by word: slow for long "
    "answers. OpenAI embeddings need a key (Settings).",
)
folder = c2.text_input("…and a sentence-transformers folder (optional)", key="w_sens_folder")
c3, c4 = st.columns(2)
replay = spec is not None and any(m.get("backend") == "replay" for m in spec.models)
do_lengths = c3.toggle(
    "Prompt-length study (new model calls)",
    key="w_sens_do_lengths",
    disabled=replay,
    help="Pads the base prompt and every perturbation with the same neutral "
    "text; the original prompt stays at the end, word for word.",
)
st.session_state.setdefault("w_sens_lengths", "100, 300, 900")
lengths_text = c3.text_input("Lengths in tokens", key="w_sens_lengths", disabled=not do_lengths or replay)
if replay:
    c3.caption(
        "A replay model only has answers to its recorded prompts: the prompt-length "
        "study needs a model that can answer new ones."
    )
chat_models = [m for m, p in DEFAULT_PRICES.items() if p["output"] > 0]
st.session_state.setdefault("w_sens_cost_models", ["gpt-4o-mini"])
cost_models = c4.multiselect("Price this study for (cost table)", chat_models, key="w_sens_cost_models")

config = None
if spec is not None:
    try:
        names = list(embedders) + ([f"st:{folder.strip()}"] if folder.strip() else [])
        config = sens.SensitivityConfig(
            measures=sens.parse_measures(measures),
            embedders=sens.parse_embedders(names, spec),
            lengths=sens.parse_lengths(lengths_text) if do_lengths and not replay else (),
            cost_models=tuple(cost_models),
        )
        need = sens.plan(spec, config, cache=state.cache())
    except sens.SensitivityError as exc:
        st.error(f"Please fix the settings — {exc}.")
        config = None


def _before() -> None:
    m1, m2, m3 = st.columns(3)
    what, why = runner.calls_words(need["cached"], replay=runner.replays_only([spec]))
    m1.metric(what, f"{need['calls']:,}", help=why)
    m2.metric("Comparisons", f"{len(spec.perturbations) or len(spec.models) - 1}")
    m3.metric(
        "Estimated cost",
        f"${need['cost']:,.4f}",
        help="upper bound: output counted at max tokens; local and replay models are free",
    )


tasks = None
if config is not None:
    tasks = {
        "sensitivity": lambda progress: sens.run_sensitivity(
            spec, config, cache=state.cache(), progress=progress, api_keys=st.session_state["api_keys"]
        )
    }
# demo mode: the default study's recorded run, at once (while the inputs are the defaults)
demo_runs.offer(
    KEY,
    "sensitivity",
    (spec, config) if config is not None else None,
    matches=lambda sc, r: demo_runs.same_inputs(sc[0], r.spec) and sc[1] == r.config,
)
results = runner.task_section(tasks, key=KEY, label="Run sensitivity study", before=_before)
result = results.get("sensitivity") if results else None
widgets.say_verdict(
    verdict,
    sf.hold_sentence(result) if result is not None else None,
    waiting="No verdict yet: pick an audit's results below and press **Run sensitivity study**.",
)

# ---------------------------------------------------------------- results
if result is not None:
    st.divider()
    if note := demo_runs.label(KEY):
        st.info(note, icon=":material/history:")
    alpha = result.spec.alpha
    st.subheader("Does the verdict hold?")
    rs = result.spec
    st.caption(
        f"Examined: {widgets.md_escape(', '.join(model_label(m) for m in rs.models))}, "
        f"{len(result.perturbations)} comparisons, k = {rs.samples}, measure "
        f"{rs.measure}, embedder {sens.embedder_label(rs.embedder)}."
    )
    table = sf.verdict_table(result)
    st.markdown(f"**{widgets.md_escape(sf.hold_sentence(result))}**")
    st.dataframe(table, hide_index=True, key=f"{KEY}_verdicts")
    st.caption(
        f"'Detectable' = significant after the {result.spec.correction} correction across "
        "perturbations, within each setting, at α = "
        f"{alpha}. ω above chance = ω minus the mean ω of the shuffled splits (about 0 "
        f"when nothing changed). {result.usage.get('calls', 0)} model calls and "
        f"{result.usage.get('embeddings_computed', 0)} new embeddings were made."
    )
    tabs = st.tabs([sens.STUDY_TITLES[s] for s in result.studies] + ["Cost", "All rows"])
    for tab, study in zip(tabs, result.studies, strict=False):
        with tab:
            if study == "length":
                st.plotly_chart(sf.length_figure(result, alpha), key=f"{KEY}_len")
                longest = max(result.padded_prompts) if result.padded_prompts else None
                if longest:
                    st.caption(
                        f"The padded base prompt at {longest} tokens (the original "
                        "prompt is its last paragraph):"
                    )
                    st.text(result.padded_prompts[longest])
            else:
                st.plotly_chart(sf.effect_figure(result, study), key=f"{KEY}_{study}_eff")
                st.plotly_chart(sf.pvalue_figure(result, study, alpha), key=f"{KEY}_{study}_p")
            st.dataframe(sf.study_table(result, study), hide_index=True, key=f"{KEY}_{study}_t")
    with tabs[len(result.studies)]:
        st.dataframe(
            sf.cost_table(result),
            hide_index=True,
            key=f"{KEY}_cost",
            column_config={
                "cost $": st.column_config.NumberColumn(format="%.4f"),
                "paid now $": st.column_config.NumberColumn(format="%.4f"),
            },
        )
        st.caption(
            "Tokens as the model reported them where it does, else ~4 characters per "
            "token. 'paid now' counts only what this run called or embedded; the rest "
            "came from the cache. 'comparison' rows price the same tokens for another "
            "model."
        )
    with tabs[len(result.studies) + 1]:
        st.dataframe(widgets.styled(sf.rows_table(list(result.rows))), hide_index=True, key=f"{KEY}_rows")
    for w in result.warnings:
        st.caption(f"Note: {w}")
    name = export.stem(
        result.spec.name or "audit",
        "-vs-".join(model_label(m) for m in result.spec.models),
        result.created_at,
    )
    d = st.columns(4)
    d[0].download_button(
        "Results (CSV)",
        result.to_csv(),
        f"{name}-sensitivity.csv",
        "text/csv",
        key=f"{KEY}_dl_csv",
        icon=":material/table:",
    )
    d[1].download_button(
        "Results (JSON)",
        result.to_json(),
        f"{name}-sensitivity.json",
        "application/json",
        key=f"{KEY}_dl_json",
        icon=":material/data_object:",
    )
    d[2].download_button(
        "Cost (CSV)",
        result.cost_csv(),
        f"{name}-cost.csv",
        "text/csv",
        key=f"{KEY}_dl_cost",
        icon=":material/payments:",
    )
    d[3].download_button(
        "Report (HTML)",
        sf.report_html(result, alpha),
        f"{name}-sensitivity.html",
        "text/html",
        key=f"{KEY}_dl_html",
        icon=":material/description:",
    )
