"""A real browser (Playwright + Debian's Chromium) drives the running dashboard.

Starts ``streamlit run app.py`` on 127.0.0.1 with the replay backend, runs the
landing example, waits for the histograms, checks that a ``<script>`` inside a
response is shown as text (and never runs) in every tab and in the Why view, checks the
verdict in one click, runs the Sensitivity page on the same audit, imports a promptfoo file
in Settings, and saves screenshots to ``screenshots/`` (or ``$DBPA_SCREENSHOTS``). (Pages
opened by their own address and the Persona explorer's heat map: the tour,
``test_browser_tour.py``, on the same recording.)
"""

import json
from pathlib import Path

import pytest

from .browser_support import dashboard, require_browser, shots, wait_idle
from .conftest import DEMO

INJECTED = "<script>alert('pwned')</script> <b>bold?</b> **not bold**"

pytestmark = [pytest.mark.browser, pytest.mark.slow]
playwright = require_browser()
DATA = Path(__file__).resolve().parents[1] / "data"


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


def _shown(page, text, name, timeout=300_000):
    """Wait for ``text`` on the page; when it does not come, ``failed-NAME.png`` is saved."""
    try:
        page.get_by_text(text).first.wait_for(timeout=timeout)
    except Exception:
        page.screenshot(path=str(shots() / f"failed-{name}.png"))
        raise


def test_landing_example_why_sensitivity_and_import_in_a_real_browser(app_url, browser):
    """The landing example's results tab by tab (the injected script shown as text, never
    run), the Why tab and the verdict's check, the Sensitivity page on the same audit (zero
    calls), a promptfoo file imported in Settings, and the results still there when the
    page is opened again. One landing audit for all: its new answers are embedded once."""
    # tall: Streamlit's main pane scrolls inside the page, so full_page does not help
    page = browser.new_page(viewport={"width": 1400, "height": 3600})
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(app_url, wait_until="networkidle")
    page.get_by_text("Does a perturbation change what the model says?").wait_for(timeout=60_000)
    page.screenshot(path=str(shots() / "01-landing.png"), full_page=True)

    page.get_by_role("button", name="Run audit").click()
    page.get_by_text("Similarity histograms").first.wait_for(timeout=300_000)
    page.locator(".js-plotly-plot").first.wait_for(timeout=60_000)
    wait_idle(page, 1200)  # the results drawn to the end
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

    # the Why tab: words that moved, typical answers with the injected script as text
    page.get_by_role("tab", name="Why").click(timeout=60_000)
    _shown(page, "Words and phrases that moved", "why", 60_000)
    page.locator(".dbpa-why").first.wait_for(timeout=30_000)
    assert "<script>alert('pwned')</script>" in page.locator(".dbpa-why").first.inner_text()
    assert page.locator(".dbpa-why mark").count() > 0
    wait_idle(page, 1200)
    page.screenshot(path=str(shots() / "10-why.png"))

    # a widget inside the tab keeps the tab open (the tabs are keyed)
    page.get_by_role("combobox", name="Why did the answers change? Perturbation").click()
    page.get_by_role("option", name="robot from the future").click()
    page.get_by_text("Why: robot from the future").first.wait_for(timeout=60_000)
    assert page.get_by_role("tab", name="Why").get_attribute("aria-selected") == "true"

    # one click: does the verdict hold?
    page.get_by_role("button", name="Check the verdict").click()
    _shown(page, "The audit says", "verdict")
    body = page.inner_text("body")
    assert "of 6 measures" in body and "Traceback" not in body
    wait_idle(page, 1200)
    page.screenshot(path=str(shots() / "11-why-verdict.png"))

    # the Sensitivity page on the same audit: zero calls to make
    page.get_by_role("link", name="Sensitivity").click()
    page.get_by_text("Audit to examine").first.wait_for(timeout=60_000)
    page.get_by_role("button", name="Run sensitivity study").click()
    _shown(page, "verdicts hold in every setting tried", "sensitivity")
    wait_idle(page, 1000)  # its charts
    page.screenshot(path=str(shots() / "12-sensitivity.png"))
    assert "Traceback" not in page.inner_text("body")

    # Settings: a promptfoo file becomes a replay model
    page.get_by_role("link", name="Settings").click()
    page.get_by_text("Import recorded responses").first.wait_for(timeout=60_000)
    page.screenshot(path=str(shots() / "06-settings.png"), full_page=True)
    page.locator("input[type=file]").first.set_input_files(str(DATA / "promptfoo_repeat.json"))
    button = page.get_by_role("button", name="Import as a replay model")
    playwright.expect(button).to_be_enabled(timeout=30_000)  # enabled once the file is up
    button.click()
    _shown(page, "Imported 7 responses", "import", 60_000)
    assert "promptfoo_repeat (imported)" in page.inner_text("body")
    wait_idle(page, 1200)
    page.screenshot(path=str(shots() / "13-import.png"))

    # the results survive the page switches
    page.get_by_role("link", name="Perturbation test").click()
    # the verdict, said twice on purpose: first under the page's question, then above the table
    page.get_by_text("perturbations change the answers detectably").first.wait_for(timeout=30_000)
    assert not dialogs, f"a response ran as code: {dialogs}"
    page.close()
