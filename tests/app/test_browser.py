"""A real browser (Playwright + Debian's Chromium) drives the running dashboard.

Starts ``streamlit run app.py`` on 127.0.0.1 with the replay backend, runs the
landing example, waits for the histograms, checks that a ``<script>`` inside a
response is shown as text (and never runs), and saves screenshots to
``screenshots/`` (or ``$DBPA_SCREENSHOTS``).
"""

import json

import pytest

from .browser_support import dashboard, require_browser, shots
from .conftest import DEMO

INJECTED = "<script>alert('pwned')</script> <b>bold?</b> **not bold**"

pytestmark = [pytest.mark.browser, pytest.mark.slow]
playwright = require_browser()


@pytest.fixture(scope="module")
def app_url(tmp_path_factory):
    """The dashboard on the demo recording whose base answers start with an injected
    script. (Not on the demo_cache: those answers are new, so the embedder is loaded
    anyway, and the cache's build would cost more than it saves.)"""
    tmp = tmp_path_factory.mktemp("browser")
    replay = tmp / "replay.jsonl"
    from ui import presets

    with open(DEMO) as fin, open(replay, "w") as fout:
        for line in fin:
            r = json.loads(line)
            if r["prompt"] == presets.NICE_PROMPT:
                r["response"] = INJECTED + " " + r["response"]
            fout.write(json.dumps(r) + "\n")
    with dashboard(tmp, DBPA_REPLAY_FILE=str(replay)) as url:
        yield url


def test_landing_example_in_a_real_browser(app_url, browser):
    # tall: Streamlit's main pane scrolls inside the page, so full_page does not help
    page = browser.new_page(viewport={"width": 1400, "height": 2400})
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(app_url, wait_until="networkidle")
    page.get_by_text("Does a perturbation change what the model says?").wait_for(timeout=60_000)
    page.screenshot(path=str(shots() / "01-landing.png"), full_page=True)

    page.get_by_role("button", name="Run audit").click()
    page.get_by_text("Similarity histograms").first.wait_for(timeout=240_000)
    page.locator(".js-plotly-plot").first.wait_for(timeout=60_000)
    page.wait_for_timeout(1500)
    page.screenshot(path=str(shots() / "02-results.png"), full_page=True)
    body = page.inner_text("body")
    assert "perturbations change the answers detectably" in body
    assert "robot from the future" in body.split("detectably")[1]
    assert "Traceback" not in body

    page.get_by_role("tab", name="Permutation test").click()
    page.wait_for_timeout(1000)
    page.screenshot(path=str(shots() / "03-permutation.png"), full_page=True)
    page.get_by_role("tab", name="Embedding map").click()
    page.wait_for_timeout(1000)
    page.screenshot(path=str(shots() / "04-embedding-map.png"), full_page=True)
    page.get_by_role("tab", name="Responses").click()
    page.get_by_text("<script>alert('pwned')</script>", exact=False).first.wait_for(timeout=30_000)
    page.screenshot(path=str(shots() / "05-responses.png"), full_page=True)
    assert "**not bold**" in page.inner_text("body")  # markdown not rendered either
    assert not dialogs, f"a response ran as code: {dialogs}"

    # state survives a page switch in the real app
    page.get_by_role("link", name="Settings").click()
    page.get_by_text("Cached items").wait_for(timeout=30_000)
    page.screenshot(path=str(shots() / "06-settings.png"), full_page=True)
    page.get_by_role("link", name="Perturbation test").click()
    # the verdict, said twice on purpose: first under the page's question, then above the table
    page.get_by_text("perturbations change the answers detectably").first.wait_for(timeout=30_000)
    page.close()


def test_direct_page_urls_look_the_same(app_url, browser):
    """With a pages/ folder Streamlit serves /settings from the file alone: same look."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    for url, heading in (
        ("settings", "Settings"),
        ("control_target", "Control vs target"),
        ("model_comparison", "Model comparison"),
    ):
        page.goto(f"{app_url}/{url}", wait_until="networkidle")
        try:
            page.get_by_role("heading", name=heading).first.wait_for(timeout=60_000)
        except Exception:
            page.screenshot(path=str(shots() / f"failed-{url}.png"))
            raise
        side = page.locator("[data-testid='stSidebar']")
        side.get_by_text("Persona explorer").wait_for(timeout=30_000)
        side.get_by_text("Test settings").wait_for(timeout=30_000)
        sidebar = side.inner_text()
        assert "Persona explorer" in sidebar and "Test settings" in sidebar
        assert "\napp\n" not in f"\n{sidebar}\n"  # Streamlit's own list stays hidden
    page.screenshot(path=str(shots() / "08-direct-url.png"))
    page.close()


def test_persona_explorer_in_a_real_browser(app_url, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 2000})
    page.goto(f"{app_url}/persona_explorer", wait_until="networkidle")
    page.get_by_text("Persona explorer").first.wait_for(timeout=60_000)
    page.get_by_role("button", name="Run").click()
    page.locator(".js-plotly-plot").first.wait_for(timeout=240_000)
    page.wait_for_timeout(1500)
    page.screenshot(path=str(shots() / "43-demo-personas.png"), full_page=True)
    # personas x two recorded models: two columns
    columns = page.locator(".js-plotly-plot").first.locator(".xtick text").filter(has_text="SmolLM2")
    playwright.expect(columns).to_have_count(2, timeout=60_000)
    # click the heat map's "robot from the future" cell (row 6 of 8): it opens below
    page.wait_for_timeout(2000)  # the chart redraws once it knows its width
    box = page.locator(".js-plotly-plot").first.locator(".nsewdrag").first.bounding_box()
    # demo mode starts on both recorded models: the cell of the first column
    cell = (box["x"] + box["width"] / 4, box["y"] + box["height"] * (5.5 / 8))
    page.mouse.move(*cell)
    page.wait_for_timeout(300)
    page.mouse.click(*cell)
    try:
        playwright.expect(page.get_by_role("combobox", name="Open a cell: persona").last).to_have_value(
            "robot from the future", timeout=30_000
        )
    except Exception:
        page.screenshot(path=str(shots() / "failed-click.png"), full_page=True)
        raise
    page.wait_for_timeout(1500)
    page.screenshot(path=str(shots() / "07-persona-explorer.png"), full_page=True)
    assert "Traceback" not in page.inner_text("body")
    page.close()
