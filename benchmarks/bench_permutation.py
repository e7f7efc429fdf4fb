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
than literal; k = 500: < 1 s. Beside a busy core (issue 35: another process spinning on
one core, started by this script) k = 50 takes at most 2x its time without it; the load
average is printed with it, since a machine busy with other work has no quiet time. Two
dashboard sessions at once (two threads of this process, as two sessions of one dashboard
server run their audits, each calling the test) take at most 2x a single session's time
per test.

Then the other measures against jsd in the same run (issue 12: ``wasserstein`` and
``ks`` within 5x of jsd at k = 200), and sequential stopping on a clear null
(issue 8: it must stop within milliseconds, not after a first batch of 1,024).
"""

from __future__ import annotations

import argparse
import multiprocessing
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
    return (center + 0.8 * gen.standard_normal((k, d)), center + 0.1 + 0.8 * gen.standard_normal((k, d)))


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
    ap.add_argument(
        "--literal-permutations",
        type=int,
        default=200,
        help="permutations timed for the literal version (rate scaled to B)",
    )
    ap.add_argument(
        "--other-sizes", default="50,200", help="k for the table of the other measures against jsd"
    )
    ap.add_argument(
        "--skip-others",
        action="store_true",
        help="only the jsd table (no other measures, no sequential stopping)",
    )
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"measure={args.measure}  B={B}  d=384  cores={os.cpu_count()}")
    print(f"{'k':>5} {'ours ms':>9} {'ours perm/s':>12} {'literal perm/s':>15} {'speed-up':>9}  target")
    ok = True
    # ours at every k before any literal run: the literal version's numpy calls leave BLAS
    # threads spinning for a while, which took cores from the next timing (k = 50 read
    # 20-23 ms right after the literal k = 25, 12-14 ms without it)
    data = {k: embeddings(k) for k in sizes}
    ours_at = {
        k: best_time(
            lambda x=x, y=y: dbpa_test(x, y, measure=args.measure, n_permutations=B, rng=0),
            repeats=7 if k <= 100 else 3,
        )
        for k, (x, y) in data.items()
    }
    for k, (x, y) in data.items():
        ours = ours_at[k]
        n_lit = max(20, args.literal_permutations // max(1, k // 50))
        lit = best_time(
            lambda x=x, y=y, n=n_lit: literal_dbpa_test(x, y, measure=args.measure, n_permutations=n, rng=0),
            repeats=1,
        )
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
        print(
            f"{k:>5} {ours * 1e3:>9.1f} {B / ours:>12,.0f} {lit_rate:>15,.0f} {speedup:>8,.0f}x  {target}",
            flush=True,
        )
    if args.measure == "jsd":
        ok &= bench_busy_core()
        ok &= bench_two_sessions()
    if args.measure == "jsd" and not args.skip_others:
        ok &= bench_other_measures([int(v) for v in args.other_sizes.split(",")])
        ok &= bench_sequential()
    print("all targets met" if ok else "SOME TARGETS MISSED")
    return 0


def bench_other_measures(sizes) -> bool:
    """Every measure at B = 10,000, timed in this process next to jsd."""
    measures = ["jsd", "wasserstein", "ks", "energy-l2", "energy-cosine"]
    print(f"\nother measures, B = {B}: ms (ratio to jsd)")
    print(f"{'k':>5} " + " ".join(f"{m:>17}" for m in measures) + "  target")
    ok = True
    for k in sizes:
        x, y = embeddings(k)
        ms = {
            m: best_time(lambda m=m, x=x, y=y: dbpa_test(x, y, measure=m, n_permutations=B, rng=0), repeats=5)
            for m in measures
        }
        cells = " ".join(f"{ms[m] * 1e3:>8.1f} ({ms[m] / ms['jsd']:>4.1f}x)" for m in measures)
        target = ""
        if k == 200:
            worst = max(ms["wasserstein"], ms["ks"]) / ms["jsd"]
            met = worst <= 5.0
            ok &= met
            target = f"wasserstein, ks <= 5x jsd: {'met' if met else 'MISSED'} ({worst:.1f}x)"
        print(f"{k:>5} {cells}  {target}", flush=True)
    return ok


def _spin(cpu: int) -> None:  # pragma: no cover - the busy core, in its own process
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {cpu})
    while True:
        pass


def bench_busy_core() -> bool:
    """k = 50, jsd, B = 10,000 alone and while another process keeps one core busy."""
    x, y = embeddings(50)

    def run():
        return best_time(lambda: dbpa_test(x, y, measure="jsd", n_permutations=B, rng=0), repeats=15)

    quiet = run()
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [0]
    busy_proc = multiprocessing.get_context("spawn").Process(target=_spin, args=(cpus[-1],), daemon=True)
    busy_proc.start()
    try:
        time.sleep(0.5)  # the spinner is running
        busy = run()
    finally:
        busy_proc.terminate()
        busy_proc.join()
    ratio = busy / quiet
    met = ratio <= 2.0
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"\nbeside a busy core, k = 50, jsd: {busy * 1e3:.1f} ms against {quiet * 1e3:.1f} ms alone "
        f"({ratio:.1f}x; load average before {load:.1f}); target <= 2x: {'met' if met else 'MISSED'}"
    )
    return met


def bench_two_sessions(repeats: int = 15) -> bool:
    """k = 50, jsd, B = 10,000 in one session, then in two sessions at once: two threads of
    this process, as one dashboard server runs two users' audits, each timing its calls."""
    import threading

    x, y = embeddings(50)
    dbpa_test(x, y, measure="jsd", n_permutations=B, rng=0)  # compiled

    def session(out: list[float], start: threading.Barrier | None = None) -> None:
        if start is not None:
            start.wait()
        for _ in range(repeats):
            t = time.perf_counter()
            dbpa_test(x, y, measure="jsd", n_permutations=B, rng=0)
            out.append(time.perf_counter() - t)

    one: list[float] = []
    session(one)
    both: list[list[float]] = [[], []]
    start = threading.Barrier(2)
    threads = [threading.Thread(target=session, args=(out, start)) for out in both]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    alone, together = float(np.median(one)), float(np.median(both[0] + both[1]))
    ratio = together / alone
    met = ratio <= 2.0
    print(
        f"two dashboard sessions at once, k = 50, jsd: {together * 1e3:.1f} ms a test (median) against "
        f"{alone * 1e3:.1f} ms in one session ({ratio:.1f}x); target <= 2x: {'met' if met else 'MISSED'}"
    )
    return met


def bench_sequential() -> bool:
    """A clear null (two draws from one distribution) with Besag–Clifford h = 10."""
    x, y = embeddings(20)
    y = x[::-1] + 0.01  # the same responses, a hair apart: p is large
    full = best_time(lambda: dbpa_test(x, y, n_permutations=B, rng=0), repeats=5)
    seq = best_time(lambda: dbpa_test(x, y, n_permutations=B, rng=0, sequential=10), repeats=5)
    r = dbpa_test(x, y, n_permutations=B, rng=0, sequential=10)
    met = seq <= 0.010
    print(
        f"\nsequential stopping, clear null, k = 20, B = {B}, h = 10: {seq * 1e3:.1f} ms after "
        f"{r.n_permutations} permutations (full run {full * 1e3:.1f} ms); target <= 10 ms: "
        f"{'met' if met else 'MISSED'}"
    )
    return met


if __name__ == "__main__":
    raise SystemExit(main())
