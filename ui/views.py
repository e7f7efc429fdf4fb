"""What each audit page draws for its results, shared with the History page (which reopens
a recorded run with the same charts). Verdicts come first and agree with the tables beneath
them; every name a user typed or a model produced is escaped."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd
import streamlit as st

from dbpa_core.audit import AuditResult
from dbpa_core.roc import best_model_at_fpr

from . import checks_view, figures, grid, presets, runner, verdicts, widgets
from .export import RunMeta
from .why import why_view
from .widgets import md_escape

TABS = ["Similarity histograms", "Permutation test", "Embedding map", "Responses", "Why", "Answers"]


def results_container(key: str):
    """A container for a page's results, dimmed while they are outdated (style.css)."""
    state = "outdated" if runner.is_outdated(key) else "current"
    return st.container(key=f"{key}_results_{state}")


def control_gate(results: Mapping[str, AuditResult], *, key: str) -> bool | None:
    """The dashboard's ``--fail-on-control``: a red verdict naming every control that
    changed the answers detectably, and a pass/fail line per model. Returns whether
    every model passed (None when nothing is marked control, or when no control could
    have failed: too few samples)."""
    gs = verdicts.gates(results)
    if not any(g.controls for g in gs):
        return None
    failure = verdicts.control_failure_sentence(results)
    untestable = verdicts.control_untestable_sentence(results)
    if failure:
        st.error(md_escape(failure), icon=":material/gpp_bad:")
    elif untestable:  # never "passed" when no control could have failed
        st.warning(md_escape(untestable), icon=":material/help:")
    else:
        first = next(iter(results.values()))
        st.success(
            f"Control gate passed: no perturbation marked control changed the answers "
            f"detectably {md_escape(verdicts.level(first))}.",
            icon=":material/verified_user:",
        )
    rows = [
        {
            "model": g.model,
            "control gate": g.status,
            "controls changed": f"{len(g.failed)} of {len(g.controls)}"
            + (": " + ", ".join(g.failed) if g.failed else ""),
            "targets detected": f"{len(g.detected)} of {len(g.targets)}",
        }
        for g in gs
    ]
    st.dataframe(
        pd.DataFrame(rows).style.map(_status_colour, subset=["control gate"]),
        hide_index=True,
        key=f"{key}_gate",
    )
    each = pd.DataFrame(
        [
            {
                "model": m,
                "perturbation": p.name,
                "role": p.role,
                "outcome": verdicts.outcome(p, g),
                "p (adjusted)": p.p_adjusted,
                "size (d)": widgets.size_cell(p),
            }
            for g, (m, r) in zip(gs, results.items(), strict=True)
            for p in r.perturbations
            if p.role in ("control", "target")
        ]
    )
    if len(results) == 1:
        each = each.drop(columns="model")
    st.dataframe(
        widgets.styled(each).map(_status_colour, subset=["outcome"]), hide_index=True, key=f"{key}_gate_each"
    )
    st.caption(
        "Gate per model: FAIL when any control changed the answers detectably "
        "(adjusted p ≤ α), as `dbpa audit --fail-on-control` exits 1. Each control "
        "passes (green) when its answers are not told apart from the base's, and "
        "fails (red) when they are; a target is detected (green) when they are. A control "
        "is not testable (amber) when k is too small for any result to be significant "
        "after the correction: it could not have failed, so it has not passed. "
        f"'{presets.SAME_PROMPT}' asks the base prompt again, with answers of its own: "
        "it shows what a passing control looks like, and fails only by chance (at "
        "rate α)."
    )
    return None if untestable and not failure else not failure


STATUS_COLOURS = {
    "NOT TESTABLE": ("#FFF4DB", "#7A5200"),
    "PASS": ("#DCF5E3", "#0B5C2C"),
    "passes": ("#DCF5E3", "#0B5C2C"),
    "detected": ("#DCF5E3", "#0B5C2C"),
    "FAIL": ("#FDE2E1", "#8A1C12"),
    "fails: changed": ("#FDE2E1", "#8A1C12"),
    "not detected": ("#FFF4DB", "#7A5200"),
}


