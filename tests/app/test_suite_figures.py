"""The suite heat map: colour only where a test is significant after the correction, grey
elsewhere; every cell's tooltip gives p and p adjusted; large grids drop the cell text."""

import math

from ui.suite_figures import grid, heatmap


def suite_tests(n_cases, perts=("a", "b")):
    out = []
    for i in range(n_cases):
        for j, p in enumerate(perts):
            sig = j == 0 and i % 2 == 0
            out.append(
                {
                    "case": f"c{i}",
                    "perturbation": p,
                    "omega": 0.5,
                    "chance": 0.3,
                    "effect_above_chance": 0.2 + 0.01 * i if sig else -0.01,
                    "p_value": 0.001 if sig else 0.6,
                    "p_adjusted": 0.004 if sig else 0.8,
                    "significant": sig,
                    "stars": "**" if sig else "",
                }
            )
    return out


def test_colour_only_where_significant_and_hover_gives_p():
    t = suite_tests(4)
    cases, perts, cells = grid(t)
    assert cases == ["c0", "c1", "c2", "c3"] and perts == ["a", "b"] and len(cells) == 8
    fig = heatmap(t, selected=("c2", "a"), correction="bh")
    grey, colour = fig.data
    sig = [[not math.isnan(v) for v in row] for row in colour.z]
    assert sig == [[True, False], [False, False], [True, False], [False, False]]
    assert all(math.isnan(grey.z[i][j]) == sig[i][j] for i in range(4) for j in range(2))
    assert colour.z[2][0] == 0.22
    assert "p (raw) = 0.0010" in colour.customdata[0][0]
    assert "p (adj.) = 0.0040" in colour.customdata[0][0]
    assert "p (adj.) = 0.8000" in grey.customdata[1][1]
    assert "not detectable after the correction" in grey.customdata[1][1]
    assert len(fig.layout.shapes) == 1  # the selected cell
    assert "bh correction" in fig.layout.annotations[0].text


def test_a_large_suite_is_read_by_colour_and_tooltip():
    fig = heatmap(suite_tests(300))
    assert fig.data[0].text is None and fig.layout.height == 1400
    assert len(fig.data[1].y) == 300
