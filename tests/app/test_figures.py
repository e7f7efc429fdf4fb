"""Figure builders tested directly: traces, axis titles, stars."""

import numpy as np
import pytest

from dbpa_core.audit import run_audit
from dbpa_core.cache import Cache
from dbpa_core.roc import roc_over_alpha
from dbpa_core.spec import parse_spec
from ui import figures
from ui.export import html_report

from .conftest import DEMO


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    from ui import presets

    spec = parse_spec(
        {
            "model": {"backend": "replay", "file": DEMO},
            "embedder": {"backend": "rouge1"},
            "samples": 10,
            "permutations": 300,
            "base": {"prompt": presets.NICE_PROMPT},
            "perturbations": [
                {"name": "comedian", "prefix": "Act as a comedian.", "role": "target"},
                {"name": "doctor", "prefix": "Act as a doctor.", "role": "control"},
            ],
        }
    )
    return run_audit(spec, cache=Cache(tmp_path_factory.mktemp("c")))


def test_similarity_histograms(result):
    fig = figures.similarity_histograms(result)
    assert len(fig.data) == 4  # P0 and P1 per perturbation
    assert {t.name for t in fig.data} == {"P0: base vs base", "P1: base vs perturbed"}
    assert sum(t.showlegend is not False for t in fig.data) == 2
    titles = [a.text for a in fig.layout.annotations]
    assert any(t.startswith("comedian") and "ω =" in t for t in titles)
    p = next(p for p in result.perturbations if p.name == "comedian")
    if p.stars:
        assert any(f"comedian {p.stars}" in t for t in titles)
    assert fig.layout.xaxis.title.text == "rouge1 similarity"
    np.testing.assert_array_equal(fig.data[0].x, p.test.null_similarities)


def test_permutation_figure(result):
    p = result.perturbations[0]
    fig = figures.permutation_figure(p)
    assert fig.data[0].type == "histogram" and len(fig.data[0].x) == p.test.n_permutations
    assert fig.layout.shapes[0].x0 == pytest.approx(p.effect_size)
    assert "observed ω" in fig.layout.annotations[0].text
    assert fig.layout.xaxis.title.text == f"ω ({p.test.measure})"


def test_embedding_map_needs_embeddings(result):
    assert figures.embedding_map(result) is None  # ROUGE: no embeddings
    xy = figures.pca_coordinates(np.random.default_rng(0).normal(size=(10, 5)))
    assert xy.shape == (10, 2)


def _fake(result, name, significant, above, p_adj=0.01, stars="**"):
    """A copy of the first perturbation with the given name, verdict and effect above chance."""
    import dataclasses

    p = result.perturbations[0]
    test = dataclasses.replace(p.test, effect_size=0.3 + above, chance_effect_size=0.3)
    return dataclasses.replace(
        p,
        name=name,
        significant=significant,
        stars=stars if significant else "",
        effect_size=0.3 + above,
        p_adjusted=p_adj,
        test=test,
    )


def test_heatmap_colours_significant_cells_by_effect_above_chance(result):
    import dataclasses

    a = dataclasses.replace(
        result,
        perturbations=(_fake(result, "doctor", False, 0.21, 0.2), _fake(result, "comedian", True, 0.23)),
    )
    b = dataclasses.replace(
        result, perturbations=(_fake(result, "doctor", True, 0.10), _fake(result, "comedian", True, 0.40))
    )
    fig = figures.persona_heatmap({"m1": a, "m2": b}, selected=("comedian", "m2"))
    ns, sig = fig.data[0], fig.data[1]
    assert ns.type == sig.type == "heatmap"
    # the non-significant 0.21 is grey (no colour value), the significant 0.23 coloured
    assert np.isnan(sig.z[0][0]) and ns.z[0][0] == 0.0
    assert sig.z[1][0] == pytest.approx(0.23) and np.isnan(ns.z[1][0])
    assert sig.text[0][0] == "+0.21 n.s." and sig.text[1][0] == "+0.23**"
    assert sig.zmin == 0 and "above" in sig.colorbar.title.text
    assert list(fig.layout.yaxis.ticktext) == ["doctor", "comedian"]
    # the selected cell (row 1, column 1) is outlined
    outer, inner = fig.layout.shapes  # dark outside, white inside
    assert (outer.x0, outer.x1, outer.y0, outer.y1) == (0.5, 1.5, 0.5, 1.5)
    assert inner.line.color == "#FFFFFF" and outer.x0 < inner.x0 < inner.x1 < outer.x1
    assert "n.s." not in fig.data[2].text[3] and "significant" in fig.data[2].text[3]


def test_heatmap_escapes_names(result):
    import dataclasses

    evil = dataclasses.replace(result, perturbations=(_fake(result, "<b>x</b>", True, 0.2),))
    fig = figures.persona_heatmap({"m<i>": evil})
    assert list(fig.layout.yaxis.ticktext) == ["&lt;b&gt;x&lt;/b&gt;"]
    assert list(fig.layout.xaxis.ticktext) == ["m&lt;i&gt;"]
    assert "<b>x</b>" not in fig.data[2].text[0]


def test_p_values_say_which_p_and_never_show_zero(result):
    assert figures.fmt_p(0.00004) == "< 0.0001" and figures.fmt_p(0.0005) == "0.0005"
    assert figures.p_text(0.00004, raw=True) == "p (raw) < 0.0001"
    assert figures.p_text(0.0123) == "p (adj.) = 0.0123"
    p = result.perturbations[0]
    perm = figures.permutation_figure(p)
    assert "p (raw)" in perm.layout.title.text and "p (adj.)" in perm.layout.title.text
    assert f"smallest possible p = {figures.fmt_p(1 / 301)}" in perm.layout.title.text
    hist = figures.similarity_histograms(result)
    assert all("p (adj.)" in a.text for a in hist.layout.annotations)
    assert "0.0000" not in perm.layout.title.text


