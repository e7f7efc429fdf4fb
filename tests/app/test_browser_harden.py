"""A real browser on the Settings page with a damaged cache: one line says so, Clear
repairs it, no traceback (issue 7). Served by ``browser_support.dashboard``."""

import os

import pytest

from .browser_support import ROOT, dashboard, require_browser, shots

pytestmark = [pytest.mark.browser, pytest.mark.slow]
playwright = require_browser()


@pytest.fixture(scope="module")
def damaged_app(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("browser-harden")
    store = tmp / "cache" / "store"
    store.mkdir(parents=True)
    (store / "cache.db").write_bytes(os.urandom(8192))
    with dashboard(tmp, DBPA_REPLAY_FILE=str(ROOT / "assets" / "demo_replay.jsonl")) as url:
        yield url


def test_settings_with_a_damaged_cache_in_a_real_browser(damaged_app, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 1600})
    page.goto(f"{damaged_app}/settings", wait_until="networkidle")
    page.get_by_text("is damaged").first.wait_for(timeout=60_000)
    page.wait_for_timeout(500)
    page.screenshot(path=str(shots() / "harden-01-damaged-cache.png"), full_page=True)
    body = page.inner_text("body")
    assert "dbpa cache clear" in body and "Traceback" not in body
    page.get_by_role("button", name="Clear the cache…").click()
    page.get_by_role("button", name="Yes, clear the cache").click()
    page.get_by_text("The damaged cache was removed").wait_for(timeout=30_000)
    page.wait_for_timeout(500)
    page.screenshot(path=str(shots() / "harden-02-repaired.png"), full_page=True)
    page.reload(wait_until="networkidle")
    page.get_by_text("Cached items").wait_for(timeout=30_000)
    playwright.expect(page.get_by_text("is damaged")).to_have_count(0)
    assert "Traceback" not in page.inner_text("body")
    page.close()
