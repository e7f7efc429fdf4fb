"""A self-contained HTML report of a fidelity analysis, with its chart as inline SVG (no
JavaScript, no plotting library: the library stays free of plotly; the dashboard passes
its Plotly charts in ``charts_html`` instead). All names and texts are escaped."""
from __future__ import annotations

import html
from datetime import UTC, datetime

import numpy as np

from . import curve as cv
from .analysis import _pct

COLORS = ("#3B6FD8", "#F28E2B", "#59A14F", "#B07AA1", "#E15759", "#76B7B2", "#EDC948",
          "#FF9DA7", "#9C755F", "#4E79A7")
UNIFORM_COLOR = "#7B8794"
CSS = """
body{font-family:Inter,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:1100px;
color:#1f2933;padding:0 1rem}h1{font-size:1.6rem}h2{margin-top:2rem;border-bottom:1px solid #e4e7eb}
table{border-collapse:collapse;width:100%;font-size:.9rem}td,th{border-bottom:1px solid #e4e7eb;
padding:.35rem .5rem;text-align:left}.muted{color:#616e7c;font-size:.85rem}
.verdict{font-size:1.02rem;font-weight:600;margin:.3rem 0}svg text{font-family:inherit}
"""


def color_of(i: int, name: str) -> str:
    return UNIFORM_COLOR if name == "uniform" else COLORS[i % len(COLORS)]


def band_simulator(result) -> str | None:
    """Whose tightness band the report shades: the simulator with the lowest AUC_cal (one
    band: four overlapping ones cannot be read)."""
    if not result.has_band:
        return None
    sims = [s for s in result.simulators if s.name != "uniform"] or list(result.simulators)
    return min(sims, key=lambda s: s.auc_cal).name


def curve_svg(result, *, width: int = 760, height: int = 420) -> str:
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

    def x(t):
        return left + pw * t

    def y(v):
        return top + ph * (1 - v / ymax)

    parts = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
             f"viewBox='0 0 {width} {height}' role='img' aria-label='calibrated quantile curves'>",
             f"<rect x='{left}' y='{top}' width='{pw}' height='{ph}' fill='#fff' stroke='#cbd2d9'/>"]
    for k in range(6):
        v = ymax * k / 5
        parts.append(f"<line x1='{left}' x2='{left + pw}' y1='{y(v):.1f}' y2='{y(v):.1f}' "
                     "stroke='#eef0f2'/>")
        parts.append(f"<text x='{left - 6}' y='{y(v) + 4:.1f}' font-size='11' text-anchor='end' "
                     f"fill='#52606d'>{v:.3g}</text>")
        t = k / 5
        parts.append(f"<text x='{x(t):.1f}' y='{top + ph + 16}' font-size='11' "
                     f"text-anchor='middle' fill='#52606d'>{t:.1f}</text>")
    parts.append(f"<text x='{left + pw / 2}' y='{height - 8}' font-size='12' text-anchor='middle' "
                 "fill='#1f2933'>τ (share of scenarios)</text>")
    parts.append(f"<text transform='rotate(-90)' x='{-(top + ph / 2)}' y='16' font-size='12' "
                 f"text-anchor='middle' fill='#1f2933'>V̂_cal(τ) ({html.escape(result.loss)})</text>")
    for i, s, _tau, _val, band in series:
        col = color_of(i, s.name)
        if band is not None:
            lo, hi = np.asarray(band[0]), np.asarray(band[1])
            pts = [f"{x(t):.1f},{y(v):.1f}" for t, v in zip(grid, hi, strict=True)]
            pts += [f"{x(t):.1f},{y(v):.1f}" for t, v in zip(grid[::-1], lo[::-1], strict=True)]
            parts.append(f"<polygon points='{' '.join(pts)}' fill='{col}' fill-opacity='0.10' "
                         "stroke='none'/>")
    t_star = 1 - result.alpha                                 # the guarantee's τ = 1 - α
    parts.append(f"<line x1='{x(t_star):.1f}' x2='{x(t_star):.1f}' y1='{top}' y2='{top + ph}' "
                 "stroke='#9AA5B1' stroke-dasharray='2 3'/>")
    parts.append(f"<text x='{x(t_star) - 4:.1f}' y='{top + 12}' font-size='11' "
                 f"text-anchor='end' fill='#616E7C'>τ = 1 − α = {t_star:g}</text>")
    for i, s, tau, val, _band in series:
        col = color_of(i, s.name)
        pts, prev = [], 0.0
        for t, v in zip(tau, val, strict=True):
            pts += [f"{x(prev):.1f},{y(v):.1f}", f"{x(t):.1f},{y(v):.1f}"]
            prev = t
        dash = " stroke-dasharray='6 4'" if s.name == "uniform" else ""
        parts.append(f"<polyline points='{' '.join(pts)}' fill='none' stroke='{col}' "
                     f"stroke-width='2'{dash}/>")
    for k, (i, s, *_rest) in enumerate(series):
        col = color_of(i, s.name)
        ly = top + 14 + 18 * k
        dash = " stroke-dasharray='6 4'" if s.name == "uniform" else ""
        parts.append(f"<line x1='{left + pw + 12}' x2='{left + pw + 36}' y1='{ly}' y2='{ly}' "
                     f"stroke='{col}' stroke-width='2'{dash}/>")
        parts.append(f"<text x='{left + pw + 42}' y='{ly + 4}' font-size='12' fill='#1f2933'>"
                     f"{html.escape(s.name[:18])}</text>")
    for i, s, _tau, _val, band in series:
        if band is not None:                                  # the band's own legend entry
            ly = top + 14 + 18 * len(series)
            parts.append(f"<rect x='{left + pw + 12}' y='{ly - 6}' width='24' height='12' "
                         f"fill='{color_of(i, s.name)}' fill-opacity='0.18'/>")
            parts.append(f"<text x='{left + pw + 42}' y='{ly + 4}' font-size='12' "
                         f"fill='#1f2933'>{html.escape(s.name[:12])} band</text>")
    parts.append("</svg>")
    return "".join(parts)


