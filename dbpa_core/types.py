"""Frozen result and configuration types of the statistical engine.

Results carry everything a plot needs (P0, P1, the permutation statistics, the
histogram edges) so that callers never recompute statistics.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (np.floating,)):
        return float(value)
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.bool_,)):
        return bool(value)
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


@dataclass(frozen=True)
class DBPAResult:
    """Outcome of one distribution-based perturbation test.

    Attributes
    ----------
    effect_size : float
        ω = T_obs, the chosen discrepancy between P0 and P1 (>= 0).
    p_value : float
        Permutation p-value, ``(1 + #{T_b >= T_obs}) / (1 + B)`` for a random
        test, ``#{T_b >= T_obs} / C(k+m, k)`` for an exact one; never 0.
    null_similarities : ndarray, shape (k(k-1)/2,)
        P0: similarities among the base responses.
    alt_similarities : ndarray, shape (k*m,)
        P1: similarities between base and perturbed responses.
    permutation_statistics : ndarray, shape (n_permutations,)
        The statistics T_b of the permuted data sets, in the order drawn.
    measure : str
        Name of ω in :data:`dbpa_core.measures.MEASURES`.
    k, m : int
        Number of base and perturbed responses.
    n_permutations : int
        Number of permutations actually evaluated (fewer than asked when the
        test stopped early or was exact).
    exact : bool
        True when all C(k+m, k) splits were enumerated.
    stopped_early : bool
        True when Besag–Clifford sequential stopping ended the test.
    bin_edges : ndarray or None
        Histogram edges shared by P0 and P1 (for ``jsd``; useful for plots).
    chance_effect_size : float
        The mean of the permutation statistics T_b: the ω that chance alone gives
        at these k and m (ω has no fixed zero; for ``jsd`` it is about 0.6 at
        k = 5 and 0.2 at k = 20 under H0). 0 when every response is identical.
    effect_above_chance : float
        ``effect_size - chance_effect_size``: how much more the answers moved than
        chance alone moves them at this k (about 0 under H0, at any k).
    """

    effect_size: float
    p_value: float
    null_similarities: np.ndarray
    alt_similarities: np.ndarray
    permutation_statistics: np.ndarray
    measure: str
    k: int
    m: int
    n_permutations: int
    exact: bool = False
    stopped_early: bool = False
    bin_edges: np.ndarray | None = None
    chance_effect_size: float = 0.0

    @property
    def effect_above_chance(self) -> float:
        return self.effect_size - self.chance_effect_size

    @property
    def statistic(self) -> float:
        """Alias of :attr:`effect_size` (scipy's name)."""
        return self.effect_size

    @property
    def pvalue(self) -> float:
        """Alias of :attr:`p_value` (scipy's name)."""
        return self.p_value

    def to_dict(self, *, arrays: bool = True) -> dict[str, Any]:
        """A JSON-ready dict; ``arrays=False`` leaves out the long arrays."""
        d = {
            "effect_size": self.effect_size,
            "chance_effect_size": self.chance_effect_size,
            "effect_above_chance": self.effect_above_chance,
            "p_value": self.p_value,
            "measure": self.measure,
            "k": self.k,
            "m": self.m,
            "n_permutations": self.n_permutations,
            "exact": self.exact,
            "stopped_early": self.stopped_early,
        }
        if arrays:
            d["null_similarities"] = self.null_similarities
            d["alt_similarities"] = self.alt_similarities
            d["permutation_statistics"] = self.permutation_statistics
            d["bin_edges"] = self.bin_edges
        return _jsonable(d)


@dataclass(frozen=True)
class MultipleTestingResult:
    """Adjusted p-values of one family of tests.

    ``reject == (p_adjusted <= alpha)`` holds element-wise.
    """

    p_values: np.ndarray
    p_adjusted: np.ndarray
    reject: np.ndarray
    stars: tuple[str, ...]
    method: str
    alpha: float


@dataclass(frozen=True)
class ROCResult:
    """ROC curve over the significance level α (control vs target p-values).

    Point ``i`` holds the rates of the rule "reject when p <= alpha[i]"
    (equivalently "p < α" for any α just above ``alpha[i]``). The first point is
    (0, 0) at α = 0 and the last is (1, 1) at α = 1.
    """

    alpha: np.ndarray
    fpr: np.ndarray
    tpr: np.ndarray
    auc: float
    n_control: int
    n_target: int

    def tpr_at_fpr(self, max_fpr: float) -> float:
        """Highest TPR reached by a threshold whose FPR is at most ``max_fpr``."""
        if not 0.0 <= max_fpr <= 1.0:
            raise ValueError(f"`max_fpr` must lie in [0, 1], got {max_fpr!r}.")
        ok = self.fpr <= max_fpr + 1e-12
        return float(self.tpr[ok].max())

    def alpha_at_fpr(self, max_fpr: float) -> float:
        """Largest α threshold whose FPR is at most ``max_fpr``."""
        if not 0.0 <= max_fpr <= 1.0:
            raise ValueError(f"`max_fpr` must lie in [0, 1], got {max_fpr!r}.")
        ok = self.fpr <= max_fpr + 1e-12
        return float(self.alpha[ok].max())

    def to_dict(self) -> dict[str, Any]:
        return _jsonable({
            "alpha": self.alpha, "fpr": self.fpr, "tpr": self.tpr, "auc": self.auc,
            "n_control": self.n_control, "n_target": self.n_target,
        })


@dataclass(frozen=True)
class PowerResult:
    """Simulated power of the DBPA test for several sample sizes."""

    sample_sizes: np.ndarray
    power: np.ndarray
    n_simulations: int
    alpha: float
    measure: str
    method: str
    power_ci: np.ndarray = field(default_factory=lambda: np.empty((0, 2)))

    def smallest_sample_size(self, target_power: float = 0.8) -> int | None:
        """Smallest simulated k whose power reaches ``target_power`` (None if none)."""
        hit = np.nonzero(self.power >= target_power)[0]
        return int(self.sample_sizes[hit[0]]) if hit.size else None
