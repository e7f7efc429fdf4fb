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
        for result in (run_fidelity(sample_data()),
                       run_fidelity(from_arrays([[90, 60], [30, 70]],
                                                {"flat": [[5, 0], [5, 0]]}))):
            fig = curves_figure(result, band="all")
            lo, hi = fig.layout.yaxis.range
            top = _top_of_traces(fig)
            assert lo == 0 and top < hi <= top * 1.1
