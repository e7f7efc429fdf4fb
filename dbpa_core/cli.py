"""``dbpa``: run audits from spec files, for batch jobs and CI.

    dbpa audit SPEC.yaml --out DIR [--no-cache] [--fail-on control,target,check]
               [--junit FILE] [--allow-key-env NAME] [--batch]
    dbpa estimate SPEC.yaml [--allow-key-env NAME]
    dbpa attack SPEC.yaml --out DIR [--no-cache] [--estimate] [--junit FILE] [--max-asr X]
    dbpa fidelity DATA.csv --loss tv --gamma 0.5 --eta 0.05 --out DIR | --simulate SPEC.yaml [--batch]
    dbpa cache info | clear
    dbpa sensitivity SPEC.yaml --measures all --embedders spec,bleu --lengths 100,300,900 --out DIR
    dbpa import FILE [--from promptfoo|openai-batch|csv|jsonl] --out replay.jsonl [--force]
    dbpa history [--model M] [--prompt P] [--since DATE] [--until DATE] [--json]
    dbpa history show ID | compare A B [--fail-on-change] | delete ID... --yes
    dbpa report RUN_ID [RUN_ID ...] --out FILE.html|FILE.pdf
    dbpa ui [STREAMLIT OPTIONS, e.g. --server.port 8600]

Global options, before or after the command: ``--cache-dir DIR`` (``$DBPA_CACHE_DIR``),
``--home DIR`` (``$DBPA_HOME``), ``--quiet`` (no progress bars).

A spec with ``cases:`` is a suite (:mod:`dbpa_core.suite`): ``dbpa audit`` runs every
case x perturbation, corrects them together and prints one pooled row per perturbation;
``dbpa estimate`` counts every case.

Every ``dbpa audit`` (of one base prompt or of a suite of cases) is recorded in the run history
(``$DBPA_HOME/history.sqlite3``, see :mod:`dbpa_core.history`) unless ``--no-history``.

Exit codes: 0 done, 1 a check asked for on the command line failed (``--fail-on``: a
control perturbation changed the answers detectably, a target did not, an answer check changed;
``--max-asr``: an attack's success rate was above it; ``history compare --fail-on-change``:
a verdict changed between the two runs), 2 a mistake in the spec, the arguments or the
setup (an unwritable ``--out`` or ``--junit``, a damaged cache), 3 a backend failure (key,
server, model, malformed answers), 130 stopped. A command that needs an optional extra
that is not installed (``local``: the embedded model; ``app``: the dashboard) says which
in one line and exits 2. ``--junit FILE`` writes a JUnit XML report
(:mod:`dbpa_core.junit`) for CI.
"""
from __future__ import annotations

import argparse
import os
import sys

from . import __version__
from .fmt import SIZE_LEGEND, fmt_p, size_cell


def _table(result) -> str:
    delta = result.spec.min_effect
    head = ("name", "role", "omega", "chance", "above", "p", "p_adj", "", "verdict", "size")
    rows = [head + ((f"> {delta:g}",) if delta is not None else ())]
    for p in result.perturbations:
        row = (p.name, p.role or "-", f"{p.effect_size:.3f}", f"{p.chance_effect_size:.3f}",
               f"{p.effect_above_chance:+.3f}", fmt_p(p.p_value), fmt_p(p.p_adjusted), p.stars,
               verdict_word(p), size_cell(p))
        if delta is not None:
            row += ("yes" if p.exceeds_min_effect else "no",)
        rows.append(row)
    return _columns(rows)


def verdict_word(p) -> str:
    """'detectable' when the change is told apart from the model's own randomness
    (``p_adj <= alpha``), 'not shown' when it is not (which does not prove no change)."""
    return "detectable" if p.significant else "not shown"


def _checks_table(result) -> str:
    """The answer checks: base and perturbed rates (or mean words), the difference in
    points (or words) with its 95 % interval, p and the adjusted p."""
    from .checks import checks_table

    return _columns(checks_table(result.checks))


def _columns(rows) -> str:
    """Rows of text (the header first) as aligned columns under a rule."""
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


