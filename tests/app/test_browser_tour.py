"""The manual's tour of the dashboard, in a real browser on the demo recordings: every page
opens without an error and says it is in demo mode, its default example runs, and a
screenshot of each is saved. On the way: a page opened by its own address keeps the
dashboard's sidebar, a click on a cell of the Persona explorer's heat map opens that cell,
and the Suite page shows its recorded suite at once.

Offline means offline, too: the tour asks nothing of any host but the dashboard's own. Every
request the browser makes is checked; one to another host (fonts.gstatic.com for a page
icon, a CDN for a script or a font) fails the test, and is blocked so that nothing waits on
it. (One tour for both: each page opened and its example run once, not twice.)

The screenshots go to ``$DBPA_DOCS_IMG`` when set (``python docs/make_screenshots.py`` sets
it to ``docs/img/``, the manual's pictures), else to ``screenshots/tour/``, so an ordinary
test run never rewrites the manual's images."""

import os
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from ui.nav import PAGES

from .browser_support import ROOT, dashboard, require_browser, shots, wait_idle

pytestmark = [pytest.mark.browser, pytest.mark.slow]
playwright = require_browser()

DEMO = str(ROOT / "assets" / "demo_replay.jsonl")


def _out() -> Path:
    d = Path(os.environ.get("DBPA_DOCS_IMG") or shots() / "tour")
    d.mkdir(parents=True, exist_ok=True)
    return d


# the manual's pictures wait longer for every chart to settle; a test run only needs them taken
SETTLE = 1.0 if os.environ.get("DBPA_DOCS_IMG") else 0.25


def _wait_idle(page, ms=1500):
    """Until the page's rerun is over (its running-man icon gone), then ``ms`` more (a
    quarter of it in a test run)."""
    wait_idle(page, ms * SETTLE, timeout=300_000)


def _shot(page, name, at=None):
    """A viewport-sized screenshot, scrolled so that ``at`` (a locator; default the demo
    banner at the page's top) is at the top."""
    # Streamlit scrolls its main block, not the window: scroll the element itself
    (at or page.get_by_text("Demo mode").first).evaluate("e => e.scrollIntoView({block: 'start'})")
    page.wait_for_timeout(700 * SETTLE)
    page.screenshot(path=str(_out() / f"{name}.png"))
    assert "Traceback" not in page.inner_text("body")


def _open(page, url, ready):
    """Open ``url``, wait for ``ready`` and the rerun's end; every page says it is in demo
    mode, and keeps the dashboard's own sidebar (not Streamlit's list of files)."""
    page.goto(url, wait_until="networkidle")
    ready(page).first.wait_for(timeout=120_000)
    page.get_by_text("Demo mode").first.wait_for(timeout=60_000)
    _wait_idle(page)
    side = page.locator("[data-testid='stSidebar']")
    side.get_by_text("Persona explorer").first.wait_for(timeout=30_000)  # the pages' own links
    sidebar = side.inner_text()
    assert "History" in sidebar and "\napp\n" not in f"\n{sidebar}\n", sidebar


def _open_a_cell(page, plot):
    """Click the Persona explorer's heat-map cell "robot from the future" (row 6 of 8) of the
    first recorded model: the page opens that cell below."""
    plot.first.evaluate("e => e.scrollIntoView({block: 'start'})")
    # personas x two recorded models: two columns
    columns = plot.first.locator(".xtick text").filter(has_text="SmolLM2")
    playwright.expect(columns).to_have_count(2, timeout=60_000)
    page.wait_for_timeout(2000)  # the chart redraws once it knows its width
    box = plot.first.locator(".nsewdrag").first.bounding_box()
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
    _wait_idle(page)
    assert "Traceback" not in page.inner_text("body")


def _run(page, label="Run"):
    page.get_by_role("button", name=label, exact=True).click()
    page.locator(".js-plotly-plot").first.wait_for(timeout=300_000)
    _wait_idle(page, 2500)


@pytest.fixture(scope="module")
def demo_url(tmp_path_factory, demo_cache):
    with dashboard(tmp_path_factory.mktemp("tour"), cache_from=demo_cache, DBPA_REPLAY_FILE=DEMO) as url:
        yield url


def _offline(context, url: str) -> list[str]:
    """Blocks every request of ``context`` to another host than ``url``'s; returns the list
    the requests (and websockets) to other hosts are added to."""
    own = urlsplit(url).netloc
    foreign: list[str] = []

    def local(u: str) -> bool:
        return urlsplit(u).scheme in ("data", "blob") or urlsplit(u).netloc == own

    context.route("**/*", lambda route: route.continue_() if local(route.request.url) else route.abort())
    # every request, also those routing does not see (a favicon is fetched outside it)
    context.on("request", lambda r: None if local(r.url) else foreign.append(r.url))
    context.on("websocket", lambda ws: None if urlsplit(ws.url).netloc == own else foreign.append(ws.url))
    return foreign


