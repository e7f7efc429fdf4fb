"""ROC over the significance level α for control vs target perturbations (the DBPA method).

Controls should not change the answer (a false positive when p < α), targets
should (a true positive when p < α). Sweeping α from 0 to 1 traces the curve;
the distinct p-values are its only breakpoints.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from numpy.typing import ArrayLike

from .multitest import check_pvalues
from .types import ROCResult


def _roc_core(control: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    thresholds = np.unique(np.concatenate([control, target]))
    if thresholds[-1] < 1.0:
        thresholds = np.append(thresholds, 1.0)
    c = np.sort(control)
    t = np.sort(target)
    fpr = np.searchsorted(c, thresholds, side="right") / c.size
    tpr = np.searchsorted(t, thresholds, side="right") / t.size
    alpha = np.concatenate([[0.0], thresholds])
    fpr = np.concatenate([[0.0], fpr])
    tpr = np.concatenate([[0.0], tpr])
    return alpha, fpr, tpr


def roc_over_alpha(control_pvalues: ArrayLike, target_pvalues: ArrayLike) -> ROCResult:
    """ROC curve of "reject when p < α" over α in [0, 1], with its AUC.

    Parameters
    ----------
    control_pvalues : array_like, shape (n_control,)
        p-values of perturbations that should not change the answer.
    target_pvalues : array_like, shape (n_target,)
        p-values of perturbations that should.

    Returns
    -------
    ROCResult
        ``alpha``, ``fpr``, ``tpr`` (from (0, 0) to (1, 1)) and
        ``auc = ∫ TPR dFPR`` (trapezoids), which equals
        ``P(p_target < p_control) + ½ P(p_target = p_control)``.

    Examples
    --------
    >>> roc_over_alpha([0.5, 0.9], [0.001, 0.2]).auc
    1.0
    """
    control = check_pvalues(control_pvalues, "control_pvalues")
    target = check_pvalues(target_pvalues, "target_pvalues")
    if control.size == 0:
        raise ValueError("`control_pvalues` is empty: mark at least one perturbation as control.")
    if target.size == 0:
        raise ValueError("`target_pvalues` is empty: mark at least one perturbation as target.")
    alpha, fpr, tpr = _roc_core(control, target)
    auc = float(np.sum(np.diff(fpr) * (tpr[1:] + tpr[:-1]) / 2.0))
    return ROCResult(alpha, fpr, tpr, auc, int(control.size), int(target.size))


def best_model_at_fpr(rocs: Mapping[str, ROCResult], max_fpr: float) -> tuple[str, float]:
    """The model whose TPR is highest at an allowed FPR, and that TPR.

    Ties go to the model with the larger AUC, then to the first listed.

    Parameters
    ----------
    rocs : Mapping[str, ROCResult]
        Each model's :func:`roc_over_alpha` result, by model name.
    max_fpr : float
        The allowed false-positive rate, in [0, 1].
    """
    if not isinstance(rocs, Mapping):
        raise TypeError(f"`rocs` must be a mapping of model name -> ROCResult, got {type(rocs).__name__}.")
    if not rocs:
        raise ValueError("`rocs` is empty: give at least one model's ROCResult.")
    for name, roc in rocs.items():
        if not isinstance(roc, ROCResult):
            raise TypeError(
                f"`rocs[{name!r}]` must be a ROCResult (from roc_over_alpha), got {type(roc).__name__}."
            )
    if isinstance(max_fpr, (bool, np.bool_)) or not isinstance(
        max_fpr, (int, float, np.floating, np.integer)
    ):
        raise TypeError(f"`max_fpr` must be a number in [0, 1], got {type(max_fpr).__name__}.")
    if not 0.0 <= float(max_fpr) <= 1.0:  # NaN fails too
        raise ValueError(f"`max_fpr` must lie in [0, 1], got {max_fpr!r}.")
    best = max(rocs.items(), key=lambda kv: (kv[1].tpr_at_fpr(max_fpr), kv[1].auc))
    return best[0], best[1].tpr_at_fpr(max_fpr)
