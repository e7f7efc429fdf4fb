"""Result objects -> Plotly figures. No statistics are computed here beyond
arranging what the results carry (P0, P1, T_b, ROC points); no Streamlit."""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from dbpa_core.audit import AuditResult, PerturbationResult
from dbpa_core.fmt import fmt_p as fmt_p  # p is written once, by the library
from dbpa_core.types import ROCResult

NULL_COLOR = "#5B8DEF"  # P0: base vs base
ALT_COLOR = "#F28E2B"  # P1: base vs perturbed
ACCENT = "#E15759"
FONT = "Inter, -apple-system, Segoe UI, Roboto, sans-serif"


def base_layout(fig: go.Figure, *, title: str | None = None, height: int | None = None) -> go.Figure:
    """The house layout every figure of the dashboard shares (template, font, margins),
    with its ``title`` and ``height``; returns ``fig``."""
    fig.update_layout(
        template="plotly_white",
        font=dict(family=FONT, size=13),
        title=dict(text=title, x=0.0, xanchor="left", font=dict(size=16)) if title else None,
        margin=dict(l=60, r=20, t=60 if title else 30, b=50),
        legend=dict(orientation="h", yanchor="bottom", y=1.02, xanchor="right", x=1),
        **({"height": height} if height else {}),
    )
    return fig


# 26 distinct colours before one repeats (plotly's default cycles after ten); with more
# arms the marker symbol changes too, so no two arms look alike
PALETTE = tuple(qualitative.Plotly) + tuple(c for c in qualitative.Alphabet if c not in qualitative.Plotly)
SYMBOLS = ("circle", "square", "triangle-up", "x", "star", "triangle-down", "cross", "hexagon")


