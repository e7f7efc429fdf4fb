"""Result objects -> Plotly figures. No statistics are computed here beyond
arranging what the results carry (P0, P1, T_b, ROC points); no Streamlit."""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dbpa_core.audit import AuditResult, PerturbationResult
from dbpa_core.types import ROCResult

NULL_COLOR = "#5B8DEF"   # P0: base vs base
ALT_COLOR = "#F28E2B"    # P1: base vs perturbed
ACCENT = "#E15759"
FONT = "Inter, -apple-system, Segoe UI, Roboto, sans-serif"


def _layout(fig: go.Figure, *, title: str | None = None, height: int | None = None) -> go.Figure:
    fig.update_layout(
        template="plotly_white", font=dict(family=FONT, size=13),
        title=dict(text=title, x=0.0, xanchor="left", font=dict(size=16)) if title else None,
        margin=dict(l=60, r=20, t=60 if title else 30, b=50),
        legend=dict(orientation="h", yanchor="bottom", y=1.02, xanchor="right", x=1),
        **({"height": height} if height else {}),
    )
    return fig


def fmt_p(p: float) -> str:
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def label(p: PerturbationResult) -> str:
    return f"{p.name} {p.stars}".strip()


def similarity_histograms(result: AuditResult, *, columns: int = 3,
                          only: Sequence[str] | None = None) -> go.Figure:
    """Small multiples: per perturbation (or those named in ``only``), the overlaid
    histograms of P0 (base vs base) and P1 (base vs perturbed) on the test's own bins."""
    perts = [p for p in result.perturbations if only is None or p.name in only]
    n = max(1, len(perts))
    cols = min(columns, n)
    rows = math.ceil(n / cols)
    titles = [f"{label(p)}<br><sup>ω = {p.effect_size:.3f}, p = {fmt_p(p.p_adjusted)}</sup>"
              for p in perts]
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=titles, shared_yaxes=False,
                        horizontal_spacing=0.06, vertical_spacing=0.16 if rows > 1 else 0.1)
    for i, p in enumerate(perts):
        r, c = i // cols + 1, i % cols + 1
        t = p.test
        xbins = None
        if t.bin_edges is not None and len(t.bin_edges) > 1:
            xbins = dict(start=float(t.bin_edges[0]), end=float(t.bin_edges[-1]),
                         size=float(t.bin_edges[1] - t.bin_edges[0]))
        for values, name, color in ((t.null_similarities, "P0: base vs base", NULL_COLOR),
                                    (t.alt_similarities, "P1: base vs perturbed", ALT_COLOR)):
            fig.add_trace(go.Histogram(x=values, name=name, histnorm="probability density",
                                       marker_color=color, opacity=0.6, xbins=xbins,
                                       legendgroup=name, showlegend=i == 0), row=r, col=c)
        fig.update_xaxes(title_text="cosine similarity" if r == rows else None, row=r, col=c)
    fig.update_layout(barmode="overlay")
    _layout(fig, height=280 * rows + 90)
    # the legend sits above every subplot title, left-aligned
    fig.update_layout(margin=dict(t=100), legend=dict(y=1.0, yref="container", yanchor="top",
                                                      x=0, xanchor="left"))
    fig.update_annotations(font=dict(size=13, color="#1F2933"))
    return fig


def permutation_figure(p: PerturbationResult) -> go.Figure:
    """The permutation distribution of ω with the observed ω marked."""
    t = p.test
    fig = go.Figure()
    fig.add_trace(go.Histogram(x=t.permutation_statistics, nbinsx=50, marker_color="#9AA5B1",
                               name="ω of shuffled splits"))
    fig.add_vline(x=t.effect_size, line_color=ACCENT, line_width=3,
                  annotation_text=f"observed ω = {t.effect_size:.3f}", annotation_position="top")
    fig.update_xaxes(title_text=f"ω ({t.measure})")
    fig.update_yaxes(title_text="number of permutations")
    return _layout(fig, title=f"Permutation distribution: {p.name} (p = {fmt_p(p.p_value)}, "
                   f"B = {t.n_permutations})", height=330)


def pca_coordinates(embeddings: np.ndarray) -> np.ndarray:
    """2-D PCA projection of row vectors (for display only)."""
    x = np.asarray(embeddings, float)
    x = x - x.mean(axis=0)
    if x.shape[0] < 2:
        return np.zeros((x.shape[0], 2))
    _, _, vt = np.linalg.svd(x, full_matrices=False)
    comps = vt[:2]
    out = x @ comps.T
    if out.shape[1] < 2:
        out = np.hstack([out, np.zeros((out.shape[0], 1))])
    return out


def embedding_map(result: AuditResult) -> go.Figure | None:
    """All responses' embeddings projected on two principal components, coloured by prompt."""
    arms = [result.base, *result.arms]
    if any(a.embeddings is None for a in arms):
        return None
    xy = pca_coordinates(np.vstack([a.embeddings for a in arms]))
    fig = go.Figure()
    start = 0
    for a in arms:
        n = len(a.texts)
        hover = [t[:160].replace("<", "&lt;") + ("…" if len(t) > 160 else "") for t in a.texts]
        fig.add_trace(go.Scatter(x=xy[start:start + n, 0], y=xy[start:start + n, 1],
                                 mode="markers", name=a.arm.name, text=hover,
                                 hovertemplate="%{text}<extra>" + a.arm.name + "</extra>",
                                 marker=dict(size=9 if a is result.base else 7,
                                             symbol="diamond" if a is result.base else "circle",
                                             line=dict(width=0.5, color="white"))))
        start += n
    fig.update_xaxes(title_text="principal component 1", zeroline=False)
    fig.update_yaxes(title_text="principal component 2", zeroline=False)
    return _layout(fig, title="Responses in embedding space (PCA)", height=440)


