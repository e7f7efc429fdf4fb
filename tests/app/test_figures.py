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

    spec = parse_spec({
        "model": {"backend": "replay", "file": DEMO}, "embedder": {"backend": "rouge1"},
        "samples": 10, "permutations": 300, "base": {"prompt": presets.NICE_PROMPT},
        "perturbations": [{"name": "comedian", "prefix": "Act as a comedian.", "role": "target"},
                          {"name": "doctor", "prefix": "Act as a doctor.", "role": "control"}]})
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
    assert fig.layout.xaxis.title.text == "cosine similarity"
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


def test_heatmap_text_has_stars():
    eff = np.array([[0.1, 0.4], [0.3, np.nan]])
    pv = np.array([[0.5, 0.001], [0.02, np.nan]])
    stars = [["", "**"], ["*", ""]]
    fig = figures.persona_heatmap(eff, pv, stars, ["doctor", "comedian"], ["m1", "m2"])
    assert fig.data[0].type == "heatmap"
    assert fig.data[0].text[0][1] == "0.40**" and fig.data[0].text[1][1] == "–"
    assert list(fig.data[0].y) == ["doctor", "comedian"]


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


def test_model_distance_figure(result):
    fig = figures.model_distance_figure(result)
    assert list(fig.data[0].x) == ["comedian", "doctor"]
    assert all(t.startswith(f"{p.effect_size:.3f}") for t, p in zip(fig.data[0].text,
                                                                      result.perturbations, strict=False))


def test_html_report_escapes_model_output(result):
    import dataclasses

    base = dataclasses.replace(result.base, texts=("<script>alert('x')</script>",)
                               + result.base.texts[1:])
    evil = dataclasses.replace(result, base=base)
    page = html_report("Report <b>", [evil], {"h": figures.similarity_histograms(evil)})
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
    assert "<script>alert('x')</script>" not in page
    assert page.count("plotly") > 0 and "<title>Report &lt;b&gt;</title>" in page
