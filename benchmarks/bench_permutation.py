"""Speed of the DBPA permutation test against a literal Algorithm 1.

Run: ``make bench`` (or ``.venv/bin/python benchmarks/bench_permutation.py``).

For k = 10 .. 500 responses per group (d = 384, MiniLM's width) and
B = 10,000 permutations, times :func:`dbpa_core.dbpa_test` (best of several
runs, after compilation) and the literal implementation of the papers'
Algorithm 1 (``dbpa_core._reference``: recompute similarities and ω from the
embeddings for every permutation in a Python loop). The literal version is
timed on fewer permutations and its rate scaled to B = 10,000 (it is linear in
B). Both run in this one process, so the speed-up is a ratio measured on the
same machine at the same time.

Targets (issue 2, 2-core machine): k = 50, jsd: <= 20 ms and >= 100x faster
than literal; k = 500: < 1 s.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from dbpa_core import dbpa_test
from dbpa_core._reference import literal_dbpa_test

B = 10_000


def embeddings(k: int, d: int = 384, seed: int = 0):
    gen = np.random.default_rng(seed)
    center = gen.standard_normal(d)
    return (center + 0.8 * gen.standard_normal((k, d)),
            center + 0.1 + 0.8 * gen.standard_normal((k, d)))


def best_time(fn, repeats: int) -> float:
    fn()  # compile / warm up
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10,25,50,100,200,500")
    ap.add_argument("--measure", default="jsd")
    ap.add_argument("--literal-permutations", type=int, default=200,
                    help="permutations timed for the literal version (rate scaled to B)")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"measure={args.measure}  B={B}  d=384  cores={os.cpu_count()}")
    print(f"{'k':>5} {'ours ms':>9} {'ours perm/s':>12} {'literal perm/s':>15} "
          f"{'speed-up':>9}  target")
    ok = True
    for k in sizes:
        x, y = embeddings(k)
        ours = best_time(lambda x=x, y=y: dbpa_test(x, y, measure=args.measure, n_permutations=B,
                                                   rng=0),
                         repeats=7 if k <= 100 else 3)
        n_lit = max(20, args.literal_permutations // max(1, k // 50))
        lit = best_time(lambda x=x, y=y, n=n_lit: literal_dbpa_test(
            x, y, measure=args.measure, n_permutations=n, rng=0), repeats=1)
        lit_rate = n_lit / lit
        speedup = (B / lit_rate) / ours
        target = ""
        if args.measure == "jsd" and k == 50:
            met = ours <= 0.020 and speedup >= 100
            ok &= met
            target = f"<= 20 ms and >= 100x: {'met' if met else 'MISSED'}"
        elif args.measure == "jsd" and k == 500:
            met = ours < 1.0
            ok &= met
            target = f"< 1000 ms: {'met' if met else 'MISSED'}"
        print(f"{k:>5} {ours * 1e3:>9.1f} {B / ours:>12,.0f} {lit_rate:>15,.0f} "
              f"{speedup:>8,.0f}x  {target}", flush=True)
    print("all targets met" if ok else "SOME TARGETS MISSED")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