def persona_heatmap(effects: np.ndarray, pvalues: np.ndarray, stars: Sequence[Sequence[str]],
                    personas: Sequence[str], models: Sequence[str]) -> go.Figure:
    """Personas (rows) x models (columns): colour = ω, text = ω with stars."""
    text = [[f"{effects[i, j]:.2f}{stars[i][j]}" if np.isfinite(effects[i, j]) else "–"
             for j in range(len(models))] for i in range(len(personas))]
    fig = go.Figure(go.Heatmap(
        z=effects, x=list(models), y=list(personas), text=text, texttemplate="%{text}",
        colorscale="YlOrRd", zmin=0, hoverinfo="skip",
        zmax=float(max(0.5, np.nanmax(effects))) if np.isfinite(effects).any() else 1.0,
        colorbar=dict(title="ω")))
    # heat maps report no clicks: invisible markers on the cell centres do, and carry the
    # tooltip (a trace with hoverinfo "skip" gets no click events either)
    xs, ys, hover = [], [], []
    for i, p in enumerate(personas):
        for j, m in enumerate(models):
            xs.append(m)
            ys.append(p)
            hover.append(f"{p} on {m}<br>ω = {effects[i, j]:.3f}<br>p (adj.) = "
                         f"{fmt_p(pvalues[i, j]) if np.isfinite(pvalues[i, j]) else '–'}")
    fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers", showlegend=False, text=hover,
                             hovertemplate="%{text}<extra></extra>", name="cells",
                             marker=dict(size=40, opacity=0, symbol="square")))
    fig.update_layout(clickmode="event+select", dragmode=False)
    fig.update_yaxes(autorange="reversed")
    return _layout(fig, title="Effect size ω by persona and model (click a cell)",
                   height=120 + 45 * len(personas))


def roc_figure(rocs: Mapping[str, ROCResult], *, max_fpr: float | None = None) -> go.Figure:
    """ROC curves over α, one per model, with AUC in the legend."""
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=[0, 1], y=[0, 1], mode="lines", name="chance",
                             line=dict(dash="dot", color="#BBBBBB")))
    for name, roc in rocs.items():
        fig.add_trace(go.Scatter(
            x=roc.fpr, y=roc.tpr, mode="lines+markers", line_shape="hv",
            name=f"{name} (AUC = {roc.auc:.2f})", customdata=roc.alpha,
            hovertemplate="α = %{customdata:.3g}<br>FPR = %{x:.2f}<br>TPR = %{y:.2f}<extra></extra>"))
    if max_fpr is not None:
        fig.add_vline(x=max_fpr, line_dash="dash", line_color=ACCENT,
                      annotation_text=f"allowed FPR {max_fpr:.0%}")
    fig.update_xaxes(title_text="false-positive rate (controls flagged)", range=[-0.02, 1.02])
    fig.update_yaxes(title_text="true-positive rate (targets flagged)", range=[-0.02, 1.02])
    _layout(fig, title="ROC over the significance level α", height=430)
    fig.update_layout(legend=dict(orientation="h", yanchor="top", y=-0.2, xanchor="left", x=0),
                      margin=dict(b=110))
    return fig


def best_models(rocs: Mapping[str, ROCResult], max_fpr: float) -> list[str]:
    """Every model reaching the highest TPR at the allowed FPR (ties included)."""
    tprs = {n: r.tpr_at_fpr(max_fpr) for n, r in rocs.items()}
    top = max(tprs.values(), default=0.0)
    return [n for n, t in tprs.items() if t >= top - 1e-12]


def tpr_at_fpr_figure(rocs: Mapping[str, ROCResult], max_fpr: float) -> go.Figure:
    names = list(rocs)
    tprs = [rocs[n].tpr_at_fpr(max_fpr) for n in names]
    best = set(best_models(rocs, max_fpr))
    colors = [ACCENT if n in best else "#9AA5B1" for n in names]
    fig = go.Figure(go.Bar(x=names, y=tprs, marker_color=colors,
                           text=[f"{t:.2f}" + (" ★" if n in best else "")
                                 for n, t in zip(names, tprs, strict=False)], textposition="outside"))
    fig.update_yaxes(title_text="targets flagged (TPR)", range=[0, 1.15])
    return _layout(fig, title=f"TPR at FPR ≤ {max_fpr:.0%} (★ best)", height=430)


def model_distance_figure(result: AuditResult) -> go.Figure:
    """Each model's distance ω from the reference model, with stars (papers' Figure 3)."""
    perts = list(result.perturbations)
    fig = go.Figure(go.Bar(
        x=[p.name for p in perts], y=[p.effect_size for p in perts],
        text=[f"{p.effect_size:.3f} {p.stars}".strip() for p in perts], textposition="outside",
        marker_color=[ALT_COLOR if p.significant else "#9AA5B1" for p in perts],
        customdata=[fmt_p(p.p_adjusted) for p in perts],
        hovertemplate="%{x}<br>ω = %{y:.3f}<br>p (adj.) = %{customdata}<extra></extra>"))
    if len(perts) <= 3:
        fig.update_traces(width=0.35)
    top = max([p.effect_size for p in perts] + [0.05])
    fig.update_yaxes(title_text="ω: distance from the reference", range=[0, top * 1.25])
    return _layout(fig, title=f"Distance from the reference model {result.base.arm.name}",
                   height=380)