def _status_colour(value) -> str:
    """Green for a pass or a detected target, red for a failed gate or control, amber for
    a target not detected or a control that could not have failed."""
    text = str(value)
    bg, fg = STATUS_COLOURS.get("NOT TESTABLE" if text.startswith("not testable") else text, ("", ""))
    return f"background-color: {bg}; color: {fg}; font-weight: 600" if bg else ""


def with_current_delta(key: str, results: Mapping | None):
    """The page's results read against the δ now set (sidebar or verdict line): δ changes
    no sample, ω or p, so the stored results are re-read, not rerun (and stay the same
    objects until δ changes again)."""
    if not results:
        return results
    delta = float(st.session_state.get("w_min_effect") or 0.0) or None
    out = {
        job: verdicts.with_min_effect(r, delta) if isinstance(r, AuditResult) else r
        for job, r in results.items()
    }
    if any(out[j] is not results[j] for j in out):
        stored = st.session_state.get("results", {})
        if stored.get(key) is results:
            stored[key] = out
    return out


# --------------------------------------------------------------------------- one audit
def perturbation_view(
    result: AuditResult, *, key: str, meta: RunMeta, title: str = "Perturbation test", job: str | None = None
) -> None:
    """The landing page's results: verdict, gate, table, histograms, permutation test,
    embedding map, responses, downloads."""
    with results_container(key):
        st.subheader("Results")
        control_gate({job or result.base.arm.model_label: result}, key=key)
        widgets.show_results_table(result, key=key)
        checks_view.checks_section(result, key=key)
        tabs = st.tabs(TABS, key=f"{key}_tabs", on_change="rerun")
        with tabs[0]:
            if tabs[0].open is not False:
                st.caption(
                    "Blue: how similar the base answers are to each other (the model's "
                    "own noise, P0). Orange: how similar base answers are to perturbed "
                    "ones (P1). The further orange sits left of blue, the more the "
                    "perturbation changed the answers. Titles give the adjusted p."
                )
                st.plotly_chart(figures.similarity_histograms(result), key=f"{key}_hist")
        with tabs[1]:
            if tabs[1].open is not False:
                names = [p.name for p in result.perturbations]
                chosen = st.selectbox("Perturbation", names, key=f"{key}_perm_pick")
                pert = next(p for p in result.perturbations if p.name == chosen)
                st.caption(
                    "Grey: ω for random re-labellings of the pooled answers (what chance "
                    "gives; dotted: their mean). Red: the observed ω. The raw p is the "
                    "share of grey at or beyond red (never below 1/(B+1)); the adjusted "
                    "p corrects it for the number of perturbations tested."
                )
                st.plotly_chart(figures.permutation_figure(pert), key=f"{key}_perm")
        with tabs[2]:
            if tabs[2].open is not False:
                st.caption(
                    "Each dot is one response, placed by its embedding (two principal "
                    "components). Clouds apart from the base (diamonds) mean changed "
                    "answers."
                )
                emb = figures.embedding_map(result)
                if emb is not None:
                    st.plotly_chart(emb, key=f"{key}_pca")
                else:
                    st.info("No embeddings with BLEU/ROUGE similarity.")
        with tabs[3]:
            if tabs[3].open is not False:
                widgets.response_viewer(result, key=key)
        with tabs[4]:
            if tabs[4].open is not False:
                why_view(result, key=f"{key}_why")
        with tabs[5]:
            if tabs[5].open is not False:
                grid.answers_grid({job or "": result}, key=key)
        widgets.downloads(
            result,
            lambda: {
                "Similarity histograms": figures.similarity_histograms(result),
                "Permutation tests": figures.permutation_grid(result),
                "Embedding map": figures.embedding_map(result),
            },
            key=key,
            title=title,
            meta=meta,
            job=job,
        )


