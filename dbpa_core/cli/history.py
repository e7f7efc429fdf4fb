"""``dbpa history``: list, show, compare and delete recorded runs, as text for people and
``--json`` for scripts (the runs are kept by :mod:`dbpa_core.history`).

Each action takes the :class:`~dbpa_core.history.History` and the parsed arguments and
returns what to print, or a :class:`Failed` (what to print, the exit code and the line that
says why) when a check asked for on the command line fails; errors are
:class:`~dbpa_core.history.HistoryError` (exit 2).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from .. import provenance
from ..fmt import SIZE_LEGEND, fmt_p, short, size_cell, table
from ..render import setting_text

if TYPE_CHECKING:
    from ..runs import RunResult, Verdict


if TYPE_CHECKING:
    from ..history import RunSummary

if TYPE_CHECKING:  # imported where used, so that `dbpa --help` starts without numpy
    from ..history import History, Run

VERDICT_CHANGED = 1  # the exit code of `compare --fail-on-change` when a verdict changed


class Failed(NamedTuple):
    """The output of a command whose check failed: print ``text``, say ``message`` on
    stderr, exit with ``code``."""

    text: str
    code: int
    message: str


# what each kind of run is called (see History.record_result), and where it reopens
KIND_NAMES = {
    "audit": "audit",
    "suite": "suite of cases",
    "battery": "robustness battery",
    "fidelity": "simulator fidelity study",
    "sensitivity": "sensitivity study",
}
KIND_PAGES = {"battery": "Robustness battery", "fidelity": "Simulator fidelity", "sensitivity": "Sensitivity"}


def _kinds(history: History, runs: Sequence[RunSummary]) -> dict[int, dict]:
    """``{run id: {"kind", "models", "headline"}}`` for every run (an audit: its own)."""
    extras = history.extras([r.id for r in runs])
    out = {}
    for r in runs:
        e = extras.get(r.id, {})
        out[r.id] = {
            "kind": e.get("kind") or "audit",
            # an audit's models are its own (a dashboard audit's extras row holds none)
            "models": tuple(e.get("models") or ()) or tuple(r.models),
            "headline": e.get("headline") or "",
        }
    return out


def _outcome(r: RunSummary, extra: dict) -> str:
    """One line on what came out: an audit's detectable changes, another kind's headline."""
    if extra["kind"] not in ("audit", "suite"):
        return extra["headline"] or "-"
    return f"{r.n_significant} of {r.n_tests} detectable"


def _when(run_summary: RunSummary) -> str:
    return run_summary.created_at.strftime("%Y-%m-%d %H:%M")


def _short(text: str, n: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def list_runs(history: History, args: argparse.Namespace) -> str:
    runs = history.list(
        model=args.model,
        prompt=args.prompt,
        since=args.since,
        until=args.until,
        source=args.source,
        limit=args.limit,
    )
    kinds = _kinds(history, runs)
    if getattr(args, "json", False):
        return json.dumps([_summary_dict(r, kinds[r.id]) for r in runs], indent=2, ensure_ascii=False)
    if not runs:
        return f"No recorded runs match (history: {history.where})."
    rows = []
    for r in runs:
        k = kinds[r.id]
        from ..history import GATE_WORDS

        gate = GATE_WORDS[r.control_gate] or "-"
        rows.append(
            (
                str(r.id),
                _when(r),
                r.source,
                k["kind"],
                _short(r.title, 28),
                _short(", ".join(k["models"]), 40),
                _short(_outcome(r, k), 48),
                gate,
            )
        )
    head = ("id", "when (UTC)", "from", "kind", "title", "models", "result", "controls")
    return table(rows, head) + f"\n\n{len(runs)} run(s) in {history.where}. `dbpa history show ID` shows one."


def _summary_dict(r: RunSummary, extra: dict) -> dict:
    """A run's summary for ``--json``, with its kind, models and headline (tests and
    significant are None for a kind of run that has no tests)."""
    d = {**r.to_dict(), "kind": extra["kind"], "models": list(extra["models"]), "headline": extra["headline"]}
    if extra["kind"] != "audit":
        d.update(tests=None, significant=None)
    return d


def _settings_line(settings: dict) -> str:
    emb = (settings.get("embedder") or {}).get("backend", "local")
    return (
        f"k = {settings.get('samples')}, B = {settings.get('permutations')}, "
        f"measure = {settings.get('measure')}, correction = {settings.get('correction')}, "
        f"alpha = {settings.get('alpha')}, seed = {settings.get('seed')}, "
        f"temperature = {settings.get('temperature')}, max_tokens = "
        f"{settings.get('max_tokens')}, similarity = {emb}"
    )


def _result_table(result: Any) -> str:
    rows = [
        (
            p.name,
            p.role or "-",
            f"{p.effect_size:.3f}",
            f"{p.effect_above_chance:+.3f}",
            fmt_p(p.p_value),
            fmt_p(p.p_adjusted),
            p.stars,
            "detectable" if p.significant else "not shown",
            size_cell(p),
        )
        for p in result.perturbations
    ]
    return table(
        rows, ("name", "role", "omega", "above chance", "p (raw)", "p (adjusted)", "", "verdict", "size (d)")
    )


def show_run(history: History, args: argparse.Namespace) -> str:
    """One run of any kind, read through its :class:`~dbpa_core.runs.RunResult`: who ran it,
    what came out (its headline and control gate), its settings, where its answers are,
    its verdicts (an audit's table; a suite's pooled table; any other kind's verdicts)."""
    from ..history import HistoryError, where_responses_live

    run: Run = history.get(args.id)
    s = run.summary
    extra = _kinds(history, [s])[s.id]
    try:
        result = history.load_run(run.id)
    except HistoryError as exc:  # the summary is still shown; why the rest is not, in a line
        result, why = None, str(exc)
    if getattr(args, "json", False):
        d = run.to_dict()
        d.update({k: v for k, v in _summary_dict(s, extra).items() if k != "audits"})
        if result is not None:
            d["responses"] = where_responses_live(run, answers=len(result.answers()), history=history.where)
            d["verdicts"] = [_verdict_dict(v) for v in result.verdicts()]
            d["checks"] = [dataclasses.asdict(c) for c in result.checks()]
            payload = result.payload() if result.audit_results() is None else None
            if isinstance(payload, dict) and isinstance(payload.get("suite"), dict):
                d["suite"] = payload["suite"]
        return json.dumps(d, indent=2, ensure_ascii=False, default=str)
    where = f", page {s.page}" if s.page else ""
    out = [f"run {s.id}: {s.title} ({s.source}{where}), {_when(s)} UTC, dbpa {s.tool_version}"]
    if s.user or s.host:
        out.append(f"run by {s.user or 'an unknown user'} on {s.host or 'an unknown machine'}")
    if result is None:  # what the history's own record says of it, and why no more
        label = KIND_NAMES.get(extra["kind"], extra["kind"])
        models = ", ".join(extra["models"]) or "no model named"
        out.append(f"{label} of {models}: {extra['headline'] or 'no summary was recorded'}")
    else:
        models = ", ".join(result.models()) or "no model named"
        out.append(f"{result.label} of {models}: {result.headline() or 'no summary was recorded'}")
    if "samples" in run.settings and "permutations" in run.settings:
        out.append(f"settings: {_settings_line(run.settings)}")
    else:
        scalars = {
            k: v
            for k, v in run.settings.items()
            if k != "signature" and isinstance(v, (str, int, float, bool)) and v != ""
        }
        if scalars:
            out.append("settings: " + _short(", ".join(f"{k} = {v}" for k, v in scalars.items()), 300))
    if run.seconds:
        out.append(f"took {run.seconds:.1f} s")
    if result is None:
        if run.unreadable:  # an audit left out: the lines below say which part and why
            why = "parts of its rows are garbled (listed below)"
        out.append(f"its verdicts cannot be shown: {why}")
        page = KIND_PAGES.get(extra["kind"])
        if page:
            out.append(
                f"its tables and charts may still reopen on the dashboard's {page} page "
                f"(`dbpa ui`, History, run {run.id})."
            )
        return "\n".join(out + _unreadable_lines(run))
    out.append(
        f"responses: {where_responses_live(run, answers=len(result.answers()), history=history.where)}"
    )
    gate = result.gate()
    if gate.failed:
        out.append(
            "CONTROL GATE: FAIL - control perturbation(s) changed the answers "
            "detectably: " + ", ".join(gate.failed)
        )
    elif gate.untestable:
        out.append(f"control gate: NOT TESTABLE - {gate.why_untestable}")
    elif gate.controls:
        out.append("control gate: pass - no control perturbation changed the answers detectably")
    for job, r in (result.audit_results() or {}).items():
        out += [
            "",
            f"== {job}: {r.spec.name} ({r.mode}) ==",
            f"base prompt: {_short(r.spec.base_prompt, 100)}",
        ]
        out += [f"answered by: {line}" for line in provenance.summary_lines(provenance.entries_of(r.usage))]
        out.append(_result_table(r))
        out.append(SIZE_LEGEND)
        if r.roc is not None:
            out.append(
                f"ROC over alpha: AUC = {r.roc.auc:.3f}; TPR at FPR <= 5 %: {r.roc.tpr_at_fpr(0.05):.2f}"
            )
        for w in r.warnings:
            out.append(f"warning: {w}")
    if result.audit_results() is None:
        out += _verdict_lines(result)
    page = result.page
    if page:
        out.append(
            f"its tables and charts reopen on the dashboard's {page} page (`dbpa ui`, "
            f"History, run {run.id}); `--json` gives this summary for scripts."
        )
    return "\n".join(out + _unreadable_lines(run))


def _unreadable_lines(run: Any) -> list[str]:
    """The parts of a run's rows that could not be read back, one line each."""
    if not run.unreadable:
        return []
    return [
        "",
        f"could not be read ({len(run.unreadable)} part(s) of this run's rows are "
        "garbled; the rest is shown above):",
        *(f"  - {u}" for u in run.unreadable),
    ]


def _verdict_dict(v: Verdict) -> dict:
    return {**dataclasses.asdict(v), "what": v.what}


def _verdict_lines(result: RunResult) -> list[str]:
    """The verdicts of a run kept as one result: one table per kind of verdict (a suite's
    tests per case are counted, not listed: ``--json`` has them)."""
    groups: dict[str, list] = {}
    for v in result.verdicts():
        groups.setdefault(v.kind, []).append(v)
    out: list[str] = []
    for kind, vs in groups.items():
        if kind == "case":
            out += ["", f'{len(vs)} tests, one per case x perturbation: `--json` ("verdicts") lists them']
            continue
        rows = [
            (
                v.part,
                v.what,
                fmt_p(v.p_value) if v.p_value is not None else "-",
                fmt_p(v.p_adjusted) if v.p_adjusted is not None else "-",
                _short(v.outcome, 90),
            )
            for v in vs
        ]
        out += ["", table(rows, ("part", "what", "p", "p_adj", "outcome"))]
    out += [f"warning: {w}" for w in result.warnings]
    return out


def compare_runs(history: History, args: argparse.Namespace) -> str | Failed:
    """``history compare A B``: two runs of one kind through the run interface
    (:meth:`dbpa_core.runs.RunResult.compare`); a kind that cannot be compared says why in
    one line."""
    from ..history import HistoryError
    from ..runs import RunRefused, RunResult, kind_named

    kinds: list[type[RunResult]] = []
    for run_id in (args.a, args.b):
        history.get(run_id)  # every id must exist
        kind = kind_named(history.extras([run_id]).get(int(run_id), {}).get("kind", "audit")) or RunResult
        refusal = kind.compare_refusal()  # known from the kind, before the run is read
        if refusal:
            raise HistoryError(f"run {run_id}: {refusal}.")
        kinds.append(kind)
    if kinds[0] is not kinds[1]:
        a_kind, b_kind = (_a(k.label or k.kind) for k in kinds)
        raise HistoryError(
            f"run {args.a} is {a_kind} and run {args.b} {b_kind}: compare two runs of one kind."
        )
    if getattr(args, "max_asr", None) is not None and not 0.0 <= args.max_asr <= 1.0:
        raise HistoryError(f"--max-asr {args.max_asr:g}: give a share between 0 and 1 (e.g. 0.2).")
    ra, rb = history.load_run(args.a), history.load_run(args.b)
    try:
        cmp = ra.compare(rb, max_asr=getattr(args, "max_asr", None))
    except RunRefused as exc:
        raise HistoryError(f"run {args.a}: {exc}.") from None
    a, b = history.get(args.a).summary, history.get(args.b).summary
    if getattr(args, "json", False):
        text = json.dumps(
            {"a": a.to_dict(), "b": b.to_dict(), **cmp.data}, indent=2, ensure_ascii=False, default=str
        )
    else:
        head = [
            f"{side} = run {r.id}: {r.title}, {_when(r)} UTC, {', '.join(run.models())}"
            for side, r, run in (("A", a, ra), ("B", b, rb))
        ]
        head += [
            f"changed: {k}: {short(setting_text(va), 60)} -> {short(setting_text(vb), 60)}"
            for k, (va, vb) in cmp.settings_changed.items()
        ]
        text = "\n".join([*head, *cmp.notes, "", *cmp.lines])
    if not (getattr(args, "fail_on_change", False) and cmp.changed):
        return text
    return Failed(
        text,
        VERDICT_CHANGED,
        f"FAIL: {len(cmp.changed)} {cmp.what} from run {a.id} to run {b.id}: {'; '.join(cmp.changed)}",
    )


def _a(name: str) -> str:
    return ("an " if name[:1] in "aeiou" else "a ") + name


def delete_runs(history: History, args: argparse.Namespace) -> str:
    from ..history import HistoryError

    runs = [history.get(i).summary for i in args.ids]  # every id must exist
    if not args.yes:
        names = "; ".join(f"run {r.id} ({r.title}, {_when(r)})" for r in runs)
        raise HistoryError(f"this would delete {names}: add --yes to delete")
    n = history.delete(*args.ids)
    if getattr(args, "json", False):
        return json.dumps({"deleted": n})
    return f"deleted {n} run(s)"


def upgrade_history(history: History, args: argparse.Namespace) -> str:
    """Bring the history's database to this dbpa's schema now (opening it does too)."""
    return f"The run history {history.where} is at schema revision {history.upgrade()}."


ACTIONS = {
    "list": list_runs,
    "show": show_run,
    "compare": compare_runs,
    "delete": delete_runs,
    "upgrade": upgrade_history,
}


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    h = sub.add_parser("history", help="list the recorded runs (every audit is recorded)")
    h.add_argument("--model", help="only runs with a model whose name contains this")
    h.add_argument("--prompt", help="only runs whose prompts or perturbations contain this")
    h.add_argument("--since", help="only runs on or after this date (YYYY-MM-DD)")
    h.add_argument("--until", help="only runs on or before this date (YYYY-MM-DD)")
    h.add_argument("--source", choices=["cli", "dashboard"], help="only runs from here")
    h.add_argument("--limit", type=int, default=None, help="at most this many runs")
    h.add_argument("--json", action="store_true", help="machine-readable output")
    h.set_defaults(action="list")
    hs = h.add_subparsers(dest="action")
    s = hs.add_parser("show", help="one run: settings, results, where its responses live")
    s.add_argument("id", type=int)
    c = hs.add_parser("compare", help="two runs side by side: which verdicts changed")
    c.add_argument("a", type=int, help="run A (e.g. before an upgrade)")
    c.add_argument("b", type=int, help="run B (e.g. after)")
    c.add_argument(
        "--fail-on-change",
        action="store_true",
        help="exit 1 when any verdict changed from A to B, naming them (for CI: a "
        "model upgrade that changes what the audit finds; a suite: a pooled "
        "verdict; a battery: an attack crossing --max-asr)",
    )
    c.add_argument(
        "--max-asr",
        type=float,
        default=None,
        metavar="X",
        help="batteries: an attack whose success rate is above X (a share) in one "
        "run and not in the other changed verdict (without it, a battery's ER and "
        "ASR are compared and no verdict changes)",
    )
    d = hs.add_parser("delete", help="delete runs (with their results and responses)")
    d.add_argument("ids", type=int, nargs="+")
    d.add_argument("--yes", action="store_true", help="really delete (required)")
    hs.add_parser(
        "upgrade", help="bring the history's database to this dbpa's schema now (opening it does so too)"
    )
    for p in (s, c, d):
        p.add_argument(
            "--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable output"
        )
    return h


def run(args: argparse.Namespace) -> int:
    """List, show, compare or delete recorded runs (text for people, --json for scripts)."""
    from ..history import History, HistoryError
    from ..resources import EXIT_MISSING_PART, MissingExtraError

    action = getattr(args, "action", None) or "list"
    try:
        out = ACTIONS[action](History(), args)
    except HistoryError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_MISSING_PART if isinstance(exc, MissingExtraError) else 2
    if isinstance(out, Failed):  # e.g. compare --fail-on-change: a verdict changed
        print(out.text)
        print(out.message, file=sys.stderr)
        return out.code
    print(out)
    return 0
