"""Issue 33 in a real browser: a suite is built on the Suite page by pointing and clicking
(cases pasted, two presets, the example's checks), run on recorded answers, and its
downloaded suite.yaml + cases.csv give the same pooled verdicts with `dbpa audit`.
Screenshots go to screenshots/ (or $DBPA_SCREENSHOTS). (The page's demo, the recorded suite
shown at once: the tour, ``test_browser_tour.py``.)"""

import contextlib
import json
import subprocess
import sys

import pytest

from .browser_support import ROOT, dashboard, require_browser, shots, wait_idle
from .test_suite_builder import BASE, PASTED, record_answers

pytestmark = [pytest.mark.browser, pytest.mark.slow]
playwright = require_browser()


def _wait_idle(page, ms=300):
    """:func:`wait_idle` with this file's five minutes for a rerun (a suite's run)."""
    wait_idle(page, ms, timeout=300_000)


def _shot(page, name, at):
    at.evaluate("e => e.scrollIntoView({block: 'start'})")
    page.wait_for_timeout(700)
    page.screenshot(path=str(shots() / f"{name}.png"))
    assert "Traceback" not in page.inner_text("body")


def _pick(page, label, options):
    """Choose ``options`` in the multiselect called ``label``, each one confirmed by its tag
    in the box (Streamlit draws a chosen value as ``<span data-tag aria-label=VALUE>``; found
    by CSS, not by role: while the list is open the tags are aria-hidden): on a busy machine
    a click on an option is sometimes lost, so it is clicked again until the tag is there
    (never when the list already marks it chosen, in case a click would take it back)."""
    box = page.get_by_role("combobox", name=label)
    widget = page.get_by_test_id("stMultiSelect").filter(has=box)
    for o in options:
        tag = widget.locator(f'[data-tag][aria-label="{o}"]')
        option = page.get_by_role("option", name=o, exact=True)
        for _ in range(5):
            _wait_idle(page, 0)  # not while a rerun redraws the box
            if tag.count():
                break
            with contextlib.suppress(playwright.TimeoutError):
                if box.get_attribute("aria-expanded") != "true":
                    box.click()
                option.wait_for(timeout=30_000)
                if option.get_attribute("aria-selected") != "true":
                    option.click(timeout=30_000)
                tag.wait_for(timeout=60_000)
        if not tag.count():
            page.screenshot(path=str(shots() / "failed-suite-pick.png"))
            (shots() / "failed-suite-pick.html").write_text(widget.evaluate("e => e.outerHTML"))
            pytest.fail(f"{o!r} is not chosen in {label!r} after five tries")
    page.keyboard.press("Escape")
    playwright.expect(widget.locator("[data-tag]")).to_have_count(len(options))


def _perturbations(page, n):
    """The run's estimate counts ``n`` perturbations (a lost choice fails here, at once,
    not as a run that never reaches its verdict)."""
    playwright.expect(page.get_by_text(f"5 cases x {n} perturbations = ").first).to_be_visible(
        timeout=120_000
    )


@pytest.fixture(scope="module")
def built_url(tmp_path_factory):
    """The dashboard on answers recorded for the suite the test builds."""
    tmp = tmp_path_factory.mktemp("suite-built")
    path = record_answers(tmp / "recorded.jsonl")
    with dashboard(tmp, DBPA_REPLAY_FILE=str(path)) as url:
        yield url, tmp


def test_build_run_and_download_a_suite(built_url, browser):
    url, tmp = built_url
    page = browser.new_page(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    page.set_default_timeout(120_000)  # a busy machine: the page's every step may be slow
    page.goto(f"{url}/suite", wait_until="networkidle")
    page.get_by_text("1 · Cases").first.wait_for(timeout=120_000)
    _wait_idle(page)
    k = page.get_by_role("spinbutton", name="Samples per prompt (k)")
    k.fill("6")
    k.press("Enter")
    _wait_idle(page)
    page.get_by_role("textbox", name="Or paste rows from a spreadsheet").fill(PASTED)
    page.get_by_role("button", name="Use the pasted rows").click()
    page.get_by_text("Read 5 pasted cases").wait_for(timeout=30_000)
    _wait_idle(page)
    base = page.get_by_role("textbox", name="A template over the cases' fields")
    base.fill(BASE)
    base.press("Control+Enter")
    _wait_idle(page)
    page.get_by_role("button", name="Remove every perturbation").click()
    _wait_idle(page)
    page.get_by_text("Presets: personas, a name swap").click()
    _wait_idle(page)
    _pick(page, "Persona prefixes (the papers' eight)", ["comedian", "child"])
    page.get_by_role("button", name="Add personas").click()
    _perturbations(page, 2)
    _wait_idle(page)
    _pick(page, "First names across groups", ["Jamal", "Emily"])
    page.get_by_role("button", name="Add name swap").click()
    _perturbations(page, 4)
    _wait_idle(page)
    _shot(page, "suite-built", page.get_by_text("3 · Perturbations").first)
    page.get_by_text("Preview: one case's prompts").click()
    prompt = "Act as a comedian. John is 70, smoker: yes. Should John take a statin?"
    page.get_by_text(prompt).first.wait_for(timeout=60_000)
    assert prompt in page.inner_text("body")
    _shot(page, "suite-preview", page.get_by_text("Preview: one case's prompts").first)
    # the two files, as downloaded
    files = tmp / "files"
    files.mkdir()
    for label, name in (("Suite (YAML)", "suite.yaml"), ("Cases (cases.csv)", "cases.csv")):
        with page.expect_download() as got:
            page.get_by_role("button", name=label).click()
        got.value.save_as(str(files / name))
    page.get_by_role("button", name="Run suite", exact=True).click()
    try:  # the recording's results are on screen until the run's replace them
        page.get_by_text("2 of 4 perturbations change the answers").first.wait_for(timeout=400_000)
    finally:
        page.screenshot(path=str(shots() / "suite-run-end.png"))
    page.locator(".js-plotly-plot").first.wait_for(timeout=60_000)
    _wait_idle(page, 1500)
    body = page.inner_text("body")
    (shots() / "suite-run-body.txt").write_text(body)
    assert "2 of 4 perturbations change the answers across the cases" in body
    _shot(page, "suite-run-verdict", page.get_by_text("5 · Run").first)
    _shot(page, "suite-run-heatmap", page.get_by_role("heading", name="Cases x perturbations").first)
    page.close()
    out = tmp / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "dbpa_core.cli", "audit", str(files / "suite.yaml"), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    pooled = json.loads((out / "results.json").read_text())["pooled"]
    changed = {d["perturbation"] for d in pooled if d["significant"]}
    assert changed == {"comedian", "child"}
    for d in pooled:
        words = "changes the answers" if d["significant"] else "no change shown"
        assert f"{d['perturbation']} {words}" in body or f"{d['perturbation']}: {words}" in body, d[
            "perturbation"
        ]
