"""Widgets shared by several pages."""
from __future__ import annotations

import html

import pandas as pd
import streamlit as st

from dbpa_core.audit import AuditResult
from dbpa_core.measures import DEFAULT_MEASURE, MEASURES, NULLS
from dbpa_core.multitest import METHODS

from . import export, state
from .nav import PAGES, ROOT


def page_setup() -> None:
    """First thing on every page: page config, style, session defaults, widget
    persistence, navigation and settings in the sidebar.

    Done by the page (not by app.py) so that a page is the same when Streamlit runs
    it on its own: when its URL is opened directly (a ``pages/`` folder makes
    Streamlit serve each file), and in AppTest after ``switch_page``.
    """
    st.set_page_config(page_title="dbpa — LLM robustness audits", page_icon="📊",
                       layout="wide")
    st.html(f"<style>{(ROOT / 'assets' / 'style.css').read_text()}</style>")
    st.logo(str(ROOT / "assets" / "logo.svg"), size="large")
    state.init()
    state.keep_widget_state()
    navigation_links()
    settings_sidebar()


def navigation_links() -> None:
    with st.sidebar:
        section = None
        for sec, file, title, icon, _url in PAGES:
            if sec != section:
                st.caption(sec)
                section = sec
            st.page_link(str(ROOT / file), label=title, icon=icon)


def base_prompt_input() -> str:
    """The base prompt, shared by the audit pages (one widget definition, so its
    identity - and value - is the same on every page)."""
    return st.text_area("Base prompt", key="w_base_prompt", height=110)


def pick_models(label: str, key: str, options: list[str], *, default_count: int,
                help: str | None = None) -> list[str]:
    """A multiselect of configured models whose remembered choice survives models
    being added or removed in Settings (unknown names are dropped)."""
    ss = st.session_state
    kept = [m for m in ss.get(key, []) if m in options]
    ss[key] = kept if (kept or key in ss) else options[:default_count]
    return st.multiselect(label, options, key=key, help=help)


def pick_model(label: str, key: str, options: list[str], *, help: str | None = None) -> str:
    """A selectbox of configured models that tolerates the remembered one being removed."""
    if st.session_state.get(key) not in options:
        st.session_state[key] = options[0]
    return st.selectbox(label, options, key=key, help=help)


def settings_sidebar() -> None:
    """Audit settings (k, B, measure, correction, α, sampling) in the sidebar."""
    with st.sidebar:
        st.markdown("### Test settings")
        st.number_input("Samples per prompt (k)", min_value=2, max_value=500, step=5,
                        key="w_samples", help="More samples: more power, more calls.")
        st.number_input("Permutations (B)", min_value=100, max_value=100_000, step=1000,
                        key="w_permutations", help="The p-value's resolution is 1/(B+1).")
        st.selectbox("Effect size ω", list(MEASURES), key="w_measure",
                     help=f"{DEFAULT_MEASURE} (default): energy distance between the response "
                     "embeddings, the most powerful calibrated measure on recorded responses. "
                     "jsd: the papers' Jensen–Shannon distance of the similarity histograms.")
        st.selectbox("Null: P0 from", list(NULLS), key="w_null",
                     format_func=lambda v: {"base": "base answers (papers')",
                                            "pooled": "both groups (symmetric)"}[v],
                     help="For jsd, wasserstein and ks, P0 (the model's own noise) comes from "
                     "the base answers only, so swapping base and perturbed changes the result. "
                     "'both groups' uses the within-group similarities of both: use it when "
                     "neither side is the reference (e.g. two models). Energy measures are "
                     "symmetric either way.")
        st.number_input("Minimum effect of interest δ", min_value=0.0, max_value=10.0,
                        step=0.01, format="%.3f", key="w_min_effect",
                        help="Optional (0 = none). Results then say separately whether a change "
                        "is detectable (p) and whether its effect above chance exceeds δ, in "
                        "units of the chosen ω. With many samples nearly every change is "
                        "detectable; δ says which ones matter.")
        st.selectbox("Multiple-testing correction", list(METHODS), key="w_correction",
                     help="holm controls the family-wise error; bh the false discovery rate.")
        st.slider("Significance level α", 0.001, 0.2, key="w_alpha", step=0.001, format="%.3f")
        with st.expander("Sampling"):
            st.slider("Temperature", 0.0, 2.0, key="w_temperature", step=0.05)
            st.number_input("Max tokens per response", 8, 4000, key="w_max_tokens", step=20)
            st.number_input("Seed", 0, 2**31 - 1, key="w_seed")
            st.selectbox("Similarity", ["local", "bleu", "rouge1", "rouge2", "rougeL"],
                         key="w_embedder",
                         help="local: MiniLM embeddings (cosine); BLEU/ROUGE compare texts.")


def results_table(result: AuditResult) -> pd.DataFrame:
    rows = []
    delta = result.spec.min_effect
    for p in result.perturbations:
        row = {"perturbation": p.name, "role": p.role or "", "model": p.model,
               "ω above chance": round(p.effect_above_chance, 4),
               "ω": round(p.effect_size, 4), "chance ω": round(p.chance_effect_size, 4),
               "p": p.p_value, "p (adjusted)": p.p_adjusted, "": p.stars,
               "detectable": p.significant}
        if delta is not None:
            row[f"> δ = {delta:g}"] = bool(p.exceeds_min_effect)
        rows.append(row)
    return pd.DataFrame(rows)


