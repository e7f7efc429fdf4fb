"""The Answers grid with 10,000 answers, driven headless with Streamlit's AppTest
(server-side script time; the browser's drawing comes on top).

Target: with the table built (once per result and session), a search, a filter or a sort
re-runs the tab in well under 1 s.

Run: ``.venv/bin/python benchmarks/bench_grid.py`` (from the repository root).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def timed(step) -> float:
    t = time.perf_counter()
    step()
    return time.perf_counter() - t


def main() -> None:
    from streamlit.testing.v1 import AppTest

    from tests.app.test_grid import SCRIPT

    at = AppTest.from_string(SCRIPT, default_timeout=240)
    print(f"first run (10,000 answers, table built): {timed(at.run):.2f} s")
    searches = [
        timed(lambda q=q: at.text_input(key="g_grid_q").set_value(q).run())
        for q in ("statin", "risk risk", "sorry", "")
    ]
    print(f"search: median {statistics.median(searches):.3f} s, max {max(searches):.3f} s")
    at.selectbox(key="g_grid_check").set_value("refuses").run()
    check = timed(lambda: at.selectbox(key="g_grid_outcome").set_value("failed").run())
    print(f"filter by check (refuses: failed): {check:.3f} s")
    sort = timed(lambda: at.selectbox(key="g_grid_sort").set_value("length").run())
    print(f"sort by length: {sort:.3f} s")


if __name__ == "__main__":
    main()
