"""The calibrated quantile curve and its summaries (Iyengar, Lin & Wang, 2025), as exact step functions.

With pseudo-discrepancies ``Δ̂_1..Δ̂_m`` sorted as ``Δ_(1) <= ... <= Δ_(m)``:

* ``V̂_m(β) = inf {t : F̂_m(t) >= β} = Δ_(⌈β m⌉)`` — a left-continuous step function, equal
  to ``Δ_(i)`` for β in ((i - 1)/m, i/m];
* ``V̂_cal(τ) = V̂_m((1 + τ) / 2)`` for τ in [0, 1];
* ``AUC_cal = ∫₀¹ V̂_cal(τ) dτ = 2 ∫_{½}^{1} V̂_m(β) dβ`` and
  ``CVaR_α = (1/α) ∫_{1-α}^{1} V̂_cal(τ) dτ = (2/α) ∫_{1-α/2}^{1} V̂_m(β) dβ``, summed exactly
  over the steps (:func:`integral`);
* the guarantee: with probability at least 1 - η over the data, a new scenario has
  ``Δ <= V̂_m(1 - α/2)`` with probability at least ``1 - α - ε(α, m, η) / sqrt(m)``, where
  ``ℓ = log(2m/η)`` and ``ε = sqrt(2αℓ + (ℓ² + 4ℓ)/m) + (ℓ + 2)/sqrt(m) + sqrt(log(4/η)/2)``;
* two simulators: ``Û_m(1 - α/2) <= 0`` (the quantile of the pairwise δ̂) means the first
  is at least as good as the second on at least a 1 - α share of scenarios (up to the
  same ε term);
* the tightness band (γ >= ½): ``V̂⁻_m(γ τ) <= V(τ) <= V̂_m(γ + (1 - γ) τ)``, V̂⁻ the
  quantile function of the lower pseudo-discrepancies.

Examples
--------
>>> import numpy as np
>>> d = np.array([0.1, 0.4, 0.2, 0.3])
>>> float(quantile(d, 0.5)), float(quantile(d, 0.75)), float(quantile(d, 1.0))
(0.2, 0.3, 0.4)
>>> round(auc_cal(d), 6)      # V̂_cal is 0.3 on [0, 0.5] and 0.4 on (0.5, 1]
0.35
"""

from __future__ import annotations

import math
from typing import overload

import numpy as np
from numpy.typing import ArrayLike

from .._validate import big_number, check_level


def _values(values: ArrayLike, name: str = "values") -> np.ndarray:
    v = np.asarray(values, dtype=float).ravel()
    if v.size < 2:
        raise ValueError(f"`{name}` must hold at least 2 scenarios (m >= 2), got {v.size}.")
    if not np.all(np.isfinite(v)):
        raise ValueError(f"`{name}` must be finite numbers.")
    return v


def _rank(beta: ArrayLike, m: int) -> np.ndarray:
    """``⌈β m⌉`` as a 1-based rank in [1, m]; β a hair above an exact i/m (float noise) still
    gives rank i."""
    b = np.asarray(beta, dtype=float)
    k = np.ceil(np.round(b * m, 9))
    return np.clip(k, 1, m).astype(int)


@overload
def quantile(values: ArrayLike, beta: float) -> float: ...


@overload
def quantile(values: ArrayLike, beta: np.ndarray) -> np.ndarray: ...


def quantile(values: ArrayLike, beta: float | np.ndarray) -> float | np.ndarray:
    """``V̂_m(β) = Δ_(⌈β m⌉)``, the empirical β-quantile (β in [0, 1]; β = 0 gives the
    smallest value). ``beta`` may be an array."""
    v = np.sort(_values(values))
    b = np.asarray(beta, dtype=float)
    if np.any((b < 0) | (b > 1)) or not np.all(np.isfinite(b)):
        raise ValueError("`beta` must lie in [0, 1].")
    out = v[_rank(b, v.size) - 1]
    return float(out) if out.ndim == 0 else out


@overload
def calibrated(values: ArrayLike, tau: float) -> float: ...


@overload
def calibrated(values: ArrayLike, tau: np.ndarray) -> np.ndarray: ...


def calibrated(values: ArrayLike, tau: float | np.ndarray) -> float | np.ndarray:
    """``V̂_cal(τ) = V̂_m((1 + τ) / 2)`` for τ in [0, 1] (an array or a number)."""
    t = np.asarray(tau, dtype=float)
    if np.any((t < 0) | (t > 1)) or not np.all(np.isfinite(t)):
        raise ValueError("`tau` must lie in [0, 1].")
    return quantile(values, (1.0 + t) / 2.0 if t.ndim else float((1.0 + t) / 2.0))


