"""Shared argument checks: messages that name the argument (scipy's ``_iv`` style)."""
from __future__ import annotations

import math
import numbers

import numpy as np


def real_array(x, name: str, expected: str) -> np.ndarray:
    """``x`` as a float64 array, or TypeError naming ``name``: None, booleans, complex
    numbers, text and ragged nesting are refused rather than silently converted
    (``np.asarray(None, float)`` is NaN; complex values would lose their imaginary
    part; booleans would become 0 and 1)."""
    if x is None:
        raise TypeError(f"`{name}` must be {expected}, got None.")
    try:
        arr = np.asarray(x)
    except (TypeError, ValueError) as exc:  # ragged nesting
        raise TypeError(f"`{name}` must be {expected}.") from exc
    kind = arr.dtype.kind
    if kind == "b":
        raise TypeError(f"`{name}` must be {expected}, got booleans.")
    if kind == "c":
        raise TypeError(f"`{name}` must be {expected}, got complex numbers.")
    if kind == "O":
        flat = arr.ravel()
        if any(isinstance(v, (bool, np.bool_, complex, np.complexfloating)) or v is None
               for v in flat):
            raise TypeError(f"`{name}` must be {expected}, got {type(flat[0]).__name__} values.")
    elif kind not in "iuf":
        raise TypeError(f"`{name}` must be {expected}, got {arr.dtype} values.")
    try:
        return arr.astype(np.float64)
    except (TypeError, ValueError, OverflowError) as exc:
        raise TypeError(f"`{name}` must be {expected}.") from exc


def check_level(value, name: str) -> float:
    """A level in (0, 1) such as ``alpha``: any real number type (numpy included),
    not a bool, finite."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"`{name}` must be a number in (0, 1), got {type(value).__name__}.")
    v = float(value)
    if not (math.isfinite(v) and 0.0 < v < 1.0):
        raise ValueError(f"`{name}` must lie in (0, 1), got {value!r}.")
    return v