def _gates(args):
    """The gated kinds (``--fail-on``, ``--fail-on-control``) and the ``--junit`` path,
    checked before anything is run; None after saying what is wrong."""
    from .junit import JUnitPathError, check_junit_path, parse_fail_on

    try:
        fail_on = parse_fail_on(getattr(args, "fail_on", None),
                                fail_on_control=getattr(args, "fail_on_control", False))
        if getattr(args, "junit", None):
            check_junit_path(args.junit)
    except (ValueError, JUnitPathError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None
    return fail_on


def _report(args, suites, fail_on) -> int:
    """Write the JUnit report (with ``--junit``) and say which gated checks failed:
    1 when any did, else 0."""
    from .junit import gate_failures, write_junit

    failed = gate_failures(suites, fail_on)
    what = {"control-changed": "control perturbation(s) changed the answers detectably",
            "target-unchanged": "target perturbation(s) did not detectably change the answers",
            "check-changed": "answer check(s) changed detectably",
            "asr-exceeded": f"attack success rate above --max-asr "
                            f"{getattr(args, 'max_asr', None)}"}
    for kind, words in what.items():
        names = [c.name for c in failed if c.failure_type == kind]
        if names:
            print(f"FAIL: {words}: {', '.join(names)}", file=sys.stderr)
    if args.junit:
        try:
            print(f"wrote {write_junit(args.junit, suites)} (JUnit)")
        except OSError as exc:
            print(f"error: cannot write the JUnit report {args.junit} "
                  f"({exc.strerror or exc}); the results are written.", file=sys.stderr)
            return 2
    return 1 if failed else 0



def _write(result, out) -> list[str] | None:
    """``result.write(out)``, or None after one line on stderr (a full disk, no permission)."""
    try:
        return result.write(out)
    except OSError as exc:
        print(f"error: cannot write the results to {out} ({exc.strerror or exc}); every "
              "answer is cached, so running again costs nothing.", file=sys.stderr)
        return None

def cmd_audit(args) -> int:
    from .audit import AuditCancelled, check_out_dir, run_audit
    from .backends.base import BackendError, clean_text
    from .junit import audit_suites, error_suites
    from .spec import load_spec

    fail_on = _gates(args)
    if fail_on is None:
        return 2
    spec = load_spec(args.spec, allow_key_env=args.allow_key_env)
    check_out_dir(args.out)  # before any paid call
    cache = _cache(args)
    cache.check()
    said = _spec_warnings(spec)  # what the plan cannot show, once nothing stops the run
    bars = _Bars((not args.quiet and sys.stderr.isatty()) or args.progress)
    if args.batch:  # uncached calls as one Batch API job into the cache; the audit reads it
        from .batch import run_batch_cli

        rc = run_batch_cli(spec, args, cache, bars)
        if rc is not None:
            return rc
    if spec.cases:  # a suite of cases
        from .suite import cmd_audit_suite

        return cmd_audit_suite(spec, args, cache, bars)
    try:
        result = run_audit(spec, cache=cache, progress=bars)
    except AuditCancelled as exc:
        print(str(exc), file=sys.stderr)
        return 130
    except BackendError as exc:  # exit 3 (in main); a CI page still learns why from the report
        if args.junit:
            _report(args, error_suites(spec, clean_text(exc, 1000), fail_on=fail_on), fail_on)
        raise
    finally:
        bars.close()
    paths = _write(result, args.out)
    if paths is None:
        return 2
    print(_table(result))
    if result.checks:
        print("\nAnswer checks (perturbed minus base; rates in points, length in words):")
        print(_checks_table(result))
        if any(c.model_graded for c in result.checks):
            print("(model-graded): a judge model's yes or no, only as good as the judge; "
                  "'+n?': replies that said neither, left out of the rate.")
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
    print(SIZE_LEGEND)
    for w in result.warnings:
        if w not in said:
            print(f"warning: {w}", file=sys.stderr)
    print("wrote " + ", ".join(paths))
    if not args.no_history:
        _record_cli_run(spec, result, args)
    return _report(args, audit_suites(result, fail_on=fail_on), fail_on)


def _record_cli_run(spec, result, args) -> None:
    """Record an audit in the run history (see :func:`record_in_history`)."""
    from .spec import model_label

    job = model_label(spec.model) if spec.mode == "perturbation" else "model comparison"
    record_in_history(args, lambda h, cache_dir, out_dir: h.record(
        {job: result}, source="cli", title=spec.name, cache_dir=cache_dir, out_dir=out_dir))


def record_in_history(args, save) -> None:
    """Record a run in the run history with ``save(history, cache_dir, out_dir) -> run id``;
    a history that cannot be written is a warning, never a failed run (the results are
    already written)."""
    import sqlite3

    from .history import History, HistoryError

    try:
        h = History()
        run_id = save(h, None if args.no_cache else _cache(args).directory,
                      os.path.abspath(args.out))
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
    if est.get("cases"):
        print(f"\nsuite: {est['cases']} cases x {len(spec.perturbations)} perturbations = "
              f"{est['tests']} tests (each row sums its arm over the cases)")
    print(f"\ntotal: {t['calls']} calls ({t['cached']} cached), ~{t['input_tokens']} input and "
          f"<= {t['output_tokens']} output tokens, embeddings ~{t['embedding_tokens']} tokens; "
          f"estimated cost ${t['cost']:.4f}")
    from .batch import batch_cost

    if t["calls"] and batch_cost(est, spec) < t["cost"]:
        print(f"through the Batch API (dbpa audit --batch): ${batch_cost(est, spec):.4f}")
    if est["unknown_prices"]:
        print("no price known for: " + ", ".join(est["unknown_prices"]) +
              " (add them under 'prices:' in the spec, $ per 1M tokens)")
    print("Tokens are estimated at ~4 characters each; output is counted at max_tokens.")
    return 0


def cmd_attack(args) -> int:
    from .attacks.battery import estimate_battery, run_battery, summary_text
    from .attacks.spec import load_attack_spec
    from .attacks.wordnet import WordNetMissing
    from .junit import battery_suites
    from .outputs import check_out_dir
    from .sampling import RunCancelled

    if args.max_asr is not None and not 0.0 <= args.max_asr <= 1.0:
        print(f"error: --max-asr {args.max_asr:g}: give a share between 0 and 1 (e.g. 0.2).",
              file=sys.stderr)
        return 2
    spec = load_attack_spec(args.spec, allow_key_env=args.allow_key_env)
    if not args.estimate:
        if _gates(args) is None:
            return 2
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
    paths = _write(result, args.out)
    if paths is None:
        return 2
    print(summary_text(result))
    u = result.usage
    print(f"\n{u['calls']} new calls, {u['cached_samples']} answers from the cache, "
          f"{u['seconds']:.1f} s.")
    for w in result.warnings:
        print(f"note: {w}", file=sys.stderr)
    print("wrote " + ", ".join(paths))
    return _report(args, battery_suites(result, max_asr=args.max_asr), frozenset())


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
                     *[f"{v[s]['significant']}/{v[s]['settings']} detectable" for s in studies],
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
    if spec.cases:
        print(f"error: {args.spec} is a suite (cases:); sensitivity studies take one base "
              "prompt: run one case's prompts as a spec without cases.", file=sys.stderr)
        return 2
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

    from .importers import ImportFormatError, import_file, output_problem, write_atomic

    out = args.out or str(Path(args.file).with_suffix("")) + ".replay.jsonl"
    inputs = [args.file] + ([args.requests] if args.requests else [])
    targets = [out] + ([args.spec_out] if args.spec_out else [])
    if args.spec_out and os.path.abspath(args.spec_out) == os.path.abspath(out):
        targets = [out]
        problems = ["--spec-out and --out name the same file; give two paths"]
    else:
        problems = []
    # every output is checked before the input is read: nothing is read, nothing is lost
    problems += [p for p in (output_problem(t, inputs=inputs, force=args.force)
                             for t in targets) if p]
    if problems:
        print(f"error: {problems[0]}; nothing was written.", file=sys.stderr)
        return 2
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
    files = {out: result.to_jsonl()}
    if args.spec_out:
        spec_dir = str(Path(args.spec_out).resolve().parent)
        files[args.spec_out] = result.starter_spec(str(Path(out).resolve()), spec_dir=spec_dir)
    try:
        write_atomic(files)  # all or nothing: never a partial replay file that reads as valid
    except OSError as exc:
        print(f"error: cannot write {' and '.join(files)} ({exc.strerror or exc}); nothing was "
              "written and the input is unchanged.", file=sys.stderr)
        return 2
    print(result.summary())
    if result.problems:
        print(f"skipped {len(result.problems)} malformed row(s), listed above.")
    print(f"wrote {out}")
    if args.spec_out:
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
        out = history_cli.ACTIONS[action](History(), args)
    except HistoryError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if isinstance(out, history_cli.Failed):  # e.g. compare --fail-on-change: a verdict changed
        print(out.text)
        print(out.message, file=sys.stderr)
        return out.code
    print(out)
    return 0


def cmd_report(args) -> int:
    """One HTML (or PDF) document with every verdict of the named runs."""
    from .report import ReportError, write_report

    try:
        path = write_report(args.ids, args.out, title=args.title)
    except ReportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {path}")
    return 0


def cmd_ui(args) -> int:
    from .launcher import run_ui

    if args.cache_dir:  # the dashboard reads it from the environment
        os.environ["DBPA_CACHE_DIR"] = os.path.abspath(os.path.expanduser(args.cache_dir))
    return run_ui(args.streamlit_options)


def _global_options(p: argparse.ArgumentParser, *, top: bool) -> None:
    """The options every command takes, before or after its name. Below the top they
    default to SUPPRESS, so a value given before the command is not reset after it."""
    def default(value):
        return value if top else argparse.SUPPRESS

    have = p._option_string_actions
    for flags, kw in ((("--cache-dir",), dict(default=default(None), metavar="DIR",
                                               help="cache folder (default: $DBPA_CACHE_DIR "
                                               "or the per-user cache)")),
                      (("--home",), dict(default=default(None), metavar="DIR",
                                         help="folder for the run history, settings and saved "
                                         "models (default: $DBPA_HOME or the per-user data "
                                         "folder)")),
                      (("--quiet",), dict(action="store_true", default=default(False),
                                          help="no progress bars"))):
        if flags[0] in have:  # the command declares it itself: keep its help, not its default
            have[flags[0]].default = default(have[flags[0]].default)
        else:
            p.add_argument(*flags, **kw)


def _subparsers(p: argparse.ArgumentParser):
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                yield child
                yield from _subparsers(child)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="dbpa", description="Audit LLM robustness with "
                                 "distribution-based perturbation analysis.")
    ap.add_argument("--version", action="version", version=f"dbpa {__version__}")
    sub = ap.add_subparsers(dest="command", required=True)
    a = sub.add_parser("audit", help="run an audit spec and write results")
    a.add_argument("spec")
    a.add_argument("--out", default="dbpa-results", help="output folder (default: dbpa-results)")
    a.add_argument("--no-cache", action="store_true", help="neither read nor write the cache")
    a.add_argument("--fail-on-control", action="store_true",
                   help="exit 1 when a control perturbation changed the answers detectably "
                   "(for CI; the same "
                   "as --fail-on control)")
    a.add_argument("--fail-on", action="append", default=[], metavar="KINDS",
                   help="exit 1 when any of these fails (comma-separated, repeatable): control "
                   "(a control perturbation changed the answers detectably), target (a "
                   "target did not), check (an answer check changed detectably)")
    a.add_argument("--quiet", action="store_true", help="no progress bars")
    a.add_argument("--progress", action="store_true", help="progress bars even when not a TTY")
    a.add_argument("--no-history", action="store_true",
                   help="do not record this audit in the run history ($DBPA_HOME)")
    a.add_argument("--batch", action="store_true",
                   help="send the uncached calls of OpenAI-compatible models as one Batch API "
                   "job (half price, answers within 24 h; a stopped run picks the job up again)")
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
    k.add_argument("--max-asr", type=float, default=None, metavar="X",
                   help="exit 1 (and fail its JUnit test case) when an attack's success rate "
                   "at some rho is above X (a share, e.g. 0.2)")
    k.add_argument("--quiet", action="store_true", help="no progress bars")
    k.add_argument("--progress", action="store_true", help="progress bars even when not a TTY")
    k.set_defaults(func=cmd_attack)
    for p in (a, k):
        p.add_argument("--junit", metavar="FILE",
                       help="also write a JUnit XML report for CI: one test case per "
                       + ("perturbation and answer check" if p is a else "attack and rho")
                       + ", failures with their numbers")
    for p in (a, e, k):
        p.add_argument("--allow-key-env", action="append", default=[], metavar="NAME",
                       help="let the spec send this environment variable as an API key although "
                       "it is not an LLM provider's key variable (a spec alone never can; "
                       "repeatable; or list it under allow_key_env in $DBPA_HOME/settings.yaml)")
    from .fidelity.command import add_parser as add_fidelity

    add_fidelity(sub).set_defaults(func=cmd_fidelity)
    from .spec_schema import add_parser as add_schema

    add_schema(sub)  # dbpa schema [--out FILE]: runs spec_schema.run_schema
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
    i.add_argument("--force", action="store_true",
                   help="replace --out / --spec-out when they exist (never the input file)")
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
    c.add_argument("--fail-on-change", action="store_true",
                   help="exit 1 when any verdict changed from A to B, naming them (for CI: a "
                   "model upgrade that changes what the audit finds)")
    d = hs.add_parser("delete", help="delete runs (with their results and responses)")
    d.add_argument("ids", type=int, nargs="+")
    d.add_argument("--yes", action="store_true", help="really delete (required)")
    for p in (s, c, d):
        p.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                       help="machine-readable output")
    r = sub.add_parser("report", help="one HTML or PDF report with every verdict of recorded "
                       "runs (an audit file)")
    r.add_argument("ids", type=int, nargs="+", metavar="RUN_ID", help="runs (dbpa history lists them)")
    r.add_argument("--out", required=True, metavar="FILE",
                   help="FILE.html, or FILE.pdf (printed by headless Chromium)")
    r.add_argument("--title", help="the report's title (default: the runs' titles)")
    r.set_defaults(func=cmd_report)
    u = sub.add_parser("ui", help="start the dashboard (needs the app extra)",
                       description="Start the dashboard in a browser (headless, no usage "
                       "statistics). Every other option goes to `streamlit run`, e.g. "
                       "--server.port 8600 or --server.address 0.0.0.0.")
    u.set_defaults(func=cmd_ui, streamlit_options=[])
    _global_options(ap, top=True)
    for p in _subparsers(ap):
        _global_options(p, top=False)
    return ap


def _parse(argv: list[str] | None) -> argparse.Namespace:
    """Parse the command line; unknown options are refused, except after ``ui`` (Streamlit's)."""
    ap = build_parser()
    args, rest = ap.parse_known_args(argv)
    if rest and args.command != "ui":
        ap.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.command == "ui":
        args.streamlit_options = rest
    if args.cache_dir is None:
        args.cache_dir = os.environ.get("DBPA_CACHE_DIR")
    if args.home:  # every reader of the run history and settings looks here
        os.environ["DBPA_HOME"] = os.path.abspath(os.path.expanduser(args.home))
    return args


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    args = _parse(argv)
    from .backends.base import BackendError, ContextLengthError, clean_text
    from .cache import CacheError
    from .launcher import MissingExtraError
    from .outputs import OutputDirError
    from .resources import extra_for, missing_extra_message
    from .spec import SpecError

    try:
        return args.func(args)
    except MissingExtraError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:  # an optional extra left out of the install
        extra = extra_for(exc.name)
        if extra is None:
            raise
        print(f"error: {missing_extra_message(extra)}", file=sys.stderr)
        return 2
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
