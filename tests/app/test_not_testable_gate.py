"""One control gate for every output: a control that could not have failed (k too small for
any result to be significant after the correction) is NOT TESTABLE on the dashboard as in
the command line, the report and JUnit, never "passed"."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from dbpa_core import runs
from dbpa_core.cache import Cache

from ..fake_openai import FakeOpenAI


@pytest.fixture(scope="module")
def untestable(tmp_path_factory):
    """An audit at k = 3 with two controls: 2 / C(6, 3) = 0.1 > α, so neither can fail."""
    from dbpa_core.audit import run_audit

    from ..test_reach import two_untestable_controls

    tmp = tmp_path_factory.mktemp("untestable")
    with FakeOpenAI(models=("fake-model", "fake-embed")) as srv:
        return run_audit(two_untestable_controls(srv.base_url), cache=Cache(tmp / "c"))


def test_the_dashboard_reads_the_gate_every_output_reads(untestable):
    from ui import verdicts

    g = verdicts.gate(untestable, "m")
    assert type(g) is runs.Gate and g.model == "m"  # one type: the run interface's
    assert g.status == runs.as_run(untestable).gate().status == "NOT TESTABLE"
    assert {verdicts.outcome(p, g) for p in untestable.perturbations} == {"not testable at k = 3"}
    assert verdicts.control_failure_sentence({"m": untestable}) is None
    sentence = verdicts.control_untestable_sentence({"m": untestable})
    assert sentence and sentence.startswith("Control gate NOT TESTABLE: a, b")


def _gate_view(result):
    from ui import views

    views.control_gate({"m": result}, key="t")


def test_the_dashboards_gate_says_not_testable_never_passed(untestable):
    at = AppTest.from_function(_gate_view, args=(untestable,), default_timeout=60).run()
    assert not at.exception, at.exception
    assert not at.success  # never "Control gate passed"
    assert any("Control gate NOT TESTABLE" in w.value for w in at.warning)
    gate, each = (d.value for d in at.dataframe)
    assert list(gate["control gate"]) == ["NOT TESTABLE"]
    assert set(each["outcome"]) == {"not testable at k = 3"}


def test_the_suite_page_says_a_pooled_control_is_not_testable():
    from ui.suite_view import verdict_lines

    summary = {
        "spec": {"models": []},
        "reachability": {"k": 3, "untestable_controls": ["swap"]},
        "pooled": [
            {
                "perturbation": "swap",
                "role": "control",
                "cases": 2,
                "discoveries": 0,
                "p_value": 0.3,
                "p_adjusted": 0.3,
                "significant": False,
            }
        ],
    }
    assert runs.SuiteRun(summary=summary).gate().status == "NOT TESTABLE"
    (line,) = verdict_lines(summary)
    assert "not testable at k = 3" in line and "as it should" not in line
