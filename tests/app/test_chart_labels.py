"""Chart labels shown whole: wrapped category names (no cut 'medical', 'comedi'), room for a
negative bar's label, and every model of a comparison named with its temperature."""

import dataclasses

import pytest

from dbpa_core.audit import build_arms
from dbpa_core.spec import parse_spec
from ui import figures
from ui import sensitivity_figures as sf

from .test_figures import result  # noqa: F401 - the module's fixture


def test_wrap_label_breaks_long_names_at_spaces_and_escapes():
    assert figures.wrap_label("medical practitioner") == "medical<br>practitioner"
    assert figures.wrap_label("robot from the future") == "robot from the<br>future"
    assert figures.wrap_label("child") == "child"
    assert figures.wrap_label("<b>x</b> y") == "&lt;b&gt;x&lt;/b&gt; y"


def test_padded_range_leaves_room_on_both_sides():
    lo, hi = figures.padded_range([-0.1, 0.2])
    assert lo < -0.1 - 0.05 and hi > 0.2 + 0.05
    assert figures.padded_range([0.1, 0.2])[0] == 0.0
    assert figures.padded_range([0.0], floor=0.0) == [0.0, 0.3]  # never an empty range


def test_negative_bar_label_is_not_clipped(result):  # noqa: F811
    p = result.perturbations[0]
    test = dataclasses.replace(p.test, effect_size=p.chance_effect_size - 0.2)
    neg = dataclasses.replace(
        result,
        perturbations=(dataclasses.replace(p, test=test, effect_size=test.effect_size),)
        + result.perturbations[1:],
    )
    fig = figures.model_distance_figure(neg)
    assert fig.data[0].cliponaxis is False
    assert fig.layout.yaxis.range[0] < -0.2 - 0.05


def test_sensitivity_p_value_chart_shows_whole_names(tmp_path):
    from types import SimpleNamespace

    from dbpa_core.sensitivity import SensitivityRow

    names = ["medical practitioner", "comedian", "robot from the future"]
    rows = tuple(
        SensitivityRow(
            "measure",
            m,
            n,
            None,
            m,
            "MiniLM",
            None,
            10,
            0.3 + 0.1 * (i - 1) - 0.1,
            0.3,
            0.1 * (i - 1) - 0.1,
            p,
            p,
            p < 0.05,
            "*" if p < 0.05 else "",
            10,
            10,
            m == "jsd",
        )
        for i, n in enumerate(names)
        for m, p in (("jsd", 0.01), ("ks", 0.2))
    )
    res = SimpleNamespace(study=lambda s: list(rows), settings=lambda s: ["jsd", "ks"], perturbations=names)
    fig = sf.pvalue_figure(res, "measure", 0.05)
    assert list(fig.layout.xaxis.ticktext) == [
        "medical<br>practitioner",
        "comedian",
        "robot from the<br>future",
    ]
    assert fig.layout.xaxis.tickangle == 0 and fig.layout.xaxis.automargin
    eff = sf.effect_figure(res, "measure")
    assert eff.layout.xaxis.range[0] < -0.1  # the negative bar and its stars


@pytest.mark.parametrize(
    "temps, names",
    [
        (
            (None, 1.2, 0.4),
            ["SmolLM2-135M (local) T=0.8", "SmolLM2-135M (local) T=1.2", "SmolLM2-135M (local) T=0.4"],
        ),
        ((None, 0.8), None),
    ],
)  # one temperature: no need to say it (and one name)
def test_every_model_of_a_comparison_is_named_with_its_temperature(temps, names):
    models = [{"backend": "local", **({"temperature": t} if t is not None else {})} for t in temps]
    if names is None:  # same name twice: the spec asks for distinct labels
        models = [dict(m, label=f"m{i}") for i, m in enumerate(models)]
        names = ["m0", "m1"]
    spec = parse_spec({"models": models, "temperature": 0.8, "base": {"prompt": "Hi"}})
    assert [a.name for a in build_arms(spec)] == names
