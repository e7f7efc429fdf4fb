"""Text (and ``--json``) for ``dbpa history``: list, show, compare and delete recorded runs.

Each function takes the :class:`~dbpa_core.history.History` and the parsed arguments and
returns what to print, or a :class:`Failed` (what to print, the exit code and the line that
says why) when a check asked for on the command line fails; errors are
:class:`~dbpa_core.history.HistoryError` (exit 2).
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from typing import NamedTuple

from . import provenance
from .history import History, HistoryError, Run, RunComparison, where_responses_live

VERDICT_CHANGED = 1  # the exit code of `compare --fail-on-change` when a verdict changed


class Failed(NamedTuple):
    """The output of a command whose check failed: print ``text``, say ``message`` on
    stderr, exit with ``code``."""

    text: str
    code: int
    message: str


def fmt_p(p: float) -> str:
    """p with four decimals; below 0.0001 as ``<0.0001`` (never 0.0000)."""
    return "<0.0001" if p < 1e-4 else f"{p:.4f}"


def _when(run_summary) -> str:
    return run_summary.created_at.strftime("%Y-%m-%d %H:%M")


def _columns(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _short(text: str, n: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[:n - 1] + "…"


def list_runs(history: History, args) -> str:
    runs = history.list(model=args.model, prompt=args.prompt, since=args.since,
                        until=args.until, source=args.source, limit=args.limit)
    if getattr(args, "json", False):
        return json.dumps([r.to_dict() for r in runs], indent=2, ensure_ascii=False)
    if not runs:
        return f"No recorded runs match (history: {history.path})."
    rows = [("id", "when (UTC)", "from", "title", "models", "tests", "signif.", "controls")]
    for r in runs:
        gate = {"fail": "FAIL", "pass": "pass", "": "-"}[r.control_gate]
        rows.append((str(r.id), _when(r), r.source, _short(r.title, 28),
                     _short(", ".join(r.models), 40), str(r.n_tests), str(r.n_significant), gate))
    return _columns(rows) + f"\n\n{len(runs)} run(s) in {history.path}. " \
        "`dbpa history show ID` shows one."


def _settings_line(settings: dict) -> str:
    emb = (settings.get("embedder") or {}).get("backend", "local")
    return (f"k = {settings.get('samples')}, B = {settings.get('permutations')}, "
            f"measure = {settings.get('measure')}, correction = {settings.get('correction')}, "
            f"alpha = {settings.get('alpha')}, seed = {settings.get('seed')}, "
            f"temperature = {settings.get('temperature')}, max_tokens = "
            f"{settings.get('max_tokens')}, similarity = {emb}")


def _result_table(result) -> str:
    rows = [("name", "role", "omega", "above chance", "p (raw)", "p (adjusted)", "", "verdict")]
    for p in result.perturbations:
        rows.append((p.name, p.role or "-", f"{p.effect_size:.3f}",
                     f"{p.effect_above_chance:+.3f}", fmt_p(p.p_value), fmt_p(p.p_adjusted),
                     p.stars, "significant" if p.significant else "not shown"))
    return _columns(rows)


def show_run(history: History, args) -> str:
    run: Run = history.get(args.id)
    kind = history.extras([run.id]).get(run.id, {}).get("kind")
    suite = history.suite(run.id) if kind == "suite" else None
    if getattr(args, "json", False):
        return json.dumps({**run.to_dict(), **({"suite": suite} if suite else {})}, indent=2,
                          ensure_ascii=False)
    s = run.summary
    where = f", page {s.page}" if s.page else ""
    out = [f"run {s.id}: {s.title} ({s.source}{where}), {_when(s)} UTC, dbpa {s.tool_version}",
           f"settings: {_settings_line(run.settings)}",
           f"responses: {where_responses_live(run)}"]
    if s.failed_controls:
        out.append("CONTROL GATE: FAIL - control perturbation(s) changed the answers "
                   "significantly: " + ", ".join(s.failed_controls))
    elif s.control_gate == "pass":
        out.append("control gate: pass - no control perturbation changed the answers "
                   "significantly")
    for job, r in run.audits.items():
        out += ["", f"== {job}: {r.spec.name} ({r.mode}) ==",
                f"base prompt: {_short(r.spec.base_prompt, 100)}"]
        out += [f"answered by: {line}"
                for line in provenance.summary_lines(provenance.entries_of(r.usage))]
        out.append(_result_table(r))
        if r.roc is not None:
            out.append(f"ROC over alpha: AUC = {r.roc.auc:.3f}; TPR at FPR <= 5 %: "
                       f"{r.roc.tpr_at_fpr(0.05):.2f}")
        for w in r.warnings:
            out.append(f"warning: {w}")
    if suite is not None:
        out += _suite_text(suite)
    if run.unreadable:
        out += ["", f"could not be read ({len(run.unreadable)} part(s) of this run's rows are "
                "garbled; the rest is shown above):"]
        out += [f"  - {u}" for u in run.unreadable]
    return "\n".join(out)


def _suite_text(suite: dict) -> list[str]:
    """A recorded suite of cases: its size, its pooled table and its warnings."""
    from .suite import pooled_rows

    spec = suite.get("spec") or {}
    out = ["", f"== suite of {suite.get('cases')} cases x {len(suite.get('pooled') or [])} "
           f"perturbations = {suite.get('n_tests')} tests, corrected together "
           f"({suite.get('correction')}, alpha = {suite.get('alpha')}) ==",
           f"base prompt: {_short(str((spec.get('base') or {}).get('prompt', '')), 100)}"]
    if suite.get("pooled"):
        out.append(_columns(pooled_rows(list(suite["pooled"]))))
    out += [f"warning: {w}" for w in suite.get("warnings") or ()]
    out.append("one row per case x perturbation: `dbpa history show ID --json` (\"suite\": "
               "\"tests\"), or the dashboard's Suite page")
    return out


def _served(run: Run) -> dict[str, tuple[str, ...]]:
    """The model names and system fingerprints a run's answers came back with."""
    entries = [e for r in run.audits.values() for e in provenance.entries_of(r.usage)]
    return {"served models": provenance.served_models(entries),
            "system fingerprints": provenance.fingerprints(entries)}


