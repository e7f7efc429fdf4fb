"""Files an auditor can file: results as CSV (with every setting on every row), JSON (with
the tool version and the run's time), the spec as YAML, and a self-contained HTML report
(plain-language verdict, table, charts with plotly.js inlined once, every response — all
model output and names escaped; rendered from the library's templates, in the layout and
stylesheet every dbpa report shares). Files are named after the audit, the model and the date.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import plotly.graph_objects as go

from dbpa_core import __version__
from dbpa_core.audit import AuditResult
from dbpa_core.render import document, markup
from dbpa_core.spec import dump_spec

from . import checks_figures, verdicts
from .figures import resolution


@dataclass(frozen=True)
class RunMeta:
    """When and where a result was made: it names the files and heads every export."""

    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    run_id: int | None = None
    source: str = "dashboard"
    tool_version: str = __version__

    def to_dict(self) -> dict:
        return {
            "run_id": self.run_id,
            "created_at": self.created_at.isoformat(timespec="seconds"),
            "source": self.source,
            "tool": "dbpa",
            "tool_version": self.tool_version,
        }


def slug(text: str, limit: int = 40) -> str:
    s = re.sub(r"[^A-Za-z0-9.=]+", "-", str(text)).strip("-.").lower()
    return s[:limit].rstrip("-.") or "audit"


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


SETTING_COLUMNS = (
    "samples_k",
    "permutations_B",
    "p_resolution",
    "measure",
    "null",
    "min_effect",
    "correction",
    "alpha",
    "seed",
    "temperature",
    "top_p",
    "max_tokens",
    "similarity",
    "reference_model",
)


def settings_of(result: AuditResult) -> dict:
    """Every setting that changes a result (``reference_model``: the model the others were
    compared with, on a model comparison; empty otherwise)."""
    s = result.spec
    return {
        "samples_k": s.samples,
        "permutations_B": s.permutations,
        "p_resolution": resolution(s.permutations),
        "measure": s.measure,
        "null": s.null,
        "min_effect": "" if s.min_effect is None else s.min_effect,
        "correction": s.correction,
        "alpha": s.alpha,
        "seed": s.seed,
        "temperature": s.temperature,
        "top_p": s.top_p,
        "max_tokens": s.max_tokens,
        "similarity": s.embedder.get("backend", "local"),
        "reference_model": result.base.arm.model_label if result.mode == "models" else "",
    }


def results_csv(result: AuditResult, meta: RunMeta) -> str:
    """One row per perturbation, each carrying the settings and the run it came from, so a
    row read on its own still says how it was obtained."""
    cols = [
        "audit",
        "run_id",
        "created_at",
        "source",
        "tool_version",
        "model",
        "name",
        "role",
        "effect_size",
        "chance_effect_size",
        "effect_above_chance",
        "p_value",
        "p_adjusted",
        "significant",
        "stars",
        *SETTING_COLUMNS,
        "prompt",
    ]
    check_cols, check_values = checks_figures.csv_fields(result)  # the answer checks
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols + check_cols, extrasaction="ignore")
    w.writeheader()
    common = {
        "audit": result.spec.name,
        "run_id": meta.run_id or "",
        "created_at": meta.created_at.isoformat(timespec="seconds"),
        "source": meta.source,
        "tool_version": meta.tool_version,
        **settings_of(result),
    }
    for p in result.perturbations:
        w.writerow({**p.to_dict(), **common, **check_values.get(p.name, {})})
    return buf.getvalue()


def results_json(result: AuditResult, meta: RunMeta) -> str:
    out = {
        **meta.to_dict(),
        "exported_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "settings": settings_of(result),
        **result.to_dict(arrays=True),
    }
    return json.dumps(out, indent=2, ensure_ascii=False)


def spec_yaml(result_or_spec, meta: RunMeta | None = None) -> str:
    spec = getattr(result_or_spec, "spec", result_or_spec)
    when = (meta.created_at if meta else datetime.now(UTC)).strftime("%Y-%m-%d %H:%M UTC")
    return dump_spec(
        spec,
        header=f"dbpa audit spec from the dashboard ({when}, dbpa "
        f"{__version__}). Run it with: dbpa audit THIS_FILE --out DIR",
    )


# --------------------------------------------------------------------------- HTML
def html_report(
    title: str,
    results: Sequence[AuditResult] | Mapping[str, AuditResult],
    figures: Mapping[str, go.Figure | None],
    meta: RunMeta | None = None,
) -> str:
    """The report (``dbpa_core/templates/audit.html.j2``, in the layout and stylesheet
    every dbpa report shares): verdict first, then settings and table per audit, charts
    (plotly.js inlined once), responses."""
    if not isinstance(results, Mapping):
        results = {r.base.arm.model_label: r for r in results}
    meta = meta or RunMeta()
    figures = {**figures, **checks_figures.report_figures(results)}
    shown = [(name, fig) for name, fig in figures.items() if fig is not None]
    charts = [
        (name, markup(fig.to_html(full_html=False, include_plotlyjs=i == 0)))
        for i, (name, fig) in enumerate(shown)
    ]
    failure = verdicts.control_failure_sentence(results)
    several = len(results) > 1
    recorded = None
    if meta.source == "recorded":
        recorded = str(next(iter(results.values())).usage.get("recorded", ""))
    return document(
        "audit.html.j2",
        title=title,
        run_id=meta.run_id,
        created_at=meta.created_at,
        run_version=meta.tool_version,
        recorded=recorded,
        failure=failure,
        untestable=verdicts.control_untestable_sentence(results),
        gate_passed=not failure and any(g.controls for g in verdicts.gates(results)),
        summaries=[(job if several else "", verdicts.summary_sentence(r)) for job, r in results.items()],
        audits=[
            {
                "job": job,
                "result": r,
                "resolution": resolution(r.spec.permutations),
                "checks": checks_figures.checks_html(r),
                "arms": (r.base, *r.arms),
            }
            for job, r in results.items()
        ],
        charts=charts,
    )
