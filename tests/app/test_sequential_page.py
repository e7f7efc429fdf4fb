"""The audit page's "Sequential sampling" switch: the spec gets sequential_sampling, the
table says how many answers each test used and why it stopped."""

import pytest

from .conftest import plain

pytestmark = pytest.mark.slow


def test_the_switch_turns_sequential_sampling_on(make_app):
    at = make_app(page="pages/perturbation_test.py", w_samples=20, w_embedder="rouge1")
    at.toggle(key="w_landing_sequential").set_value(True).run()
    assert not at.exception, at.exception
    assert "Model calls to make (at most)" in [m.label for m in at.metric]  # the worst case
    at.button(key="landing_run").click().run()
    assert not at.exception, at.exception
    table = next(d.value for d in at.dataframe if "answers per arm" in d.value.columns)
    assert set(table["stopped"]) <= {"rejected", "futility", "maximum"}
    assert set(table["answers per arm"]) <= {10, 20}
    said = " ".join(plain(c.value) for c in at.caption)
    assert "Sequential sampling: the answers were drawn in rounds" in said
    assert "sequential, 2 looks (k = 10, 20), weights 0.5, 0.5; stopped at k = " in said
