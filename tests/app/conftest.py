import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[2]
APP = str(ROOT / "app.py")
DEMO = str(ROOT / "assets" / "demo_replay.jsonl")
DEFAULT = object()


@pytest.fixture
def make_app(tmp_path, demo_cache):
    """An AppTest of the dashboard with a temporary cache and given models (``models=None``:
    the defaults, as a fresh session gets them). DBPA_HOME is a temporary folder (see
    tests/conftest.py), so the history and saved models start empty. The cache starts as a
    copy of the session's demo cache (tests/demo_cache.py): the recorded answers' MiniLM
    vectors are there, so no test embeds them again; nothing else is."""
    from tests.demo_cache import copy_to

    cache = copy_to(demo_cache, tmp_path / "cache")

    def make(models=DEFAULT, page=None, **state):
        at = AppTest.from_file(APP, default_timeout=240)
        at.session_state["cache_dir"] = str(cache)
        if models is DEFAULT:
            models = [{"backend": "replay", "file": DEMO, "label": "demo"}]
        if models is not None:
            at.session_state["models"] = models
        at.session_state["w_samples"] = 10
        at.session_state["w_permutations"] = 500
        for k, v in state.items():
            at.session_state[k] = v
        at.run()
        if page:
            at.switch_page(page)
            at.run()
        assert not at.exception, at.exception
        return at

    return make


def plain(text: str) -> str:
    """Markdown text as read on screen: backslash escapes (ui.widgets.md_escape) undone."""
    return re.sub(r"\\(.)", r"\1", text)


def errors(at) -> list[str]:
    return [plain(e.value) for e in at.error]


def warnings(at) -> list[str]:
    return [plain(w.value) for w in at.warning]


def successes(at) -> list[str]:
    return [plain(s.value) for s in at.success]


@pytest.fixture(scope="module")
def browser():
    """A headless Debian Chromium (see browser_support); the module is skipped without one."""
    from .browser_support import launch, require_browser

    with require_browser().sync_playwright() as p:
        b = launch(p)
        yield b
        b.close()
