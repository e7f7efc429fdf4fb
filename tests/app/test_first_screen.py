"""Issue 33, item 7: every page says on its first screen what it answers (its title, a
question) and, right under what it does, its verdict in words: in demo mode, with no model
loaded and no file, each page's first elements are the question, the explanation and the
verdict (or, before any result, what to press for one)."""

import pytest

from dbpa_core.backends import local
from ui.widgets import VERDICT_ICON

from .conftest import DEMO, plain

PAGES = {  # page -> (words of its title, how its verdict starts)
    # the recorded result of the landing example, at once (demo mode replays the recording)
    "pages/perturbation_test.py": ("Does a perturbation change", "8 of 8 perturbations change the answers"),
    # the battery, the sensitivity study and History: demo mode's recorded runs (ui/demo_runs.py)
    "pages/robustness.py": ("do typos", "Clean: 7 of 8 items wrong"),
    "pages/fidelity.py": ("does the simulator answer surveys", "Lowest curve"),
    "pages/sensitivity.py": ("does the verdict hold?", "8 of 8 verdicts hold in every setting tried"),
    "pages/history.py": ("did a verdict change?", "Recorded examples: 4 runs listed below. The latest, #4"),
    "pages/suite.py": ("Does a change to every case", "2 of 3 perturbations change the answers"),
}


def first_screen(at) -> list:
    """The main area's first elements, in order (the demo banner skipped)."""
    out = []
    for node in at.main.children.values():
        if type(node).__name__ == "Info" and "**Demo mode**" in str(node.value):
            continue
        out.append(node)
        if len(out) == 4:
            break
    return out


@pytest.mark.parametrize("page", list(PAGES))
def test_each_page_says_what_it_answers_and_its_verdict_first(make_app, monkeypatch, page):
    monkeypatch.setenv("DBPA_REPLAY_FILE", DEMO)
    loaded = dict(local._LOADED)
    at = make_app(models=None, page=page, w_samples=20, w_permutations=2000)  # the defaults
    assert not at.exception, at.exception
    title, verdict = PAGES[page]
    top = first_screen(at)
    assert type(top[0]).__name__ == "Title" and title in top[0].value
    assert type(top[1]).__name__ == "Markdown" and "dbpa-explain" in top[1].value
    said = top[2]
    assert type(said).__name__ == "Info" and said.icon == VERDICT_ICON, [type(n).__name__ for n in top]
    assert plain(said.value).startswith(verdict), said.value
    assert local._LOADED == loaded  # no model loaded


def test_the_history_verdict_names_the_latest_run():
    from datetime import datetime
    from types import SimpleNamespace

    from ui.history_figures import latest_sentence

    run = SimpleNamespace(
        id=7,
        title="",
        page="landing",
        created_at=datetime(2026, 11, 28, 9, 30),
        n_tests=8,
        n_significant=3,
        control_gate="fail",
    )
    older = SimpleNamespace(**{**vars(run), "id": 6})
    assert latest_sentence([run, older], {"landing": "Perturbation test"}) == (
        "2 runs listed below. The latest, #7 (Perturbation test, 2026-11-28 09:30): 3 of 8 tests "
        "changed the answers detectably; a control failed."
    )
    assert latest_sentence([], {}) is None
