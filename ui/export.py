"""Files an auditor can file: results as CSV (with every setting on every row), JSON (with
the tool version and the run's time), the spec as YAML, and a self-contained HTML report
(plain-language verdict, table, charts with plotly.js inlined once, every response — all
model output and names escaped). Files are named after the audit, the model and the date.
"""
from __future__ import annotations

import csv
import html
import io
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import plotly.graph_objects as go

from dbpa_core import __version__
from dbpa_core.audit import AuditResult
from dbpa_core.spec import dump_spec

from . import checks_figures, verdicts
from .figures import fmt_effect, fmt_p, resolution

CSS = """
body{font-family:Inter,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:1100px;
color:#1f2933;padding:0 1rem}h1{font-size:1.6rem}h2{margin-top:2rem;border-bottom:1px solid #e4e7eb}
table{border-collapse:collapse;width:100%;font-size:.9rem}td,th{border-bottom:1px solid #e4e7eb;
padding:.35rem .5rem;text-align:left}pre{white-space:pre-wrap;background:#f5f7fa;padding:.6rem;
border-radius:6px;font-size:.85rem}.muted{color:#616e7c;font-size:.85rem}
.verdict{font-size:1.05rem;font-weight:600}.fail{color:#b42318;background:#fef3f2;
padding:.6rem .8rem;border-radius:6px;border-left:4px solid #d92d20}
.pass{color:#067647;background:#ecfdf3;padding:.6rem .8rem;border-radius:6px}
.note{color:#1e3a8a;background:#eff6ff;padding:.6rem .8rem;border-radius:6px;
border-left:4px solid #3b6fd8}
"""


@dataclass(frozen=True)
class RunMeta:
    """When and where a result was made: it names the files and heads every export."""

    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    run_id: int | None = None
    source: str = "dashboard"
    tool_version: str = __version__

    def to_dict(self) -> dict:
        return {"run_id": self.run_id, "created_at": self.created_at.isoformat(timespec="seconds"),
                "source": self.source, "tool": "dbpa", "tool_version": self.tool_version}


def slug(text: str, limit: int = 40) -> str:
    s = re.sub(r"[^A-Za-z0-9.=]+", "-", str(text)).strip("-.").lower()
    return (s[:limit].rstrip("-.") or "audit")


def stem(name: str, who: str, when: datetime) -> str:
    """``<name>_<who>_<YYYY-MM-DD_HHMM>``: what, on which model, when (every download)."""
    return f"{slug(name)}_{slug(who)}_{when:%Y-%m-%d_%H%M}"


def models_of(result: AuditResult) -> str:
    """Who a result is about: its model, or ``<reference>-vs-<model>...`` for a comparison."""
    if result.mode == "models":
        return "-vs-".join([result.base.arm.model_label, *(a.arm.model_label for a in result.arms)])
    return result.base.arm.model_label


def file_stem(result: AuditResult, meta: RunMeta, job: str | None = None) -> str:
    """``<audit>_<model>_<YYYY-MM-DD_HHMM>``: what, on which model(s), when."""
    return stem(result.spec.name, models_of(result), meta.created_at)


SETTING_COLUMNS = ("samples_k", "permutations_B", "p_resolution", "measure", "null",
                   "min_effect", "correction", "alpha", "seed", "temperature", "top_p",
                   "max_tokens", "similarity", "reference_model")


def settings_of(result: AuditResult) -> dict:
    """Every setting that changes a result (``reference_model``: the model the others were
    compared with, on a model comparison; empty otherwise)."""
    s = result.spec
    return {"samples_k": s.samples, "permutations_B": s.permutations,
            "p_resolution": resolution(s.permutations), "measure": s.measure, "null": s.null,
            "min_effect": "" if s.min_effect is None else s.min_effect,
            "correction": s.correction, "alpha": s.alpha, "seed": s.seed,
            "temperature": s.temperature, "top_p": s.top_p, "max_tokens": s.max_tokens,
            "similarity": s.embedder.get("backend", "local"),
            "reference_model": result.base.arm.model_label if result.mode == "models" else ""}


def results_csv(result: AuditResult, meta: RunMeta) -> str:
    """One row per perturbation, each carrying the settings and the run it came from, so a
    row read on its own still says how it was obtained."""
    cols = ["audit", "run_id", "created_at", "source", "tool_version", "model", "name", "role",
            "effect_size", "chance_effect_size", "effect_above_chance", "p_value",
            "p_adjusted", "significant", "stars", *SETTING_COLUMNS, "prompt"]
    check_cols, check_values = checks_figures.csv_fields(result)  # the answer checks
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols + check_cols, extrasaction="ignore")
    w.writeheader()
    common = {"audit": result.spec.name, "run_id": meta.run_id or "",
              "created_at": meta.created_at.isoformat(timespec="seconds"),
              "source": meta.source, "tool_version": meta.tool_version, **settings_of(result)}
    for p in result.perturbations:
        w.writerow({**p.to_dict(), **common, **check_values.get(p.name, {})})
    return buf.getvalue()


def results_json(result: AuditResult, meta: RunMeta) -> str:
    out = {**meta.to_dict(), "exported_at": datetime.now(UTC).isoformat(timespec="seconds"),
           "settings": settings_of(result), **result.to_dict(arrays=True)}
    return json.dumps(out, indent=2, ensure_ascii=False)


