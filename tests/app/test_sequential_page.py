"""The audit page's "Sequential sampling" switch: the spec gets sequential_sampling, the
table says how many answers each test used and why it stopped."""

import pytest

from .conftest import plain

pytestmark = pytest.mark.slow


def test_the_switch_turns_sequential_sampling_on(make_app):
    at = make_app(page="pages/perturbation_test.py", w_samples=20, w_embedder="rouge1")
    at.toggle(key="w_landing_sequential").set_value(True).run()
    assert not at.exception, at.exception
    assert "Recorded answers to read (at most)" in [m.label for m in at.metric]  # the worst case
    at.button(key="landing_run").click().run()
    assert not at.exception, at.exception
    table = next(d.value for d in at.dataframe if "answers per arm" in d.value.columns)
    assert set(table["stopped"]) <= {"rejected", "futility", "maximum"}
    assert set(table["answers per arm"]) <= {12, 20}
    said = " ".join(plain(c.value) for c in at.caption)
    assert "Sequential sampling: the answers were drawn in rounds" in said
    assert "sequential, 2 looks (k = 12, 20), weights 0.5, 0.5; stopped at k = " in said


def test_the_suite_page_switch_is_written_into_suite_yaml(make_app, tmp_path, monkeypatch):
    import yaml

    from dbpa_core.spec import load_spec
    from ui import suite_builder

    at = make_app(page="pages/suite.py", w_samples=20, w_embedder="rouge1")
    assert not at.exception, at.exception
    assert at.toggle(key="w_suite_sequential").value is False
    assert "sequential_sampling" not in at.session_state["_suite_doc"]
    at.toggle(key="w_suite_sequential").set_value(True).run()
    assert not at.exception, at.exception
    doc = at.session_state["_suite_doc"]
    assert doc["sequential_sampling"] is True
    assert "Recorded answers to read (at most)" in [m.label for m in at.metric]  # the worst case
    # the downloaded suite.yaml carries it, and `dbpa audit` reads the same plan
    text = suite_builder.spec_yaml(doc)
    assert yaml.safe_load(text)["sequential_sampling"] is True
    (tmp_path / "suite.yaml").write_text(text)
    (tmp_path / "cases.csv").write_text(suite_builder.cases_csv(doc))
    spec = load_spec(tmp_path / "suite.yaml")
    assert spec.sequential_sampling.plan(spec.samples).looks == (12, 20)
    # with rounds of this suite in the cache, the estimate's pilot (computed and tested in
    # tests/test_sequential.py; the demo recording holds too few answers for a round of 12
    # per suite prompt) is said under the totals
    from dbpa_core import runs as runs_module

    real = runs_module.estimate

    def with_pilot(spec, **kw):
        est = real(spec, **kw)
        est["sequential"]["pilot"] = {
            "cases": 3,
            "piloted": 3,
            "rounds": 1,
            "open": 2,
            "stopped": {"decided": 4},
            "best_calls": 40,
            "worst_calls": 40,
        }
        return est

    monkeypatch.setattr(runs_module, "estimate", with_pilot)
    at.run()
    said = " ".join(plain(c.value) for c in at.caption)
    assert (
        "Sequential sampling: from the cached rounds of 3 of 3 cases (a pilot): 4 of 6 tests decided" in said
    )
    monkeypatch.setattr(runs_module, "estimate", real)
    # a suite with a plan of its own, opened again (a reload reads the draft the page keeps):
    # the switch is on and the plan is kept as written, not turned into `true`
    own = dict(doc, sequential_sampling={"looks": [5, 20], "weights": [0.2, 0.8]})
    suite_builder.save_draft(own)
    again = make_app(page="pages/suite.py", w_samples=20, w_embedder="rouge1")
    assert not again.exception, again.exception
    assert again.toggle(key="w_suite_sequential").value is True
    kept = again.session_state["_suite_doc"]["sequential_sampling"]
    assert kept["looks"] == [5, 20] and kept["weights"] == [0.2, 0.8]
    again.toggle(key="w_suite_sequential").set_value(False).run()
    assert "sequential_sampling" not in again.session_state["_suite_doc"]
