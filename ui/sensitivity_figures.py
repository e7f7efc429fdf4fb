"""Sensitivity results -> Plotly figures and display tables (no Streamlit, no statistics:
only arranging what :class:`~dbpa_core.sensitivity.SensitivityResult` carries)."""

from __future__ import annotations

import html
import math

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dbpa_core.sensitivity import STUDY_TITLES, SensitivityResult, SensitivityRow

from .figures import ACCENT, base_layout, fmt_effect, fmt_p, padded_range, wrap_label

PALETTE = [
    "#5B8DEF",
    "#F28E2B",
    "#59A14F",
    "#E15759",
    "#B07AA1",
    "#76B7B2",
    "#EDC948",
    "#9C755F",
    "#FF9DA7",
    "#BAB0AC",
]


def _esc(s: str) -> str:
    return html.escape(str(s))


def _p(r: SensitivityRow) -> str:
    return fmt_p(r.p_adjusted) if r.applicable else "n/a"


def effect_figure(result: SensitivityResult, study: str) -> go.Figure:
    """Small multiples, one panel per setting (each on its own scale: ω of different
    measures or embedders are in different units): ω above chance per perturbation,
    pale when not significant, stars beside; the audit's own setting is marked."""
    rows = result.study(study)
    settings = result.settings(study)
    perts = result.perturbations
    cols = max(1, len(settings))
    titles = [
        _esc(s) + (" (audit)" if any(r.baseline and r.setting == s for r in rows) else "") for s in settings
    ]
    fig = make_subplots(
        rows=1, cols=cols, shared_yaxes=True, subplot_titles=titles, horizontal_spacing=min(0.04, 0.4 / cols)
    )
    for j, s in enumerate(settings):
        by = {r.perturbation: r for r in rows if r.setting == s}
        rs = [by.get(p) for p in perts]
        color = PALETTE[j % len(PALETTE)]
        fig.add_trace(
            go.Bar(
                y=[_esc(p) for p in perts],
                orientation="h",
                x=[r.effect_above_chance if r is not None and r.applicable else None for r in rs],
                marker=dict(
                    color=color,
                    opacity=[1.0 if r is not None and r.significant else 0.35 for r in rs],
                    line=dict(color="#1F2933", width=[2 if r is not None and r.baseline else 0 for r in rs]),
                ),
                text=[(r.stars if r.applicable else "n/a") if r is not None else "" for r in rs],
                textposition="outside",
                cliponaxis=False,
                showlegend=False,
                textfont=dict(size=11),
                customdata=[[_p(r), r.note] if r is not None else ["", ""] for r in rs],
                hovertemplate=(
                    f"{_esc(s)}<br>%{{y}}<br>ω above chance = %{{x:.3f}}<br>"
                    "p (adj.) = %{customdata[0]}<extra>%{customdata[1]}</extra>"
                ),
            ),
            row=1,
            col=j + 1,
        )
        fig.add_vline(x=0, line_color="#52606D", line_width=1, row=1, col=j + 1)
        # room beyond both ends for the stars beside a bar, a negative one's on its left
        fig.update_xaxes(
            nticks=3,
            zeroline=False,
            row=1,
            col=j + 1,
            range=padded_range(
                [r.effect_above_chance for r in rs if r is not None and r.applicable], floor=0.0
            ),
        )
    fig.update_yaxes(autorange="reversed", automargin=True)
    fig.update_annotations(font=dict(size=12, color="#1F2933"))
    fig.update_layout(bargap=0.3)
    fig = base_layout(
        fig,
        title=f"{STUDY_TITLES[study]}: ω above chance<br><sup>each on its own "
        "scale; pale: not significant</sup>",
        height=160 + 30 * len(perts),
    )
    fig.update_layout(margin=dict(t=100))  # two title lines above the panels' own titles
    return fig


P_TICKS = [1, 0.1, 0.05, 0.01, 0.001, 0.0001]