def model_comparison_view(
    result: AuditResult, *, key: str, meta: RunMeta, title: str = "Model comparison"
) -> None:
    with results_container(key):
        bar = figures.model_distance_figure(result)
        widgets.verdict_line(widgets.summary_sentence(result), key=key)
        st.plotly_chart(bar, key=f"{key}_bar")
        st.caption(
            "Bars: ω above chance (ω minus what chance alone gives at this k). Orange: "
            "detectably different from the reference after correction; grey (n.s.): "
            "not shown to differ with this k. The test takes the reference's answers as "
            "the null, so swapping reference and model can change p."
        )
        widgets.show_results_table(result, key=key, sentence=False)
        checks_view.checks_section(result, key=key)
        st.plotly_chart(figures.similarity_histograms(result), key=f"{key}_hist")
        widgets.response_viewer(result, key=key)
        why_view(result, key=f"{key}_why")
        grid.answers_tab({"model comparison": result}, key=key)
        widgets.downloads(
            result,
            lambda: {
                "Distance from the reference": figures.model_distance_figure(result),
                "Histograms": figures.similarity_histograms(result),
                "Permutation tests": figures.permutation_grid(result),
            },
            key=key,
            title=title,
            meta=meta,
            job="model comparison",
        )


# --------------------------------------------------------------------------- several models
def _pick_clicked_cell(key: str, personas: list[str], models: list[str]) -> None:
    """Apply a new click on the heat map (read from its state before it is drawn, so the
    outline follows the click at once); the selection stays in the chart, so a click is
    applied once and the selectboxes rule after that."""
    ss = st.session_state
    event = ss.get(f"{key}_heat")
    points = (event or {}).get("selection", {}).get("points", []) if event else []
    if not points:
        return
    try:
        i, j = round(float(points[0].get("y"))), round(float(points[0].get("x")))
    except (TypeError, ValueError):
        return
    if not (0 <= i < len(personas) and 0 <= j < len(models)):
        return
    click = (personas[i], models[j])
    if click != ss.get(f"_{key}_last_click"):
        ss[f"_{key}_last_click"] = click
        ss[f"{key}_cell_p"], ss[f"{key}_cell_m"] = click


def persona_view(
    results: Mapping[str, AuditResult], *, key: str, meta: RunMeta, title: str = "Persona explorer"
) -> None:
    personas, models, _cells = figures.persona_grid(results)
    with results_container(key):
        if len(results) == 1:
            widgets.verdict_line(widgets.summary_sentence(next(iter(results.values()))), key=key)
        else:
            for m, r in results.items():
                st.markdown(f"**{md_escape(m)}:** {md_escape(widgets.summary_sentence(r))}")
            if key in st.session_state.get("results", {}):  # an audit page, not History
                widgets.delta_setter(key)
        _persona_cells(results, personas, models, key=key)
        _persona_tables(results, key=key, meta=meta, title=title)
        checks_view.checks_section(results, key=key)
        grid.answers_tab(results, key=key)


def memo_figure(kind: str, ident: tuple, build):
    """A figure built once per session for ``ident`` (ids of results, names, the selected
    cell): building a Plotly figure (its validation) is most of the time a click takes,
    and going back to a cell should cost nothing."""
    memo = st.session_state.setdefault("_figure_memo", {})
    k = (kind, *ident)
    if k not in memo:
        if len(memo) > 64:
            memo.clear()
        memo[k] = build()
    return memo[k]