def integral(values: ArrayLike, lo: float, hi: float) -> float:
    """``∫_lo^hi V̂_m(β) dβ`` exactly: ``Σ_i Δ_(i) · |((i-1)/m, i/m] ∩ [lo, hi]|``."""
    v = np.sort(_values(values))
    m = v.size
    if not 0.0 <= lo <= hi <= 1.0:
        raise ValueError(f"the limits must satisfy 0 <= lo <= hi <= 1, got ({lo}, {hi}).")
    i = np.arange(1, m + 1)
    left = np.clip((i - 1) / m, lo, hi)
    right = np.clip(i / m, lo, hi)
    return float(np.sum(v * (right - left)))


def auc_cal(values: ArrayLike) -> float:
    """``AUC_cal = ∫₀¹ V̂_cal(τ) dτ = 2 ∫_{½}^{1} V̂_m(β) dβ`` (exact)."""
    return 2.0 * integral(values, 0.5, 1.0)


def cvar(values: ArrayLike, alpha: float = 0.1) -> float:
    """``CVaR_α = (1/α) ∫_{1-α}^{1} V̂_cal(τ) dτ``: the mean of the calibrated curve over
    its worst α share (α = 0.1: the worst 10 %)."""
    a = check_level(alpha, "alpha")
    return 2.0 / a * integral(values, 1.0 - a / 2.0, 1.0)


def epsilon(alpha: float, m: int, eta: float) -> float:
    """``ε(α, m, η) = sqrt(2αℓ + (ℓ² + 4ℓ)/m) + (ℓ + 2)/sqrt(m) + sqrt(log(4/η)/2)``,
    ``ℓ = log(2m/η)``; ``m`` in [2, 10¹²] (:data:`MAX_SCENARIOS`)."""
    a = check_level(alpha, "alpha")
    e = check_level(eta, "eta")
    m = _check_m(m)
    ell = math.log(2 * m / e)
    return (
        math.sqrt(2 * a * ell + (ell * ell + 4 * ell) / m)
        + (ell + 2) / math.sqrt(m)
        + math.sqrt(math.log(4 / e) / 2)
    )


def guaranteed_level(alpha: float, m: int, eta: float) -> float:
    """``1 - α - ε(α, m, η) / sqrt(m)``: the share of new scenarios guaranteed (with
    probability 1 - η) to have ``Δ <= V̂_m(1 - α/2)``. Can be negative for small m."""
    return 1.0 - alpha - epsilon(alpha, m, eta) / math.sqrt(_check_m(m))


MAX_SCENARIOS = 10**12  # m: every scenario is a question answered by real respondents


def _check_m(m: object) -> int:
    """m in [2, :data:`MAX_SCENARIOS`] (no study asks more questions; beyond it ``2m/η``
    and ``ε`` would stop being exact floats long before)."""
    if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < 2:
        raise ValueError(f"`m` (the number of scenarios) must be a whole number >= 2, got {m!r}.")
    if m > MAX_SCENARIOS:
        raise ValueError(
            f"`m` (the number of scenarios) must be <= {MAX_SCENARIOS:.0e}, got {big_number(m)}: "
            "every scenario is a question real respondents answered, and the guarantee is "
            "already within 1e-5 of 1 - α there."
        )
    return int(m)


def band(
    lower_values: ArrayLike, upper_values: ArrayLike, gamma: float, tau: float | np.ndarray
) -> tuple[float | np.ndarray, float | np.ndarray]:
    """The tightness band at ``tau``: ``(V̂⁻_m(γ τ), V̂_m(γ + (1 - γ) τ))``.

    For γ >= ½ the curve of the real discrepancies lies between the two (asymptotically).
    """
    g = check_level(gamma, "gamma")
    t = np.asarray(tau, dtype=float)
    return quantile(lower_values, g * t), quantile(upper_values, g + (1 - g) * t)


def steps(values: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """The step function V̂_cal as ``(tau_right, value)``: ``V̂_cal(τ) = value[k]`` for τ in
    ``(tau_right[k-1], tau_right[k]]`` (``tau_right[-1] = 1``; the first step includes 0)."""
    v = np.sort(_values(values))
    m = v.size
    first = int(_rank(0.5, m))  # V̂_cal(0) = Δ_(⌈m/2⌉)
    i = np.arange(first, m + 1)
    return np.clip(2.0 * i / m - 1.0, 0.0, 1.0), v[i - 1]


__all__ = [
    "auc_cal",
    "band",
    "calibrated",
    "cvar",
    "epsilon",
    "guaranteed_level",
    "integral",
    "quantile",
    "steps",
]
