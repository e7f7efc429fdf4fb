"""Pairwise similarity matrices.

Cosine similarity of embeddings (rows are normalized; zero rows are an error),
and text similarities that need no embedder: BLEU (sacrebleu) and ROUGE-1/2/L
(rouge-score). Every matrix returned is symmetric with ones on the diagonal, so
that it can be handed to :func:`dbpa_core.dbpa_test_similarity`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

from ._validate import real_array, size_words

TEXT_SIMILARITIES = ("bleu", "rouge1", "rouge2", "rougeL")


MAX_ROWS = 20_000  # rows of a similarity matrix: it takes 8 n² bytes (3.2 GB here)
MAX_TEXTS = 2_000  # texts compared pairwise by BLEU/ROUGE: n²/2 scorings in Python (minutes here)
MAX_ABS_ENTRY = 1e150  # larger entries overflow the squares of norms and distances
MIN_ROW_SCALE = 1e-150  # a row whose largest entry is smaller underflows to a zero norm


def check_embeddings(x: ArrayLike, name: str) -> np.ndarray:
    """Validate one group of embeddings and return it as a float64 (n, d) array.

    Refused, with a message naming ``name``: anything but real numbers (booleans
    and complex numbers included), NaN or infinite entries, zero rows, and
    magnitudes whose squares overflow or underflow float64 (rescale such
    embeddings: cosine similarity does not change)."""
    arr = real_array(x, name, "a 2-D array of numbers (one row per response)")
    if arr.ndim != 2:
        raise ValueError(
            f"`{name}` must be a 2-D array of shape (n_responses, dim), got {arr.ndim}-D "
            f"with shape {arr.shape}."
        )
    if arr.shape[1] < 1:
        raise ValueError(f"`{name}` has embeddings of width 0.")
    if not np.all(np.isfinite(arr)):
        bad = int(np.argwhere(~np.isfinite(arr))[0][0])
        raise ValueError(f"`{name}` contains NaN or infinite values (first in row {bad}).")
    scale = np.abs(arr).max(axis=1) if arr.shape[0] else np.zeros(0)
    if np.any(scale == 0):
        bad = int(np.nonzero(scale == 0)[0][0])
        raise ValueError(f"`{name}` contains a zero vector (row {bad}); it has no direction.")
    if np.any(scale > MAX_ABS_ENTRY):
        bad = int(np.argmax(scale))
        raise ValueError(
            f"`{name}` has entries as large as {scale[bad]:.3g} (row {bad}): their "
            "squares overflow; rescale the embeddings (cosine similarity does not change)."
        )
    if np.any(scale < MIN_ROW_SCALE):
        bad = int(np.argmin(scale))
        raise ValueError(
            f"`{name}` row {bad} has no entry larger than {scale[bad]:.3g}: its norm "
            "underflows; rescale the embeddings (cosine similarity does not change)."
        )
    return arr


def normalize_rows(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm."""
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def cosine_similarity_matrix(x: ArrayLike, y: ArrayLike | None = None) -> np.ndarray:
    """Cosine similarities between the rows of ``x`` (and ``y``).

    Parameters
    ----------
    x : array_like, shape (n, d)
    y : array_like, shape (p, d), optional
        Defaults to ``x``.

    Returns
    -------
    ndarray, shape (n, p)
        ``S[i, j] = <x_i, y_j> / (|x_i| |y_j|)``, clipped to [-1, 1]. At most
        ``20_000 x 20_000`` entries (:data:`MAX_ROWS`; 3.2 GB): larger is refused.

    Examples
    --------
    >>> cosine_similarity_matrix([[1, 0], [1, 1]]).round(3)
    array([[1.   , 0.707],
           [0.707, 1.   ]])
    """
    xn = normalize_rows(check_embeddings(x, "x"))
    rows = xn.shape[0] if y is None else None
    if rows is not None and rows > MAX_ROWS:
        raise ValueError(
            f"`x` must have at most {MAX_ROWS:_} rows, got {rows:_}: the {rows:_} x {rows:_} "
            f"matrix would take {size_words(8.0 * rows * rows)}."
        )
    if y is None:
        s = xn @ xn.T
        np.fill_diagonal(s, 1.0)
    else:
        yn = normalize_rows(check_embeddings(y, "y"))
        if yn.shape[1] != xn.shape[1]:
            raise ValueError(
                f"`x` and `y` have embeddings of different widths ({xn.shape[1]} vs {yn.shape[1]})."
            )
        if xn.shape[0] * yn.shape[0] > MAX_ROWS * MAX_ROWS:
            raise ValueError(
                f"`x` and `y` have {xn.shape[0]:_} and {yn.shape[0]:_} rows: the matrix would take "
                f"{size_words(8.0 * xn.shape[0] * yn.shape[0])}, over the "
                f"{size_words(8.0 * MAX_ROWS * MAX_ROWS)} of a {MAX_ROWS:_} x {MAX_ROWS:_} one."
            )
        s = xn @ yn.T
    return np.clip(s, -1.0, 1.0)


