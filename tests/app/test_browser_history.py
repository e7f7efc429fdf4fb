"""A real browser on the History page and on what the audit-ready dashboard changed: an
open tab survives the first widget change after a run, results are marked outdated, the
run is recorded and reopens with its charts (escaped), two runs compare side by side.
Reuses the server and browser fixtures of test_browser.py (replay backend, temporary
DBPA_HOME and cache); screenshots go to screenshots/ (or $DBPA_SCREENSHOTS)."""

import re

import pytest

from .browser_support import require_browser, shots, wait_idle
from .test_browser import app_url  # noqa: F401 - the server fixture

pytestmark = [pytest.mark.browser, pytest.mark.slow]
playwright = require_browser()


def _selected_tab(page) -> str:
    return page.locator("[role='tab'][aria-selected='true']").first.inner_text().strip()


def test_history_page_in_a_real_browser(app_url, browser):  # noqa: F811 - fixtures
    page = browser.new_page(viewport={"width": 1400, "height": 2400})
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(app_url, wait_until="networkidle")
    page.get_by_text("Does a perturbation change what the model says?").wait_for(timeout=60_000)
    k = page.get_by_role("spinbutton", name="Samples per prompt (k)")
    k.fill("10")
    k.press("Enter")
    wait_idle(page)
    page.get_by_role("button", name="Run audit").click()
    page.get_by_role("tab", name="Permutation test").wait_for(timeout=240_000)
    wait_idle(page)

    # the first widget change after a run keeps the open tab (it used to jump back)
    page.get_by_role("tab", name="Permutation test").click()
    wait_idle(page)
    page.get_by_role("combobox", name="Perturbation").first.click()
    page.get_by_role("option", name="comedian").first.click()
    wait_idle(page)
    assert _selected_tab(page) == "Permutation test"
    playwright.expect(page.locator(".gtitle").first).to_contain_text("comedian", timeout=60_000)  # redrawn
    title = page.locator(".gtitle").first.text_content()
    assert "comedian" in title and "p (raw)" in title and "p (adj.)" in title
    assert not re.search(r"(?<!\$)\b0\.0000\b", page.inner_text("body"))
    page.screenshot(path=str(shots() / "10-permutation-tab-kept.png"), full_page=True)

    # a changed input marks the results outdated; a second run is recorded too
    k.fill("12")
    k.press("Enter")
    wait_idle(page)
    page.get_by_text("Outdated:").first.wait_for(timeout=30_000)
    assert page.locator("[class*='_results_outdated']").count() == 1
    page.screenshot(path=str(shots() / "11-outdated.png"), full_page=True)
    page.get_by_role("button", name="Run audit").click()
    page.get_by_text("Outdated:").first.wait_for(state="detached", timeout=240_000)
    wait_idle(page)
    assert page.locator("[class*='_results_outdated']").count() == 0

    # the History page lists both runs and reopens the newest with its charts
    page.get_by_role("link", name="History").click()
    page.get_by_role("heading", name="History").wait_for(timeout=60_000)
    page.get_by_text("2 run(s)").first.wait_for(timeout=60_000)
    wait_idle(page, 1500)
    page.screenshot(path=str(shots() / "12-history.png"), full_page=True)
    body = page.inner_text("body")
    assert "2 run(s)" in body and "Traceback" not in body
    page.locator(".js-plotly-plot").first.wait_for(timeout=60_000)
    page.get_by_role("tab", name="Responses").click()
    wait_idle(page)
    page.get_by_text("<script>alert('pwned')</script>", exact=False).first.wait_for(timeout=30_000)
    assert not dialogs, f"a recorded response ran as code: {dialogs}"

    # compare the two runs
    page.get_by_role("tab", name="Compare two runs").click()
    page.get_by_text("Run A vs run B").first.wait_for(timeout=60_000)
    page.get_by_text("Changed between the runs").first.wait_for(timeout=60_000)
    wait_idle(page, 1500)
    page.screenshot(path=str(shots() / "13-history-compare.png"), full_page=True)
    body = page.inner_text("body")
    assert "changed verdict" in body or "No verdict changed" in body
    assert "Changed between the runs" in body and "samples" in body
    page.close()
