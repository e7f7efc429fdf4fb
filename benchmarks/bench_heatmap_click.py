"""How long a click on a Persona explorer heat-map cell takes to open the cell, in a real
browser (Chromium via Playwright), in demo mode: from the click to the opened cell's
answers on screen. The heat map and the opened cell are a Streamlit fragment, so a click
reruns only them, not the page above (form, estimate, tables).

Target: under 1.5 s per click on an idle machine.
Run: ``.venv/bin/python benchmarks/bench_heatmap_click.py``.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> int:
    from playwright.sync_api import sync_playwright

    from tests.app.browser_support import dashboard, launch
    from ui import presets

    personas = presets.PERSONAS
    times = []
    with (
        tempfile.TemporaryDirectory() as tmp,
        dashboard(Path(tmp), DBPA_REPLAY_FILE=str(ROOT / "assets" / "demo_replay.jsonl")) as url,
        sync_playwright() as p,
    ):
        browser = launch(p)
        page = browser.new_page(viewport={"width": 1400, "height": 2400})
        page.goto(url + "/persona_explorer", wait_until="networkidle")
        page.get_by_role("button", name="Run", exact=True).click()
        page.get_by_text(f"Answer #1 of {personas[0]} beside").first.wait_for(timeout=300_000)
        page.wait_for_timeout(2000)
        box = page.locator(".js-plotly-plot").first.locator(".nsewdrag").first.bounding_box()
        for i in (4, 7, 1, 5, 2, 6):
            t = time.perf_counter()
            page.mouse.click(
                box["x"] + box["width"] / 4,  # the first model's column
                box["y"] + box["height"] * (i + 0.5) / len(personas),
            )
            page.get_by_text(f"Answer #1 of {personas[i]} beside").first.wait_for(timeout=60_000)
            times.append(time.perf_counter() - t)
            page.wait_for_timeout(1000)
        browser.close()
    print(
        f"heat-map click -> cell open: median {statistics.median(times):.2f} s, "
        f"max {max(times):.2f} s over {len(times)} clicks"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
