"""Run comparison -> Plotly figure (no Streamlit): each perturbation's ω above chance in
run A and in run B, filled where significant, with the verdict changes in red."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go

from dbpa_core.history import RunComparison

from .figures import ACCENT, base_layout, esc, p_text

A_COLOR = "#5B8DEF"
B_COLOR = "#F28E2B"


def comparison_figure(cmp: RunComparison) -> go.Figure:
    """A dumbbell per perturbation tested in both runs: A (blue) and B (orange) ω above
    chance on one line; a filled marker is significant, a hollow one is not; the line is red
    where the verdict changed."""
    rows = [r for r in cmp.rows if r.a is not None and r.b is not None]
    several = len({r.job for r in rows}) > 1
    labels = [esc(f"{r.job}: {r.name}" if several else r.name) for r in rows]
    fig = go.Figure()
    for y, r in zip(labels, rows, strict=True):
        fig.add_trace(
            go.Scatter(
                x=[r.a.effect_above_chance, r.b.effect_above_chance],
                y=[y, y],
                mode="lines",
                line=dict(
                    color=ACCENT if r.verdict_changed else "#CBD2D9", width=3 if r.verdict_changed else 2
                ),
                hoverinfo="skip",
                showlegend=False,
            )
        )
    for side, color, name in (("a", A_COLOR, f"A: run {cmp.a.id}"), ("b", B_COLOR, f"B: run {cmp.b.id}")):
        ps = [getattr(r, side) for r in rows]
        fig.add_trace(
            go.Scatter(x=[None], y=[None], mode="markers", name=name, marker=dict(size=13, color=color))
        )  # the legend's entry
        fig.add_trace(
            go.Scatter(
                x=[p.effect_above_chance for p in ps],
                y=labels,
                mode="markers",
                name=name,
                showlegend=False,
                marker=dict(
                    size=13,
                    color=[color if p.significant else "white" for p in ps],
                    line=dict(color=color, width=2.5),
                ),
                customdata=[
                    [
                        p.effect_size,
                        p_text(p.p_adjusted),
                        "significant" if p.significant else "not significant",
                    ]
                    for p in ps
                ],
                hovertemplate="%{y}<br>ω above chance %{x:+.3f} (ω = %{customdata[0]:.3f})<br>"
                "%{customdata[1]}, %{customdata[2]}<extra>" + name + "</extra>",
            )
        )
    fig.add_vline(x=0, line_color="#52606D", line_width=1)
    fig.update_xaxes(title_text="ω above chance (filled: significant; hollow: not)")
    fig.update_yaxes(autorange="reversed")
    return base_layout(
        fig, title="Run A vs run B — red lines: the verdict changed", height=140 + 34 * max(1, len(rows))
    )


def latest_sentence(runs: Sequence[Any], titles: Mapping[str, str]) -> str | None:
    """The History list's verdict in words: how many runs (newest first), and what the
    latest found (``titles``: page key -> page title, for runs without a title)."""
    if not runs:
        return None
    r = runs[0]
    title = r.title or titles.get(r.page or "", "") or "run"
    found = (
        f"{r.n_significant} of {r.n_tests} tests changed the answers detectably"
        if r.n_tests
        else "no permutation test"
    )
    gate = {"fail": "; a control failed", "pass": "; every control passed"}.get(r.control_gate, "")
    return (
        f"{len(runs)} run{'s' if len(runs) != 1 else ''} listed below. The latest, #{r.id} "
        f"({title}, {r.created_at:%Y-%m-%d %H:%M}): {found}{gate}."
    )
