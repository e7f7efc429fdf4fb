"""Fidelity result -> Plotly figures (no Streamlit, no statistics beyond arranging what the
result carries), and the HTML report with the charts."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import plotly.graph_objects as go

from dbpa_core.fidelity import curve as cv
from dbpa_core.fidelity.analysis import FidelityResult
from dbpa_core.fidelity.report import COLORS, UNIFORM_COLOR, report_html

from .fidelity import sample_size_text
from .figures import base_layout, esc

REAL_COLOR = "#1F2933"


def color_of(result: FidelityResult, name: str) -> str:
    if name == "uniform":
        return UNIFORM_COLOR
    names = [s.name for s in result.simulators if s.name != "uniform"]
    return COLORS[names.index(name) % len(COLORS)]


def _rgba(hex_color: str, alpha: float) -> str:
    h = hex_color.lstrip("#")
    r, g, b = (int(h[i : i + 2], 16) for i in (0, 2, 4))
    return f"rgba({r},{g},{b},{alpha})"


def _step_xy(upper) -> tuple[list[float], list[float]]:
    """The exact step function V̂_cal as a polyline (a vertical segment at each jump)."""
    tau, val = cv.steps(upper)
    xs, ys, start = [], [], 0.0
    for t, v in zip(tau, val, strict=True):
        xs += [start, float(t)]
        ys += [float(v), float(v)]
        start = float(t)
    return xs, ys


def curves_figure(result: FidelityResult, *, band: str | None = "all") -> go.Figure:
    """Every simulator's calibrated curve V̂_cal(τ) and the uniform baseline (dashed) on one
    chart, with the tightness band (shaded) of the simulator named ``band`` (``"all"``: of
    each; None: none) when the result has one; a dotted line at τ = 1 - α marks the
    guarantee's quantile V̂_m(1 - α/2)."""
    fig = go.Figure()
    grid = np.linspace(0.0, 1.0, 201)
    for s in result.simulators:
        col = color_of(result, s.name)
        name = esc(s.name)
        if s.lower is not None and band is not None and band in ("all", s.name):
            lo, hi = s.band(result.gamma, grid)
            fig.add_trace(
                go.Scatter(
                    x=np.concatenate([grid, grid[::-1]]),
                    y=np.concatenate([hi, np.asarray(lo)[::-1]]),
                    fill="toself",
                    fillcolor=_rgba(col, 0.18),
                    line=dict(width=0),
                    mode="lines",
                    legendgroup=name,
                    showlegend=True,
                    hoverinfo="skip",
                    name=f"{name}: tightness band",
                )
            )
            if band == s.name:
                fig.add_trace(
                    go.Scatter(
                        x=grid,
                        y=lo,
                        mode="lines",
                        hoverinfo="skip",
                        line=dict(color=col, width=1, dash="dot"),
                        legendgroup=name,
                        showlegend=False,
                    )
                )
    for s in result.simulators:
        col = color_of(result, s.name)
        name = esc(s.name)
        xs, ys = _step_xy(s.upper)
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=ys,
                mode="lines",
                name=name,
                legendgroup=name,
                line=dict(
                    color=col,
                    width=2.5 if s.name != "uniform" else 2,
                    dash="dash" if s.name == "uniform" else "solid",
                ),
                hovertemplate=f"{name}<br>τ = %{{x:.3f}}<br>V̂_cal = %{{y:.4f}}<extra></extra>",
            )
        )
    t_star = 1 - result.alpha
    fig.add_vline(
        x=t_star,
        line=dict(color="#9AA5B1", dash="dot", width=1),
        annotation_text=f"τ = 1 − α = {t_star:g}",
        annotation_position="top left",
        annotation_font=dict(size=11, color="#616E7C"),
    )
    fig.update_xaxes(title_text="τ — share of questions", range=[0, 1])
    tops = [float(np.nanmax(np.asarray(t.y, dtype=float))) for t in fig.data if len(t.y)]
    top = max([t for t in tops if np.isfinite(t)] or [1.0]) or 1.0
    fig.update_yaxes(
        title_text=f"calibrated discrepancy V̂_cal(τ) ({esc(result.loss)})", range=[0, top * 1.06]
    )  # a flat curve at the top stays in view
    return base_layout(fig, title="Calibrated quantile curves", height=460)


