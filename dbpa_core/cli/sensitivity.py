"""``dbpa sensitivity SPEC.yaml``: does each verdict hold under other measures, embedders
and prompt lengths (:mod:`dbpa_core.sensitivity`)?"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from ..fmt import table
from .common import add_gates, add_no_history, add_progress_options, gates, open_cache, progress_bars

if TYPE_CHECKING:
    from ..sensitivity import SensitivityResult


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    s = sub.add_parser(
        "sensitivity", help="does the verdict hold under other measures, embedders and prompt lengths?"
    )
    s.add_argument("spec", metavar="SPEC_FILE")
    s.add_argument("--measures", default="all", help="'all', 'none' or a comma-separated list (default: all)")
    s.add_argument(
        "--embedders",
        default="spec",
        help="comma-separated: spec, local, bleu, rouge1, rouge2, rougeL, openai[:MODEL], "
        "st:FOLDER (default: spec, the spec's own)",
    )
    s.add_argument(
        "--lengths",
        default="",
        help="prompt lengths in tokens, e.g. 100,300,900 (new model calls; default none)",
    )
    s.add_argument(
        "--cost-models",
        default="",
        help="priced models to compare in the cost table, e.g. gpt-4o-mini,gpt-4o",
    )
    s.add_argument("--out", default="dbpa-sensitivity", help="output folder")
    s.add_argument("--dry-run", action="store_true", help="print the calls and cost; run nothing")
    s.add_argument("--no-cache", action="store_true", help="neither read nor write the cache")
    add_no_history(s, "study")
    add_progress_options(s)
    add_gates(s, "perturbation (whether its verdict holds in every setting)")
    return s


def verdict_table(result: SensitivityResult) -> str:
    """One row per perturbation: the audit's verdict, how many settings of each study
    found a detectable change, and whether the verdict holds."""
    studies = result.studies
    rows = []
    for v in result.verdicts():
        base = {True: "changed", False: "no change", None: "-"}[v["baseline_significant"]]
        rows.append(
            (
                v["perturbation"],
                base,
                *[f"{v[s]['significant']}/{v[s]['settings']} detectable" for s in studies],
                "holds" if v["holds"] else "DEPENDS ON THE SETTING",
            )
        )
    return table(rows, ("perturbation", "audit", *[f"{s}s" for s in studies], "verdict"))


def run(args: argparse.Namespace) -> int:
    from ..sampling import RunCancelled
    from ..sensitivity import (
        SensitivityConfig,
        SensitivityError,
        parse_embedders,
        parse_lengths,
        parse_measures,
        plan,
        run_sensitivity,
    )
    from ..spec import load_spec

    fail_on = gates(args)
    if fail_on is None:
        return 2
    spec = load_spec(args.spec)
    if spec.cases:
        print(
            f"error: {args.spec} is a suite (cases:); sensitivity studies take one base "
            "prompt: run one case's prompts as a spec without cases.",
            file=sys.stderr,
        )
        return 2
    try:
        config = SensitivityConfig(
            measures=parse_measures(args.measures),
            embedders=parse_embedders(args.embedders, spec),
            lengths=parse_lengths(args.lengths),
            cost_models=tuple(m.strip() for m in (args.cost_models or "").split(",") if m.strip()),
        )
        need = plan(spec, config, cache=open_cache(args))
    except SensitivityError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(
        f"{need['calls']} model calls to make ({need['cached']} samples already cached), "
        f"estimated cost ${need['cost']:.4f}"
        + (f" (no price for {', '.join(need['unknown_prices'])})" if need["unknown_prices"] else "")
        + ".",
        file=sys.stderr,
    )
    if args.dry_run:
        return 0
    from ..outputs import check_out_dir

    check_out_dir(args.out)  # before any paid call
    bars = progress_bars(args)
    try:
        result = run_sensitivity(spec, config, cache=open_cache(args), progress=bars)
    except RunCancelled as exc:
        print(str(exc), file=sys.stderr)
        return 130
    finally:
        bars.close()
    paths = result.write(args.out)
    print(verdict_table(result))
    u = result.usage
    print(
        f"\n{u['calls']} new model calls, {u['cached_samples']} samples from the cache, "
        f"{u['embeddings_computed']} new embeddings, {u['seconds']:.1f} s. One row per "
        f"perturbation x setting in results.csv; cost in cost.csv."
    )
    for w in result.warnings:
        print(f"warning: {w}", file=sys.stderr)
    print("wrote " + ", ".join(paths))
    from ..runs import as_run
    from .common import finish, record_run_in_history

    run = as_run({"sensitivity": result}, title=spec.name)
    record_run_in_history(args, run)
    return finish(args, run, fail_on)
