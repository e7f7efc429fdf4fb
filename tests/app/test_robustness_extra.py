"""The Robustness page on a dashboard installed without the `battery` extra: one line that
names the extra, and nothing to run."""

import sys

from tests.test_battery_extra import MESSAGE


def test_the_robustness_page_names_the_extra(monkeypatch, make_app):
    monkeypatch.setitem(sys.modules, "nltk", None)
    at = make_app(page="pages/robustness.py")
    assert [e.value for e in at.error] == [MESSAGE]
    assert not at.button  # nothing to run
