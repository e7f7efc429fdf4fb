"""A real browser runs the Simulator fidelity page: the sample's curves, an upload whose
simulator is named ``<script>…`` (shown as text, never run), and simulating now against
the rule-based survey respondent (tests/survey_model.py on 127.0.0.1, saved as the only
model in a temporary DBPA_HOME). Screenshots go to ``screenshots/`` (or
``$DBPA_SCREENSHOTS``); ``DBPA_TEST_PORTS`` picks the dashboard's port."""

import pytest
import yaml

from tests.survey_model import SurveyModel

from .browser_support import dashboard, require_browser, shots

pytestmark = [pytest.mark.browser, pytest.mark.slow]
playwright = require_browser()

UPLOAD = (
    "scenario,option,real,<script>alert('pwned')</script>,plain\n"
    "q1,Agree,60,0.5,10\nq1,Disagree,40,0.5,30\n"
    "q2,Yes,20,0.3,25\nq2,No,80,0.7,15\n"
    "q3,Often,33,0.4,5\nq3,Never,67,0.6,35\n"
)


@pytest.fixture(scope="module")
def survey():
    with SurveyModel() as srv:
        yield srv


@pytest.fixture(scope="module")
def app_url(tmp_path_factory, survey):
    tmp = tmp_path_factory.mktemp("browser-fidelity")
    home = tmp / "home"
    home.mkdir()
    (home / "models.yaml").write_text(
        yaml.safe_dump(
            {
                "models": [
                    {
                        "backend": "openai",
                        "name": "survey-model",
                        "base_url": survey.base_url,
                        "label": "survey-model",
                        "max_retries": 0,
                    }
                ]
            }
        )
    )
    with dashboard(tmp, start_timeout=240) as url:
        yield url


def test_fidelity_page_in_a_real_browser(app_url, browser, survey, tmp_path):
    page = browser.new_page(viewport={"width": 1400, "height": 2800})
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(f"{app_url}/fidelity", wait_until="networkidle")
    try:
        page.get_by_role("heading", name="Results").wait_for(timeout=120_000)
        page.locator(".js-plotly-plot").first.wait_for(timeout=60_000)
    except Exception:
        page.screenshot(path=str(shots() / "failed-fidelity.png"))
        raise
    page.wait_for_timeout(1500)
    page.screenshot(path=str(shots() / "30-fidelity-sample.png"))
    body = page.inner_text("body")
    assert (
        "sim-close is at least as good as sim-biased on at least 90 % of these questions "
        "(worst case over their confidence sets); for new questions like these, guaranteed "
        "on at least 13 %."
    ) in body
    assert "Simulator fidelity" in page.locator("[data-testid='stSidebar']").inner_text()
    assert page.locator(".js-plotly-plot").count() == 3  # the curves, the plan, a question
    assert (
        "sim-close: tightness band" in body
        or "tightness band" in page.locator(".js-plotly-plot").first.inner_text()
    )  # the band has a legend entry
    assert "Lowest curve: sim-close" in body and "Baseline: uniform, drawn" in body
    page.get_by_role("tab", name="Plan: questions needed").click()
    page.wait_for_timeout(1500)
    page.screenshot(path=str(shots() / "30b-fidelity-plan.png"))
    assert "With 40 questions 2 of 12 pairwise verdicts" in page.inner_text("body")
    page.get_by_role("tab", name="Per question").click()

    # an upload whose simulator name is HTML: shown as text, never run
    page.get_by_text("Upload a CSV", exact=True).click()
    f = tmp_path / "mine.csv"
    f.write_text(UPLOAD)
    page.locator("input[type='file']").set_input_files(str(f))
    page.get_by_text("3 questions and 2 simulator column(s) read from mine.csv").wait_for(timeout=60_000)
    page.get_by_role("heading", name="Results").wait_for(timeout=60_000)
    page.wait_for_timeout(1500)
    page.screenshot(path=str(shots() / "31-fidelity-upload.png"))
    assert "<script>alert('pwned')</script>" in page.inner_text("body")

    # simulate now against the survey respondent
    page.get_by_text("Simulate now", exact=True).click()
    page.get_by_role("button", name="Simulate answers").wait_for(timeout=60_000)
    before = survey.requests
    page.get_by_role("button", name="Simulate answers").click()
    page.get_by_text("survey-model is at least as good as uniform").or_(
        page.get_by_text("Undecided: these data cannot say")
    ).first.wait_for(timeout=120_000)
    page.wait_for_timeout(1500)
    page.screenshot(path=str(shots() / "32-fidelity-simulated.png"))
    assert survey.requests - before == 6 * 10
    page.get_by_role("tab", name="Simulated answers").click()
    page.wait_for_timeout(1200)
    page.screenshot(path=str(shots() / "33-fidelity-answers.png"))
    # QA review 2: ticking the checkbox reran the page and jumped back to "Per question"
    page.get_by_text("Only unparsed answers").click()
    page.wait_for_timeout(2500)
    tab = page.get_by_role("tab", name="Simulated answers")
    assert tab.get_attribute("aria-selected") == "true", "the tab jumped back"
    assert not dialogs, f"a name ran as code: {dialogs}"
    assert "Traceback" not in page.inner_text("body")
    page.close()