def arm_style(i: int) -> tuple[str, str]:
    """(colour, symbol) of the i-th arm: unique for the first len(PALETTE) * len(SYMBOLS)."""
    return PALETTE[i % len(PALETTE)], SYMBOLS[(i // len(PALETTE)) % len(SYMBOLS)]


def esc(text: object) -> str:
    """A user- or model-given name made safe for Plotly text (which reads a subset of HTML)."""
    return html.escape(str(text), quote=False)


def wrap_label(text: object, width: int = 14) -> str:
    """A user-given name escaped for Plotly and broken into lines of about ``width``
    characters at spaces (``<br>``), so that a category label is shown whole, never cut
    or rotated into the legend ("medical practitioner" -> "medical<br>practitioner")."""
    lines: list[str] = []
    for word in str(text).split():
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return "<br>".join(esc(line) for line in lines) or esc(text)


def padded_range(values: Sequence[float], *, floor: float = 0.05, pad: float = 0.3) -> list[float]:
    """An axis range from below the lowest to above the highest value (and 0), with room
    ``pad`` × span beyond each end for a bar's label outside it, negative bars included."""
    lo, hi = min([0.0, *values]), max([floor, *values])
    span = (hi - lo) or 1.0
    return [lo - pad * span if lo < 0 else 0.0, hi + pad * span]


def fmt_effect(x: float, *, signed: bool = False) -> str:
    """ω, chance ω and ω above chance: three decimals, rounded once from the value the
    result holds (tables, charts, the Why view and the report agree; the CSV keeps every
    digit)."""
    return "–" if not np.isfinite(x) else (f"{x:+.3f}" if signed else f"{x:.3f}")


def fmt_rate(x: float) -> str:
    """An AUC or a rate in [0, 1]: two decimals (``0.00``, ``1.00``), never a bare ``0``."""
    return "–" if not np.isfinite(x) else f"{x:.2f}"


def p_text(p: float, *, raw: bool = False) -> str:
    """``p (adj.) = 0.0040`` or ``p (raw) = < 0.0001``: always says which p it is."""
    v = fmt_p(p)
    return f"p ({'raw' if raw else 'adj.'}) {v if v.startswith('<') else '= ' + v}"


def resolution(n_permutations: int) -> float:
    """The smallest p a permutation test with B permutations can give: 1/(B+1)."""
    return 1.0 / (n_permutations + 1)


def similarity_name(result: AuditResult) -> str:
    kind = result.spec.embedder.get("backend", "local")
    return f"{kind} similarity" if kind in ("bleu", "rouge1", "rouge2", "rougeL") else "cosine similarity"


def label(p: PerturbationResult) -> str:
    return f"{esc(p.name)} {p.stars}".strip()


def _row_gap(rows: int, row_height: int) -> float:
    """Plotly's vertical spacing is a share of the figure: about 85 px between rows of
    small multiples whatever their number (a fixed share left half of a tall figure empty)."""
    return 0.1 if rows <= 1 else min(0.16, 85 / (row_height * rows))


def similarity_histograms(
    result: AuditResult, *, columns: int = 3, only: Sequence[str] | None = None
) -> go.Figure:
    """Small multiples: per perturbation (or those named in ``only``), the overlaid
    histograms of P0 (base vs base) and P1 (base vs perturbed) on the test's own bins."""
    perts = [p for p in result.perturbations if only is None or p.name in only]
    n = max(1, len(perts))
    cols = min(columns, n)
    rows = math.ceil(n / cols)
    titles = [
        f"{label(p)}<br><sup>ω = {p.effect_size:.3f} ({p.effect_above_chance:+.3f} above "
        f"chance), {p_text(p.p_adjusted)}</sup>"
        for p in perts
    ]
    fig = make_subplots(
        rows=rows,
        cols=cols,
        subplot_titles=titles,
        shared_yaxes=False,
        horizontal_spacing=0.06,
        vertical_spacing=_row_gap(rows, 280),
    )
    for i, p in enumerate(perts):
        r, c = i // cols + 1, i % cols + 1
        t = p.test
        xbins = None
        if t.bin_edges is not None and len(t.bin_edges) > 1:
            xbins = dict(
                start=float(t.bin_edges[0]),
                end=float(t.bin_edges[-1]),
                size=float(t.bin_edges[1] - t.bin_edges[0]),
            )
        names = (
            ("P0: reference vs reference", "P1: reference vs model")
            if result.mode == "models"
            else ("P0: base vs base", "P1: base vs perturbed")
        )
        if getattr(t, "null", "base") == "pooled":  # P0 then pools both groups' similarities
            names = ("P0: within each group", names[1])
        for values, name, color in (
            (t.null_similarities, names[0], NULL_COLOR),
            (t.alt_similarities, names[1], ALT_COLOR),
        ):
            fig.add_trace(
                go.Histogram(
                    x=values,
                    name=name,
                    histnorm="probability density",
                    marker_color=color,
                    opacity=0.6,
                    xbins=xbins,
                    legendgroup=name,
                    showlegend=i == 0,
                ),
                row=r,
                col=c,
            )
        fig.update_xaxes(title_text=similarity_name(result) if r == rows else None, row=r, col=c)
    fig.update_layout(barmode="overlay")
    base_layout(fig, height=280 * rows + 90)
    # the legend sits above every subplot title, left-aligned
    fig.update_layout(
        margin=dict(t=100), legend=dict(y=1.0, yref="container", yanchor="top", x=0, xanchor="left")
    )
    fig.update_annotations(font=dict(size=13, color="#1F2933"))
    return fig


def permutation_figure(p: PerturbationResult) -> go.Figure:
    """The permutation distribution of ω with the observed ω marked."""
    t = p.test
    fig = go.Figure()
    fig.add_trace(
        go.Histogram(
            x=t.permutation_statistics, nbinsx=50, marker_color="#9AA5B1", name="ω of shuffled splits"
        )
    )
    fig.add_vline(
        x=t.effect_size,
        line_color=ACCENT,
        line_width=3,
        annotation_text=f"observed ω = {t.effect_size:.3f}",
        annotation_position="top",
    )
    fig.add_vline(
        x=p.chance_effect_size,
        line_color="#52606D",
        line_dash="dot",
        annotation_text=f"chance ω = {p.chance_effect_size:.3f}",
        annotation_position="top left",  # above the bars, on a white box: legible
        annotation=dict(bgcolor="rgba(255,255,255,0.85)", font=dict(color="#1F2933")),
    )
    fig.update_xaxes(title_text=f"ω ({t.measure})")
    fig.update_yaxes(title_text="number of permutations")
    base_layout(
        fig,
        title=f"Permutation distribution: {esc(p.name)}<br><sup>"
        f"{p_text(p.p_value, raw=True)}, {p_text(p.p_adjusted)}; B = {t.n_permutations}, "
        f"smallest possible p = {fmt_p(resolution(t.n_permutations))}</sup>",
        height=360,
    )
    fig.update_layout(margin=dict(t=80))
    return fig


def permutation_grid(result: AuditResult, *, columns: int = 3) -> go.Figure:
    """Small multiples of :func:`permutation_figure` (for reports): grey = ω of shuffled
    splits, red = the observed ω, titled with the raw and adjusted p."""
    perts = list(result.perturbations)
    n = max(1, len(perts))
    cols = min(columns, n)
    rows = math.ceil(n / cols)
    titles = [
        f"{label(p)}<br><sup>{p_text(p.p_value, raw=True)}, {p_text(p.p_adjusted)}</sup>" for p in perts
    ]
    fig = make_subplots(
        rows=rows,
        cols=cols,
        subplot_titles=titles,
        horizontal_spacing=0.06,
        vertical_spacing=_row_gap(rows, 240),
    )
    for i, p in enumerate(perts):
        r, c = i // cols + 1, i % cols + 1
        fig.add_trace(
            go.Histogram(
                x=p.test.permutation_statistics,
                nbinsx=40,
                marker_color="#9AA5B1",
                name="ω of shuffled splits",
                legendgroup="perm",
                showlegend=i == 0,
            ),
            row=r,
            col=c,
        )
        fig.add_vline(x=p.effect_size, line_color=ACCENT, line_width=2, row=r, col=c)
    fig.add_trace(
        go.Scatter(x=[None], y=[None], mode="lines", line=dict(color=ACCENT, width=2), name="observed ω")
    )
    base_layout(fig, height=240 * rows + 90)
    fig.update_layout(
        margin=dict(t=100), legend=dict(y=1.0, yref="container", yanchor="top", x=0, xanchor="left")
    )
    fig.update_annotations(font=dict(size=12, color="#1F2933"))
    return fig


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
    for i, a in enumerate(arms):
        n = len(a.texts)
        hover = [esc(t[:160]) + ("…" if len(t) > 160 else "") for t in a.texts]
        color, symbol = ("#1F2933", "diamond") if a is result.base else arm_style(i - 1)
        fig.add_trace(
            go.Scatter(
                x=xy[start : start + n, 0],
                y=xy[start : start + n, 1],
                mode="markers",
                name=esc(a.arm.name),
                text=hover,
                hovertemplate="%{text}<extra>%{fullData.name}</extra>",
                marker=dict(
                    size=10 if a is result.base else 8,
                    color=color,
                    symbol=symbol,
                    line=dict(width=0.5, color="white"),
                ),
            )
        )
        start += n
    fig.update_xaxes(title_text="principal component 1", zeroline=False)
    fig.update_yaxes(title_text="principal component 2", zeroline=False)
    base_layout(fig, title="Responses in embedding space (PCA)", height=max(440, 60 + 22 * len(arms)))
    # a legend beside the plot never covers the title, however many arms there are
    fig.update_layout(
        legend=dict(orientation="v", yanchor="top", y=1, xanchor="left", x=1.02, title_text="prompt"),
        margin=dict(r=200),
    )
    return fig


def persona_grid(results: Mapping[str, AuditResult]) -> tuple[list[str], list[str], dict]:
    """(personas, models, {(persona, model): PerturbationResult}) of a persona run: personas
    in the order first seen, models in the order of ``results``."""
    personas: list[str] = []
    cells: dict[tuple[str, str], PerturbationResult] = {}
    for m, r in results.items():
        for p in r.perturbations:
            if p.name not in personas:
                personas.append(p.name)
            cells[(p.name, m)] = p
    return personas, list(results), cells


def persona_heatmap(
    results: Mapping[str, AuditResult], *, selected: tuple[str, str] | None = None
) -> go.Figure:
    """Personas (rows) x models (columns), coloured by ω above chance where the change is
    significant (adjusted p <= α); non-significant cells are grey and say "n.s.", so a
    non-significant 0.21 cannot pass for a significant 0.23. ``selected`` (persona, model)
    is outlined. Axes are numbered (tick labels carry the escaped names), so a click
    reports the cell's row and column index."""
    personas, models, cells = persona_grid(results)
    shape = (len(personas), len(models))
    sig, ns = np.full(shape, np.nan), np.full(shape, np.nan)
    text = [["–"] * len(models) for _ in personas]
    hover = []
    xs, ys = [], []
    for i, name in enumerate(personas):
        for j, m in enumerate(models):
            xs.append(j)
            ys.append(i)
            p = cells.get((name, m))
            if p is None:
                hover.append(f"{esc(name)} on {esc(m)}: not tested")
                continue
            above = p.effect_above_chance
            if p.significant:
                sig[i, j] = above
                text[i][j] = f"{above:+.2f}{p.stars}"
            else:
                ns[i, j] = 0.0
                text[i][j] = f"{above:+.2f} n.s."
            hover.append(
                f"<b>{esc(name)}</b> on {esc(m)}<br>ω = {p.effect_size:.3f}, chance "
                f"gives {p.chance_effect_size:.3f}: {above:+.3f} above chance<br>"
                f"{p_text(p.p_value, raw=True)}, {p_text(p.p_adjusted)}<br>"
                + ("significant" if p.significant else "not significant")
            )
    top = float(np.nanmax(sig)) if np.isfinite(sig).any() else 0.1
    fig = go.Figure()
    fig.add_trace(
        go.Heatmap(
            z=ns,
            x=list(range(len(models))),
            y=list(range(len(personas))),
            text=text,
            texttemplate="%{text}",
            textfont=dict(color="#7B8794"),
            hoverinfo="skip",
            colorscale=[[0, "#EEF1F5"], [1, "#EEF1F5"]],
            showscale=False,
            xgap=2,
            ygap=2,
            name="not significant",
        )
    )
    fig.add_trace(
        go.Heatmap(
            z=sig,
            x=list(range(len(models))),
            y=list(range(len(personas))),
            text=text,
            texttemplate="%{text}",
            colorscale="YlOrRd",
            zmin=0,
            zmax=max(0.1, top),
            hoverinfo="skip",
            xgap=2,
            ygap=2,
            name="significant",
            colorbar=dict(title=dict(text="ω above<br>chance")),
        )
    )
    # heat maps report no clicks: invisible markers on the cell centres do, and carry the
    # tooltip (a trace with hoverinfo "skip" gets no click events either)
    fig.add_trace(
        go.Scatter(
            x=xs,
            y=ys,
            mode="markers",
            showlegend=False,
            text=hover,
            hovertemplate="%{text}<extra></extra>",
            name="cells",
            marker=dict(size=40, opacity=0, symbol="square"),
        )
    )
    if selected is not None and selected[0] in personas and selected[1] in models:
        i, j = personas.index(selected[0]), models.index(selected[1])
        # two outlines, dark outside and white inside: visible on light and dark cells alike
        fig.add_shape(
            type="rect",
            x0=j - 0.5,
            x1=j + 0.5,
            y0=i - 0.5,
            y1=i + 0.5,
            line=dict(color="#1F2933", width=5),
            fillcolor="rgba(0,0,0,0)",
        )
        fig.add_shape(
            type="rect",
            x0=j - 0.45,
            x1=j + 0.45,
            y0=i - 0.45,
            y1=i + 0.45,
            line=dict(color="#FFFFFF", width=2),
            fillcolor="rgba(0,0,0,0)",
        )
    fig.update_layout(clickmode="event+select", dragmode=False)
    fig.update_xaxes(
        tickvals=list(range(len(models))),
        ticktext=[esc(m) for m in models],
        showgrid=False,
        zeroline=False,
        side="top",
    )
    fig.update_yaxes(
        tickvals=list(range(len(personas))),
        ticktext=[esc(p) for p in personas],
        autorange="reversed",
        showgrid=False,
        zeroline=False,
    )
    return base_layout(
        fig,
        title="ω above chance by persona and model — grey: not significant (click a cell)",
        height=150 + 45 * len(personas),
    )


def roc_figure(rocs: Mapping[str, ROCResult], *, max_fpr: float | None = None) -> go.Figure:
    """ROC curves over α, one per model, with AUC in the legend."""
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(x=[0, 1], y=[0, 1], mode="lines", name="chance", line=dict(dash="dot", color="#BBBBBB"))
    )
    for name, roc in rocs.items():
        fig.add_trace(
            go.Scatter(
                x=roc.fpr,
                y=roc.tpr,
                mode="lines+markers",
                line_shape="hv",
                name=f"{esc(name)} (AUC = {roc.auc:.2f})",
                customdata=roc.alpha,
                hovertemplate="α = %{customdata:.3g}<br>FPR = %{x:.2f}<br>TPR = %{y:.2f}<extra></extra>",
            )
        )
    if max_fpr is not None:
        fig.add_vline(
            x=max_fpr, line_dash="dash", line_color=ACCENT, annotation_text=f"allowed FPR {max_fpr:.0%}"
        )
    fig.update_xaxes(title_text="false-positive rate (controls flagged)", range=[-0.02, 1.02])
    fig.update_yaxes(title_text="true-positive rate (targets flagged)", range=[-0.02, 1.02])
    base_layout(fig, title="ROC over the significance level α", height=430)
    fig.update_layout(
        legend=dict(orientation="h", yanchor="top", y=-0.2, xanchor="left", x=0), margin=dict(b=110)
    )
    return fig


def best_models(rocs: Mapping[str, ROCResult], max_fpr: float) -> list[str]:
    """Every model reaching the highest TPR at the allowed FPR (ties included)."""
    tprs = {n: r.tpr_at_fpr(max_fpr) for n, r in rocs.items()}
    top = max(tprs.values(), default=0.0)
    return [n for n, t in tprs.items() if t >= top - 1e-12]


def tpr_at_fpr_figure(rocs: Mapping[str, ROCResult], max_fpr: float) -> go.Figure:
    names = list(rocs)
    tprs = [rocs[n].tpr_at_fpr(max_fpr) for n in names]
    best = set(best_models(rocs, max_fpr)) if max(tprs, default=0.0) > 0 else set()  # no ★ at 0
    colors = [ACCENT if n in best else "#9AA5B1" for n in names]
    fig = go.Figure(
        go.Bar(
            x=[esc(n) for n in names],
            y=tprs,
            marker_color=colors,
            text=[f"{t:.2f}" + (" ★" if n in best else "") for n, t in zip(names, tprs, strict=False)],
            textposition="outside",
        )
    )
    fig.update_yaxes(title_text="targets flagged (TPR)", range=[0, 1.15])
    return base_layout(fig, title=f"TPR at FPR ≤ {max_fpr:.0%} (★ best)", height=430)


def model_distance_figure(result: AuditResult) -> go.Figure:
    """Each model's distance from the reference model, as ω above chance (ω minus the ω
    chance alone gives at this k), orange where significant after correction, with stars
    (papers' Figure 3)."""
    perts = list(result.perturbations)
    above = [p.effect_above_chance for p in perts]
    fig = go.Figure(
        go.Bar(
            x=[wrap_label(p.name, 24) for p in perts],
            y=above,
            text=[
                f"{a:+.3f} {p.stars}".strip() if p.significant else f"{a:+.3f} n.s."
                for a, p in zip(above, perts, strict=True)
            ],
            textposition="outside",
            cliponaxis=False,  # a negative bar's label sits below it: never cut off
            marker_color=[ALT_COLOR if p.significant else "#9AA5B1" for p in perts],
            customdata=[
                [p.effect_size, p.chance_effect_size, p_text(p.p_value, raw=True), p_text(p.p_adjusted)]
                for p in perts
            ],
            hovertemplate="%{x}<br>ω = %{customdata[0]:.3f}, chance gives %{customdata[1]:.3f}"
            "<br>above chance: %{y:+.3f}<br>%{customdata[2]}, %{customdata[3]}"
            "<extra></extra>",
        )
    )
    if len(perts) <= 3:
        fig.update_traces(width=0.35)
    fig.add_hline(y=0, line_color="#52606D", line_width=1)
    fig.update_yaxes(title_text="ω above chance: distance from the reference", range=padded_range(above))
    fig.update_xaxes(tickangle=0, automargin=True)
    return base_layout(
        fig, title=f"Distance from the reference model {esc(result.base.arm.name)}", height=380
    )