def pairwise_distance_matrix(x: np.ndarray, metric: str) -> np.ndarray:
    """Pairwise distances between the rows of ``x``: ``cosine`` (1 - cos), ``l1`` or ``l2``."""
    if metric == "cosine":
        return np.maximum(1.0 - cosine_similarity_matrix(x), 0.0)
    if metric in ("l1", "l2"):
        from scipy.spatial.distance import pdist, squareform

        # pdist subtracts coordinates directly: no cancellation for close rows
        return squareform(pdist(x, "cityblock" if metric == "l1" else "euclidean"))
    raise ValueError(f"`metric` must be in {{'cosine', 'l1', 'l2'}}, got {metric!r}.")


def _check_texts(texts: Sequence[str]) -> list[str]:
    if isinstance(texts, str) or not isinstance(texts, Sequence):
        raise TypeError("`texts` must be a list of strings (one per response).")
    out = list(texts)
    for i, t in enumerate(out):
        if not isinstance(t, str):
            raise TypeError(f"`texts[{i}]` is {type(t).__name__}, not a string.")
    return out


def text_similarity_matrix(texts: Sequence[str], kind: str = "rougeL") -> np.ndarray:
    """Pairwise text similarity in [0, 1] between responses, no embedder needed.

    Parameters
    ----------
    texts : list of str, length n
        At most 2_000 (:data:`MAX_TEXTS`): every pair is scored in Python, n²/2
        scorings (two million there, minutes).
    kind : {"bleu", "rouge1", "rouge2", "rougeL"}
        ``bleu`` is sacrebleu's sentence BLEU / 100, averaged over both directions
        (BLEU is not symmetric); ``rouge*`` is the ROUGE F-measure (symmetric).

    Returns
    -------
    ndarray, shape (n, n)
        Symmetric, ones on the diagonal.
    """
    texts = _check_texts(texts)
    if len(texts) > MAX_TEXTS:
        raise ValueError(
            f"`texts` must hold at most {MAX_TEXTS:_} texts, got {len(texts):_}: every pair is "
            f"scored one by one ({len(texts) * (len(texts) - 1) // 2:_} scorings here); compare "
            "fewer answers, or embed them (an embedder scales to more)."
        )
    if kind not in TEXT_SIMILARITIES:
        raise ValueError(f"`kind` must be in {set(TEXT_SIMILARITIES)}, got {kind!r}.")
    n = len(texts)
    s = np.eye(n)
    if kind == "bleu":
        from sacrebleu.metrics import BLEU

        bleu = BLEU(effective_order=True)
        for i in range(n):
            for j in range(i + 1, n):
                a = bleu.sentence_score(texts[i], [texts[j]]).score / 100.0
                b = bleu.sentence_score(texts[j], [texts[i]]).score / 100.0
                s[i, j] = s[j, i] = 0.5 * (a + b)
    else:
        from rouge_score import rouge_scorer

        scorer = rouge_scorer.RougeScorer([kind], use_stemmer=False)
        for i in range(n):
            for j in range(i + 1, n):
                s[i, j] = s[j, i] = scorer.score(texts[i], texts[j])[kind].fmeasure
    return s
