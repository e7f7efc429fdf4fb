"""Confidence intervals for a proportion, shared by the answer checks and the robustness
battery (one implementation, one behaviour at n = 0).

Wilson's score interval for ``x`` successes in ``n`` trials at confidence ``1 - a``, with
``z`` the ``1 - a/2`` normal quantile and ``p = x / n``::

    centre = (p + z²/(2n)) / (1 + z²/n)
    half   = z / (1 + z²/n) · sqrt(p(1 - p)/n + z²/(4n²))

clipped to [0, 1]. It never leaves [0, 1] and is not empty at x = 0 or x = n (where the
normal interval collapses). With no trial (n = 0) there is no interval: (NaN, NaN).

Reference: E. B. Wilson, Probable inference, the law of succession, and statistical
inference, JASA 22 (1927).

Examples
--------
>>> lo, hi = wilson_interval(18, 20)
>>> round(lo, 3), round(hi, 3)
(0.699, 0.972)
"""

from __future__ import annotations

import math

from scipy import stats

from ._validate import big_number

CONFIDENCE = 0.95
MAX_COUNT = 2**53  # trials counted: floats hold every whole number up to here exactly


def wilson_interval(x: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Wilson's score interval of the proportion ``x / n`` (NaN, NaN when ``n == 0``);
    raises ValueError naming the argument for ``x`` outside [0, n] or a confidence
    outside (0, 1), and for ``n`` above 2⁵³ (:data:`MAX_COUNT`: larger counts are not
    exact as floats)."""
    if n > MAX_COUNT:
        raise ValueError(
            f"`n` must be <= {MAX_COUNT:_}, got {big_number(n)}: larger counts are not exact as floats."
        )
    if n < 0 or not 0 <= x <= max(n, 0):
        raise ValueError(f"`x` must lie in [0, n]; got x={x}, n={n}.")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"`confidence` must lie in (0, 1), got {confidence!r}.")
    if n == 0:
        return float("nan"), float("nan")
    z = float(stats.norm.ppf(0.5 + confidence / 2))
    p = x / n
    den = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return max(0.0, centre - half), min(1.0, centre + half)


__all__ = ["CONFIDENCE", "MAX_COUNT", "wilson_interval"]