def spec_yaml(result_or_spec, meta: RunMeta | None = None) -> str:
    spec = getattr(result_or_spec, "spec", result_or_spec)
    when = (meta.created_at if meta else datetime.now(UTC)).strftime("%Y-%m-%d %H:%M UTC")
    return dump_spec(spec, header=f"dbpa audit spec from the dashboard ({when}, dbpa "
                     f"{__version__}). Run it with: dbpa audit THIS_FILE --out DIR")


# --------------------------------------------------------------------------- HTML
def _table(result: AuditResult) -> str:
    delta = result.spec.min_effect
    head = ("<tr><th>perturbation</th><th>role</th><th>model</th><th>ω above chance</th>"
            "<th>ω</th><th>chance ω</th><th>p (raw)</th><th>p (adjusted)</th><th></th>"
            "<th>verdict</th>" + (f"<th>&gt; δ = {delta:g}</th>" if delta is not None else "")
            + "</tr>")
    rows = "".join(
        f"<tr><td>{html.escape(p.name)}</td><td>{html.escape(p.role or '')}</td>"
        f"<td>{html.escape(p.model)}</td><td>{fmt_effect(p.effect_above_chance, signed=True)}"
        f"</td><td>{fmt_effect(p.effect_size)}</td><td>{fmt_effect(p.chance_effect_size)}</td>"
        f"<td>{html.escape(fmt_p(p.p_value))}</td><td>{html.escape(fmt_p(p.p_adjusted))}</td>"
        f"<td>{p.stars}</td><td>{'significant' if p.significant else 'not significant'}</td>"
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


def _verdict(results: Mapping[str, AuditResult]) -> str:
    out = []
    failure = verdicts.control_failure_sentence(results)
    if failure:
        out.append(f"<p class='fail'>{html.escape(failure)}</p>")
    elif any(g.controls for g in verdicts.gates(results)):
        out.append("<p class='pass'>Control gate passed: no perturbation marked control "
                   "changed the answers detectably.</p>")
    for job, r in results.items():
        who = f"{html.escape(job)}: " if len(results) > 1 else ""
        out.append(f"<p class='verdict'>{who}{html.escape(verdicts.summary_sentence(r))}</p>")
    return "".join(out)


def html_report(title: str, results: Sequence[AuditResult] | Mapping[str, AuditResult],
                figures: Mapping[str, go.Figure | None], meta: RunMeta | None = None) -> str:
    """The report: verdict first, then settings and table per audit, charts, responses."""
    if not isinstance(results, Mapping):
        results = {r.base.arm.model_label: r for r in results}
    meta = meta or RunMeta()
    figures = {**figures, **checks_figures.report_figures(results)}
    charts = []
    first = True
    for name, fig in figures.items():
        if fig is None:
            continue
        charts.append(f"<h3>{html.escape(name)}</h3>" + fig.to_html(
            full_html=False, include_plotlyjs=True if first else False))
        first = False
    run = f"run {meta.run_id}, " if meta.run_id else ""
    body = [f"<h1>{html.escape(title)}</h1>",
            f"<p class='muted'>{run}{meta.created_at:%Y-%m-%d %H:%M} UTC, dbpa "
            f"{html.escape(meta.tool_version)}; report written {datetime.now(UTC):%Y-%m-%d %H:%M} "
            "UTC.</p>",
            *([f"<p class='note'>Recorded result: these answers were recorded earlier "
               f"({html.escape(str(next(iter(results.values())).usage.get('recorded', '')))}) "
               "and replayed, not sampled when this report was made. Run the audit to sample "
               "them afresh.</p>"] if meta.source == "recorded" else []),
            "<h2>Verdict</h2>", _verdict(results),
            "<p class='muted'>ω is the effect size and chance ω what chance alone gives at "
            "this k; ω above chance (ω − chance ω) is about 0 when nothing changed. p (raw) comes from a "
            "permutation test on the responses' similarities; p (adjusted) corrects it for "
            "the number of perturbations tested; a perturbation is significant when its "
            "adjusted p is at most α. Stars mark the adjusted p (* &lt; .05, ** &lt; .01, "
            "*** &lt; .001). A p shown as &lt; 0.0001 is below the table's precision; no p "
            "can be smaller than 1/(B+1).</p>"]
    for job, r in results.items():
        s = r.spec
        body.append(f"<h2>{html.escape(job)}: {html.escape(s.name)}</h2>")
        body.append(f"<p class='muted'>Model: {html.escape(r.base.arm.model_label)}<br>Base "
                    f"prompt: {html.escape(s.base_prompt)}<br>k = {s.samples}, B = "
                    f"{s.permutations} (smallest possible p = {fmt_p(resolution(s.permutations))}"
                    f"), ω = {html.escape(s.measure)}, correction = {html.escape(s.correction)}, "
                    f"α = {s.alpha}, seed = {s.seed}, temperature = {s.temperature}, max tokens "
                    f"= {s.max_tokens}, similarity = "
                    f"{html.escape(str(s.embedder.get('backend', 'local')))}</p>")
        body.append(_table(r) + checks_figures.checks_html(r))
        for w in r.warnings:
            body.append(f"<p class='muted'>Warning: {html.escape(w)}</p>")
    body.append("<h2>Charts</h2>" + "".join(charts))
    body.append("<h2>Responses</h2>" + "".join(_responses(r) for r in results.values()))
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
            f"</title><style>{CSS}</style></head><body>{''.join(body)}</body></html>")