def plan_figure(result: FidelityResult) -> go.Figure:
    """Planning: for each ordered pair that some m decides, the chance that "A is at least as
    good as B" is decided with m questions drawn like these; the guaranteed level
    1 − α − ε/√m (dashed, shown from 0); a dotted line at the questions loaded."""
    plan = result.plan()
    fig = go.Figure()
    ms = list(plan.levels)
    fig.add_trace(
        go.Scatter(
            x=ms,
            y=[max(0.0, plan.levels[m]) for m in ms],
            mode="lines+markers",
            name="guaranteed level (new questions)",
            line=dict(color=UNIFORM_COLOR, dash="dash"),
            hovertemplate="m = %{x:,}<br>level %{y:.2f}<extra></extra>",
        )
    )
    shown = [p for p in plan.pairs if max(p.chance.values()) >= 0.01]
    for i, p in enumerate(shown):
        ms_p = sorted(p.chance)
        name = esc(f"{p.first} ≥ {p.second}")
        fig.add_trace(
            go.Scatter(
                x=ms_p,
                y=[p.chance[m] for m in ms_p],
                mode="lines+markers",
                name=name,
                line=dict(color=COLORS[i % len(COLORS)]),
                hovertemplate=name + "<br>m = %{x:,}<br>chance %{y:.0%}<extra></extra>",
            )
        )
    lo, hi = min(ms + [result.m]), max(ms + [result.m])
    # shapes on a log axis take log10 coordinates
    fig.add_vline(
        x=float(np.log10(result.m)),
        line=dict(color="#9AA5B1", dash="dot", width=1),
        annotation_text=f"m = {result.m} now",
        annotation_position="top right",
        annotation_font=dict(size=11, color="#616E7C"),
    )
    fig.update_xaxes(
        title_text="questions m (log scale)",
        type="log",
        range=[float(np.log10(lo)) - 0.05, float(np.log10(hi)) + 0.05],
    )
    fig.update_yaxes(title_text="chance decided / guaranteed level", range=[0, 1.05], tickformat=".0%")
    return base_layout(fig, title="How many questions a verdict needs", height=380)


def distribution_figure(result: FidelityResult, index: int) -> go.Figure:
    """One question: the real answer distribution beside every simulator's (bars), the
    uniform one as a dotted line."""
    data = result.data
    sc = data.scenarios[index]
    fig = go.Figure()
    if data.kind == "categorical":
        opts = [esc(o) for o in sc.options]
        real = sc.real / sc.real.sum()
        fig.add_trace(
            go.Bar(
                x=opts,
                y=real,
                name=f"real (n = {sc.n:g})",
                marker_color=REAL_COLOR,
                hovertemplate="%{x}: %{y:.3f}<extra>real</extra>",
            )
        )
        for s in result.simulators:
            if s.name == "uniform":
                continue
            q = data.probabilities(s.name)[index]
            name = esc(s.name)
            if data.sim_kinds.get(s.name) == "counts":  # a 100 % bar may rest on one answer
                name += f" ({sample_size_text(result, s.name, index)})"
            fig.add_trace(
                go.Bar(
                    x=opts,
                    y=q,
                    name=name,
                    marker_color=color_of(result, s.name),
                    hovertemplate="%{x}: %{y:.3f}<extra>" + esc(s.name) + "</extra>",
                )
            )
        fig.add_trace(
            go.Scatter(
                x=opts,
                y=[1 / len(opts)] * len(opts),
                mode="lines",
                name="uniform",
                line=dict(color=UNIFORM_COLOR, dash="dot"),
                hoverinfo="skip",
            )
        )
        fig.update_yaxes(title_text="share of answers", rangemode="tozero")
        fig.update_layout(barmode="group", bargap=0.2)
    else:
        fig.add_trace(go.Box(y=sc.real, name="real", marker_color=REAL_COLOR, boxpoints="outliers"))
        for s in result.simulators:
            if s.name != "uniform":
                fig.add_trace(
                    go.Box(
                        y=data.simulated[s.name][index],
                        name=esc(s.name),
                        marker_color=color_of(result, s.name),
                        boxpoints="outliers",
                    )
                )
        fig.update_yaxes(title_text="answer")
    title = esc(sc.id) if not sc.question else esc(_short(sc.question, 90))
    return base_layout(fig, title=title, height=380)


def _short(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def fidelity_figures(result: FidelityResult) -> dict[str, go.Figure]:
    """The charts of the report, by title (the band of the simulator with the lowest
    AUC_cal, as in the library's report)."""
    from dbpa_core.fidelity.report import band_simulator

    return {"Calibrated quantile curves": curves_figure(result, band=band_simulator(result))}


def html_report(
    result: FidelityResult, figures: Mapping[str, go.Figure] | None = None, title: str = "Simulator fidelity"
) -> str:
    """The library's report (escaped texts, tables, verdicts) with the Plotly charts inlined."""
    charts, first = [], True
    for fig in (figures or fidelity_figures(result)).values():  # each chart bears its title
        charts.append(fig.to_html(full_html=False, include_plotlyjs=True if first else False))
        first = False
    return report_html(result, charts_html="".join(charts), title=title)


__all__ = [
    "color_of",
    "curves_figure",
    "distribution_figure",
    "fidelity_figures",
    "html_report",
    "plan_figure",
]
