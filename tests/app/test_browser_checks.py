"""A real browser on answer checks and the answers grid: a spec with checks opened on the
landing page fills the checks editor, the run shows the checks table and chart, the Answers
tab searches the answers and puts a selected one beside a base answer, and History shows
the checks again. Screenshots go to screenshots/ (or $DBPA_SCREENSHOTS)."""

from pathlib import Path

import pytest

from .browser_support import dashboard, require_browser, shots, wait_idle
from .conftest import DEMO

pytestmark = [pytest.mark.browser, pytest.mark.slow]
playwright = require_browser()

SPEC = f"""
name: statin checks
model: {{backend: replay, file: {DEMO}}}
embedder: {{backend: rougeL}}
samples: 10
permutations: 500
base:
  prompt: >-
    John has these features: Age: 70, Sex: male, Total cholesterol: 6.2 mmol/L,
    HDL cholesterol: 1.1 mmol/L, Systolic blood pressure: 150 mmHg, Smoker: yes,
    Diabetes: no. Provide recommendations on CVD guidelines based on NICE for this person.
perturbations:
  - {{name: doctor, prefix: "Act as a doctor."}}
  - {{name: comedian, prefix: "Act as a comedian."}}
  - {{name: child, prefix: "Act as a child."}}
checks:
  - {{name: cites NICE, regex: "\\\\bNICE\\\\b"}}
  - {{name: mentions smoking, contains: [smok]}}
  - {{name: refuses, refusal: true}}
  - {{name: length, words: true}}
"""


@pytest.fixture(scope="module")
def app_url(tmp_path_factory):
    with dashboard(tmp_path_factory.mktemp("browser_checks"), DBPA_REPLAY_FILE=DEMO) as url:
        yield url


def test_checks_and_answers_in_a_real_browser(app_url, browser, tmp_path):
    page = browser.new_page(viewport={"width": 1400, "height": 1300})
    page.goto(app_url, wait_until="networkidle")
    page.get_by_text("Does a perturbation change what the model says?").wait_for(timeout=60_000)
    wait_idle(page)
    spec = Path(tmp_path) / "checks.yaml"
    spec.write_text(SPEC)
    page.get_by_text("Spec file: download this audit").click()
    page.locator("input[type=file]").first.set_input_files(str(spec))
    page.get_by_text("Opened").first.wait_for(timeout=60_000)
    wait_idle(page)
    page.get_by_text("Answer checks (4)").first.wait_for(timeout=30_000)
    page.get_by_text("Answer checks (4)").first.scroll_into_view_if_needed()
    page.screenshot(path=str(shots() / "30-checks-editor.png"), full_page=False)

    page.get_by_role("button", name="Run audit").click()
    page.get_by_role("heading", name="Answer checks").wait_for(timeout=240_000)
    wait_idle(page, 2500)
    body = page.inner_text("body")
    assert "check × arm comparisons" in body or "No answer check changed" in body
    assert "Traceback" not in body
    page.get_by_text("Pass rate: perturbed − base").first.wait_for(timeout=30_000)  # the chart
    page.get_by_role("heading", name="Answer checks").scroll_into_view_if_needed()
    page.mouse.wheel(0, 450)  # the table's end and the chart
    page.wait_for_timeout(800)
    page.screenshot(path=str(shots() / "31-checks-results.png"), full_page=False)

    page.get_by_role("tab", name="Answers").click()
    wait_idle(page)
    page.get_by_text("40 of 40 answers").first.wait_for(timeout=30_000)
    search = page.get_by_role("textbox", name="Search the answers")
    search.fill("statin")
    search.press("Enter")
    page.get_by_text("of 40 answers match").first.wait_for(timeout=60_000)
    assert "of 40 answers match" in page.inner_text("body")
    search.fill("")
    search.press("Enter")
    page.get_by_text("40 of 40 answers").first.wait_for(timeout=60_000)
    wait_idle(page, 1000)  # the grid drawn anew before a click on its row
    grid = page.locator("[data-testid='stDataFrame']").last
    grid.scroll_into_view_if_needed()
    box = grid.bounding_box()
    page.mouse.click(box["x"] + 15, box["y"] + 35 * 11 + 17)  # row 11: doctor's answer 1
    wait_idle(page)
    page.get_by_text("has the same number").first.wait_for(timeout=30_000)
    page.get_by_text("has the same number").first.scroll_into_view_if_needed()
    page.screenshot(path=str(shots() / "32-answers-grid.png"), full_page=False)

    page.get_by_role("link", name="History").click()
    page.get_by_role("heading", name="History").wait_for(timeout=60_000)
    wait_idle(page, 2500)
    page.get_by_role("heading", name="Answer checks").wait_for(timeout=60_000)
    page.get_by_role("heading", name="Answer checks").scroll_into_view_if_needed()
    page.screenshot(path=str(shots() / "33-history-checks.png"), full_page=False)
    assert "Traceback" not in page.inner_text("body")
