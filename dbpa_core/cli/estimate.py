"""``dbpa estimate SPEC.yaml``: the calls, tokens and cost of a spec; calls nothing."""

from __future__ import annotations

import argparse
from typing import Any

from ..fmt import table
from .common import add_allow_key_env, open_cache, spec_warnings


def add_parser(sub: Any) -> argparse.ArgumentParser:
    e = sub.add_parser("estimate", help="calls, tokens and cost of a spec; calls nothing")
    e.add_argument("spec", metavar="SPEC_FILE")
    add_allow_key_env(e)
    return e


def run(args: argparse.Namespace) -> int:
    from ..batch import batch_cost
    from ..reach import reachability
    from ..runs import duration_lines, estimate, requests
    from ..spec import load_spec

    spec = load_spec(args.spec, allow_key_env=args.allow_key_env)
    cache = open_cache(args)
    cache.check()
    spec_warnings(spec)
    est = estimate(spec, cache=cache)
    rows = [
        (
            r["arm"][:28],
            r["model"][:24],
            r["calls"],
            r["cached"],
            r["input_tokens"],
            r["output_tokens"],
            "?" if r["cost"] != r["cost"] else f"{r['cost']:.4f}",
        )
        for r in est["arms"]
    ]
    print(table(rows, ("arm", "model", "calls", "cached", "in tok", "out tok", "cost $"), align="llrrrrr"))
    t = est["totals"]
    if est.get("cases"):
        print(
            f"\nsuite: {est['cases']} cases x {len(spec.perturbations)} perturbations = "
            f"{est['tests']} tests (each row sums its arm over the cases)"
        )
    print(
        f"\ntotal: {t['calls']} calls ({t['cached']} cached), ~{t['input_tokens']} input and "
        f"<= {t['output_tokens']} output tokens, embeddings ~{t['embedding_tokens']} tokens; "
        f"estimated cost ${t['cost']:.4f}"
    )
    if est.get("sequential"):
        q = est["sequential"]
        print(
            f"{q['plan']}: between {q['best_calls']} calls (every test stops at the first look) "
            f"and {q['worst_calls']} (every test runs to samples, as above)"
        )
        if q.get("pilot"):
            print(pilot_line(q["pilot"]))
    elif t["calls"] and batch_cost(est, spec) < t["cost"]:
        print(f"through the Batch API (dbpa audit --batch): ${batch_cost(est, spec):.4f}")
    if est["unknown_prices"]:
        print(
            "no price known for: "
            + ", ".join(est["unknown_prices"])
            + " (add them under 'prices:' in the spec, $ per 1M tokens)"
        )
    print("Tokens are estimated at ~4 characters each; output is counted at max_tokens.")
    for line in duration_lines(requests(spec), cache):  # what the run declares it asks
        print(line)
    print("\nreachability (the smallest p each test can return, at this k and correction):")
    for line in reachability(spec).lines():
        print(f"  {line}")
    return 0


def pilot_line(pilot: dict) -> str:
    """What the cached rounds of a sequential run already decided, and the calls left."""
    if "cases" in pilot:  # a suite's: summed over its cases
        decided = sum(pilot["stopped"].values())
        if not pilot["open"]:
            return "the cached rounds of every case decide every test: the run calls nothing more"
        return (
            f"from the cached rounds of {pilot['piloted']} of {pilot['cases']} cases (a pilot): "
            f"{decided} of {decided + pilot['open']} tests decided; {pilot['best_calls']} more calls "
            f"if the open ones stop at the next look, {pilot['worst_calls']} if they run to samples"
        )
    rounds = f"{pilot['rounds']} cached round{'s' if pilot['rounds'] > 1 else ''}"
    if not pilot["open"]:
        return f"the {rounds} decide every test: the run calls nothing more"
    decided = sum(pilot["stopped"].values())
    return (
        f"from the {rounds} (a pilot, k = {pilot['k']}): {decided} of {decided + pilot['open']} tests "
        f"decided; {pilot['best_calls']} more calls if the open ones stop at the next look, "
        f"{pilot['worst_calls']} if they run to samples"
    )
