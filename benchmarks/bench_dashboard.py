"""Dashboard responsiveness (issue 4), measured by driving the app headless with
Streamlit's AppTest (server-side script time; the browser's drawing comes on top,
typically well under 0.3 s for these charts).

Targets: with results already cached, the landing example (9 prompts x 20
responses, MiniLM embeddings, B = 2000) re-runs and redraws in under 3 s;
switching pages and moving a slider redraw in under 1 s.

Run: ``make bench`` or ``.venv/bin/python benchmarks/bench_dashboard.py``.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def timed(fn, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> int:
    from streamlit.testing.v1 import AppTest

    demo = str(ROOT / "assets" / "demo_replay.jsonl")
    with tempfile.TemporaryDirectory() as tmp:
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
        at.session_state["cache_dir"] = tmp
        at.session_state["models"] = [{"backend": "replay", "file": demo, "label": "demo"}]
        at.run()
        t = time.perf_counter()
        at.button(key="landing_run").click().run()  # fills the cache, loads MiniLM
        first = time.perf_counter() - t
        assert not at.exception and "landing" in at.session_state["results"]

        def rerun():
            at.button(key="landing_run").click().run()
            assert next(iter(at.session_state["results"]["landing"].values())).usage["calls"] == 0

        cached = timed(rerun)

        def switch():
            at.switch_page("pages/settings.py").run()
            at.switch_page("pages/perturbation_test.py").run()

        switch_t = timed(switch) / 2
        alphas = iter([0.01, 0.05] * 10)
        slider = timed(lambda: at.slider(key="w_alpha").set_value(next(alphas)).run())
        assert not at.exception
    ok_run, ok_switch, ok_slider = cached < 3.0, switch_t < 1.0, slider < 1.0
    print(f"landing example, first run (embeds 180 responses): {first:.2f} s")
    print(
        f"landing example re-run from the cache + redraw: {cached:.2f} s "
        f"(target < 3 s: {'met' if ok_run else 'MISSED'})"
    )
    print(
        f"switching pages (one page, with results drawn): {switch_t:.2f} s "
        f"(target < 1 s: {'met' if ok_switch else 'MISSED'})"
    )
    print(
        f"moving a slider (α, with results drawn): {slider:.2f} s "
        f"(target < 1 s: {'met' if ok_slider else 'MISSED'})"
    )
    print("all targets met" if ok_run and ok_switch and ok_slider else "SOME TARGETS MISSED")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
