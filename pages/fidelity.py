"""Simulator fidelity: how far an LLM's simulated survey answers are from real ones, across
all questions and with a guarantee (calibrated quantile curves, SPEC §3)."""

import hashlib

import pandas as pd
import streamlit as st

from dbpa_core.fidelity.data import FidelityDataError
from ui import fidelity as fid
from ui import fidelity_figures as figs
from ui import runner, state, widgets
from ui.widgets import md_escape

KEY = "fidelity"
widgets.page_setup(settings="run")
ss = st.session_state
for k, v in fid.DEFAULTS.items():
    if k != "w_fid_persona":
        ss.setdefault(k, v)
ss.setdefault("fid_persona", pd.DataFrame(fid.DEFAULTS["w_fid_persona"]))
ss.setdefault("fid_persona_version", 0)
verdict = widgets.page_intro(
    "Simulator fidelity: does the simulator answer surveys like the people it plays?",
    "An LLM answers survey questions <b>as</b> respondents of a group; "
    "how far are its answers from real people's — not on average, but across <b>all</b> "
    "questions, the worst included? For each question, the worst discrepancy the real answers "
    "allow (over a confidence set) is computed; the <b>calibrated curve</b> V̂_cal(τ) then bounds "
    "the discrepancy of a τ share of questions, with a finite-sample guarantee for new questions "
    "like these. Lower is better; the dashed curve is a simulator that answers uniformly at "
    "random.",
)


def upload(label: str, key: str, missing: str, *, help: str, read=lambda d: d):
    """A long-CSV uploader: (``read`` of the data, None, the file), or (None, why not —
    ``missing`` when no file is given —, the file)."""
    up = st.file_uploader(label, type=["csv"], key=key, help=help)
    if up is None:
        return None, missing, None
    try:
        return read(fid.read_upload(up.getvalue(), up.name)), None, up
    except FidelityDataError as exc:
        return None, str(exc), up


data, fingerprint, data_error, sim, own_questions = None, None, None, None, None
left, right = st.columns([3, 2], gap="large")
with left:
    st.markdown("**Data**")
    source = st.radio("Data", fid.SOURCES, key="w_fid_source", horizontal=True, label_visibility="collapsed")
    if source == "Sample data":
        data, fingerprint = fid.sample_data(), "sample"
        st.caption(
            "40 synthetic questions made by the project (no real survey data): real "
            "counts and three simulated respondents with known flaws — sim-close, "
            "sim-biased (leans to the last options) and sim-flat (half uniform)."
        )
    elif source == "Upload a CSV":
        data, data_error, up = upload(
            "Long CSV: scenario,option,real,<simulator>,… (or scenario,real,… for real-valued answers)",
            "fid_upload",
            "Upload a CSV, or use the sample data.",
            help="real: counts of real answers. A simulator column holds counts, or "
            "probabilities when its values sum to 1 in every question. Optional: a question "
            "column (needed to simulate).",
        )
        if data is not None:
            fingerprint = hashlib.sha256(up.getvalue()).hexdigest()
            st.caption(
                f"{data.m} questions and {len(data.simulators)} simulator column(s) read from {up.name}."
            )
    else:
        st.radio(
            "Questions",
            fid.QUESTION_SOURCES,
            key="w_fid_qsource",
            horizontal=True,
            help="Your CSV needs a question column (its real counts are what the "
            "simulated answers are compared with).",
        )
        if ss["w_fid_qsource"] == fid.QUESTION_SOURCES[0]:
            st.caption(
                "Ask models to answer the sample's questions as a respondent described "
                "by the fields below (their real answers are synthetic: use your own "
                "survey for real conclusions)."
            )
        else:
            own_questions, data_error, up = upload(
                "Long CSV with a question column: scenario,option,real,question",
                "fid_sim_upload",
                "Upload a CSV with a question column, or ask the sample's questions.",
                read=fid.questions_of,
                help="The first non-empty question cell of each scenario is asked; simulator "
                "columns in the file are left out.",
            )
            if own_questions is not None:
                st.caption(f"{own_questions.m} questions read from {up.name}.")
