"""A real browser runs the Robustness battery page with its defaults.

The dashboard is started on 127.0.0.1 with a replay file holding the rule-based model's
answer to every prompt the page's default battery asks (one answer carries a
``<script>``, which must show as text), runs the battery, opens every tab and saves
screenshots (``screenshots/`` or ``$DBPA_SCREENSHOTS``). ``DBPA_TEST_PORTS`` picks the ports.
"""

import json

import pytest

from .browser_support import dashboard, require_browser, shots

pytestmark = [pytest.mark.browser, pytest.mark.slow]
playwright = require_browser()

INJECTED = "<script>alert('pwned')</script> **B**"


def default_prompts():
    """Every prompt of the page's default battery (RTI's every round)."""
    from dbpa_core.attacks.battery import RTI_RHOS, plan, rti_queries
    from ui import battery, state

    settings = {
        "seed": 0,
        "samples": state.DEFAULTS["w_samples"],
        "permutations": state.DEFAULTS["w_permutations"],
        "measure": "jsd",
        "correction": "holm",
        "alpha": 0.05,
        "embedder": {"backend": "local"},
        "temperature": 0.8,
        "max_tokens": 120,
    }
    spec = battery.build_spec(dict(battery.DEFAULTS), settings, {"backend": "local"})
    prompts = [q.prompt for qs in plan(spec).values() for q in qs]
    prompts += [
        q.prompt for op in spec.rti for rho in RTI_RHOS for q in rti_queries(spec, spec.items, op, rho)
    ]
    return spec, list(dict.fromkeys(prompts))


@pytest.fixture(scope="module")
def app_url(tmp_path_factory):
    from tests.rule_model import rule_answer, vocabulary_of

    tmp = tmp_path_factory.mktemp("browser-robustness")
    spec, prompts = default_prompts()
    vocab = vocabulary_of([it.passage for it in spec.items] + [it.question for it in spec.items])
    replay = tmp / "replay.jsonl"
    with open(replay, "w") as fh:
        for i, p in enumerate(prompts):
            answer = INJECTED if i == 0 else rule_answer(p, vocab)
            fh.write(json.dumps({"prompt": p, "response": answer}) + "\n")
    with dashboard(tmp, start_timeout=240, DBPA_REPLAY_FILE=str(replay)) as url:
        yield url


def test_robustness_battery_in_a_real_browser(app_url, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 2600})
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(f"{app_url}/robustness", wait_until="networkidle")
    page.get_by_role("heading", name="Robustness battery").first.wait_for(timeout=90_000)
    page.get_by_text("Answers to ask").wait_for(timeout=60_000)
    page.wait_for_timeout(1000)
    page.screenshot(path=str(shots() / "20-robustness-form.png"))
    assert "Robustness battery" in page.locator("[data-testid='stSidebar']").inner_text()
    # the options are checked before anything runs: the sample's give nothing away
    assert "Answer-blind check: no rule that ignores the question beats chance" in page.inner_text("body")

    page.get_by_role("button", name="Run battery").click()
    try:
        page.get_by_role("heading", name="Results").wait_for(timeout=300_000)
        page.locator(".js-plotly-plot").first.wait_for(timeout=60_000)
    except Exception:
        page.screenshot(path=str(shots() / "failed-robustness.png"))
        raise
    page.wait_for_timeout(1500)
    page.screenshot(path=str(shots() / "21-robustness-results.png"))
    body = page.inner_text("body")
    assert "Clean:" in body and "strongest attack" in body and "Traceback" not in body

    for i, tab in enumerate(("Per data set", "RTI", "Consistency", "Which words", "Examples")):
        page.get_by_role("tab", name=tab).click()
        page.wait_for_timeout(1200)
        page.screenshot(path=str(shots() / f"2{i + 2}-robustness-{tab.lower().replace(' ', '-')}.png"))
        if tab == "Which words":  # the phrase table and the forest's importances, drawn
            forest = page.locator(".js-plotly-plot", has_text="What predicts a changed answer")
            forest.scroll_into_view_if_needed()
            page.wait_for_timeout(800)
            forest.screenshot(path=str(shots() / "25b-robustness-forest.png"))
            page.screenshot(path=str(shots() / "25c-robustness-phrase-section.png"))
            phrases = page.locator(".js-plotly-plot", has_text="Which phrases break it")
            phrases.screenshot(path=str(shots() / "25a-robustness-phrases.png"))
            assert "held-out accuracy" in page.inner_text("body")
    assert page.locator("mark").count() > 0  # the attacked words are highlighted
    page.get_by_role("tab", name="Answers").click()
    page.get_by_text("Only unparsed answers").wait_for(timeout=30_000)
    page.wait_for_timeout(1500)
    page.screenshot(path=str(shots() / "27-robustness-answers.png"))
    page.get_by_role("tab", name="Options").click()  # answer positions, answer-blind rules
    page.get_by_text("Answer-blind rules: how often").wait_for(timeout=30_000)
    page.wait_for_timeout(1500)
    page.screenshot(path=str(shots() / "28-robustness-options.png"))
    assert not dialogs, f"a response ran as code: {dialogs}"
    assert "Traceback" not in page.inner_text("body")
    page.close()
