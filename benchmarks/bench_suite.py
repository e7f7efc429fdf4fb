"""Speed and memory of a suite of cases (``cases:`` in a spec).

A suite of ``--cases`` (default 1,000) cases x 3 perturbations at k = ``--samples``
(default 10) against the local fake OpenAI server (in its own process, as a real server
would be; 40,000 calls at the default size: each case's base prompt and its three
perturbations, k samples each), every sample through the cache as in a real run. The
embedder is a cheap fake in this process (hashed words, ``tests/fake_openai.fake_embedding``):
the benchmark measures the suite runner, not an embedding model.

Prints the wall time, the peak memory of this process (targets: < 1 GB) and the time of
the statistics for the 3,000 tests (each case's DBPA tests, plus the suite's correction
and pooled tests; target < 10 s).

Run: ``.venv/bin/python benchmarks/bench_suite.py [--cases 1000] [--samples 10]``.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from dbpa_core.cache import Cache  # noqa: E402
from dbpa_core.spec import parse_spec  # noqa: E402
from dbpa_core.suite import run_suite  # noqa: E402
from tests.fake_openai import FakeOpenAIProcess, fake_embedding  # noqa: E402


class HashEmbedder:
    """A cheap stand-in for an embedding model: hashed word counts, 32 numbers."""

    name = "fake-hash"

    def embed(self, texts):
        return np.asarray([fake_embedding(t) for t in texts], dtype=np.float32)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=1000)
    ap.add_argument("--samples", type=int, default=10)
    ap.add_argument("--permutations", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=32)
    args = ap.parse_args()
    with FakeOpenAIProcess() as srv, tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        rows = ["id,name,age,chol"] + [
            f"c{i},Patient{i},{40 + i % 50},{4 + i / 250:.3f}" for i in range(args.cases)
        ]
        (tmp / "cases.csv").write_text("\n".join(rows) + "\n")
        spec = parse_spec(
            f"""
model: {{backend: openai, name: fake-model, base_url: "{srv.base_url}",
         concurrency: {args.concurrency}}}
embedder: {{backend: openai, name: fake-hash, base_url: "{srv.base_url}"}}
samples: {args.samples}
permutations: {args.permutations}
cases: {{file: cases.csv}}
base: {{prompt: "{{name}}, aged {{age}}, cholesterol {{chol}} mmol/L. What do you advise?"}}
perturbations:
  - {{name: comedian, prefix: "Act as a comedian.", role: target}}
  - {{name: renamed, set: {{name: Ahmed}}, role: control}}
  - {{name: older, set: {{age: 85}}}}
""",
            source="bench.yaml",
            base_dir=tmp,
        )
        done = {"n": 0}

        def progress(p):
            if (
                p.stage == "cases"
                and p.done
                and p.done % max(1, args.cases // 10) == 0
                and p.done != done["n"]
            ):
                done["n"] = p.done
                print(f"  {p.done}/{p.total} cases, {time.perf_counter() - t0:.0f} s", flush=True)

        t0 = time.perf_counter()
        with open(tmp / "responses.jsonl", "w") as fh:
            res = run_suite(
                spec, cache=Cache(tmp / "cache"), embedder=HashEmbedder(), progress=progress, responses=fh
            )
        wall = time.perf_counter() - t0
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    u = res.usage
    stats_s = u["test_seconds"] + u["pool_seconds"]
    print(
        f"{args.cases} cases x 3 perturbations = {len(res.tests)} tests, k = {args.samples}, "
        f"B = {args.permutations}: {u['calls']} calls"
    )
    print(f"wall time: {wall:.1f} s")
    print(f"peak memory (this process): {peak_mb:.0f} MB (target < 1024 MB)")
    print(
        f"statistics: {stats_s:.2f} s for {len(res.tests)} tests "
        f"(DBPA tests {u['test_seconds']:.2f} s, correction and pooling "
        f"{u['pool_seconds']:.2f} s; target < 10 s); CPU time of the DBPA tests "
        f"{u['test_cpu_seconds']:.2f} s (wall and CPU differ when the machine is shared)"
    )
    for d in res.pooled:
        print(
            f"  {d['perturbation']:<9} p = {d['p_value']:.2g}, above chance "
            f"{d['mean_effect_above_chance']:+.3f}, {d['discoveries']}/{d['cases']} cases"
        )
    return 0 if peak_mb < 1024 and stats_s < 10 else 1


if __name__ == "__main__":
    raise SystemExit(main())
