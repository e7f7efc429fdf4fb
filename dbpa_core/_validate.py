"""Shared argument checks: messages that name the argument (scipy's ``_iv`` style)."""

from __future__ import annotations

import csv
import math
import numbers
import os
import re
from collections.abc import Iterator

import numpy as np


def real_array(x: object, name: str, expected: str) -> np.ndarray:
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
        if any(isinstance(v, (bool, np.bool_, complex, np.complexfloating)) or v is None for v in flat):
            raise TypeError(f"`{name}` must be {expected}, got {type(flat[0]).__name__} values.")
    elif kind not in "iuf":
        raise TypeError(f"`{name}` must be {expected}, got {arr.dtype} values.")
    try:
        return arr.astype(np.float64)
    except (TypeError, ValueError, OverflowError) as exc:
        raise TypeError(f"`{name}` must be {expected}.") from exc


def check_int(value: object, name: str, minimum: int, maximum: int | None = None, why: str = "") -> int:
    """``value`` as an int in ``[minimum, maximum]``, or an error naming ``name``: TypeError
    for a bool, a float or text; ValueError for a value out of range, with ``why`` (the
    reason for the upper bound, e.g. the memory it would take) after the bound."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"`{name}` must be an integer, got {type(value).__name__}.")
    if value < minimum:
        raise ValueError(f"`{name}` must be >= {minimum}, got {value}.")
    if maximum is not None and value > maximum:
        got = big_number(value)
        reason = f": {why}" if why else ""
        raise ValueError(f"`{name}` must be <= {maximum:_}, got {got}{reason}.")
    return int(value)


def big_number(value: int | np.integer) -> str:
    """A whole number in words for a message: ``1_000_000``, or ``about 1e400`` when it
    is too long to read (or to convert to a float)."""
    return f"{value:_}" if value < 10**30 else f"about 1e{len(str(int(value))) - 1}"


def size_words(n_bytes: float) -> str:
    """A byte count in words: '240 MB', '3.2 GB', '2.4e+05 GB'."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n_bytes >= size:
            v = n_bytes / size
            return f"{v:.0f} {unit}" if v >= 10 and unit != "GB" else f"{v:.2g} {unit}"
    return f"{int(n_bytes)} bytes"


# --------------------------------------------------------------------------- work of a test
MAX_EXACT_SPLITS = 1_000_000  # all C(k+m, k) splits are enumerated up to this many
MAX_WORK = 10**10  # pair visits of one permutation test: about two minutes of one core


def pair_visits(k: int, m: int, n_permutations: int, bins: int = 0) -> int:
    """Steps one permutation test of k against m responses takes, in pair visits, known
    before any work: the splits it evaluates (all ``C(k+m, k)`` when they are at most
    ``min(B, MAX_EXACT_SPLITS)``, else B, plus the observed one) times the pairs one split
    visits at most (``n²/2``, n = k + m) plus ``bins`` (jsd's histogram; 0 otherwise)."""
    n = k + m
    n_splits = math.comb(n, k)
    splits = n_splits if n_splits <= min(n_permutations, MAX_EXACT_SPLITS) else n_permutations
    return (splits + 1) * (n * n // 2 + bins)


def check_level(value: object, name: str) -> float:
    """A level in (0, 1) such as ``alpha``: any real number type (numpy included),
    not a bool, finite."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"`{name}` must be a number in (0, 1), got {type(value).__name__}.")
    v = float(value)
    if not (math.isfinite(v) and 0.0 < v < 1.0):
        raise ValueError(f"`{name}` must lie in (0, 1), got {value!r}.")
    return v


# --------------------------------------------------------------------------- text
# A lone UTF-16 surrogate (U+D800..U+DFFF): JSON's "\ud800" escape or Python's surrogateescape
# make one, but it is not a character and cannot be written as UTF-8. Valid pairs are
# already one code point in a Python str, so any code point in this range is a lone half.
_SURROGATE = re.compile("[\ud800-\udfff]")
REPLACEMENT = "\ufffd"


def valid_unicode(text: str) -> tuple[str, int]:
    """``text`` with every lone surrogate replaced by U+FFFD (�), and how many were.

    The one rule for text that is not valid Unicode wherever it enters: recorded text
    (a server's answer, a replay or imported file) is kept with the bad characters
    replaced and the count said in a warning; it is never stored as it is (it cannot be
    written as UTF-8) nor dropped.
    """
    return _SURROGATE.subn(REPLACEMENT, text)


def first_surrogate(text: str) -> str | None:
    """The first lone surrogate of ``text`` as an escape (``\\ud800``), or None."""
    m = _SURROGATE.search(text)
    return None if m is None else f"\\u{ord(m.group()):04x}"


# --------------------------------------------------------------------------- files
def file_problem(path: str | os.PathLike) -> str | None:
    """Why ``path`` cannot be read as a file, in words (None when it is a regular file):
    "no such file", "is a folder, not a file", or "is not a regular file (a device, a
    pipe or a socket)" — checked before it is opened, so a FIFO never blocks a read and
    /dev/zero is never read without end."""
    import os
    import stat

    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "no such file"
    except NotADirectoryError:
        return "no such file (a part of the path is a file, not a folder)"
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    if stat.S_ISDIR(mode):
        return "is a folder, not a file"
    if not stat.S_ISREG(mode):
        return "is not a regular file (a device, a pipe or a socket)"
    return None


def csv_header(
    reader: Iterator[list[str]],
    source: str,
    error: type[Exception],
    *,
    empty: str = "the file is empty",
    bad: str = "{source}, line 1: {exc}",
) -> list[str]:
    """The first row of a ``csv.reader``, or ``error`` in one line: ``{source}: {empty}`` for
    an empty file, ``bad`` (formatted with ``source`` and ``exc``) for one that is no CSV."""
    try:
        return next(reader)
    except StopIteration:
        raise error(f"{source}: {empty}") from None
    except csv.Error as exc:
        raise error(bad.format(source=source, exc=exc)) from None
