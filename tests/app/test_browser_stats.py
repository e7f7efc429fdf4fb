"""Issue 8 in a real browser: the warning above the Run button when no result can be
significant, the sidebar's δ and null controls, and the effect above chance in the
results table. Screenshots go to ``screenshots/`` (or ``$DBPA_SCREENSHOTS``)."""

import pytest

from .browser_support import dashboard, require_browser, shots
from .conftest import DEMO

pytestmark = [pytest.mark.browser, pytest.mark.slow]
playwright = require_browser()


@pytest.fixture(scope="module")
def stats_url(tmp_path_factory, demo_cache):
    tmp = tmp_path_factory.mktemp("browser-stats")
    with dashboard(tmp, start_timeout=240, cache_from=demo_cache, DBPA_REPLAY_FILE=DEMO) as url:
        yield url


def _set_number(page, label: str, value) -> None:
    box = page.get_by_role("spinbutton", name=label).first
    box.fill(str(value))
    box.press("Enter")
    page.wait_for_timeout(1500)


def test_warnings_controls_and_above_chance(stats_url, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 2400})
    page.goto(stats_url, wait_until="networkidle")
    page.get_by_text("Does a perturbation change what the model says?").wait_for(timeout=90_000)
    side = page.locator("[data-testid='stSidebar']")
    side.get_by_text("Minimum effect of interest δ").wait_for(timeout=30_000)
    side.get_by_text("Null: P0 from").wait_for(timeout=30_000)
    page.screenshot(path=str(shots() / "19-sidebar-defaults.png"), full_page=True)

    _set_number(page, "Samples per prompt (k)", 2)
    warning = page.get_by_text("no result can be significant", exact=False).first
    warning.wait_for(timeout=60_000)
    page.screenshot(path=str(shots() / "20-warning-k2.png"), full_page=True)
    # the warning sits above the Run button
    run = page.get_by_role("button", name="Run audit")
    assert warning.bounding_box()["y"] < run.bounding_box()["y"]

    _set_number(page, "Samples per prompt (k)", 10)
    playwright.expect(page.get_by_text("no result can be significant", exact=False)).to_have_count(
        0, timeout=60_000
    )
    _set_number(page, "Minimum effect of interest δ", 0.02)
    run.click()
    page.get_by_text("Similarity histograms").first.wait_for(timeout=400_000)
    page.wait_for_timeout(2000)
    page.screenshot(path=str(shots() / "21-results-above-chance.png"), full_page=True)
    body = page.inner_text("body")
    # the table itself is drawn on a canvas (see the screenshot); its caption is text
    assert "read 'ω above chance', about 0 when nothing changed" in body
    assert "exceeds δ = 0.02" in body
    assert "Traceback" not in body
    page.close()