def test_names_are_escaped_in_chart_titles(result):
    import dataclasses

    evil = dataclasses.replace(result, perturbations=(_fake(result, "<b>bold</b> **x**", True, 0.1),))
    titles = [a.text for a in figures.similarity_histograms(evil).layout.annotations]
    assert titles[0].startswith("&lt;b&gt;bold&lt;/b&gt; **x**")
    assert "&lt;b&gt;" in figures.permutation_figure(evil.perturbations[0]).layout.title.text
    bar = figures.model_distance_figure(evil)
    assert list(bar.data[0].x) == ["&lt;b&gt;bold&lt;/b&gt; **x**"]


def test_embedding_map_colours_do_not_repeat_and_legend_is_beside(result):
    import dataclasses

    rng = np.random.default_rng(0)
    arms = tuple(
        dataclasses.replace(
            result.arms[0],
            arm=dataclasses.replace(result.arms[0].arm, name=f"arm {i}"),
            embeddings=rng.normal(size=(3, 4)),
        )
        for i in range(14)
    )
    base = dataclasses.replace(result.base, embeddings=rng.normal(size=(3, 4)))
    fig = figures.embedding_map(dataclasses.replace(result, base=base, arms=arms))
    styles = [(t.marker.color, t.marker.symbol) for t in fig.data]
    assert len(set(styles)) == 15  # base + 14 arms, no two alike
    assert len({t.marker.color for t in fig.data[1:]}) == 14
    assert fig.layout.legend.orientation == "v" and fig.layout.legend.x > 1
    assert len({figures.arm_style(i) for i in range(200)}) == 200


def test_model_distance_uses_effect_above_chance(result):
    fig = figures.model_distance_figure(result)
    assert list(fig.data[0].y) == pytest.approx([p.effect_above_chance for p in result.perturbations])
    assert "above chance" in fig.layout.yaxis.title.text


def test_roc_figures():
    a = roc_over_alpha([0.5, 0.8], [0.001, 0.3])
    b = roc_over_alpha([0.01, 0.8], [0.2, 0.3])
    fig = figures.roc_figure({"a": a, "b": b}, max_fpr=0.05)
    assert [t.name for t in fig.data] == ["chance", "a (AUC = 1.00)", "b (AUC = 0.50)"]
    assert fig.layout.xaxis.title.text.startswith("false-positive rate")
    bar = figures.tpr_at_fpr_figure({"a": a, "b": b}, 0.05)
    assert "★" in bar.data[0].text[0] and "★" not in bar.data[0].text[1]
    tie = figures.tpr_at_fpr_figure({"a": a, "c": a}, 0.05)
    assert all("★" in t for t in tie.data[0].text)
    assert figures.best_models({"a": a, "b": b, "c": a}, 0.05) == ["a", "c"]
    none = roc_over_alpha([0.01, 0.02], [0.5, 0.6])  # no target beats a control
    flat = figures.tpr_at_fpr_figure({"a": none, "b": none}, 0.05)
    assert list(flat.data[0].y) == [0.0, 0.0] and not any("★" in t for t in flat.data[0].text)


def test_p_values_never_round_onto_a_threshold():
    """0.0009995 next to '***' (p < .001) must not read 0.0010, nor 0.0009995 (seven
    digits where every other p has four): '< 0.001'; floors read '< 0.0001'."""
    assert figures.fmt_p(0.0009995) == "< 0.001" and figures.fmt_p(0.04996) == "< 0.05"
    assert figures.fmt_p(0.0123) == "0.0123" and figures.fmt_p(0.001) == "0.0010"
    assert figures.fmt_p(5e-5) == "< 0.0001" and figures.fmt_p(float("nan")) == "–"
    assert figures.fmt_p(1 / 2001) == "0.0005" and figures.fmt_p(1.0) == "1.0000"
    assert figures.fmt_rate(0.0) == "0.00" and figures.fmt_rate(1) == "1.00"


def test_tables_round_omega_once_as_the_charts_do(result):
    """A value such as 0.08449 rounded to four digits first (0.0845) and then to three read
    +0.085 in the table but +0.084 on the chart and in the Why view."""
    import dataclasses

    from ui import widgets

    p = result.perturbations[0]
    above = 0.0844999
    test = dataclasses.replace(p.test, effect_size=p.chance_effect_size + above)
    twisted = dataclasses.replace(
        result,
        perturbations=(dataclasses.replace(p, test=test, effect_size=test.effect_size),)
        + result.perturbations[1:],
    )
    shown = widgets.styled(widgets.results_table(twisted)).to_html()
    assert f"{twisted.perturbations[0].effect_above_chance:+.3f}" == "+0.084"
    assert ">+0.084<" in shown and ">+0.085<" not in shown
    chart = figures.model_distance_figure(twisted)
    assert chart.data[0].text[0].startswith("+0.084")


def test_model_distance_figure(result):
    fig = figures.model_distance_figure(result)
    assert list(fig.data[0].x) == ["comedian", "doctor"]
    assert all(
        t.startswith(f"{p.effect_above_chance:+.3f}")
        for t, p in zip(fig.data[0].text, result.perturbations, strict=True)
    )


def test_html_report_escapes_model_output(result):
    import dataclasses

    base = dataclasses.replace(result.base, texts=("<script>alert('x')</script>",) + result.base.texts[1:])
    evil = dataclasses.replace(result, base=base)
    page = html_report("Report <b>", [evil], {"h": figures.similarity_histograms(evil)})
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in page  # Jinja2's escaping
    assert "<script>alert('x')</script>" not in page
    assert page.count("plotly") > 0 and "<title>Report &lt;b&gt;</title>" in page
