"""Flow in a real browser: Stop (and a reload) cancels the embedded model's batch, so the
next Run starts at once instead of waiting for it; a reload shows the last form and
results again; the battery's RTI and robustness curve run on the recording. Screenshots go
to ``screenshots/`` (or ``$DBPA_SCREENSHOTS``)."""

import re
import time

import pytest

from .browser_support import ROOT, dashboard, require_browser, shots, wait_idle

pytestmark = [pytest.mark.browser, pytest.mark.slow]
playwright = require_browser()
DEMO = str(ROOT / "assets" / "demo_replay.jsonl")


def _lines(page, start="Sampling responses:") -> list[str]:
    return [x for x in page.inner_text("body").split("\n") if x.startswith(start)]


def _set_number(page, name, value):
    box = page.get_by_role("spinbutton", name=name)
    box.fill(str(value))
    box.press("Enter")
    wait_idle(page, 600)


def _until_answers(page, at_least=1, limit=300):
    """Wait until the sampling line counts ``at_least`` complete answers; returns it."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        page.wait_for_timeout(500)
        for line in _lines(page):
            m = re.match(r"Sampling responses: \d+ % \((\d+) of (\d+) answers complete\)", line)
            if m and int(m.group(1)) >= at_least:
                return line
    pytest.fail(f"no answer in {limit} s: {_lines(page)}")


def _starts_without_waiting(page, looks: int) -> None:
    """The run draws tokens (or ``looks`` quarter seconds pass) without ever waiting for
    another run's answers."""
    seen: list[str] = []
    for _ in range(looks):
        page.wait_for_timeout(250)
        seen += _lines(page)
        if any("tokens" in x for x in seen):
            break
    assert not [x for x in seen if "waiting for another run" in x], seen


@pytest.fixture(scope="module")
def local_url(tmp_path_factory):
    with dashboard(tmp_path_factory.mktemp("flow-local")) as url:  # the embedded model
        yield url


def test_stop_and_reload_cancel_the_batch_and_the_next_run_never_waits(local_url, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 2200})
    page.goto(local_url, wait_until="networkidle")
    page.get_by_role("button", name="Run audit").wait_for(timeout=60_000)
    _set_number(page, "Samples per prompt (k)", 4)
    _set_number(page, "Max tokens per response", 16)  # the first answers sooner
    page.get_by_role("button", name="Run audit").click()
    _until_answers(page)
    page.screenshot(path=str(shots() / "40-flow-running.png"))
    page.get_by_role("button", name="Stop").click()
    page.get_by_text("The last run was stopped").first.wait_for(timeout=30_000)
    page.screenshot(path=str(shots() / "41-flow-stopped.png"))

    # the next run starts at once: no answer is held by the stopped one
    page.get_by_role("button", name="Run audit").click()
    _starts_without_waiting(page, 40)

    # a reload mid-run: the old tab's batch is cancelled as well
    page.reload(wait_until="networkidle")
    page.get_by_role("button", name="Run audit").wait_for(timeout=60_000)
    page.get_by_role("button", name="Run audit").click()
    _starts_without_waiting(page, 60)
    stop = page.get_by_role("button", name="Stop")
    if stop.count():  # (on a fast CPU this run may be over already: nothing to stop)
        stop.click()
    page.close()


@pytest.fixture(scope="module")
def slow_server_url(tmp_path_factory):
    """The dashboard with one saved model: an OpenAI-compatible server that holds every
    request for ten minutes."""
    from dbpa_core.home import save_models
    from tests.fake_openai import FakeOpenAI

    tmp = tmp_path_factory.mktemp("flow-slow")
    with FakeOpenAI(fault="slow", slow_seconds=600) as srv:
        save_models(
            [
                {
                    "backend": "openai",
                    "name": "fake-model",
                    "base_url": srv.base_url,
                    "label": "slow server",
                    "max_retries": 0,
                }
            ],
            path=tmp / "home" / "models.yaml",
        )
        with dashboard(tmp) as url:
            yield url, srv


