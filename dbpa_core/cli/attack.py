"""``dbpa attack SPEC.yaml --out DIR``: run a robustness battery spec (the spec model is
:mod:`dbpa_core.attacks.spec`, the run :mod:`dbpa_core.attacks.battery`)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from .common import (
    add_allow_key_env,
    add_gates,
    add_no_history,
    add_progress_options,
    finish,
    gates,
    open_cache,
    progress_bars,
    record_run_in_history,
    write_results,
)

if TYPE_CHECKING:
    from ..attacks.spec import BatterySpec
    from ..cache import Cache
    from .common import Bars


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    k = sub.add_parser(
        "attack",
        help="run a robustness battery spec (typos, word edits, "
        "homoglyphs, instructions, option orders, RTI) and write results",
    )
    k.add_argument("spec", metavar="SPEC_FILE")
    k.add_argument("--out", default="dbpa-attack", help="output folder (default: dbpa-attack)")
    k.add_argument("--no-cache", action="store_true", help="neither read nor write the cache")
    k.add_argument("--estimate", action="store_true", help="print the calls it needs; call nothing")
    k.add_argument(
        "--max-asr",
        type=float,
        default=None,
        metavar="X",
        help="exit 1 (and fail its JUnit test case) when an attack's success rate "
        "at some rho is above X (a share, e.g. 0.2)",
    )
    k.add_argument(
        "--batch",
        action="store_true",
        help="send the uncached calls of an OpenAI-compatible model as one Batch API "
        "job (half price, answers within 24 h; RTI's rounds all asked at once; a "
        "stopped run picks the job up again)",
    )
    add_no_history(k, "battery")
    add_progress_options(k)
    add_gates(k, "attack and rho")
    add_allow_key_env(k)
    return k


def run(args: argparse.Namespace) -> int:
    from ..launcher import require_extra

    require_extra("battery")  # WordNet, confusables, spaCy, scikit-learn: one line if missing
    from ..attacks.battery import run_battery, summary_text
    from ..attacks.spec import load_attack_spec
    from ..attacks.wordnet import WordNetMissing
    from ..batch import battery_batch_cost
    from ..outputs import check_out_dir
    from ..sampling import RunCancelled

    if args.max_asr is not None and not 0.0 <= args.max_asr <= 1.0:
        print(f"error: --max-asr {args.max_asr:g}: give a share between 0 and 1 (e.g. 0.2).", file=sys.stderr)
        return 2
    spec = load_attack_spec(args.spec, allow_key_env=args.allow_key_env)
    fail_on: frozenset[str] = frozenset()
    if not args.estimate:
        found = gates(args)
        if found is None:
            return 2
        fail_on = found
        check_out_dir(args.out)  # before any paid call
    if args.estimate:
        from ..attacks.leaks import leak_notes, option_leaks
        from ..runs import estimate

        for note in spec.notes:  # items left out of the data: said before anything runs
            print(f"note: {note}", file=sys.stderr)
        for note in leak_notes(option_leaks(spec.items)):  # the options alone, no model
            print(f"note: {note}", file=sys.stderr)
        e = estimate(spec, cache=open_cache(args))  # counted from the requests the run asks
        cost = "unknown (add 'prices:')" if e["unknown_price"] else f"${e['cost']:.4f}"
        print(
            f"{e['answers']} answers + at most {e['rti_max']} for RTI + {e['curve']} curve "
            f"samples = at most {e['calls']} calls ({e['cached']} cached); ~{e['input_tokens']} "
            f"input and <= {e['output_tokens']} output tokens; estimated cost {cost}"
        )
        if e["calls"] and not e["unknown_price"] and spec.model.get("backend") == "openai":
            print(
                f"through the Batch API (dbpa attack --batch, every RTI round asked): "
                f"${battery_batch_cost(e, spec):.4f}"
            )
        return 0
    bars = progress_bars(args)
    cache = open_cache(args)
    try:
        if args.batch:  # uncached calls as one Batch API job into the cache, read from there
            rc = _batch(spec, cache, bars)
            if rc is not None:
                return rc
            bars.close()  # the batch stage's
            bars = progress_bars(args)
        result = run_battery(spec, cache=cache, progress=bars)
    except RunCancelled as exc:
        print(str(exc), file=sys.stderr)
        return 130
    except WordNetMissing as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        bars.close()
    paths = write_results(result, args.out)
    if paths is None:
        return 2
    print(summary_text(result))
    u = result.usage
    print(f"\n{u['calls']} new calls, {u['cached_samples']} answers from the cache, {u['seconds']:.1f} s.")
    for w in result.warnings:
        print(f"note: {w}", file=sys.stderr)
    print("wrote " + ", ".join(paths))
    from ..runs import BatteryRun

    run = BatteryRun(spec.name, tuple(result.warnings), batteries={"battery": result}, max_asr=args.max_asr)
    record_run_in_history(args, run)
    return finish(args, run, fail_on)


def _batch(spec: BatterySpec, cache: Cache, bars: Bars) -> int | None:
    """``--batch``: the battery's uncached samples (RTI's every round) as one Batch API
    job, with its batch price first; None to go on with the battery, else the exit code."""
    from ..batch import battery_batch_cost, jobs, jobs_cli
    from ..runs import estimate

    if cache.enabled:
        e = estimate(spec, cache=cache)
        if e["calls"] and spec.model.get("backend") == "openai":
            price = "unknown (add 'prices:')" if e["unknown_price"] else f"${battery_batch_cost(e, spec):.4f}"
            print(
                f"Batch API: at most {e['calls']} uncached calls (RTI's every round), "
                f"estimated {price} at the batch price.",
                file=sys.stderr,
            )
    return jobs_cli(jobs(spec), cache, bars)
