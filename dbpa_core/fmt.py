"""How dbpa writes a p-value, the size of a change and a text table, the same way
everywhere: the command line (``dbpa audit``, ``dbpa history``), the dashboard and its reports.

>>> fmt_p(0.0123), fmt_p(0.0009995), fmt_p(0.00004)
('0.0123', '< 0.001', '< 0.0001')
>>> size_word(0.62)
'moderate'
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .audit import PerturbationResult

P_THRESHOLDS = (0.1, 0.05, 0.01, 0.001)  # the stars' and the usual α's

# How large a change is, in words: Cohen's d of the similarities (see size_d), against
# Cohen's (1988) anchors for a standardized mean difference.
SIZE_ANCHORS = ((0.8, "large"), (0.5, "moderate"), (0.2, "small"))
SIZE_BELOW = "very small"


def fmt_p(p: float) -> str:
    """The one way dbpa writes a p-value: four decimals (``0.0123``), ``< 0.0001``
    below that (never ``0.0000``), and where four decimals would round p up onto a
    threshold it is below, the threshold with ``<`` (``0.0009995`` -> ``< 0.001``, next
    to ``***`` for p < .001; ``0.04996`` -> ``< 0.05``), never more digits."""
    if p is None or not math.isfinite(p):
        return "–"
    if p < 1e-4:
        return "< 0.0001"
    s = f"{p:.4f}"
    for t in P_THRESHOLDS:
        if p < t <= float(s):
            return f"< {t:g}"
    return s


def size_d(p: PerturbationResult) -> float | None:
    """How far the perturbed answers of a :class:`~dbpa_core.audit.PerturbationResult`
    moved, on one scale for every measure and embedder: Cohen's d of the similarities,
    ``(mean P0 - mean P1) / sd``, where P0 are the similarities of the base answers among
    themselves (the model's own noise), P1 those of base answers with perturbed ones, and
    sd the root of their mean variance. 0: the perturbed answers are as close to the base
    answers as these are to each other; 1: a typical base-perturbed pair is one standard
    deviation less similar. Unlike ω it has no upward bias at small k and the same meaning
    under every ω. None without similarities (e.g. a run whose detail could not be read)."""
    import numpy as np  # here, so that the command line starts without it

    p0 = np.asarray(p.test.null_similarities, float)
    p1 = np.asarray(p.test.alt_similarities, float)
    if p0.size < 2 or p1.size < 2:
        return None
    sd = float(np.sqrt((p0.var(ddof=1) + p1.var(ddof=1)) / 2))
    if not np.isfinite(sd) or sd <= 0:
        return None
    return float((p0.mean() - p1.mean()) / sd)


def fmt_pct(x: float) -> str:
    """A share as a percentage: whole when it is one (``0.9`` -> ``90 %``), else one
    decimal (``0.955`` -> ``95.5 %``)."""
    v = 100 * x
    return f"{v:.0f} %" if abs(v - round(v)) < 1e-9 else f"{v:.1f} %"


def size_word(d: float | None) -> str:
    """'large' (d >= 0.8), 'moderate' (>= 0.5), 'small' (>= 0.2), 'very small', or '' (no d)."""
    if d is None:
        return ""
    return next((w for t, w in SIZE_ANCHORS if d >= t), SIZE_BELOW)


def size_text(p: PerturbationResult) -> str:
    """'moderate, d = 0.62' (or '' without similarities)."""
    d = size_d(p)
    return "" if d is None else f"{size_word(d)}, d = {d:.2f}"


def size_cell(p: PerturbationResult) -> str:
    """'moderate (0.62)' for a detectable change; '(0.31)', no word, for one that is not
    (its size is not established: at k = 20 chance alone moves d by about ±0.2); '–'
    without similarities."""
    d = size_d(p)
    if d is None:
        return "–"
    return f"{size_word(d)} ({d:.2f})" if p.significant else f"({d:.2f})"


SIZE_LEGEND = (
    "size: Cohen's d of the similarities, in words for detectable changes (small "
    "from 0.2, moderate from 0.5, large from 0.8; in brackets alone where the "
    "change is not detectable). 'Detectably' means told apart from the model's own "
    "randomness (p_adj <= alpha): it says nothing about how large the change is."
)

_ALIGN = {"l": "left", "r": "right", "c": "center"}


def short(text: str, n: int) -> str:
    """``text`` on one line (runs of white space as one space), cut to ``n`` characters
    with an ellipsis."""
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def table(
    rows: Iterable[Sequence[object]],
    headers: Sequence[str],
    *,
    align: str | None = None,
    free_last: bool = False,
) -> str:
    """The one way dbpa prints a text table: the headers, a rule of dashes under each
    column, then the rows, in columns two spaces apart (``tabulate``'s "simple" format).
    Cells are shown as given (``str``), never re-read as numbers, so ``0.0010`` stays
    ``0.0010``; ``align`` has one letter per column, ``l``, ``r`` or ``c`` (default: all
    left). ``free_last``: the last column is free text (a sentence per row), its rule only
    as wide as its header. No line ends in spaces.

    >>> print(table([("a", "0.0010"), ("bb", "< 0.001")], ("name", "p"), align="lr"))
    name          p
    ------  -------
    a        0.0010
    bb      < 0.001
    """
    from tabulate import tabulate  # here, so that importing dbpa_core stays light

    colalign = None if align is None else tuple(_ALIGN[a] for a in align)
    text = tabulate(
        [[str(c) for c in r] for r in rows],
        headers=list(headers),
        tablefmt="simple",
        disable_numparse=True,
        stralign="left",
        colalign=colalign,
    )
    lines = [line.rstrip() for line in text.splitlines()]
    if free_last and headers and len(lines) > 1:
        rule = lines[1].rsplit("  ", 1)
        lines[1] = (rule[0] + "  " if len(rule) > 1 else "") + "-" * len(headers[-1])
    return "\n".join(lines)


__all__ = [
    "P_THRESHOLDS",
    "SIZE_ANCHORS",
    "SIZE_BELOW",
    "SIZE_LEGEND",
    "fmt_p",
    "fmt_pct",
    "short",
    "size_cell",
    "size_d",
    "size_text",
    "size_word",
    "table",
]