with right:
    st.markdown("**Analysis**")
    losses = fid.losses_for(data) if data is not None else list(fid.LOSS_TEXT)
    if ss["w_fid_loss"] not in losses:
        ss["w_fid_loss"] = losses[0]
    st.selectbox(
        "Loss",
        losses,
        key="w_fid_loss",
        format_func=fid.LOSS_TEXT.get,
        help="tv: half the sum of the differences of the option shares (0 to 1). "
        "w1: how far answers move on the options' scale. squared/absolute: error of the "
        "mean answer.",
    )
    c1, c2, c3 = st.columns(3)
    c1.number_input(
        "γ coverage",
        0.05,
        0.95,
        key="w_fid_gamma",
        step=0.05,
        help="Each question's confidence set holds the real distribution with "
        "probability γ (½ in the paper; the band needs γ ≥ ½).",
    )
    c2.number_input(
        "η",
        0.001,
        0.5,
        key="w_fid_eta",
        step=0.01,
        format="%.3f",
        help="The guarantee fails with probability at most η.",
    )
    c3.number_input(
        "α",
        0.01,
        0.5,
        key="w_fid_alpha",
        step=0.01,
        help="Guarantee and comparisons for at least 1 − α of questions.",
    )
    st.selectbox(
        "Uniform baseline",
        list(fid.BASELINE_TEXT),
        key="w_fid_baseline",
        format_func=fid.BASELINE_TEXT.get,
        help="Drawn: the uniform simulator answers k times per question at random, "
        "as many as the simulators drew (seeded by the sidebar's seed), so it carries "
        "the same sampling noise — a fair comparison. Exact: 1/d per option.",
    )
    if data is not None and data.kind == "values":
        c1, c2 = st.columns(2)
        if ss["w_fid_loss"] == "w1":
            c1.text_input(
                "σ (w1)",
                key="w_fid_sigma",
                placeholder="pooled SD of the data",
                help="Sub-Gaussian scale of the real values; empty: their pooled "
                "standard deviation (as `dbpa fidelity`).",
            )
        c2.text_input(
            "Bounds a, b",
            key="w_fid_bounds",
            placeholder="the data's range",
            help="The range of the values (squared, absolute, and the uniform simulator).",
        )

if source == "Simulate now":
    st.markdown("**Simulate respondents**")
    own = ss["w_fid_qsource"] != fid.QUESTION_SOURCES[0]
    cols = st.columns(4)
    if not own:  # the file's questions are all asked
        cols.pop(0).number_input("Questions", 2, 40, key="w_fid_questions", help="The sample's first ones.")
    c2, c3, c4 = cols[:3]
    c2.number_input("Answers per question (k)", 1, 500, key="w_fid_k")
    c3.number_input("Temperature", 0.0, 2.0, key="w_fid_temperature", step=0.1)
    c4.number_input("Max tokens", 1, 400, key="w_fid_max_tokens")
    models = runner.model_options()
    chosen = widgets.pick_models("Models (one simulator each)", "w_fid_models", list(models), default_count=1)
    table = ss["fid_persona"]
    edited = st.data_editor(
        table,
        key=f"fid_persona_{ss['fid_persona_version']}",
        num_rows="dynamic",
        hide_index=True,
        height=widgets.table_height(len(table) + 1),
    )
    if not edited.equals(table):
        ss["fid_persona"] = edited.reset_index(drop=True)
        ss["fid_persona_version"] += 1
    with st.expander("Prompt template"):
        st.text_area(
            "Template: {question}, {options}, {persona} or a field such as {Age}",
            key="w_fid_template",
            height=170,
        )
    values = {k: ss[k] for k in fid.DEFAULTS if k != "w_fid_persona"}
    values.update(w_fid_persona=ss["fid_persona"], seed=ss.get("w_seed", 0))
    questions = own_questions if own else fid.sample_questions(int(ss["w_fid_questions"]))
    tasks, signature = None, None
    try:
        if questions is None:  # said once, here, beside the button it keeps off
            msg, data_error = data_error or "Upload a CSV with a question column.", None
            raise ValueError(md_escape(msg))
        settings = fid.simulation_settings(values)
        picked = [models[m] for m in chosen]
        if not picked:
            raise ValueError("Choose at least one model.")
        fid.check_simulation(questions, picked, settings)  # a bad template stops here
        with st.expander("The first prompt"):
            st.code(fid.first_prompt(questions, settings), language=None)
        if lacking := fid.replay_shortfall(questions, picked, settings, list(models.values())):
            raise ValueError(lacking)
        tasks = {
            "simulation": fid.simulation_task(questions, picked, settings, state.cache(), ss["api_keys"])
        }
        signature = fid.simulation_signature(questions, picked, settings)
    except Exception as exc:  # noqa: BLE001 - shown as one short message
        st.error(
            runner.friendly(exc) if not isinstance(exc, ValueError) else str(exc), icon=":material/edit_note:"
        )

    def show_estimate() -> None:  # also redrawn after a run: counted anew from the cache
        e = fid.estimate(questions, picked, settings, state.cache())
        st.caption(f"{e['answers']:,} answers to ask ({e['cached']:,} already cached, {e['calls']:,} calls).")

    results = runner.task_section(
        tasks, key=f"{KEY}_sim", label="Simulate answers", before=show_estimate, signature=signature
    )
    sim = (results or {}).get("simulation")
    if sim is not None:
        st.dataframe(fid.unparsed_summary(sim), hide_index=True, key=f"{KEY}_unparsed_sum")
        if sim.data is None:
            data_error = sim.error
        else:
            made_with = ss["results_meta"].get(f"{KEY}_sim", {}).get("signature")
            data, fingerprint = sim.data, f"sim:{made_with}"  # the inputs it was made from
    elif (
        data_error is None
        and tasks is not None
        and not ss["results_meta"].get(f"{KEY}_sim", {}).get("failed")
    ):
        st.info("Press **Simulate answers** to draw the simulated respondents.", icon=":material/play_arrow:")