def _chips_cut_off(page) -> list[str]:
    """The chosen options of multiselects whose chip is not shown whole."""
    return page.evaluate("""() => [...document.querySelectorAll(
        '[data-testid=stMultiSelectTagsContainer]')].flatMap(box => {
          const r = box.getBoundingClientRect();
          return [...box.querySelectorAll('[data-tag]')].filter(t => {
            const c = t.getBoundingClientRect();
            return c.right > r.right + 1 || c.bottom > r.bottom + 1; })
          .map(t => t.getAttribute('aria-label')); })""")


def test_a_tour_of_every_page(demo_url, browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    foreign = _offline(context, demo_url)
    page = context.new_page()
    plot = page.locator(".js-plotly-plot")
    visited: set[str] = set()  # the pages' addresses the tour opened
    page.on("framenavigated", lambda f: f == page.main_frame and visited.add(urlsplit(f.url).path.strip("/")))

    # the landing page: the papers' eight personas, run on the recorded answers
    _open(page, demo_url, lambda p: p.get_by_role("button", name="Run audit"))
    _shot(page, "tour-landing")
    page.get_by_role("button", name="Run audit").click()
    page.get_by_role("tab", name="Permutation test").first.wait_for(timeout=300_000)
    plot.first.locator(".main-svg").first.wait_for(timeout=120_000)  # the histograms drawn
    _wait_idle(page, 2500)
    assert "perturbations change the answers" in page.inner_text("body")
    _shot(page, "tour-landing-results", page.get_by_role("heading", name="Results").first)
    tabs = page.get_by_role("tablist").first
    page.get_by_role("tab", name="Why").first.click()
    _wait_idle(page)
    _shot(page, "tour-why", tabs)
    page.get_by_role("tab", name="Answers").first.click()
    _wait_idle(page)
    _shot(page, "tour-answers", tabs)

    # the audit pages that run their default example on the recordings
    run = page.get_by_role("button", name="Run", exact=True)  # the results follow it
    for url, name, at in (
        ("persona_explorer", "tour-persona-explorer", plot.first),
        ("control_target", "tour-control-target", run),
        ("model_comparison", "tour-model-comparison", run),
    ):
        _open(page, f"{demo_url}/{url}", lambda p: p.get_by_role("button", name="Run", exact=True))
        if url == "persona_explorer":  # every chosen persona's chip shown whole
            assert not _chips_cut_off(page)
        _run(page)
        _shot(page, name, at)
        if url == "persona_explorer":
            _open_a_cell(page, plot)

    _open(page, f"{demo_url}/robustness", lambda p: p.get_by_role("button", name="Run battery"))
    _run(page, "Run battery")
    _shot(page, "tour-robustness", page.get_by_role("heading", name="Results").first)

    _open(page, f"{demo_url}/fidelity", lambda p: p.get_by_role("heading", name="Results"))
    plot.first.wait_for(timeout=120_000)
    _wait_idle(page)
    _shot(page, "tour-fidelity", plot.first)  # the calibrated curves

    # the Suite page: its example's recorded result at once, the verdict in words first
    _open(page, f"{demo_url}/suite", lambda p: p.get_by_text("Recorded result"))
    plot.first.wait_for(timeout=120_000)
    _wait_idle(page)
    body = page.inner_text("body")
    assert "perturbations change the answers across the cases" in body  # the verdict, first
    assert "changes the answers" in body and "comedian" in body
    page.get_by_text("its answers side by side").first.wait_for(timeout=60_000)  # one case's
    _shot(page, "tour-suite")
    _shot(page, "tour-suite-results", page.get_by_text("Recorded result").first)
    _shot(page, "tour-suite-heatmap", page.get_by_role("heading", name="Cases x perturbations").first)

    for url, name in (
        ("sensitivity", "tour-sensitivity"),
        ("history", "tour-history"),
        ("settings", "tour-settings"),
    ):
        _open(page, f"{demo_url}/{url}", lambda p: p.get_by_text("Demo mode"))
        _shot(page, name)
    body = page.inner_text("body")
    assert "Settings" in body
    # any page the tour has not shown by its own address is opened as well
    assert {"", "persona_explorer", "suite", "settings"} <= visited, visited
    for *_, title, _icon, url_path in PAGES:
        if url_path not in visited:
            _open(page, f"{demo_url}/{url_path}", lambda p: p.get_by_role("heading", level=1))
            assert "Traceback" not in page.inner_text("body"), title
    context.close()
    assert not foreign, "requests to other hosts:\n" + "\n".join(foreign)