def report_html(result, *, charts_html: str | None = None, title: str = "Simulator fidelity") -> str:
    """The report: settings, the plain-language guarantee, the summary table, each pair's
    verdict, the chart (``charts_html``, else inline SVG) and the per-scenario values."""
    r = result
    noun = "questions"
    body = [f"<h1>{html.escape(title)}</h1>",
            f"<p class='muted'>Generated {datetime.now(UTC):%Y-%m-%d %H:%M UTC} by dbpa from "
            f"{html.escape(str(r.data.source))}: {r.m} {noun}, loss <b>{html.escape(r.loss)}</b>, "
            f"{html.escape(r.set_name)} confidence sets with coverage γ = {r.gamma:g}, "
            f"η = {r.eta:g}, α = {r.alpha:g}.</p>",
            "<h2>What the curve says</h2>",
            f"<p>For each simulator, V̂_cal(τ) is a calibrated upper bound of the τ-quantile of "
            f"its discrepancy from the real answers across {noun}: at τ = {1 - r.alpha:g}, "
            f"{_pct(1 - r.alpha)} of {noun} are at most that far off (worst case over their "
            "confidence sets). AUC_cal is the area under the curve (lower is better); CVaR₁₀ "
            "the mean of its worst 10 %.</p>",
            f"<p class='verdict'>{html.escape(r.ranking_sentence())}</p>",
            f"<p>{html.escape(r.baseline_text())}</p>",
            f"<p class='verdict'>{html.escape(r.guarantee_text(noun))}</p>",
            f"<p>Planning: {html.escape(r.plan().sentence())}</p>"]
    for w in r.warnings:
        body.append(f"<p class='muted'>Note: {html.escape(w)}</p>")
    rows = "".join(
        f"<tr><td>{html.escape(s.name)}</td><td>{html.escape(s.kind)}</td>"
        f"<td>{html.escape(r.sample_size_summary(s.name))}</td>"
        f"<td>{html.escape(s.method_text)}</td>"
        + (f"<td>{html.escape(s.lower_method_text)}</td>" if r.has_band else "")
        + f"<td>{s.auc_cal:.4f}</td>"
        f"<td>{s.cvar():.4f}</td><td>{s.guarantee_quantile:.4f}</td></tr>" for s in r.simulators)
    body.append(f"<h2>Summary</h2><p class='muted'>Real answers per question: "
                f"{html.escape(r.n_summary())}. Simulated answers per question: k below.</p>"
                "<table><tr><th>simulator</th><th>answers</th><th>k per question</th>"
                "<th>worst case Δ̂</th>" + ("<th>best case Δ⁻ (band)</th>" if r.has_band else "")
                + f"<th>AUC_cal</th><th>CVaR₁₀</th><th>V̂_m(1 − α/2)</th></tr>{rows}</table>")
    if r.comparisons:
        body.append("<h2>Which simulator is better</h2>")
        for c in r.comparisons:
            body.append(f"<p class='verdict'>{'✓ ' if c.guaranteed else ''}"
                        f"{html.escape(c.sentence(noun))}</p>"
                        f"<p class='muted'>Û_m(1 − α/2) = {c.u_hat:+.4f} ({html.escape(c.first)} "
                        f"against {html.escape(c.second)}), {c.u_hat_reverse:+.4f} the other way; "
                        "≤ 0 means at least as good.</p>")
        if r.comparison_note:
            body.append(f"<p class='muted'>{html.escape(r.comparison_note)}</p>")
    body.append("<h2>Calibrated quantile curves</h2>" + (charts_html or curve_svg(r)))
    if r.has_band:
        body.append(f"<p class='muted'>Shaded: the tightness band V̂⁻_m(γτ) … V̂_m(γ + (1 − γ)τ) "
                    f"of {html.escape(band_simulator(r))} (γ = {r.gamma:g}); the curve of its real "
                    "discrepancies lies inside it (asymptotically).</p>")
    head = "".join(f"<th>{html.escape(s.name)}</th>" for s in r.simulators)
    uppers = [s.upper.tolist() for s in r.simulators]     # plain floats format faster
    lines = "".join(
        f"<tr><td>{html.escape(sc.id)}</td><td>{sc.n:g}</td>"
        + "".join(f"<td>{u[j]:.4f}</td>" for u in uppers) + "</tr>"
        for j, sc in enumerate(r.data.scenarios))
    body.append(f"<h2>Per {noun[:-1]}: worst-case discrepancy Δ̂</h2><table><tr><th>id</th>"
                f"<th>n real</th>{head}</tr>{lines}</table>")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{CSS}</style></head><body>{''.join(body)}</body></html>")


__all__ = ["COLORS", "curve_svg", "report_html"]