result = None
if data_error:
    st.error(md_escape(data_error), icon=":material/upload_file:")
elif data is not None:
    try:
        settings = {
            "loss": ss["w_fid_loss"],
            "gamma": float(ss["w_fid_gamma"]),
            "eta": float(ss["w_fid_eta"]),
            "alpha": float(ss["w_fid_alpha"]),
            "baseline": ss["w_fid_baseline"],
            "seed": int(ss.get("w_seed", 0)),
        }
        if data.kind == "values":
            settings["bounds"] = fid.parse_bounds(ss["w_fid_bounds"])
            if settings["loss"] == "w1":
                settings["sigma"] = fid.parse_sigma(ss["w_fid_sigma"])
        key = fid.analysis_key(fingerprint, settings)
        memo = ss.get("_fid_memo")
        bar = st.empty()  # drawn on every rerun: the tabs below keep their place (and tab)
        if memo and memo[0] == key:
            result = memo[1]
        else:
            result = fid.analyse(
                data,
                settings,
                progress=lambda p: bar.progress(
                    p.done / max(p.total, 1), text=f"Computing the curves: {p.detail}"
                ),
            )
            bar.empty()
            ss["_fid_memo"] = (key, result)
    except Exception as exc:  # noqa: BLE001 - bad input is one short message
        st.error(
            md_escape(str(exc)) if isinstance(exc, (ValueError, TypeError)) else runner.friendly(exc),
            icon=":material/error:",
        )