def compare_runs(history: History, args) -> str | Failed:
    cmp: RunComparison = history.compare(args.a, args.b)
    served = {what: (va, vb) for (what, va), vb in
              zip(_served(cmp.a).items(), _served(cmp.b).values(), strict=True) if va != vb}
    if getattr(args, "json", False):
        d = cmp.to_dict()
        d["served_changed"] = {k.replace(" ", "_"): [list(va), list(vb)]
                               for k, (va, vb) in served.items()}
        text = json.dumps(d, indent=2, ensure_ascii=False)
    else:
        text = _comparison_text(cmp, served)
    if getattr(args, "fail_on_change", False) and cmp.changed:
        which = "; ".join(f"{r.job}: {r.name} ({r.status})" if len(cmp.pairs) > 1
                          else f"{r.name} ({r.status})" for r in cmp.changed)
        return Failed(text, VERDICT_CHANGED,
                      f"FAIL: {len(cmp.changed)} verdict(s) changed from run {cmp.a.summary.id} "
                      f"to run {cmp.b.summary.id}: {which}")
    return text


def _comparison_text(cmp: RunComparison, served: dict[str, tuple]) -> str:
    a, b = cmp.a.summary, cmp.b.summary
    out = [f"A = run {a.id}: {a.title}, {_when(a)} UTC, {', '.join(a.models)}",
           f"B = run {b.id}: {b.title}, {_when(b)} UTC, {', '.join(b.models)}"]
    for k, (va, vb) in cmp.settings_changed.items():
        out.append(f"changed: {k}: {_short(str(va), 60)} -> {_short(str(vb), 60)}")
    for k, (va, vb) in served.items():
        out.append(f"changed: {k} the answers came back with: "
                   f"{_short(', '.join(va) or 'not reported', 60)} -> "
                   f"{_short(', '.join(vb) or 'not reported', 60)}")
    rows = [("audit", "perturbation", "role", "p_adj A", "p_adj B", "above chance A",
             "above chance B", "verdict")]
    for r in cmp.rows:
        rows.append((_short(r.job, 30), r.name, r.role or "-",
                     fmt_p(r.a.p_adjusted) + r.a.stars if r.a else "-",
                     fmt_p(r.b.p_adjusted) + r.b.stars if r.b else "-",
                     f"{r.a.effect_above_chance:+.3f}" if r.a else "-",
                     f"{r.b.effect_above_chance:+.3f}" if r.b else "-",
                     r.status.upper() if r.verdict_changed else r.status))
    out += ["", _columns(rows), "",
            f"{len(cmp.changed)} of {sum(1 for r in cmp.rows if r.a and r.b)} perturbations "
            "tested in both runs changed verdict."]
    return "\n".join(out)


def delete_runs(history: History, args) -> str:
    runs = [history.get(i).summary for i in args.ids]   # every id must exist
    if not args.yes:
        names = "; ".join(f"run {r.id} ({r.title}, {_when(r)})" for r in runs)
        raise HistoryError(f"this would delete {names}: add --yes to delete")
    n = history.delete(*args.ids)
    if getattr(args, "json", False):
        return json.dumps({"deleted": n})
    return f"deleted {n} run(s)"


ACTIONS = {"list": list_runs, "show": show_run, "compare": compare_runs, "delete": delete_runs}
