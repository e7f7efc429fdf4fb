from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[2]
APP = str(ROOT / "app.py")
DEMO = str(ROOT / "assets" / "demo_replay.jsonl")


@pytest.fixture
def make_app(tmp_path):
    """An AppTest of the dashboard with a temporary cache and given models."""

    def make(models=None, page=None, **state):
        at = AppTest.from_file(APP, default_timeout=240)
        at.session_state["cache_dir"] = str(tmp_path / "cache")
        at.session_state["models"] = models or [{"backend": "replay", "file": DEMO,
                                                 "label": "demo"}]
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


def errors(at) -> list[str]:
    return [e.value for e in at.error]
