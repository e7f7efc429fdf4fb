"""Explanation -> Plotly figures for the "Why" view (no Streamlit, no statistics)."""

from __future__ import annotations

import html

import plotly.graph_objects as go

from dbpa_core.explain import Explanation

from .figures import ALT_COLOR, NULL_COLOR, base_layout


def terms_figure(
    ex: Explanation, *, n: int = 12, base_label: str = "base", perturbed_label: str = "perturbed"
) -> go.Figure:
    """Diverging bar chart of the distinguishing terms: z of the weighted log-odds,
    left (blue) for terms typical of the base answers, right (orange) for the
    perturbed ones; dotted lines at |z| = 1.96."""
    base_label, perturbed_label = html.escape(base_label), html.escape(perturbed_label)
    # bottom to top: the strongest base term at the bottom, the strongest perturbed on top
    ordered = sorted(ex.terms_for("base", n) + ex.terms_for("perturbed", n), key=lambda t: t.z)
    fig = go.Figure(
        go.Bar(
            x=[t.z for t in ordered],
            y=[t.term for t in ordered],
            orientation="h",
            marker_color=[ALT_COLOR if t.z > 0 else NULL_COLOR for t in ordered],
            customdata=[[t.count_base, t.count_perturbed] for t in ordered],
            hovertemplate=(
                f"%{{y}}<br>z = %{{x:.2f}}<br>{base_label}: %{{customdata[0]}}×"
                f"<br>{perturbed_label}: %{{customdata[1]}}×<extra></extra>"
            ),
        )
    )
    for x in (-1.96, 1.96):
        fig.add_vline(x=x, line_dash="dot", line_color="#9AA5B1")
    fig.add_vline(x=0, line_color="#52606D", line_width=1)
    top = max([abs(t.z) for t in ordered] + [2.5])
    fig.update_xaxes(
        title_text=f"← more in {base_label}        z (weighted log-odds)        more in {perturbed_label} →",
        range=[-top * 1.1, top * 1.1],
        zeroline=False,
    )
    fig.update_yaxes(type="category", automargin=True)
    fig.update_layout(showlegend=False, bargap=0.25)
    return base_layout(fig, title="Words and phrases that moved", height=max(260, 60 + 22 * len(ordered)))
