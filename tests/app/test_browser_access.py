"""Issue 32 in a real browser: with an access token set, the dashboard shows only its gate
(no page, no sidebar); the token typed in, or in the link, opens it, and the link's token
leaves the address bar; a page's own URL (/perturbation_test, the landing page) opens that
page, not "Page not found". Screenshots: access-gate.png, access-open.png,
access-link.png."""

import pytest

from .browser_support import dashboard, require_browser, shots
from .conftest import DEMO

pytestmark = [pytest.mark.browser, pytest.mark.slow]
playwright = require_browser()

TOKEN = "tok-browser-6d1f90aa"
LANDING = "Does a perturbation change what the model says?"


def settled(page) -> None:
    """Wait until the page is drawn (no skeleton placeholders left)."""
    page.wait_for_function("!document.querySelector('[data-testid=stSkeleton]')", timeout=60_000)
    page.wait_for_timeout(1000)


@pytest.fixture(scope="module")
def app_url(tmp_path_factory, demo_cache):
    tmp = tmp_path_factory.mktemp("access")
    with dashboard(tmp, cache_from=demo_cache, DBPA_REPLAY_FILE=DEMO, DBPA_UI_TOKEN=TOKEN) as url:
        yield url


def test_the_gate_shows_and_the_token_opens_the_dashboard(app_url, browser):
    context = browser.new_context(viewport={"width": 1300, "height": 900})
    page = context.new_page()
    page.goto(app_url, wait_until="networkidle")
    page.get_by_text("Access token needed").wait_for(timeout=60_000)
    page.wait_for_timeout(1000)
    body = page.inner_text("body")
    assert LANDING not in body and "Settings" not in body and "Run audit" not in body
    page.screenshot(path=str(shots() / "access-gate.png"), full_page=True)
    field = page.get_by_label("Access token", exact=True)
    field.fill("not-the-token")
    page.get_by_role("button", name="Open the dashboard").click()
    page.get_by_text("That is not the access token.").wait_for(timeout=30_000)
    assert LANDING not in page.inner_text("body")
    field.fill(TOKEN)
    page.get_by_role("button", name="Open the dashboard").click()
    page.get_by_role("button", name="Run audit").wait_for(timeout=60_000)
    settled(page)
    page.screenshot(path=str(shots() / "access-open.png"), full_page=True)
    context.close()


def test_the_link_with_the_token_opens_a_page_by_its_own_url(app_url, browser):
    context = browser.new_context(viewport={"width": 1300, "height": 900})
    page = context.new_page()
    page.goto(f"{app_url}/perturbation_test?token={TOKEN}", wait_until="networkidle")
    page.get_by_role("heading", name=LANDING).wait_for(timeout=60_000)
    page.get_by_role("button", name="Run audit").wait_for(timeout=60_000)
    settled(page)
    body = page.inner_text("body")
    assert "Page not found" not in body and "Access token needed" not in body
    assert "token=" not in page.url  # read once, then out of the address bar
    assert page.url.rstrip("/").endswith("/perturbation_test")
    page.screenshot(path=str(shots() / "access-link.png"), full_page=True)
    # another page through the sidebar: the session keeps the token
    page.get_by_role("link", name="Settings").click()
    page.get_by_role("heading", name="Settings", exact=True).wait_for(timeout=60_000)
    assert "Access token needed" not in page.inner_text("body")
    # a reload is a new session: the gate again (the link's token was taken out)
    page.reload(wait_until="networkidle")
    page.get_by_text("Access token needed").wait_for(timeout=60_000)
    context.close()
