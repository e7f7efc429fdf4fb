"""``dbpa attack SPEC.yaml --out DIR``: run a robustness battery spec (the spec model is
:mod:`dbpa_core.attacks.spec`, the run :mod:`dbpa_core.attacks.battery`)."""
from __future__ import annotations

import argparse
import sys

from .common import (
    add_allow_key_env,
    add_junit,
    add_progress_options,
    gates,
    open_cache,
    progress_bars,
    report,
    write_results,
)


def add_parser(sub) -> argparse.ArgumentParser:
    k = sub.add_parser("attack", help="run a robustness battery spec (typos, word edits, "
                       "homoglyphs, instructions, option orders, RTI) and write results")
    k.add_argument("spec")
    k.add_argument("--out", default="dbpa-attack", help="output folder (default: dbpa-attack)")
    k.add_argument("--no-cache", action="store_true", help="neither read nor write the cache")
    k.add_argument("--estimate", action="store_true", help="print the calls it needs; call nothing")
    k.add_argument("--max-asr", type=float, default=None, metavar="X",
                   help="exit 1 (and fail its JUnit test case) when an attack's success rate "
                   "at some rho is above X (a share, e.g. 0.2)")
    add_progress_options(k)
    add_junit(k, "attack and rho")
    add_allow_key_env(k)
    return k


def run(args) -> int:
    from ..launcher import require_extra

    require_extra("battery")   # WordNet, confusables, spaCy, scikit-learn: one line if missing
    from ..attacks.battery import estimate_battery, run_battery, summary_text
    from ..attacks.spec import load_attack_spec
    from ..attacks.wordnet import WordNetMissing
    from ..junit import battery_suites
    from ..outputs import check_out_dir
    from ..sampling import RunCancelled

    if args.max_asr is not None and not 0.0 <= args.max_asr <= 1.0:
        print(f"error: --max-asr {args.max_asr:g}: give a share between 0 and 1 (e.g. 0.2).",
              file=sys.stderr)
        return 2
    spec = load_attack_spec(args.spec, allow_key_env=args.allow_key_env)
    if not args.estimate:
        if gates(args) is None:
            return 2
        check_out_dir(args.out)  # before any paid call
    if args.estimate:
        e = estimate_battery(spec, cache=open_cache(args))
        cost = "unknown (add 'prices:')" if e["unknown_price"] else f"${e['cost']:.4f}"
        print(f"{e['answers']} answers + at most {e['rti_max']} for RTI + {e['curve']} curve "
              f"samples = at most {e['calls']} calls ({e['cached']} cached); ~{e['input_tokens']} "
              f"input and <= {e['output_tokens']} output tokens; estimated cost {cost}")
        return 0
    bars = progress_bars(args)
    try:
        result = run_battery(spec, cache=open_cache(args), progress=bars)
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
    print(f"\n{u['calls']} new calls, {u['cached_samples']} answers from the cache, "
          f"{u['seconds']:.1f} s.")
    for w in result.warnings:
        print(f"note: {w}", file=sys.stderr)
    print("wrote " + ", ".join(paths))
    return report(args, battery_suites(result, max_asr=args.max_asr), frozenset())
