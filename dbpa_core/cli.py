"""``dbpa``: run audits from spec files, for batch jobs and CI.

    dbpa audit SPEC.yaml --out DIR [--no-cache] [--fail-on-control] [--allow-key-env NAME]
    dbpa estimate SPEC.yaml [--allow-key-env NAME]
    dbpa attack SPEC.yaml --out DIR [--no-cache] [--estimate]
    dbpa fidelity DATA.csv --loss tv --gamma 0.5 --eta 0.05 --out DIR | --simulate SPEC.yaml
    dbpa cache info | clear
    dbpa sensitivity SPEC.yaml --measures all --embedders spec,bleu --lengths 100,300,900 --out DIR
    dbpa import FILE [--from promptfoo|openai-batch|csv|jsonl] --out replay.jsonl
    dbpa history [--model M] [--prompt P] [--since DATE] [--until DATE] [--json]
    dbpa history show ID | compare A B | delete ID... --yes

Every ``dbpa audit`` is recorded in the run history (``$DBPA_HOME/history.sqlite3``,
see :mod:`dbpa_core.history`) unless ``--no-history``.

Exit codes: 0 done, 1 a control perturbation was significant (with
``--fail-on-control``), 2 a mistake in the spec, the arguments or the setup (an
unwritable ``--out``, a damaged cache), 3 a backend failure (key, server, model,
malformed answers), 130 stopped.
"""
from __future__ import annotations

import argparse
import os
import sys

from . import __version__


def _fmt_p(p: float) -> str:
    """Four decimals (1e-4 and below in exponent form); four significant digits where four
    decimals would round p up onto a star's threshold (0.0009995 is not 0.0010)."""
    if p < 1e-4:
        return f"{p:.1e}"
    s = f"{p:.4f}"
    return f"{p:.4g}" if any(p < t <= float(s) for t in (0.1, 0.05, 0.01, 0.001)) else s


def _table(result) -> str:
    delta = result.spec.min_effect
    head = ("name", "role", "omega", "chance", "above", "p", "p_adj", "")
    rows = [head + ((f"> {delta:g}",) if delta is not None else ())]
    for p in result.perturbations:
        row = (p.name, p.role or "-", f"{p.effect_size:.3f}", f"{p.chance_effect_size:.3f}",
               f"{p.effect_above_chance:+.3f}", _fmt_p(p.p_value), _fmt_p(p.p_adjusted), p.stars)
        if delta is not None:
            row += ("yes" if p.exceeds_min_effect else "no",)
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