def test_stop_abandons_a_servers_requests_in_flight(slow_server_url, browser):
    """Stop while every request hangs: the run stops at once (it used to wait for the
    answers), no request is sent after it, and the next Run does not wait for it."""
    url, srv = slow_server_url
    page = browser.new_page(viewport={"width": 1400, "height": 2200})
    page.goto(url, wait_until="networkidle")
    page.get_by_role("button", name="Run audit").wait_for(timeout=60_000)
    _set_number(page, "Samples per prompt (k)", 4)
    page.get_by_role("button", name="Run audit").click()
    page.get_by_role("button", name="Stop").wait_for(timeout=60_000)
    while not srv.requests:
        page.wait_for_timeout(200)
    page.get_by_role("button", name="Stop").click()
    page.get_by_text("The last run was stopped").first.wait_for(timeout=30_000)
    sent = srv.requests
    page.screenshot(path=str(shots() / "45-flow-stopped-server.png"))
    page.get_by_role("button", name="Run audit").click()
    page.get_by_role("button", name="Stop").wait_for(timeout=60_000)
    seen = []
    for _ in range(20):
        page.wait_for_timeout(250)
        seen += _lines(page)
    assert not [x for x in seen if "waiting for another run" in x], seen
    assert srv.requests > sent and srv.chat_ok == 0  # asked again: nothing was held
    page.get_by_role("button", name="Stop").click()
    page.get_by_text("The last run was stopped").first.wait_for(timeout=30_000)
    page.close()


@pytest.fixture(scope="module")
def demo_url(tmp_path_factory, demo_cache):
    with dashboard(tmp_path_factory.mktemp("flow-demo"), cache_from=demo_cache, DBPA_REPLAY_FILE=DEMO) as url:
        yield url


def test_a_reload_keeps_the_form_and_the_results(demo_url, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 2200})
    page.goto(demo_url, wait_until="networkidle")
    page.get_by_role("button", name="Run audit").wait_for(timeout=60_000)
    k = page.get_by_role("spinbutton", name="Samples per prompt (k)")
    _set_number(page, "Samples per prompt (k)", 10)
    playwright.expect(k).to_have_value("10", timeout=30_000)  # the form took it
    page.get_by_role("button", name="Run audit").click()
    # in demo mode the page opens on the recording's result (its tabs included): wait until
    # this run's result has replaced it, or the reload below would stop the run mid-way
    # (.first: while Streamlit redraws, the old result's tabs and the new ones both exist)
    playwright.expect(page.get_by_text("Recorded result")).to_have_count(0, timeout=240_000)
    page.get_by_role("tab", name="Permutation test").first.wait_for(timeout=240_000)
    wait_idle(page, 1200)
    page.reload(wait_until="networkidle")
    page.get_by_role("tab", name="Permutation test").first.wait_for(timeout=60_000)
    wait_idle(page, 1200)
    # the restored form is drawn after the first pass of the page: wait for its value (a
    # read at once saw the input before it was restored), a lost form never shows 10
    playwright.expect(k).to_have_value("10", timeout=60_000)
    page.screenshot(path=str(shots() / "42-flow-reloaded.png"), full_page=True)
    body = page.inner_text("body")
    assert "Recorded result" not in body and "Outdated" not in body and "Traceback" not in body
    page.close()


def test_the_battery_runs_every_rti_operation_and_the_curve_on_the_recording(demo_url, browser):
    """Demo mode runs what it offers: the battery with every RTI operation and the
    robustness curve, on the recording. (That every page says it is in demo mode: the
    tour, ``test_browser_tour.py``.)"""
    page = browser.new_page(viewport={"width": 1400, "height": 2200})
    page.goto(f"{demo_url}/robustness", wait_until="networkidle")
    page.get_by_role("button", name="Run battery").wait_for(timeout=60_000)
    page.get_by_text("ω and p of the responses at ρ = 0.1 … 1.0").click()
    wait_idle(page, 1200)
    rti = page.get_by_role("combobox", name="RTI for word attacks")
    for op in ("insert", "delete"):
        rti.click()
        page.get_by_role("option", name=op).click()
        wait_idle(page, 600)
    page.keyboard.press("Escape")
    body = page.inner_text("body")
    assert "does not hold" not in body and "holds no recorded answer" not in body, body[-2000:]
    page.get_by_role("button", name="Run battery").click()
    page.get_by_role("tab", name="Robustness curve").wait_for(timeout=300_000)
    wait_idle(page, 1200)
    page.get_by_role("tab", name="RTI").click()
    wait_idle(page, 1200)
    page.screenshot(path=str(shots() / "44-demo-battery-rti.png"), full_page=True)
    assert "Traceback" not in page.inner_text("body")
    page.close()