def summary_sentence(result: AuditResult) -> str:
    """One plain sentence: which perturbations (or models) changed the answers."""
    sig = [p.name for p in result.perturbations if p.significant]
    n = len(result.perturbations)
    spec = result.spec
    corr = "" if spec.correction == "none" else f", {spec.correction}-adjusted"
    level = f"(α = {spec.alpha}{corr})"
    models = result.mode == "models"
    if n == 1:
        p = result.perturbations[0]
        does, does_not = (("differs from the reference", "does not differ from the reference")
                          if models else ("changes the answers", "does not change the answers"))
        if p.significant:
            return f"{p.name} {does} significantly {level}."
        return (f"{p.name} {does_not} significantly {level}. This does not prove it has no "
                "effect: more samples may show one.")
    what = "models differ from the reference" if models else "perturbations change the answers"
    if not sig:
        return (f"None of the {n} {what} significantly {level}. This does not prove they have "
                "no effect: more samples may show one.")
    return f"{len(sig)} of {n} {what} significantly {level}: " + ", ".join(sig) + "."


def show_results_table(result: AuditResult, *, key: str) -> None:
    st.markdown(f"**{html.escape(summary_sentence(result))}**")
    df = results_table(result)
    spec = result.spec
    st.dataframe(df, hide_index=True, key=f"{key}_table", column_config={
        "p": st.column_config.NumberColumn(format="%.4f"),
        "p (adjusted)": st.column_config.NumberColumn(format="%.4f"),
        "ω above chance": st.column_config.NumberColumn(
            format="%+.3f", help="how much more the answers moved than chance alone moves "
            "them at this k: about 0 when nothing changed"),
        "ω": st.column_config.NumberColumn(format="%.3f", help="effect size, raw"),
        "chance ω": st.column_config.NumberColumn(
            format="%.3f", help="the ω chance alone gives at this k (mean over permutations)"),
        "detectable": st.column_config.CheckboxColumn(
            help="significant after the correction (adjusted p <= α)"),
    })
    notes = ("" if spec.min_effect is None else
             f" '> δ': the effect above chance exceeds δ = {spec.min_effect:g}, a question "
             "separate from whether it is detectable.")
    if result.mode == "models" and spec.null == "base" and not MEASURES[spec.measure].symmetric:
        notes += (" With this ω, P0 comes from the reference model's answers only, so the "
                  "comparison is asymmetric (swapping the two models changes ω and p); choose "
                  "'Null: P0 from both groups' in the sidebar for a symmetric one.")
    st.caption(f"k = {spec.samples} responses per prompt, B = {spec.permutations} permutations, "
               f"ω = {spec.measure}, correction = {spec.correction}, α = {spec.alpha}. "
               "Stars on the adjusted p: * < .05, ** < .01, *** < .001. A small p means the "
               "perturbed answers differ from the base answers by more than the model's own "
               "randomness explains; a large p means this sample could not show a change. "
               "ω has no fixed zero: read 'ω above chance', about 0 when nothing changed."
               + notes)


def response_viewer(result: AuditResult, *, key: str, only: list[str] | None = None) -> None:
    """Base and perturbed answers side by side, as plain text."""
    names = [a.arm.name for a in result.arms if only is None or a.arm.name in only]
    if not names:
        return
    c1, c2 = st.columns([3, 1])
    chosen = c1.selectbox("Compare the base answers with", names, key=f"{key}_viewer_arm")
    k = len(result.base.texts)
    idx = c2.number_input("Response #", 1, k, 1, key=f"{key}_viewer_idx") - 1
    arm = next(a for a in result.arms if a.arm.name == chosen)
    left, right = st.columns(2)
    with left:
        st.markdown(f"**{html.escape(result.base.arm.name)}**")
        st.text(result.base.texts[idx])
    with right:
        st.markdown(f"**{html.escape(chosen)}**")
        st.text(arm.texts[idx])


def downloads(result: AuditResult, figures: dict, *, key: str, title: str) -> None:
    """CSV, JSON, JSONL and a self-contained HTML report with the charts."""
    c = st.columns(4)
    name = result.spec.name or "audit"
    c[0].download_button("Results (CSV)", result.to_csv(), f"{name}-results.csv", "text/csv",
                         key=f"{key}_dl_csv", icon=":material/table:")
    c[1].download_button("Results (JSON)", result.to_json(arrays=True), f"{name}-results.json",
                         "application/json", key=f"{key}_dl_json", icon=":material/data_object:")
    c[2].download_button("Responses (JSONL)", result.responses_jsonl(), f"{name}-responses.jsonl",
                         "application/jsonl", key=f"{key}_dl_jsonl", icon=":material/chat:")
    c[3].download_button("Report (HTML)", export.html_report(title, [result], figures),
                         f"{name}-report.html", "text/html", key=f"{key}_dl_html",
                         icon=":material/description:")
    st.caption("Each chart also downloads as PNG from the camera icon in its toolbar.")