class _Bars:
    """tqdm bars per stage, driven by the audit's progress callback."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.bars: dict[str, object] = {}

    def __call__(self, p) -> None:
        if not self.enabled:
            return
        from tqdm import tqdm

        bar = self.bars.get(p.stage)
        if bar is None:
            bar = self.bars[p.stage] = tqdm(total=p.total, desc=p.stage, unit=" item",
                                            file=sys.stderr, leave=True, dynamic_ncols=True)
        bar.total = p.total
        bar.n = p.done
        if p.detail:
            bar.set_postfix_str(p.detail[:60], refresh=False)
        bar.refresh()

    def close(self) -> None:
        for bar in self.bars.values():
            bar.close()


def _cache(args):
    from .cache import Cache

    return Cache(args.cache_dir, enabled=not getattr(args, "no_cache", False))


def _spec_warnings(spec) -> list[str]:
    """Print what the spec cannot show (before any call) and return the warnings."""
    from .spec import spec_notes, spec_warnings

    found = spec_warnings(spec)
    for w in found:
        print(f"warning: {w}", file=sys.stderr)
    for n in spec_notes(spec):
        print(f"note: {n}", file=sys.stderr)
    return found


def cmd_audit(args) -> int:
    from .audit import AuditCancelled, check_out_dir, run_audit
    from .spec import load_spec

    spec = load_spec(args.spec, allow_key_env=args.allow_key_env)
    check_out_dir(args.out)  # before any paid call
    cache = _cache(args)
    cache.check()
    said = _spec_warnings(spec)  # what the plan cannot show, once nothing stops the run
    bars = _Bars((not args.quiet and sys.stderr.isatty()) or args.progress)
    try:
        result = run_audit(spec, cache=cache, progress=bars)
    except AuditCancelled as exc:
        print(str(exc), file=sys.stderr)
        return 130
    finally:
        bars.close()
    try:
        paths = result.write(args.out)
    except OSError as exc:
        print(f"error: cannot write the results to {args.out} ({exc.strerror or exc}); every "
              "response is cached, so running again costs nothing.", file=sys.stderr)
        return 2
    print(_table(result))
    if result.roc is not None:
        print(f"\nROC over alpha: AUC = {result.roc.auc:.3f}; "
              f"TPR at FPR <= 5 %: {result.roc.tpr_at_fpr(0.05):.2f}")
    u = result.usage
    print(f"\n{u['calls']} new calls, {u['cached_samples']} samples from the cache, "
          f"{u['seconds']:.1f} s. Correction: {spec.correction}, alpha = {spec.alpha}.")
    print(f"omega = {spec.measure}; chance = the omega chance alone gives at k = {spec.samples}; "
          "above = omega - chance (about 0 when nothing changed)." +
          (f" '> {spec.min_effect:g}': above chance by more than the minimum effect of interest."
           if spec.min_effect is not None else ""))
    for w in result.warnings:
        if w not in said:
            print(f"warning: {w}", file=sys.stderr)
    print("wrote " + ", ".join(paths))
    if not args.no_history:
        _record_cli_run(spec, result, args)
    if args.fail_on_control:
        bad = [p.name for p in result.perturbations if p.role == "control" and p.significant]
        if bad:
            print(f"FAIL: control perturbation(s) changed the answers significantly: "
                  f"{', '.join(bad)}", file=sys.stderr)
            return 1
    return 0


def _record_cli_run(spec, result, args) -> None:
    """Record an audit in the run history; a history that cannot be written is a warning,
    never a failed audit (the results are already written)."""
    import sqlite3

    from .history import History, HistoryError
    from .spec import model_label

    job = model_label(spec.model) if spec.mode == "perturbation" else "model comparison"
    try:
        h = History()
        run_id = h.record({job: result}, source="cli", title=spec.name,
                          cache_dir=None if args.no_cache else _cache(args).directory,
                          out_dir=os.path.abspath(args.out))
    except (HistoryError, OSError, sqlite3.Error) as exc:
        print(f"warning: the run was not recorded in the history: {exc}", file=sys.stderr)
        return
    print(f"recorded as run {run_id} in {h.path} (dbpa history show {run_id})")


def cmd_estimate(args) -> int:
    from .audit import estimate
    from .spec import load_spec

    spec = load_spec(args.spec, allow_key_env=args.allow_key_env)
    cache = _cache(args)
    cache.check()
    _spec_warnings(spec)
    est = estimate(spec, cache=cache)
    print(f"{'arm':<28} {'model':<24} {'calls':>6} {'cached':>7} {'in tok':>9} {'out tok':>9} {'cost $':>9}")
    for r in est["arms"]:
        cost = "?" if r["cost"] != r["cost"] else f"{r['cost']:.4f}"
        print(f"{r['arm'][:28]:<28} {r['model'][:24]:<24} {r['calls']:>6} {r['cached']:>7} "
              f"{r['input_tokens']:>9} {r['output_tokens']:>9} {cost:>9}")
    t = est["totals"]
    print(f"\ntotal: {t['calls']} calls ({t['cached']} cached), ~{t['input_tokens']} input and "
          f"<= {t['output_tokens']} output tokens, embeddings ~{t['embedding_tokens']} tokens; "
          f"estimated cost ${t['cost']:.4f}")
    if est["unknown_prices"]:
        print("no price known for: " + ", ".join(est["unknown_prices"]) +
              " (add them under 'prices:' in the spec, $ per 1M tokens)")
    print("Tokens are estimated at ~4 characters each; output is counted at max_tokens.")
    return 0


def cmd_attack(args) -> int:
    from .attacks.battery import estimate_battery, run_battery, summary_text
    from .attacks.spec import load_attack_spec
    from .attacks.wordnet import WordNetMissing
    from .outputs import check_out_dir
    from .sampling import RunCancelled

    spec = load_attack_spec(args.spec, allow_key_env=args.allow_key_env)
    if not args.estimate:
        check_out_dir(args.out)  # before any paid call
    if args.estimate:
        e = estimate_battery(spec, cache=_cache(args))
        cost = "unknown (add 'prices:')" if e["unknown_price"] else f"${e['cost']:.4f}"
        print(f"{e['answers']} answers + at most {e['rti_max']} for RTI + {e['curve']} curve "
              f"samples = at most {e['calls']} calls ({e['cached']} cached); ~{e['input_tokens']} "
              f"input and <= {e['output_tokens']} output tokens; estimated cost {cost}")
        return 0
    bars = _Bars((not args.quiet and sys.stderr.isatty()) or args.progress)
    try:
        result = run_battery(spec, cache=_cache(args), progress=bars)
    except RunCancelled as exc:
        print(str(exc), file=sys.stderr)
        return 130
    except WordNetMissing as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        bars.close()
    paths = result.write(args.out)
    print(summary_text(result))
    u = result.usage
    print(f"\n{u['calls']} new calls, {u['cached_samples']} answers from the cache, "
          f"{u['seconds']:.1f} s.")
    for w in result.warnings:
        print(f"note: {w}", file=sys.stderr)
    print("wrote " + ", ".join(paths))
    return 0


def cmd_fidelity(args) -> int:
    from .fidelity.command import cmd_fidelity as run

    return run(args, cache_of=_cache,
               bars_of=lambda a: _Bars((not a.quiet and sys.stderr.isatty()) or a.progress))


def cmd_cache(args) -> int:
    c = _cache(args)
    if args.action == "clear":
        n = c.clear()
        if c.repaired:
            print(f"the cache store in {c.directory} was damaged: removed it and started an "
                  "empty one")
        else:
            print(f"removed {n} cached items from {c.directory}")
    else:
        print(f"cache folder: {c.directory}\nitems: {c.count()}\nsize: {c.volume() / 1e6:.1f} MB")
    return 0


def _verdict_table(result) -> str:
    studies = result.studies
    rows = [("perturbation", "audit", *[f"{s}s" for s in studies], "verdict")]
    for v in result.verdicts():
        base = {True: "changed", False: "no change", None: "-"}[v["baseline_significant"]]
        rows.append((v["perturbation"], base,
                     *[f"{v[s]['significant']}/{v[s]['settings']} significant" for s in studies],
                     "holds" if v["holds"] else "DEPENDS ON THE SETTING"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def cmd_sensitivity(args) -> int:
    from .sampling import RunCancelled
    from .sensitivity import (
        SensitivityConfig,
        SensitivityError,
        parse_embedders,
        parse_lengths,
        parse_measures,
        plan,
        run_sensitivity,
    )
    from .spec import load_spec

    spec = load_spec(args.spec)
    try:
        config = SensitivityConfig(
            measures=parse_measures(args.measures), embedders=parse_embedders(args.embedders, spec),
            lengths=parse_lengths(args.lengths),
            cost_models=tuple(m.strip() for m in (args.cost_models or "").split(",") if m.strip()))
        need = plan(spec, config, cache=_cache(args))
    except SensitivityError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{need['calls']} model calls to make ({need['cached']} samples already cached), "
          f"estimated cost ${need['cost']:.4f}"
          + (f" (no price for {', '.join(need['unknown_prices'])})" if need["unknown_prices"]
             else "") + ".", file=sys.stderr)
    if args.dry_run:
        return 0
    from .outputs import check_out_dir

    check_out_dir(args.out)  # before any paid call
    bars = _Bars((not args.quiet and sys.stderr.isatty()) or args.progress)
    try:
        result = run_sensitivity(spec, config, cache=_cache(args), progress=bars)
    except RunCancelled as exc:
        print(str(exc), file=sys.stderr)
        return 130
    finally:
        bars.close()
    paths = result.write(args.out)
    print(_verdict_table(result))
    u = result.usage
    print(f"\n{u['calls']} new model calls, {u['cached_samples']} samples from the cache, "
          f"{u['embeddings_computed']} new embeddings, {u['seconds']:.1f} s. One row per "
          f"perturbation x setting in results.csv; cost in cost.csv.")
    for w in result.warnings:
        print(f"warning: {w}", file=sys.stderr)
    print("wrote " + ", ".join(paths))
    return 0


def cmd_import(args) -> int:
    from pathlib import Path

    from .importers import ImportFormatError, import_file

    try:
        result = import_file(args.file, args.fmt, requests=args.requests,
                             prompt_column=args.prompt_column,
                             response_column=args.response_column,
                             model_column=args.model_column, system_column=args.system_column,
                             keep_cached_copies=args.keep_cached_copies)
    except ImportFormatError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for p in result.problems[:50]:
        print(f"{'skipped' if args.skip_bad else 'bad row'}: {args.file}, {p}", file=sys.stderr)
    if len(result.problems) > 50:
        print(f"... and {len(result.problems) - 50} more", file=sys.stderr)
    if result.problems and not args.skip_bad:
        print(f"error: {len(result.problems)} row(s) could not be imported; nothing was written. "
              f"Fix them, or pass --skip-bad to import the other {len(result.records)}.",
              file=sys.stderr)
        return 2
    if not result.records:
        print(f"error: {args.file}: no usable responses", file=sys.stderr)
        return 2
    out = args.out or str(Path(args.file).with_suffix("")) + ".replay.jsonl"
    result.write(out)
    print(result.summary())
    if result.problems:
        print(f"skipped {len(result.problems)} malformed row(s), listed above.")
    print(f"wrote {out}")
    if args.spec_out:
        spec_dir = str(Path(args.spec_out).resolve().parent)
        Path(args.spec_out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.spec_out).write_text(result.starter_spec(str(Path(out).resolve()),
                                                           spec_dir=spec_dir), encoding="utf-8")
        print(f"wrote {args.spec_out}: check it, then run `dbpa audit {args.spec_out}`")
    else:
        print(f"Use it as a model: {{backend: replay, file: {out}}} (or --spec-out SPEC.yaml "
              "for a starter spec).")
    return 0


def cmd_history(args) -> int:
    """List, show, compare or delete recorded runs (text for people, --json for scripts)."""
    from . import history_cli
    from .history import History, HistoryError

    action = getattr(args, "action", None) or "list"
    try:
        text = history_cli.ACTIONS[action](History(), args)
    except HistoryError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(text)
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="dbpa", description="Audit LLM robustness with "
                                 "distribution-based perturbation analysis.")
    ap.add_argument("--version", action="version", version=f"dbpa {__version__}")
    ap.add_argument("--cache-dir", default=os.environ.get("DBPA_CACHE_DIR"),
                    help="cache folder (default: $DBPA_CACHE_DIR or the per-user cache)")
    sub = ap.add_subparsers(dest="command", required=True)
    a = sub.add_parser("audit", help="run an audit spec and write results")
    a.add_argument("spec")
    a.add_argument("--out", default="dbpa-results", help="output folder (default: dbpa-results)")
    a.add_argument("--no-cache", action="store_true", help="neither read nor write the cache")
    a.add_argument("--fail-on-control", action="store_true",
                   help="exit 1 when a control perturbation is significant (for CI)")
    a.add_argument("--quiet", action="store_true", help="no progress bars")
    a.add_argument("--progress", action="store_true", help="progress bars even when not a TTY")
    a.add_argument("--no-history", action="store_true",
                   help="do not record this audit in the run history ($DBPA_HOME)")
    a.set_defaults(func=cmd_audit)
    e = sub.add_parser("estimate", help="calls, tokens and cost of a spec; calls nothing")
    e.add_argument("spec")
    e.set_defaults(func=cmd_estimate)
    k = sub.add_parser("attack", help="run a robustness battery spec (typos, word edits, "
                       "homoglyphs, instructions, option orders, RTI) and write results")
    k.add_argument("spec")
    k.add_argument("--out", default="dbpa-attack", help="output folder (default: dbpa-attack)")
    k.add_argument("--no-cache", action="store_true", help="neither read nor write the cache")
    k.add_argument("--estimate", action="store_true", help="print the calls it needs; call nothing")
    k.add_argument("--quiet", action="store_true", help="no progress bars")
    k.add_argument("--progress", action="store_true", help="progress bars even when not a TTY")
    k.set_defaults(func=cmd_attack)
    for p in (a, e, k):
        p.add_argument("--allow-key-env", action="append", default=[], metavar="NAME",
                       help="let the spec send this environment variable as an API key although "
                       "it does not look like an LLM key (specs are trusted input; repeatable)")
    from .fidelity.command import add_parser as add_fidelity

    add_fidelity(sub).set_defaults(func=cmd_fidelity)
    c = sub.add_parser("cache", help="show or clear the cache")
    c.add_argument("action", choices=["info", "clear"])
    c.set_defaults(func=cmd_cache)
    s = sub.add_parser("sensitivity", help="does the verdict hold under other measures, "
                       "embedders and prompt lengths?")
    s.add_argument("spec")
    s.add_argument("--measures", default="all",
                   help="'all', 'none' or a comma-separated list (default: all)")
    s.add_argument("--embedders", default="spec",
                   help="comma-separated: spec, local, bleu, rouge1, rouge2, rougeL, openai[:MODEL], "
                   "st:FOLDER (default: spec, the spec's own)")
    s.add_argument("--lengths", default="",
                   help="prompt lengths in tokens, e.g. 100,300,900 (new model calls; default none)")
    s.add_argument("--cost-models", default="",
                   help="priced models to compare in the cost table, e.g. gpt-4o-mini,gpt-4o")
    s.add_argument("--out", default="dbpa-sensitivity", help="output folder")
    s.add_argument("--dry-run", action="store_true", help="print the calls and cost; run nothing")
    s.add_argument("--no-cache", action="store_true", help="neither read nor write the cache")
    s.add_argument("--quiet", action="store_true", help="no progress bars")
    s.add_argument("--progress", action="store_true", help="progress bars even when not a TTY")
    s.set_defaults(func=cmd_sensitivity)
    i = sub.add_parser("import", help="turn promptfoo, OpenAI Batch or CSV/JSONL output into a "
                       "replay file")
    i.add_argument("file")
    i.add_argument("--from", dest="fmt", default="auto",
                   choices=["auto", "promptfoo", "openai-batch", "csv", "jsonl"])
    i.add_argument("--requests", help="OpenAI Batch: the requests file that was uploaded")
    i.add_argument("--prompt-column", help="CSV/JSONL: the column with the prompt")
    i.add_argument("--response-column", help="CSV/JSONL: the column with the response")
    i.add_argument("--model-column", help="CSV/JSONL: the column with the model name (optional)")
    i.add_argument("--system-column", help="CSV/JSONL: the column with the system prompt (optional)")
    i.add_argument("--out", help="replay file to write (default: next to FILE, .replay.jsonl)")
    i.add_argument("--spec-out", help="also write a starter audit spec for the imported responses")
    i.add_argument("--skip-bad", action="store_true",
                   help="import the good rows when some are malformed (each is still listed)")
    i.add_argument("--keep-cached-copies", action="store_true",
                   help="promptfoo: keep cached responses that repeat another word for word")
    i.set_defaults(func=cmd_import)
    h = sub.add_parser("history", help="list the recorded runs (every audit is recorded)")
    h.add_argument("--model", help="only runs with a model whose name contains this")
    h.add_argument("--prompt", help="only runs whose prompts or perturbations contain this")
    h.add_argument("--since", help="only runs on or after this date (YYYY-MM-DD)")
    h.add_argument("--until", help="only runs on or before this date (YYYY-MM-DD)")
    h.add_argument("--source", choices=["cli", "dashboard"], help="only runs from here")
    h.add_argument("--limit", type=int, default=None, help="at most this many runs")
    h.add_argument("--json", action="store_true", help="machine-readable output")
    h.set_defaults(func=cmd_history, action="list")
    hs = h.add_subparsers(dest="action")
    s = hs.add_parser("show", help="one run: settings, results, where its responses live")
    s.add_argument("id", type=int)
    c = hs.add_parser("compare", help="two runs side by side: which verdicts changed")
    c.add_argument("a", type=int, help="run A (e.g. before an upgrade)")
    c.add_argument("b", type=int, help="run B (e.g. after)")
    d = hs.add_parser("delete", help="delete runs (with their results and responses)")
    d.add_argument("ids", type=int, nargs="+")
    d.add_argument("--yes", action="store_true", help="really delete (required)")
    for p in (s, c, d):
        p.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                       help="machine-readable output")
    return ap


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    args = build_parser().parse_args(argv)
    from .backends.base import BackendError, ContextLengthError, clean_text
    from .cache import CacheError
    from .outputs import OutputDirError
    from .spec import SpecError

    try:
        return args.func(args)
    except (SpecError, CacheError, OutputDirError, ContextLengthError) as exc:
        print(f"error: {clean_text(exc, 1000)}", file=sys.stderr)
        return 2
    except BackendError as exc:  # server text is stripped of escapes before it is shown
        print(f"error: {clean_text(exc, 1000)}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        print("stopped: every response received so far is cached; run again to resume.",
              file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
