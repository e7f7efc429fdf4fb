"""The fidelity charts' axes: every curve and band stays in view (a flat curve at the top
of the range used to sit on the chart's upper edge, hard to see)."""

import warnings

import numpy as np

from dbpa_core.fidelity import from_arrays, run_fidelity
from dbpa_core.fidelity.sample import sample_data
from ui.fidelity_figures import curves_figure


def _top_of_traces(fig):
    return max(float(np.nanmax(np.asarray(t.y, dtype=float))) for t in fig.data if len(t.y))


def test_the_y_range_holds_every_curve_with_room_above():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for result in (
            run_fidelity(sample_data()),
            run_fidelity(from_arrays([[90, 60], [30, 70]], {"flat": [[5, 0], [5, 0]]})),
        ):
            fig = curves_figure(result, band="all")
            lo, hi = fig.layout.yaxis.range
            top = _top_of_traces(fig)
            assert lo == 0 and top < hi <= top * 1.1


def test_the_band_has_a_legend_entry_and_tau_is_marked():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = run_fidelity(sample_data())
    fig = curves_figure(result, band="sim-close")
    shown = [t.name for t in fig.data if t.showlegend is not False]
    assert "sim-close: tightness band" in shown
    assert any(a.text == "τ = 1 − α = 0.9" for a in fig.layout.annotations)
    none = curves_figure(result, band=None)
    assert not any("band" in (t.name or "") for t in none.data)


def test_demo_mode_names_what_it_offers_instead_of_the_embedded_model(monkeypatch):
    """Every listed model is a recording (the demo): the message must not send the user to
    'the embedded local one', which the demo does not list."""
    import ui.runner as runner
    from ui import fidelity as fid

    data = sample_data().select(["agree-01", "agree-02"]).without_simulators()
    settings = fid.simulation_settings(fid.DEFAULTS)
    replay = {"backend": "replay", "file": "/nonexistent/demo.jsonl", "label": "demo (recorded)"}
    monkeypatch.setattr(runner, "replay_lacking", lambda m, need: (list(need), None))
    msg = fid.replay_shortfall(data, [replay], settings, [replay])
    assert "embedded" not in msg
    assert "**Sample data** and **Upload a CSV** sources work here" in msg
    live = {"backend": "openai", "name": "m", "base_url": "http://127.0.0.1:1/v1", "label": "live"}
    msg = fid.replay_shortfall(data, [replay], settings, [replay, live])
    assert "choose a live model, such as **live**, to simulate" in msg
