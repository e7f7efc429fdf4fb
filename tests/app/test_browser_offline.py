"""Offline means offline: opening every page of the dashboard (and running the landing
example, charts included) asks nothing of any host but the dashboard's own. Every request
the browser makes is checked; one to another host (fonts.gstatic.com for a page icon, a CDN
for a script or a font) fails the test, and is blocked so that nothing waits on it."""

from urllib.parse import urlsplit

import pytest

from ui.nav import PAGES

from .browser_support import dashboard, require_browser, shots
from .conftest import DEMO

pytestmark = [pytest.mark.browser, pytest.mark.slow]
playwright = require_browser()


@pytest.fixture(scope="module")
def app_url(tmp_path_factory, demo_cache):
    with dashboard(tmp_path_factory.mktemp("offline"), cache_from=demo_cache, DBPA_REPLAY_FILE=DEMO) as url:
        yield url


def test_no_page_asks_another_host(app_url, browser):
    own = urlsplit(app_url).netloc
    foreign: list[str] = []
    context = browser.new_context(viewport={"width": 1400, "height": 1600})

    def local(url: str) -> bool:
        return urlsplit(url).scheme in ("data", "blob") or urlsplit(url).netloc == own

    def block(route):
        route.continue_() if local(route.request.url) else route.abort()

    context.route("**/*", block)
    # every request, also those routing does not see (a favicon is fetched outside it)
    context.on("request", lambda r: None if local(r.url) else foreign.append(r.url))
    context.on("websocket", lambda ws: None if urlsplit(ws.url).netloc == own else foreign.append(ws.url))
    page = context.new_page()
    for _section, _file, title, _icon, url_path in PAGES:
        page.goto(f"{app_url}/{url_path}", wait_until="networkidle")
        page.get_by_role("heading", level=1).first.wait_for(timeout=60_000)
        page.wait_for_timeout(1500)
        assert "Traceback" not in page.inner_text("body"), title
        if url_path == "persona_explorer":  # every chosen persona's chip shown whole
            cut = page.evaluate("""() => [...document.querySelectorAll(
                '[data-testid=stMultiSelectTagsContainer]')].flatMap(box => {
                  const r = box.getBoundingClientRect();
                  return [...box.querySelectorAll('[data-tag]')].filter(t => {
                    const c = t.getBoundingClientRect();
                    return c.right > r.right + 1 || c.bottom > r.bottom + 1; })
                  .map(t => t.getAttribute('aria-label')); })""")
            assert not cut, f"chips cut off: {cut}"
    # the landing example's results: Plotly charts, tables, icons, downloads
    page.goto(app_url, wait_until="networkidle")
    page.get_by_role("button", name="Run audit").click()
    page.locator(".js-plotly-plot").first.wait_for(timeout=240_000)
    page.wait_for_timeout(2000)
    page.screenshot(path=str(shots() / "offline-landing.png"), full_page=True)
    context.close()
    assert not foreign, "requests to other hosts:\n" + "\n".join(foreign)
