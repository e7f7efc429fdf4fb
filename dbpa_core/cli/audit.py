"""``dbpa audit SPEC.yaml --out DIR``: run an audit spec (or a suite of cases), print its
table, write its results, record it in the run history and apply the ``--fail-on`` gates."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from ..fmt import SIZE_LEGEND, fmt_p, size_cell, table
from .common import (
    add_allow_key_env,
    add_gates,
    add_progress_options,
    finish,
    gates,
    open_cache,
    progress_bars,
    record_run_in_history,
    report,
    spec_warnings,
    write_results,
)

if TYPE_CHECKING:
    from ..audit import PerturbationResult
    from ..cache import Cache
    from ..spec import AuditSpec
    from .common import Bars


if TYPE_CHECKING:
    from ..audit import AuditResult


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    a = sub.add_parser("audit", help="run an audit spec and write results")
    a.add_argument("spec", metavar="SPEC_FILE")
    a.add_argument("--out", default="dbpa-results", help="output folder (default: dbpa-results)")
    a.add_argument("--no-cache", action="store_true", help="neither read nor write the cache")
    add_progress_options(a)
    a.add_argument(
        "--no-history", action="store_true", help="do not record this audit in the run history ($DBPA_HOME)"
    )
    a.add_argument(
        "--batch",
        action="store_true",
        help="send the uncached calls of OpenAI-compatible models as one Batch API "
        "job (half price, answers within 24 h; a stopped run picks the job up again)",
    )
    add_gates(a, "perturbation and answer check (a suite: per case x perturbation, pooled verdict and check)")
    add_allow_key_env(a)
    return a


def results_table(result: AuditResult) -> str:
    """One row per perturbation: omega, chance, above chance, p, adjusted p, verdict, size."""
    delta = result.spec.min_effect
    head: tuple[str, ...] = ("name", "role", "omega", "chance", "above", "p", "p_adj", "", "verdict", "size")
    head += (f"> {delta:g}",) if delta is not None else ()
    seq = result.spec.sequential_sampling is not None
    head += ("k", "stopped") if seq else ()
    rows = []
    for p in result.perturbations:
        row: tuple[str, ...] = (
            p.name,
            p.role or "-",
            f"{p.effect_size:.3f}",
            f"{p.chance_effect_size:.3f}",
            f"{p.effect_above_chance:+.3f}",
            fmt_p(p.p_value),
            fmt_p(p.p_adjusted),
            p.stars,
            verdict_word(p),
            size_cell(p),
        )
        if delta is not None:
            row += ("yes" if p.exceeds_min_effect else "no",)
        if seq:
            row += (str(p.samples_used), p.sequential.reason if p.sequential else "-")
        rows.append(row)
    return table(rows, head)


def sequential_text(result: AuditResult) -> str:
    """With sequential sampling: the answers drawn against a fixed k, and why each test
    stopped (one line each)."""
    used = sum(len(a.texts) for a in (result.base, *result.arms))
    most = (1 + len(result.arms)) * result.spec.samples
    lines = [f"sequential sampling: {used} answers of at most {most} ({1 - used / most:.0%} fewer)"]
    lines += [f"  {p.name}: {p.sequential.statement}" for p in result.perturbations if p.sequential]
    return "\n".join(lines)


def verdict_word(p: PerturbationResult) -> str:
    """'detectable' when the change is told apart from the model's own randomness
    (``p_adj <= alpha``), 'not shown' when it is not (which does not prove no change)."""
    return "detectable" if p.significant else "not shown"


def checks_text(result: AuditResult) -> str:
    """The answer checks: base and perturbed rates (or mean words), the difference in
    points (or words) with its 95 % interval, p and the adjusted p."""
    from ..checks import checks_table

    rows = checks_table(result.checks)
    return table(rows[1:], rows[0])


def run(args: argparse.Namespace) -> int:
    from ..audit import AuditCancelled, check_out_dir, run_audit
    from ..backends.base import BackendError, clean_text
    from ..junit import error_suites
    from ..runs import as_run
    from ..spec import load_spec

    fail_on = gates(args)
    if fail_on is None:
        return 2
    spec = load_spec(args.spec, allow_key_env=args.allow_key_env)
    by_round = bool(args.batch) and spec.sequential_sampling is not None  # a Batch API job per round
    check_out_dir(args.out)  # before any paid call
    cache = open_cache(args)
    cache.check()
    said = spec_warnings(spec)  # what the plan cannot show, once nothing stops the run
    bars = progress_bars(args)
    if args.batch and not by_round:  # uncached calls as one Batch API job into the cache
        from ..batch import run_batch_cli

        rc = run_batch_cli(spec, args, cache, bars)
        if rc is not None:
            return rc
    if spec.cases:  # a suite of cases
        if by_round:  # each round of all the cases as one Batch API job, then the suite reads them
            from ..batch import suite_rounds_cli

            rc = suite_rounds_cli(spec, cache, bars)
            if rc is not None:
                return rc
        return run_suite_command(spec, args, cache, bars, fail_on)
    fetch = None
    if by_round:  # each round's uncached calls as one Batch API job; the round reads them
        from ..batch import round_fetch

        fetch = round_fetch(cache, bars)
    try:
        result = run_audit(spec, cache=cache, progress=bars, fetch_round=fetch)
    except AuditCancelled as exc:
        print(str(exc), file=sys.stderr)
        return 130
    except KeyboardInterrupt as exc:
        if not by_round:
            raise
        from ..batch import STOPPED_WHILE_PENDING

        print(STOPPED_WHILE_PENDING, file=sys.stderr)
        return 128 + int(getattr(exc, "signum", 2))
    except BackendError as exc:  # exit 3 (in main); a CI page still learns why from the report
        if args.junit:
            report(args, error_suites(spec, clean_text(exc, 1000), fail_on=fail_on), fail_on)
        raise
    finally:
        bars.close()
    paths = write_results(result, args.out)
    if paths is None:
        return 2
    print(results_table(result))
    if result.checks:
        print("\nAnswer checks (perturbed minus base; rates in points, length in words):")
        print(checks_text(result))
        if any(c.model_graded for c in result.checks):
            print(
                "(model-graded): a judge model's yes or no, only as good as the judge; "
                "'+n?': replies that said neither, left out of the rate."
            )
    if result.roc is not None:
        print(
            f"\nROC over alpha: AUC = {result.roc.auc:.3f}; "
            f"TPR at FPR <= 5 %: {result.roc.tpr_at_fpr(0.05):.2f}"
        )
    u = result.usage
    print(
        f"\n{u['calls']} new calls, {u['cached_samples']} samples from the cache, "
        f"{u['seconds']:.1f} s. Correction: {spec.correction}, alpha = {spec.alpha}."
    )
    if spec.sequential_sampling is not None:
        print(sequential_text(result))
    print(
        f"omega = {spec.measure}; chance = the omega chance alone gives at "
        f"{'the k each test used' if spec.sequential_sampling is not None else f'k = {spec.samples}'}; "
        "above = omega - chance (about 0 when nothing changed)."
        + (
            f" '> {spec.min_effect:g}': above chance by more than the minimum effect of interest."
            if spec.min_effect is not None
            else ""
        )
    )
    print(SIZE_LEGEND)
    for w in result.warnings:
        if w not in said:
            print(f"warning: {w}", file=sys.stderr)
    print("wrote " + ", ".join(paths))
    from ..spec import model_label

    job = model_label(spec.model) if spec.mode == "perturbation" else "model comparison"
    run = as_run({job: result}, title=spec.name)
    record_run_in_history(args, run)
    return finish(args, run, fail_on)


def run_suite_command(
    spec: AuditSpec, args: argparse.Namespace, cache: Cache, bars: Bars, fail_on: frozenset[str] = frozenset()
) -> int:
    """``dbpa audit`` of a suite: run it, write the results, print the pooled table."""
    import os
    import uuid

    from ..sampling import RunCancelled
    from ..suite import pooled_checks_rows, pooled_rows, run_suite

    os.makedirs(args.out, exist_ok=True)
    partial = os.path.join(args.out, f".responses.jsonl.{os.getpid()}-{uuid.uuid4().hex[:8]}.partial")
    try:
        with open(partial, "w", encoding="utf-8") as fh:
            result = run_suite(spec, cache=cache, progress=bars, responses=fh)
        result.responses_file = partial
        paths = result.write(args.out)
    except RunCancelled as exc:
        print(str(exc), file=sys.stderr)
        return 130
    except OSError as exc:
        print(
            f"error: cannot write the results to {args.out} ({exc.strerror or exc}); every "
            "response is cached, so running again costs nothing.",
            file=sys.stderr,
        )
        return 2
    finally:
        bars.close()
        if os.path.exists(partial):
            os.unlink(partial)
    rows = pooled_rows(result)
    print(table(rows[1:], rows[0]))
    u = result.usage
    print(
        f"\n{result.n_cases} cases x {len(spec.perturbations)} perturbations = "
        f"{len(result.tests)} tests, corrected together ({spec.correction}, alpha = "
        f"{spec.alpha}); one row per test in results.csv."
    )
    print(
        "p (Fisher): does the perturbation change the answers in any case (Fisher's "
        "combined test over the cases); p_adj: corrected across perturbations; above "
        "chance: mean over cases with a bootstrap interval; discoveries: cases significant "
        "after the suite's correction; share changed: 1 - Storey's estimate of the share "
        "of unchanged cases."
    )
    if result.pooled_checks:
        rows = pooled_checks_rows(result)
        print("\nAnswer checks pooled over the cases (each arm's rate over all its answers):")
        print(table(rows[1:], rows[0]))
        print(
            f"+N?: answers that chose no option clearly (left out of the rate). "
            f"p: the exact stratified test over the cases (Cochran-Mantel-Haenszel beyond "
            f"its size; Fisher's combined test for lengths); p_adj: corrected across the pooled "
            f"checks. The {len(result.checks)} per-case check rows are one family "
            f"({spec.correction}), in checks.csv."
        )
    print(
        f"{u.get('calls', 0)} new calls, {u.get('cached_samples', 0)} samples from the cache, "
        f"{u['seconds']:.1f} s."
    )
    if spec.sequential_sampling is not None:
        used: dict[str, list[int]] = {}
        for t in result.tests:
            used.setdefault(t["case"], []).append(t["samples_used"])
        drawn = sum(max(ks) + sum(ks) for ks in used.values())
        most = len(used) * (1 + len(spec.perturbations)) * spec.samples
        print(
            f"sequential sampling: {drawn} answers of at most {most} ({1 - drawn / max(1, most):.0%} "
            "fewer); each test's k and why it stopped: samples_used, stop_reason in results.csv."
        )
    for w in result.warnings:
        print(f"warning: {w}", file=sys.stderr)
    print("wrote " + ", ".join(paths))
    from ..runs import as_run

    run = as_run(result, title=spec.name)  # its answers read from the responses.jsonl written
    record_run_in_history(args, run)
    return finish(args, run, fail_on)  # the gates read the pooled verdicts across the cases
