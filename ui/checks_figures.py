"""Answer checks as a table, a chart and export pieces: what each check's rate (or mean)
is in the base and the perturbed answers, the difference with its 95 % interval, p and
adjusted p. Nothing is computed here beyond arranging what the results carry; no Streamlit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dbpa_core.audit import AuditResult
from dbpa_core.checks import (
    CheckResult,
    signed,  # "−60" / "+0.9": the CLI's signs
)
from dbpa_core.render import partial

from .figures import ALT_COLOR, base_layout, esc, fmt_p

NS_COLOR = "#9AA5B1"
MODEL_GRADED = "model-graded"
# the table's columns, in order (``model`` only when several models are shown)
COLUMNS = (
    "check",
    "graded by",
    "arm",
    "model",
    "base → perturbed",
    "difference",
    "95 % interval",
    "p (raw)",
    "p (adjusted)",
    "",
    "significant",
)


def scale(r: CheckResult) -> tuple[float, str, int]:
    """(factor, unit, decimals) of a check's difference: rates in percentage points,
    numbers (``words``) in words."""
    return (1.0, "words", 1) if r.numeric else (100.0, "points", 0)


def arm_text(r: CheckResult, side: str) -> str:
    """One arm as read in the table: ``18/20 (90 %)``, ``+2 unparsed``; ``mean 84.2 words``."""
    base = side == "base"
    mean = r.base if base else r.value
    n = r.base_n if base else r.n
    if r.numeric:
        return "no answers" if mean is None else f"mean {mean:.1f} words (n = {n})"
    count = r.base_count if base else r.count
    unparsed = r.base_unparsed if base else r.unparsed
    text = f"{count}/{n}" + (f" ({100 * mean:.0f} %)" if mean is not None else "")
    return text + (f", +{unparsed} unparsed" if unparsed else "")


def change_text(r: CheckResult) -> str:
    """``7/10 (70 %) → 1/10 (10 %)``; for a length ``88.6 → 82.2 words (mean, n = 10)``."""
    if r.numeric and r.base is not None and r.value is not None:
        n = f"n = {r.n}" if r.n == r.base_n else f"n = {r.base_n}, {r.n}"
        return f"{r.base:.1f} → {r.value:.1f} words (mean, {n})"
    return f"{arm_text(r, 'base')} → {arm_text(r, 'perturbed')}"


def difference_text(r: CheckResult) -> tuple[str, str]:
    """``(−60 points, [−81, −31])``; dashes when an arm has nothing to compare."""
    if r.difference is None or r.ci is None:
        return "–", "–"
    f, unit, d = scale(r)
    return (
        f"{signed(r.difference * f, d)} {unit}",
        f"[{signed(r.ci[0] * f, d)}, {signed(r.ci[1] * f, d)}]",
    )


def all_checks(results: Mapping[str, AuditResult]) -> list[tuple[str, CheckResult]]:
    """Every check result of every job, as ``(job, result)``."""
    return [(job, c) for job, r in results.items() for c in r.checks]


def checks_frame(results: Mapping[str, AuditResult]) -> pd.DataFrame:
    """One row per check × arm (× model when several jobs), columns :data:`COLUMNS`; p
    values stay numbers so the table sorts by them."""
    rows = []
    several = len(results) > 1
    for job, r in all_checks(results):
        diff, ci = difference_text(r)
        rows.append(
            {
                "check": r.check,
                "graded by": MODEL_GRADED if r.model_graded else "rule",
                "arm": r.perturbation,
                "model": job,
                "base → perturbed": change_text(r),
                "difference": diff,
                "95 % interval": ci,
                "p (raw)": r.p_value,
                "p (adjusted)": r.p_adjusted,
                "": r.stars,
                "significant": r.significant,
            }
        )
    df = pd.DataFrame(rows, columns=list(COLUMNS))
    return df if several else df.drop(columns="model")


def difference_figure(results: Mapping[str, AuditResult]) -> go.Figure | None:
    """Each check × arm's difference (perturbed minus base) with its 95 % interval: rates in
    percentage points (above), numbers in words (below, when any). Orange: significant after
    the correction (with stars), grey: not shown to differ. None without checks."""
    items = [(job, r) for job, r in all_checks(results) if r.difference is not None]
    if not items:
        return None
    several = len(results) > 1
    panels = [
        ("rates", [x for x in items if not x[1].numeric]),
        ("numbers", [x for x in items if x[1].numeric]),
    ]
    panels = [(name, xs) for name, xs in panels if xs]
    titles = {
        "rates": "Pass rate: perturbed − base (percentage points)",
        "numbers": "Mean: perturbed − base (words)",
    }
    # stacked (rates above lengths), each panel as tall as its rows, labels on the left
    total = sum(len(xs) for _n, xs in panels)
    height = 110 + 34 * total + 90 * (len(panels) - 1)
    fig = make_subplots(
        rows=len(panels),
        cols=1,
        row_heights=[len(xs) for _n, xs in panels],
        vertical_spacing=min(0.3, 90 / height),
        subplot_titles=[titles[n] for n, _ in panels],
    )
    for row, (_name, xs) in enumerate(panels, start=1):
        labels, x, lo, hi, colors, texts, hover = [], [], [], [], [], [], []
        for job, r in reversed(xs):  # the first check at the top
            f = scale(r)[0]
            who = f" · {job}" if several else ""
            tag = " (model-graded)" if r.model_graded else ""
            labels.append(f"{esc(r.check)}{tag} — {esc(r.perturbation)}{esc(who)}")
            x.append(r.difference * f)
            lo.append((r.difference - r.ci[0]) * f)
            hi.append((r.ci[1] - r.difference) * f)
            colors.append(ALT_COLOR if r.significant else NS_COLOR)
            texts.append(r.stars if r.significant else "")
            diff, ci = difference_text(r)
            hover.append(
                f"{esc(r.check)}{tag}, {esc(r.perturbation)}<br>base "
                f"{esc(arm_text(r, 'base'))} → {esc(arm_text(r, 'perturbed'))}<br>"
                f"{diff} {ci}<br>p = {fmt_p(r.p_value)}, adjusted "
                f"{fmt_p(r.p_adjusted) if r.p_adjusted is not None else '–'}"
            )
        fig.add_trace(
            go.Scatter(
                x=x,
                y=labels,
                mode="markers+text",
                text=texts,
                textposition="top center",
                marker=dict(color=colors, size=11, line=dict(color="#1F2933", width=0.5)),
                error_x=dict(
                    type="data",
                    symmetric=False,
                    array=hi,
                    arrayminus=lo,
                    color="#52606D",
                    thickness=1.5,
                    width=5,
                ),
                hovertext=hover,
                hoverinfo="text",
                showlegend=False,
            ),
            row=row,
            col=1,
        )
        fig.add_vline(x=0, line_color="#52606D", line_width=1, row=row, col=1)
    fig.update_xaxes(zeroline=False)
    fig.update_annotations(font=dict(size=13, color="#1F2933"))
    base_layout(fig, height=height)
    fig.update_layout(margin=dict(l=20, r=20, t=60, b=40))
    fig.update_yaxes(automargin=True)
    return fig


# --------------------------------------------------------------------------- exports
CSV_FIELDS = ("base", "perturbed", "difference", "ci_low", "ci_high", "p_value", "p_adjusted", "significant")


def csv_fields(result: AuditResult) -> tuple[list[str], dict[str, dict]]:
    """The checks as columns of the results CSV (one row per perturbation):
    ``check: <name>: base`` … ``significant`` (rates as shares, numbers as means), and the
    values per perturbation name."""
    names = list(dict.fromkeys(c.check for c in result.checks))
    cols = [f"check: {n}: {f}" for n in names for f in CSV_FIELDS]
    values: dict[str, dict] = {}
    for c in result.checks:
        lo, hi = c.ci if c.ci is not None else (None, None)
        got = (c.base, c.value, c.difference, lo, hi, c.p_value, c.p_adjusted, c.significant)
        values.setdefault(c.perturbation, {}).update(
            {f"check: {c.check}: {f}": v for f, v in zip(CSV_FIELDS, got, strict=True)}
        )
    return cols, values


def checks_html(result: AuditResult) -> str:
    """The checks as an HTML table for the report (every name escaped); empty without."""
    if not result.checks:
        return ""
    df = checks_frame({"": result})
    rows = []
    for row in df.itertuples(index=False):
        cells = []
        for col, v in zip(df.columns, row, strict=True):
            if col.startswith("p ("):
                v = "–" if v is None or pd.isna(v) else fmt_p(v)
            elif col == "significant":
                v = "significant" if v else "not significant"
            cells.append(str(v))
        rows.append(cells)
    return partial("audit_checks.html.j2", columns=[str(c) for c in df.columns], rows=rows)


def report_figures(results: Sequence[AuditResult] | Mapping[str, AuditResult]) -> dict:
    """``{"Answer checks": figure}`` for a report, or nothing without checks."""
    if not isinstance(results, Mapping):
        results = {str(i): r for i, r in enumerate(results)}
    fig = difference_figure(results)
    return {"Answer checks: differences with 95 % intervals": fig} if fig is not None else {}