@st.fragment
def _persona_cells(
    results: Mapping[str, AuditResult], personas: list[str], models: list[str], *, key: str
) -> None:
    """The heat map and the opened cell, as a fragment: a click on a cell (or a change of
    the cell's persona or model) reruns only this, not the page above it (its estimate,
    form and tables), so the cell opens at once."""
    ss = st.session_state
    _pick_clicked_cell(key, personas, models)
    if ss.get(f"{key}_cell_p") not in personas:
        ss[f"{key}_cell_p"] = personas[0]
    if ss.get(f"{key}_cell_m") not in models:
        ss[f"{key}_cell_m"] = models[0]
    selected = (ss[f"{key}_cell_p"], ss[f"{key}_cell_m"])
    ident = tuple(id(r) for r in results.values())
    heat = memo_figure(
        "heat", (*ident, selected), lambda: figures.persona_heatmap(results, selected=selected)
    )
    st.plotly_chart(heat, key=f"{key}_heat", on_select="rerun", selection_mode="points")
    st.caption(
        "Colour and number: ω above chance (how much more the answers moved than "
        "chance alone moves them at this k), only where the change is detectable "
        "after correction; grey cells (n.s.) are not shown to differ, whatever "
        "their number. Read across a row to see whether a persona moves every "
        "model, down a column to see which personas a model is sensitive to."
    )
    c1, c2 = st.columns(2)
    cell_p = c1.selectbox("Open a cell: persona", personas, key=f"{key}_cell_p")
    cell_m = c2.selectbox("… on model", models, key=f"{key}_cell_m")
    res = results[cell_m]
    if any(p.name == cell_p for p in res.perturbations):
        st.plotly_chart(
            memo_figure(
                "hist",
                (id(res), cell_p),
                lambda: figures.similarity_histograms(res, columns=1, only=[cell_p]),
            ),
            key=f"{key}_cell_hist",
        )
        widgets.response_viewer(res, key=f"{key}_cell", only=[cell_p])
        why_view(res, key=f"{key}_why", only=cell_p)
    else:
        st.info(f"{md_escape(cell_p)} was not tested on {md_escape(cell_m)}.")


def _persona_tables(results: Mapping[str, AuditResult], *, key: str, meta: RunMeta, title: str) -> None:
    for m, r in results.items():
        with st.expander(f"Table and downloads: {md_escape(m)}"):
            widgets.show_results_table(r, key=f"{key}_{m}")
            widgets.downloads(
                r,
                lambda r=r: {
                    "Persona heat map": figures.persona_heatmap(results),
                    "Permutation tests": figures.permutation_grid(r),
                },
                key=f"{key}_{m}",
                title=f"{title} — {m}",
                meta=meta,
                job=m,
            )


