"""The Why view's and the sensitivity studies' figure builders (no Streamlit)."""

import dataclasses

import pytest

from dbpa_core.cache import Cache
from dbpa_core.explain import explain
from dbpa_core.sensitivity import SensitivityConfig, run_sensitivity
from dbpa_core.spec import parse_spec
from tests.fake_openai import FakeOpenAI
from ui import sensitivity_figures as sf
from ui.figures import ALT_COLOR, NULL_COLOR
from ui.why import marked_html
from ui.why_figures import terms_figure

NAME = "<b>comedian</b>"


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    cache = Cache(tmp_path_factory.mktemp("cache"))
    with FakeOpenAI(models=("m", "e")) as srv:
        spec = parse_spec(f"""
model: {{backend: openai, name: m, base_url: "{srv.base_url}"}}
embedder: {{backend: openai, name: e, base_url: "{srv.base_url}"}}
samples: 6
permutations: 200
base: {{prompt: "John has these features: age 70."}}
perturbations:
  - {{name: name-change, prompt: "Ahmed has these features: age 70."}}
  - {{name: "{NAME}", prefix: "Act as a comedian."}}
""")
        return run_sensitivity(
            spec, SensitivityConfig(measures=("jsd", "ks", "energy-l2"), lengths=(80,)), cache=cache
        )


def test_sensitivity_figures(result):
    eff = sf.effect_figure(result, "measure")
    assert len(eff.data) == 3  # one panel per measure
    assert all(list(t.y) == ["name-change", "&lt;b&gt;comedian&lt;/b&gt;"] for t in eff.data)
    pv = sf.pvalue_figure(result, "measure", 0.05)
    assert len(pv.data) == 3 and all(len(t.x) == 2 for t in pv.data)
    ln = sf.length_figure(result, 0.05)
    assert len(ln.data) == 4  # ω and p, per perturbation
    assert list(ln.data[0].x) == sorted(ln.data[0].x)
    assert "<b>comedian</b>" not in eff.to_json() and "<b>comedian</b>" not in ln.to_json()
    v = sf.verdict_table(result)
    assert list(v.columns[:4]) == ["perturbation", "role", "audit", "verdict"]
    t = sf.study_table(result, "measure")
    assert list(t.columns) == ["perturbation", "energy-l2", "jsd", "ks"]  # the audit's own first
    assert len(sf.rows_table(list(result.rows))) == len(result.rows)
    assert {"kind", "model", "cost $", "paid now $"} <= set(sf.cost_table(result).columns)
    html = sf.report_html(result, 0.05)
    assert html.count("plotly.js") >= 1 and "Does the verdict hold?" in html


def test_terms_figure_and_marked_html():
    ex = explain(
        ["take statins daily", "take statins and walk daily"] * 3,
        ["a joke about statins", "another joke, a silly joke"] * 3,
    )
    fig = terms_figure(ex, base_label="base", perturbed_label=NAME)
    bar = fig.data[0]
    assert list(bar.x) == sorted(bar.x)  # base-typical at the bottom
    assert {c for x, c in zip(bar.x, bar.marker.color, strict=True) if x > 0} == {ALT_COLOR}
    assert {c for x, c in zip(bar.x, bar.marker.color, strict=True) if x < 0} == {NULL_COLOR}
    assert NAME not in bar.hovertemplate
    out = marked_html("<script>alert(1)</script> take statins", ["a joke"], ["statins"])
    assert "<script>" not in out and out.startswith("<div class='dbpa-why'>&lt;<mark")
    assert "<mark class='term'>statins</mark>" in out and "<mark class='only'>take</mark>" in out


def test_sensitivity_tables_never_show_p_as_zero(result):
    """Issue 11: `< 0.0001`, never `0.0000`, in the tables the Why view and the Sensitivity
    page draw (styled like every results table)."""
    from ui.widgets import styled

    row = dataclasses.replace(result.rows[0], p_adjusted=5e-5)
    html_table = styled(sf.rows_table([row])).to_html()
    assert "< 0.0001" in html_table and "0.0000" not in html_table
    cell = sf.study_table(dataclasses.replace(result, rows=(row,)), row.study).iloc[0, 1]
    assert "p adj. < 0.0001" in cell