def pvalue_figure(result: SensitivityResult, study: str, alpha: float) -> go.Figure:
    """Adjusted p per perturbation (x) and setting (side by side) on a log scale, with α."""
    rows = [r for r in result.study(study) if r.applicable]
    settings = result.settings(study)
    perts = result.perturbations
    width = min(0.8, 0.12 * len(settings))
    fig = go.Figure()
    for j, s in enumerate(settings):
        rs = [r for r in rows if r.setting == s]
        color = PALETTE[j % len(PALETTE)]
        offset = (
            (j - (len(settings) - 1) / 2) * width / max(1, len(settings) - 1) if len(settings) > 1 else 0.0
        )
        fig.add_trace(
            go.Scatter(
                x=[perts.index(r.perturbation) + offset for r in rs],
                y=[max(r.p_adjusted, 1e-6) for r in rs],
                mode="markers",
                name=_esc(s),
                marker=dict(
                    size=10,
                    color=[color if r.significant else "white" for r in rs],
                    line=dict(color=color, width=2),
                    symbol=["diamond" if r.baseline else "circle" for r in rs],
                ),
                customdata=[[_esc(r.perturbation), _p(r)] for r in rs],
                hovertemplate=f"{_esc(s)}<br>%{{customdata[0]}}<br>p (adj.) = %{{customdata[1]}}"
                "<extra></extra>",
            )
        )
    fig.add_hline(y=alpha, line_dash="dash", line_color=ACCENT)
    # on a log axis an annotation's y is the exponent (add_hline's own label lands off-chart)
    fig.add_annotation(
        x=1,
        xref="paper",
        y=math.log10(alpha),
        yref="y",
        text=f"α = {alpha:g}",
        showarrow=False,
        xanchor="right",
        yanchor="top",
        font=dict(color=ACCENT, size=12),
    )
    lowest = min([r.p_adjusted for r in rows] + [alpha, 0.01])
    ticks = [t for t in P_TICKS if t >= lowest / 2]
    # from p = 1 at the bottom to just past the smallest p at the top (log axis: exponents)
    fig.update_yaxes(
        type="log",
        title_text="p (adjusted)",
        tickvals=ticks,
        ticktext=[f"{t:g}" for t in ticks],
        range=[0.08, math.log10(lowest) - 0.25],
    )
    fig.update_xaxes(
        tickvals=list(range(len(perts))),
        ticktext=[wrap_label(p) for p in perts],
        range=[-0.6, len(perts) - 0.4],
        tickangle=0,
        automargin=True,
    )
    fig = base_layout(
        fig,
        title=f"{STUDY_TITLES[study]}: p-values<br><sup>filled: significant; "
        "diamond: the audit's setting; higher is smaller</sup>",
        height=420,
    )
    # the legend below the plot: above it, it ran into the title on narrow windows
    lines = max((wrap_label(p).count("<br>") + 1 for p in perts), default=1)
    fig.update_layout(
        legend=dict(orientation="h", yanchor="top", y=-0.08 - 0.06 * lines, xanchor="left", x=0),
        margin=dict(t=80, b=60 + 18 * lines),
        height=420 + 18 * lines,
    )
    return fig


def length_figure(result: SensitivityResult, alpha: float) -> go.Figure:
    """ω above chance and adjusted p against the prompt length, one line per perturbation."""
    rows = [r for r in result.study("length") if r.applicable]
    fig = make_subplots(
        rows=1, cols=2, horizontal_spacing=0.1, subplot_titles=("ω above chance", "p (adjusted; log scale)")
    )
    for j, name in enumerate(result.perturbations):
        rs = sorted((r for r in rows if r.perturbation == name), key=lambda r: r.prompt_tokens)
        if not rs:
            continue
        color = PALETTE[j % len(PALETTE)]
        x = [r.prompt_tokens for r in rs]
        fig.add_trace(
            go.Scatter(
                x=x,
                y=[r.effect_above_chance for r in rs],
                mode="lines+markers",
                name=_esc(name),
                legendgroup=_esc(name),
                line=dict(color=color),
                marker=dict(
                    size=9,
                    color=[color if r.significant else "white" for r in rs],
                    line=dict(color=color, width=2),
                ),
                hovertemplate="~%{x} tokens<br>ω above chance = %{y:.3f}<extra>" + _esc(name) + "</extra>",
            ),
            row=1,
            col=1,
        )
        fig.add_trace(
            go.Scatter(
                x=x,
                y=[max(r.p_adjusted, 1e-6) for r in rs],
                mode="lines+markers",
                name=_esc(name),
                legendgroup=_esc(name),
                showlegend=False,
                line=dict(color=color),
                marker=dict(
                    size=9,
                    color=[color if r.significant else "white" for r in rs],
                    line=dict(color=color, width=2),
                ),
                customdata=[_p(r) for r in rs],
                hovertemplate="~%{x} tokens<br>p (adj.) = %{customdata}<extra>" + _esc(name) + "</extra>",
            ),
            row=1,
            col=2,
        )
    fig.add_hline(y=alpha, line_dash="dash", line_color=ACCENT, row=1, col=2)
    fig.add_hline(y=0, line_color="#52606D", line_width=1, row=1, col=1)
    lowest = min([r.p_adjusted for r in rows] + [alpha, 0.01])
    ticks = [t for t in P_TICKS if t >= lowest / 2]
    fig.update_yaxes(
        type="log",
        tickvals=ticks,
        ticktext=[f"{t:g}" for t in ticks],
        range=[0.08, math.log10(lowest) - 0.25],
        row=1,
        col=2,
    )
    fig.update_xaxes(title_text="prompt length (tokens, ~4 characters each)")
    fig.update_annotations(font=dict(size=13, color="#1F2933"))
    base_layout(
        fig,
        title="Prompt length: does the effect survive a longer prompt? (filled: "
        f"significant; dashed: α = {alpha:g})",
        height=440,
    )
    fig.update_layout(
        legend=dict(orientation="h", yanchor="top", y=-0.22, xanchor="left", x=0), margin=dict(b=110)
    )
    return fig


