"""A real browser on the Why view, the Sensitivity page and the import block.

Reuses the server and browser fixtures of ``test_browser.py`` (the dashboard on
127.0.0.1 with recorded responses whose base answers start with an injected
``<script>``): runs the landing example, opens the Why tab (the injected script
must show as text, never run), checks the verdict in one click, runs the
Sensitivity page and uploads a promptfoo file in Settings. Screenshots go to
``screenshots/`` (or ``$DBPA_SCREENSHOTS``).
"""

from pathlib import Path

import pytest

from .browser_support import require_browser, shots
from .test_browser import app_url  # noqa: F401 - the server fixture
from .test_browser_history import _wait_idle

pytestmark = [pytest.mark.browser, pytest.mark.slow]
playwright = require_browser()
DATA = Path(__file__).resolve().parents[1] / "data"


def _fail_shot(page, name):
    page.screenshot(path=str(shots() / f"failed-{name}.png"))


def test_why_sensitivity_and_import_in_a_real_browser(app_url, browser):  # noqa: F811
    page = browser.new_page(viewport={"width": 1400, "height": 3600})
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(app_url, wait_until="networkidle")
    page.get_by_text("Does a perturbation change what the model says?").wait_for(timeout=60_000)
    page.get_by_role("button", name="Run audit").click()
    page.get_by_text("Similarity histograms").first.wait_for(timeout=300_000)
    page.locator(".js-plotly-plot").first.wait_for(timeout=60_000)
    _wait_idle(page)  # the results drawn to the end

    # the Why tab: words that moved, typical answers with the injected script as text
    page.get_by_role("tab", name="Why").click(timeout=60_000)
    try:
        page.get_by_text("Words and phrases that moved").first.wait_for(timeout=60_000)
        page.locator(".dbpa-why").first.wait_for(timeout=30_000)
    except Exception:
        _fail_shot(page, "why")
        raise
    assert "<script>alert('pwned')</script>" in page.locator(".dbpa-why").first.inner_text()
    assert page.locator(".dbpa-why mark").count() > 0
    _wait_idle(page)
    page.screenshot(path=str(shots() / "10-why.png"))

    # a widget inside the tab keeps the tab open (the tabs are keyed)
    page.get_by_role("combobox", name="Why did the answers change? Perturbation").click()
    page.get_by_role("option", name="robot from the future").click()
    page.get_by_text("Why: robot from the future").first.wait_for(timeout=60_000)
    assert page.get_by_role("tab", name="Why").get_attribute("aria-selected") == "true"

    # one click: does the verdict hold?
    page.get_by_role("button", name="Check the verdict").click()
    try:
        page.get_by_text("The audit says").first.wait_for(timeout=300_000)
    except Exception:
        _fail_shot(page, "verdict")
        raise
    body = page.inner_text("body")
    assert "of 6 measures" in body and "Traceback" not in body
    _wait_idle(page)
    page.screenshot(path=str(shots() / "11-why-verdict.png"))

    # the Sensitivity page on the same audit: zero calls to make
    page.get_by_role("link", name="Sensitivity").click()
    page.get_by_text("Audit to examine").first.wait_for(timeout=60_000)
    page.get_by_role("button", name="Run sensitivity study").click()
    try:
        page.get_by_text("verdicts hold in every setting tried").first.wait_for(timeout=300_000)
    except Exception:
        _fail_shot(page, "sensitivity")
        raise
    _wait_idle(page, 1000)  # its charts
    page.screenshot(path=str(shots() / "12-sensitivity.png"))
    assert "Traceback" not in page.inner_text("body")

    # Settings: a promptfoo file becomes a replay model
    page.get_by_role("link", name="Settings").click()
    page.get_by_text("Import recorded responses").first.wait_for(timeout=60_000)
    page.locator("input[type=file]").first.set_input_files(str(DATA / "promptfoo_repeat.json"))
    button = page.get_by_role("button", name="Import as a replay model")
    playwright.expect(button).to_be_enabled(timeout=30_000)  # enabled once the file is up
    button.click()
    try:
        page.get_by_text("Imported 7 responses").first.wait_for(timeout=60_000)
    except Exception:
        _fail_shot(page, "import")
        raise
    assert "promptfoo_repeat (imported)" in page.inner_text("body")
    _wait_idle(page)
    page.screenshot(path=str(shots() / "13-import.png"))
    assert not dialogs, f"a response ran as code: {dialogs}"
    page.close()