def control_target_view(
    results: Mapping[str, AuditResult],
    *,
    key: str,
    meta: RunMeta,
    fpr_key: str = "w_roc_fpr",
    title: str = "Control vs target",
) -> None:
    """Controls first: a red verdict naming every significant control, a gate per model;
    then ROC over α and the best model at an allowed FPR."""
    rocs = {m: r.roc for m, r in results.items() if r.roc is not None}
    with results_container(key):
        passed = control_gate(results, key=key)
        if not rocs:
            st.info("No ROC: mark at least one perturbation as control and one as target.")
            return
        st.session_state.setdefault(fpr_key, 0.05)
        max_fpr = st.select_slider(
            "Allowed false-positive rate",
            options=[0.01, 0.05, 0.1, 0.2],
            format_func=lambda v: f"{v:.0%}",
            key=fpr_key,
        )
        c1, c2 = st.columns([3, 2])
        c1.plotly_chart(figures.roc_figure(rocs, max_fpr=max_fpr), key=f"{key}_curve")
        c2.plotly_chart(figures.tpr_at_fpr_figure(rocs, max_fpr), key=f"{key}_bar")
        best, tpr = best_model_at_fpr(rocs, max_fpr)
        tied = figures.best_models(rocs, max_fpr)
        where = (
            f"At an allowed FPR of {max_fpr:.0%} (a threshold α on the raw p that flags at "
            "most that share of controls)"
        )
        if len(rocs) == 1:
            sentence = f"{where}, **{md_escape(best)}** flags {tpr:.0%} of the targets (TPR {tpr:.2f})."
        else:
            who = (
                f"**{md_escape(best)}** detects"
                if len(tied) == 1
                else "**" + "**, **".join(md_escape(t) for t in tied) + "** tie: each detects"
            )
            sentence = (
                f"{where}, {who} the most targets (TPR {tpr:.2f}). The best model can "
                "change with the allowed FPR."
            )
        if passed is False:
            failing = [g.model for g in verdicts.gates(results) if g.failed]
            st.warning(
                sentence
                + " But the control gate failed on "
                + ", ".join(f"**{md_escape(m)}**" for m in failing)
                + ": a model that reacts to controls is not robust, whatever its TPR."
            )
        elif tpr <= 0:
            st.info(
                sentence + " No target is told apart from the controls at this level: "
                "the targets may not change these answers, or k is too small to show it."
            )
        else:
            st.success(sentence)
        st.caption(
            "A point of the curve is one threshold α: the share of controls (x) and of "
            "targets (y) with raw p below it. AUC 1 = every target below every control; "
            "0.5 = no better than chance. With few perturbations the curve is coarse."
        )
        st.dataframe(
            widgets.styled(
                pd.DataFrame(
                    [
                        {
                            "model": m,
                            "AUC": r.auc,
                            "TPR at allowed FPR": r.tpr_at_fpr(max_fpr),
                            "controls": r.n_control,
                            "targets": r.n_target,
                        }
                        for m, r in rocs.items()
                    ]
                )
            ),
            hide_index=True,
            key=f"{key}_auc",
        )
        for m, r in results.items():
            g = verdicts.gate(r, m)
            with st.expander(
                f"Per-perturbation results: {md_escape(m)} — control gate {g.status}", expanded=not g.passed
            ):
                widgets.show_results_table(r, key=f"{key}_{m}")
                widgets.downloads(
                    r,
                    lambda r=r: {
                        "ROC": figures.roc_figure(rocs, max_fpr=max_fpr),
                        "Permutation tests": figures.permutation_grid(r),
                        "Similarity histograms": figures.similarity_histograms(r),
                    },
                    key=f"{key}_{m}",
                    title=f"{title} — {m}",
                    meta=meta,
                    job=m,
                )
                why_view(r, key=f"{key}_{m}_why")
        checks_view.checks_section(results, key=key)
        grid.answers_tab(results, key=key)


VIEWS = {"landing": "perturbation", "personas": "personas", "roc": "control_target", "models": "models"}


def view_for(page: str | None, results: Mapping[str, AuditResult]) -> str:
    """Which view draws a recorded run: by the page that ran it; for CLI runs by what the
    audit is (a model comparison, controls and targets, or perturbations)."""
    if page in VIEWS:
        return VIEWS[page]
    first = next(iter(results.values()))
    if first.mode == "models":
        return "models"
    if first.roc is not None:
        return "control_target"
    return "perturbation"


def show_recorded(
    results: Mapping[str, AuditResult], *, page: str | None, key: str, meta: RunMeta, title: str
) -> None:
    """Draw a recorded run with the view of the page that made it."""
    kind = view_for(page, results)
    results = checks_view.with_checks(results, key=key)  # recomputed from the answers
    if kind == "personas":
        persona_view(results, key=key, meta=meta, title=title)
    elif kind == "control_target":
        control_target_view(results, key=key, meta=meta, fpr_key=f"{key}_fpr", title=title)
    elif kind == "models":
        model_comparison_view(next(iter(results.values())), key=key, meta=meta, title=title)
    else:
        for job, r in results.items():
            if len(results) > 1:
                st.markdown(f"#### {md_escape(job)}")
            perturbation_view(
                r, key=f"{key}_{job}" if len(results) > 1 else key, meta=meta, title=title, job=job
            )
