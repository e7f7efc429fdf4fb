"""A self-contained HTML report: the charts (plotly.js inlined once), the results
table and every response, all escaped (model output is shown as text)."""
from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

import plotly.graph_objects as go

from dbpa_core.audit import AuditResult

CSS = """
body{font-family:Inter,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:1100px;
color:#1f2933;padding:0 1rem}h1{font-size:1.6rem}h2{margin-top:2rem;border-bottom:1px solid #e4e7eb}
table{border-collapse:collapse;width:100%;font-size:.9rem}td,th{border-bottom:1px solid #e4e7eb;
padding:.35rem .5rem;text-align:left}pre{white-space:pre-wrap;background:#f5f7fa;padding:.6rem;
border-radius:6px;font-size:.85rem}.muted{color:#616e7c;font-size:.85rem}
"""


def _table(result: AuditResult) -> str:
    delta = result.spec.min_effect
    head = "<tr><th>perturbation</th><th>role</th><th>model</th><th>ω above chance</th>" \
           "<th>ω</th><th>chance ω</th><th>p</th><th>p (adjusted)</th><th></th>" + \
           (f"<th>&gt; δ = {delta:g}</th>" if delta is not None else "") + "</tr>"
    rows = "".join(
        f"<tr><td>{html.escape(p.name)}</td><td>{html.escape(p.role or '')}</td>"
        f"<td>{html.escape(p.model)}</td><td>{p.effect_above_chance:+.4f}</td>"
        f"<td>{p.effect_size:.4f}</td><td>{p.chance_effect_size:.4f}</td><td>{p.p_value:.4g}</td>"
        f"<td>{p.p_adjusted:.4g}</td><td>{p.stars}</td>"
        + (f"<td>{'yes' if p.exceeds_min_effect else 'no'}</td>" if delta is not None else "")
        + "</tr>" for p in result.perturbations)
    return f"<table>{head}{rows}</table>"


def _responses(result: AuditResult) -> str:
    parts = []
    for a in (result.base, *result.arms):
        items = "".join(f"<pre>{html.escape(t)}</pre>" for t in a.texts)
        parts.append(f"<details><summary>{html.escape(a.arm.name)} — "
                     f"{len(a.texts)} responses</summary>"
                     f"<p class='muted'>Prompt: {html.escape(a.arm.prompt)}</p>{items}</details>")
    return "".join(parts)


def html_report(title: str, results: Sequence[AuditResult],
                figures: Mapping[str, go.Figure | None]) -> str:
    charts = []
    first = True
    for name, fig in figures.items():
        if fig is None:
            continue
        charts.append(f"<h3>{html.escape(name)}</h3>" + fig.to_html(
            full_html=False, include_plotlyjs=True if first else False))
        first = False
    body = [f"<h1>{html.escape(title)}</h1>",
            f"<p class='muted'>Generated {datetime.now(UTC):%Y-%m-%d %H:%M UTC} by dbpa. "
            "ω is the effect size and chance ω what chance alone gives at this k; ω above "
            "chance (ω − chance ω) is about 0 when nothing changed. p comes from a permutation "
            "test on the response embeddings; stars mark the adjusted p (* &lt; .05, "
            "** &lt; .01, *** &lt; .001).</p>"]
    for r in results:
        s = r.spec
        body.append(f"<h2>{html.escape(r.base.arm.model_label)}: {html.escape(s.name)}</h2>")
        body.append(f"<p class='muted'>Base prompt: {html.escape(s.base_prompt)}<br>k = "
                    f"{s.samples}, B = {s.permutations}, ω = {s.measure}, correction = "
                    f"{s.correction}, α = {s.alpha}, temperature = {s.temperature}</p>")
        body.append(_table(r))
    body.append("<h2>Charts</h2>" + "".join(charts))
    body.append("<h2>Responses</h2>" + "".join(_responses(r) for r in results))
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
            f"</title><style>{CSS}</style></head><body>{''.join(body)}</body></html>")
