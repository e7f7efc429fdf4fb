"""Speed of sampling and caching (issue 3).

1. Concurrency: 200 requests against the local fake OpenAI server with 100 ms
   latency each, at concurrency 16. Ideal: 200 / 16 x 0.1 s = 1.25 s; target
   within 1.5x of it (1.875 s).
2. A fully cached rerun of the eight-persona example (9 prompts x 20 samples)
   as a fresh ``dbpa audit`` process, everything included; target < 3 s. The
   first, uncached run (real generation with the local model) is done first if
   needed and reported too.
(The local backend's tokens per second: ``benchmarks/bench_local.py``.)

Run: ``make bench`` or ``.venv/bin/python benchmarks/bench_audit.py [--skip-local]``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dbpa_core.cache import Cache  # noqa: E402
from tests.fake_openai import FakeOpenAIProcess  # noqa: E402


def bench_concurrency() -> bool:
    from dbpa_core.backends import GenerationParams, SampleRequest
    from dbpa_core.backends.openai_compat import OpenAIBackend, OpenAIClientSettings

    # the server runs in its own process, as a real server would
    with FakeOpenAIProcess(latency=0.1) as srv, tempfile.TemporaryDirectory() as tmp:
        backend = OpenAIBackend("fake-model", OpenAIClientSettings(base_url=srv.base_url, concurrency=16))
        params = GenerationParams(max_tokens=50)
        reqs = [SampleRequest(f"prompt {i % 2}", i, i, params) for i in range(200)]
        cache = Cache(tmp)
        got = []

        def on_sample(req, sample):  # what the audit does with each sample: cache it
            cache.set(f"s{req.index}", {"text": sample.text})
            got.append(req.index)

        # the first call of a process pays for the openai client's lazy imports and
        # pydantic models (~0.5 s): measure it separately
        t = time.perf_counter()
        backend.generate([SampleRequest("warm-up", i, i, params) for i in range(16)], lambda r, s: None)
        cold = time.perf_counter() - t
        t = time.perf_counter()
        backend.generate(reqs, on_sample)
        elapsed = time.perf_counter() - t
        assert sorted(got) == list(range(200))
        cache.close()
    ideal = 200 / 16 * 0.1
    ok = elapsed <= 1.5 * ideal
    print(
        f"200 requests, 100 ms latency, concurrency 16: {elapsed:.2f} s "
        f"(ideal {ideal:.2f} s, target <= {1.5 * ideal:.2f} s: {'met' if ok else 'MISSED'}); "
        f"a cold first batch of 16 took {cold:.2f} s (ideal 0.10 s)"
    )
    return ok


def bench_cached_rerun(cache_dir: str) -> bool:
    env = dict(os.environ, DBPA_CACHE_DIR=cache_dir)
    cmd = [
        sys.executable,
        "-m",
        "dbpa_core.cli",
        "audit",
        str(ROOT / "examples/nice_personas.yaml"),
        "--out",
        os.path.join(cache_dir, "bench-out"),
        "--quiet",
    ]
    t = time.perf_counter()
    first = subprocess.run(cmd, env=env, capture_output=True, text=True)
    t_first = time.perf_counter() - t
    if first.returncode != 0:
        print(first.stderr)
        return False
    runs = []
    for _ in range(3):
        t = time.perf_counter()
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
        runs.append(time.perf_counter() - t)
        assert r.returncode == 0 and "0 new calls" in r.stdout, r.stdout + r.stderr
    best = min(runs)
    ok = best < 3.0
    print(
        f"eight-persona example (9 x 20 samples): first run {t_first:.1f} s; fully cached "
        f"rerun, fresh process: {best:.2f} s (target < 3 s: {'met' if ok else 'MISSED'})"
    )
    return ok


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--skip-local", action="store_true", help="skip the real local-model parts")
    ap.add_argument(
        "--cache-dir",
        default=str(ROOT / ".cache" / "bench"),
        help="cache for the persona example (kept between runs)",
    )
    args = ap.parse_args()
    ok = bench_concurrency()
    if not args.skip_local:
        ok &= bench_cached_rerun(args.cache_dir)
    print("all targets met" if ok else "SOME TARGETS MISSED")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