widgets.say_verdict(
    verdict,
    fid.best_sentence(result) if result is not None else None,
    waiting="No verdict yet: load the survey answers of real people and of the simulator "
    "above (or press **Simulate answers**).",
)
if result is not None:
    st.divider()
    st.subheader("Results")
    st.markdown(f"**{md_escape(fid.best_sentence(result))}**")
    decided = [v for v in fid.verdicts(result) if v[0] != "neither"]
    for _v, sentence, detail, guaranteed in decided:
        if guaranteed:
            st.success(md_escape(sentence), icon=":material/check_circle:")
        else:  # true of these questions only: no success style
            st.info(md_escape(sentence), icon=":material/description:")
        st.caption(detail)
    undecided = fid.undecided_sentence(result)
    if undecided:
        st.info(md_escape(undecided), icon=":material/balance:")
    if result.comparison_note:
        st.caption(result.comparison_note)
    for w in result.warnings:
        st.warning(md_escape(w), icon=":material/info:")
    band = None
    if result.has_band:
        names = [s.name for s in result.simulators]
        band = st.selectbox(
            "Tightness band of",
            [*names, "none"],
            key=f"{KEY}_band",
            help="Shaded: where the curve of the real discrepancies lies "
            "(V̂⁻_m(γτ) below, V̂_m(γ + (1 − γ)τ) above).",
        )
    st.plotly_chart(figs.curves_figure(result, band=None if band == "none" else band), key=f"{KEY}_curves")
    st.caption(
        md_escape(fid.curve_caption(result, band not in (None, "none")) + " " + result.baseline_text())
    )
    st.dataframe(
        fid.summary_table(result),
        hide_index=True,
        key=f"{KEY}_summary",
        column_config={
            c: st.column_config.NumberColumn(format="%.4f")
            for c in fid.summary_table(result).columns
            if c not in ("simulator", "answers", "k per question", "worst case")
        },
    )
    tabs = st.tabs(
        ["Per question", "Plan: questions needed"] + (["Simulated answers"] if sim is not None else [])
    )
    with tabs[1]:
        st.markdown(md_escape(result.plan().sentence()))
        if result.comparisons:
            st.plotly_chart(figs.plan_figure(result), key=f"{KEY}_plan")
            ptable = fid.plan_table(result)
            st.dataframe(
                ptable,
                hide_index=True,
                key=f"{KEY}_plan_table",
                column_config={
                    c: st.column_config.NumberColumn(format="percent")
                    for c in ptable.columns
                    if c.startswith("m = ")
                },
            )
            st.caption(
                "Chance decided: resampling the loaded questions, the share of studies "
                "with m questions in which the verdict holds at this α (≥ 80 % counts as "
                "reachable). The plug-in share compares the losses at the estimates "
                "only: a description with no guarantee."
            )
    with tabs[0]:
        labels = fid.question_labels(result)
        pick = st.selectbox(
            "Question", range(len(labels)), format_func=labels.__getitem__, key=f"{KEY}_question"
        )
        st.plotly_chart(figs.distribution_figure(result, pick), key=f"{KEY}_dist")
        qtable = fid.question_table(result, pick)
        st.dataframe(
            qtable,
            hide_index=True,
            key=f"{KEY}_qtable",
            column_config={
                c: st.column_config.NumberColumn(format="%.4f")
                for c in qtable.columns
                if c not in ("simulator", "answers")
            },
        )
    if sim is not None:
        with tabs[2]:
            only = st.checkbox("Only unparsed answers", value=True, key=f"{KEY}_only_unparsed")
            st.dataframe(fid.unparsed_table(sim, only_unparsed=only), hide_index=True, key=f"{KEY}_answers")
    run_name = (ss.get("w_audit_name") or "").strip()
    stem = fid.file_stem(run_name or "fidelity", result.created_at)
    title = f"Simulator fidelity: {run_name}" if run_name else "Simulator fidelity"
    files = [
        ("Results JSON", result.to_json, "fidelity.json", "application/json", ":material/data_object:"),
        ("Questions CSV", result.to_csv, "fidelity.csv", "text/csv", ":material/table:"),
        ("Pairs CSV", result.comparisons_csv, "comparisons.csv", "text/csv", ":material/compare_arrows:"),
        (
            "Report HTML",
            lambda: figs.html_report(result, title=title),
            "report.html",
            "text/html",
            ":material/description:",
        ),
    ]
    if sim is not None and sim.data is not None:
        files += [
            ("Data CSV", sim.data.to_csv, "data.csv", "text/csv", ":material/dataset:"),
            ("Answers JSONL", sim.answers_jsonl, "answers.jsonl", "application/jsonl", ":material/chat:"),
        ]
    cols = st.columns(len(files))
    for col, (label, make, suffix, mime, icon) in zip(cols, files, strict=True):
        col.download_button(
            label, make, f"{stem}-{suffix}", mime, key=f"{KEY}_dl_{suffix}", icon=icon, on_click="ignore"
        )
    st.caption("The chart also downloads as PNG from the camera icon in its toolbar.")