# --------------------------------------------------------------------------- tables
def hold_sentence(result: SensitivityResult) -> str:
    """The study's verdict in words: how many of the audit's verdicts hold everywhere."""
    table = verdict_table(result)
    n_hold = int((table["verdict"] == "holds").sum())
    return f"{n_hold} of {len(table)} verdicts hold in every setting tried."


def verdict_table(result: SensitivityResult) -> pd.DataFrame:
    """One row per perturbation: the audit's verdict and, per study, how many settings
    agree (detectable in a of b: significant after the correction)."""
    rows = []
    for v in result.verdicts():
        d = {
            "perturbation": v["perturbation"],
            "role": v["role"] or "",
            "audit": {True: "changes the answers", False: "no change shown", None: "–"}[
                v["baseline_significant"]
            ],
            "verdict": "holds" if v["holds"] else "depends on the setting",
        }
        for s in result.studies:
            d[STUDY_TITLES[s]] = f"detectable in {v[s]['significant']} of {v[s]['settings']}"
        rows.append(d)
    return pd.DataFrame(rows)


def study_table(result: SensitivityResult, study: str) -> pd.DataFrame:
    """Perturbations × settings; each cell ``ω above chance, stars (p adj.)``."""
    settings = result.settings(study)
    out = []
    for name in result.perturbations:
        d = {"perturbation": name}
        for s in settings:
            r = next((x for x in result.study(study) if x.perturbation == name and x.setting == s), None)
            if r is None or not r.applicable:
                d[s] = "n/a"
            else:
                d[s] = (
                    f"{fmt_effect(r.effect_above_chance, signed=True)} {r.stars} "
                    f"(p adj. {fmt_p(r.p_adjusted)})"
                ).replace("  ", " ")
        out.append(d)
    return pd.DataFrame(out)


def rows_table(rows: list[SensitivityRow]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "study": STUDY_TITLES[r.study],
                "setting": r.setting,
                "perturbation": r.perturbation,
                "ω above chance": None if not r.applicable else r.effect_above_chance,  # shown rounded
                "ω": None if not r.applicable else r.effect_size,  # once (styled)
                "p (adjusted)": None if not r.applicable else r.p_adjusted,
                "": r.stars,
                "audit's setting": r.baseline,
                "note": r.note,
            }
            for r in rows
        ]
    )


def cost_table(result: SensitivityResult) -> pd.DataFrame:
    def num(v: float) -> float | None:
        return None if isinstance(v, float) and math.isnan(v) else v

    return pd.DataFrame(
        [
            {
                "kind": c.kind,
                "model": c.model,
                "samples / texts": c.items,
                "new now": c.new,
                "input tokens": c.input_tokens,
                "output tokens": c.output_tokens,
                "$ / 1M input": num(c.price_input),
                "$ / 1M output": num(c.price_output),
                "cost $": num(c.cost),
                "paid now $": num(c.cost_new),
                "note": c.note,
            }
            for c in result.cost
        ]
    )


def report_html(result: SensitivityResult, alpha: float) -> str:
    """The core's HTML report with these Plotly charts in place of its SVG ones."""
    charts: dict[str, str] = {}
    first = True
    for s in result.studies:
        figs = (
            [length_figure(result, alpha)]
            if s == "length"
            else [effect_figure(result, s), pvalue_figure(result, s, alpha)]
        )
        parts = []
        for f in figs:
            parts.append(f.to_html(full_html=False, include_plotlyjs=True if first else False))
            first = False
        charts[STUDY_TITLES[s]] = "".join(parts)
    return result.to_html(charts=charts)
