"""A self-contained HTML report of a fidelity analysis (``templates/fidelity.html.j2``, in
the layout every dbpa report shares), with its chart as inline SVG (no JavaScript, no
plotting library: the library stays free of plotly; the dashboard passes its Plotly
charts in ``charts_html`` instead). All names and texts are escaped."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

import numpy as np

from ..render import document, markup
from ..render import section as render_section
from . import curve as cv

if TYPE_CHECKING:
    from .analysis import FidelityResult

COLORS = (
    "#3B6FD8",
    "#F28E2B",
    "#59A14F",
    "#B07AA1",
    "#E15759",
    "#76B7B2",
    "#EDC948",
    "#FF9DA7",
    "#9C755F",
    "#4E79A7",
)
UNIFORM_COLOR = "#7B8794"


def color_of(i: int, name: str) -> str:
    return UNIFORM_COLOR if name == "uniform" else COLORS[i % len(COLORS)]


def band_simulator(result: FidelityResult) -> str | None:
    """Whose tightness band the report shades: the simulator with the lowest AUC_cal (one
    band: four overlapping ones cannot be read)."""
    if not result.has_band:
        return None
    sims = [s for s in result.simulators if s.name != "uniform"] or list(result.simulators)
    return min(sims, key=lambda s: s.auc_cal).name


def curve_svg(result: FidelityResult, *, width: int = 760, height: int = 420) -> str:
    """The calibrated curves (steps), the uniform baseline (dashed) and, when computed, the
    tightness band (shaded) of :func:`band_simulator`, as an SVG element."""
    left, right, top, bottom = 64, 170, 20, 48
    pw, ph = width - left - right, height - top - bottom
    grid = np.linspace(0.0, 1.0, 201)
    series = []
    ymax = 0.0
    shaded = band_simulator(result)
    for i, s in enumerate(result.simulators):
        tau, val = cv.steps(s.upper)
        band = s.band(result.gamma, grid) if s.name == shaded else None
        series.append((i, s, tau, val, band))
        ymax = max(ymax, float(val.max()), float(np.max(band[1])) if band else 0.0)
    ymax = ymax * 1.05 if ymax > 0 else 1.0

    def x(t: float) -> float:
        return left + pw * t

    def y(v: float) -> float:
        return top + ph * (1 - v / ymax)

    parts = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
        f"viewBox='0 0 {width} {height}' role='img' aria-label='calibrated quantile curves'>",
        f"<rect x='{left}' y='{top}' width='{pw}' height='{ph}' fill='#fff' stroke='#cbd2d9'/>",
    ]
    for k in range(6):
        v = ymax * k / 5
        parts.append(f"<line x1='{left}' x2='{left + pw}' y1='{y(v):.1f}' y2='{y(v):.1f}' stroke='#eef0f2'/>")
        parts.append(
            f"<text x='{left - 6}' y='{y(v) + 4:.1f}' font-size='11' text-anchor='end' "
            f"fill='#52606d'>{v:.3g}</text>"
        )
        t = k / 5
        parts.append(
            f"<text x='{x(t):.1f}' y='{top + ph + 16}' font-size='11' "
            f"text-anchor='middle' fill='#52606d'>{t:.1f}</text>"
        )
    parts.append(
        f"<text x='{left + pw / 2}' y='{height - 8}' font-size='12' text-anchor='middle' "
        "fill='#1f2933'>τ (share of scenarios)</text>"
    )
    parts.append(
        f"<text transform='rotate(-90)' x='{-(top + ph / 2)}' y='16' font-size='12' "
        f"text-anchor='middle' fill='#1f2933'>V̂_cal(τ) ({html.escape(result.loss)})</text>"
    )
    for i, s, _tau, _val, band in series:
        col = color_of(i, s.name)
        if band is not None:
            lo, hi = np.asarray(band[0]), np.asarray(band[1])
            pts = [f"{x(t):.1f},{y(v):.1f}" for t, v in zip(grid, hi, strict=True)]
            pts += [f"{x(t):.1f},{y(v):.1f}" for t, v in zip(grid[::-1], lo[::-1], strict=True)]
            parts.append(
                f"<polygon points='{' '.join(pts)}' fill='{col}' fill-opacity='0.10' stroke='none'/>"
            )
    t_star = 1 - result.alpha  # the guarantee's τ = 1 - α
    parts.append(
        f"<line x1='{x(t_star):.1f}' x2='{x(t_star):.1f}' y1='{top}' y2='{top + ph}' "
        "stroke='#9AA5B1' stroke-dasharray='2 3'/>"
    )
    parts.append(
        f"<text x='{x(t_star) - 4:.1f}' y='{top + 12}' font-size='11' "
        f"text-anchor='end' fill='#616E7C'>τ = 1 − α = {t_star:g}</text>"
    )
    for i, s, tau, val, _band in series:
        col = color_of(i, s.name)
        pts, prev = [], 0.0
        for t, v in zip(tau, val, strict=True):
            pts += [f"{x(prev):.1f},{y(v):.1f}", f"{x(t):.1f},{y(v):.1f}"]
            prev = t
        dash = " stroke-dasharray='6 4'" if s.name == "uniform" else ""
        parts.append(
            f"<polyline points='{' '.join(pts)}' fill='none' stroke='{col}' stroke-width='2'{dash}/>"
        )
    for k, (i, s, *_rest) in enumerate(series):
        col = color_of(i, s.name)
        ly = top + 14 + 18 * k
        dash = " stroke-dasharray='6 4'" if s.name == "uniform" else ""
        parts.append(
            f"<line x1='{left + pw + 12}' x2='{left + pw + 36}' y1='{ly}' y2='{ly}' "
            f"stroke='{col}' stroke-width='2'{dash}/>"
        )
        parts.append(
            f"<text x='{left + pw + 42}' y='{ly + 4}' font-size='12' fill='#1f2933'>"
            f"{html.escape(s.name[:18])}</text>"
        )
    for i, s, _tau, _val, band in series:
        if band is not None:  # the band's own legend entry
            ly = top + 14 + 18 * len(series)
            parts.append(
                f"<rect x='{left + pw + 12}' y='{ly - 6}' width='24' height='12' "
                f"fill='{color_of(i, s.name)}' fill-opacity='0.18'/>"
            )
            parts.append(
                f"<text x='{left + pw + 42}' y='{ly + 4}' font-size='12' "
                f"fill='#1f2933'>{html.escape(s.name[:12])} band</text>"
            )
    parts.append("</svg>")
    return "".join(parts)


def report_html(
    result: FidelityResult,
    *,
    charts_html: str | None = None,
    title: str = "Simulator fidelity",
    section: bool = False,
) -> str:
    """The report (``templates/fidelity.html.j2``): settings, the plain-language
    guarantee, the summary table, each pair's verdict, the chart (``charts_html``, else
    inline SVG) and the per-scenario values; ``section``: without the page around it."""
    context = dict(
        title=title,
        result=result,
        noun="questions",
        uppers=[s.upper.tolist() for s in result.simulators],  # plain floats: faster
        chart=markup(charts_html or curve_svg(result)),
        band=band_simulator(result) if result.has_band else None,
    )
    return (render_section if section else document)("fidelity.html.j2", **context)


__all__ = ["COLORS", "curve_svg", "report_html"]
