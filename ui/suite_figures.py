"""A suite of cases -> Plotly figure (no Streamlit): the cases x perturbations heat map.

Colour is the effect above chance of each case x perturbation test where it is
significant after the suite's correction; a cell whose change the data cannot show after
the correction is grey. The tooltip gives ω, the effect above chance, p and p adjusted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from .figures import base_layout, esc, p_text

GREY = "#D9DEE5"
TEXT_CELLS = 400  # cells written in (a larger grid is read by colour and tooltip only)


def grid(tests: Sequence[dict[str, Any]]) -> tuple[list[str], list[str], dict]:
    """(case ids, perturbation names, {(case, perturbation): test}) in the suite's order."""
    cases: dict[str, None] = {}
    perts: dict[str, None] = {}
    cells = {}
    for t in tests:
        c, p = str(t["case"]), str(t["perturbation"])
        cases.setdefault(c)
        perts.setdefault(p)
        cells[(c, p)] = t
    return list(cases), list(perts), cells


def heatmap(
    tests: Sequence[dict[str, Any]],
    *,
    selected: tuple[str, str] | None = None,
    correction: str = "",
    title: str | None = None,
) -> go.Figure:
    """Cases (rows) x perturbations (columns); see the module's docstring."""
    cases, perts, cells = grid(tests)
    sig = np.full((len(cases), len(perts)), np.nan)
    ns = np.full_like(sig, np.nan)
    hover = [["" for _ in perts] for _ in cases]
    text = [["" for _ in perts] for _ in cases]
    for i, c in enumerate(cases):
        for j, p in enumerate(perts):
            t = cells.get((c, p))
            if t is None:
                continue
            above = float(t["effect_above_chance"])
            if t.get("significant"):
                sig[i, j] = above
                text[i][j] = f"{above:+.2f}{t.get('stars', '')}"
                verdict = "significant after the correction"
            else:
                ns[i, j] = 0.0
                text[i][j] = f"{above:+.2f}"
                verdict = "not detectable after the correction"
            hover[i][j] = (
                f"<b>{esc(c)}</b> · {esc(p)}<br>ω = {float(t['omega']):.3f}, chance "
                f"gives {float(t['chance']):.3f}: {above:+.3f} above chance<br>"
                f"{p_text(float(t['p_value']), raw=True)}, "
                f"{p_text(float(t['p_adjusted']))}<br>{verdict}"
            )
    show_text = len(cases) * len(perts) <= TEXT_CELLS
    top = float(np.nanmax(sig)) if np.isfinite(sig).any() else 0.1
    gap = 2 if len(cases) <= 60 else 0
    common = dict(
        x=[esc(p) for p in perts],
        y=[esc(c) for c in cases],
        customdata=hover,
        hovertemplate="%{customdata}<extra></extra>",
        hoverongaps=False,
        xgap=gap,
        ygap=gap,
        **({"text": text, "texttemplate": "%{text}"} if show_text else {}),
    )
    fig = go.Figure()
    fig.add_trace(
        go.Heatmap(
            z=ns,
            colorscale=[[0, GREY], [1, GREY]],
            showscale=False,
            name="not detectable",
            textfont=dict(color="#52606D"),
            **common,
        )
    )
    fig.add_trace(
        go.Heatmap(
            z=sig,
            colorscale="YlOrRd",
            zmin=min(0.0, float(np.nanmin(sig))) if np.isfinite(sig).any() else 0.0,
            zmax=max(0.1, top),
            name="significant",
            colorbar=dict(title=dict(text="ω above<br>chance")),
            **common,
        )
    )
    fig.update_yaxes(autorange="reversed", title="case", type="category")
    fig.update_xaxes(title="perturbation", side="top", type="category")
    height = int(min(1400, max(320, 120 + 26 * len(cases))))
    base_layout(fig, title=title, height=height)
    fig.update_layout(margin=dict(l=90, r=20, t=90 if title else 70, b=30))
    if selected is not None and selected[0] in cases and selected[1] in perts:
        i, j = cases.index(selected[0]), perts.index(selected[1])
        fig.add_shape(
            type="rect",
            x0=j - 0.5,
            x1=j + 0.5,
            y0=i - 0.5,
            y1=i + 0.5,
            line=dict(color="#1F2933", width=4),
            fillcolor="rgba(0,0,0,0)",
        )
    if correction:
        fig.add_annotation(
            text=f"grey: not detectable after the {esc(correction)} correction across the suite",
            xref="paper",
            yref="paper",
            x=0,
            y=-0.02,
            yanchor="top",
            showarrow=False,
            font=dict(size=11, color="#52606D"),
        )
    return fig


__all__ = ["grid", "heatmap"]
