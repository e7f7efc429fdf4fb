"""Frozen result and configuration types of the statistical engine.

Results carry everything a plot needs (P0, P1, the permutation statistics, the
histogram edges) so that callers never recompute statistics.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


def jsonable(value: Any) -> Any:
    """``value`` with numpy arrays and scalars turned into lists and Python numbers, tuples
    into lists (recursively through dicts and lists): what ``json.dumps`` can write."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (np.floating,)):
        return float(value)
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.bool_,)):
        return bool(value)
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
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
    null_similarities : ndarray, shape (k(k-1)/2,) or (k(k-1)/2 + m(m-1)/2,)
        P0: similarities among the base responses (with ``null="pooled"``, among
        the responses of each group).
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
        They span the whiskers of the pooled similarities; values beyond them
        are counted in the outer bins.
    chance_effect_size : float
        The mean of the permutation statistics T_b: the ω that chance alone gives
        at these k and m (ω has no fixed zero; for ``jsd`` it is about 0.6 at
        k = 5 and 0.2 at k = 20 under H0). 0 when every response is identical.
    effect_above_chance : float
        ``effect_size - chance_effect_size``: how much more the answers moved than
        chance alone moves them at this k (about 0 under H0, at any k).
    null : {"base", "pooled"}
        Where P0 came from: the base group only (the papers' asymmetric test) or
        both groups (symmetric in base and perturbed).
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
    null: str = "base"

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
            "null": self.null,
        }
        if arrays:
            d["null_similarities"] = self.null_similarities
            d["alt_similarities"] = self.alt_similarities
            d["permutation_statistics"] = self.permutation_statistics
            d["bin_edges"] = self.bin_edges
        return jsonable(d)


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
        return jsonable(
            {
                "alpha": self.alpha,
                "fpr": self.fpr,
                "tpr": self.tpr,
                "auc": self.auc,
                "n_control": self.n_control,
                "n_target": self.n_target,
            }
        )


@dataclass(frozen=True)
class PowerResult:
    """Simulated power of the DBPA test for several sample sizes.

    ``notes`` say what limits the numbers (a k where no p can reach α/M, data
    sets that overlap because k is close to the pilot size).
    """

    sample_sizes: np.ndarray
    power: np.ndarray
    n_simulations: int
    alpha: float
    measure: str
    method: str
    power_ci: np.ndarray = field(default_factory=lambda: np.empty((0, 2)))
    n_permutations: int = 0
    n_tests: int = 1
    null: str = "base"
    notes: tuple[str, ...] = ()

    def smallest_sample_size(self, target_power: float = 0.8) -> int | None:
        """Smallest simulated k whose power reaches ``target_power`` (None if none)."""
        hit = np.nonzero(self.power >= target_power)[0]
        return int(self.sample_sizes[hit[0]]) if hit.size else None


def _stars(p: float) -> str:
    return "***" if p < 0.001 else "**" if p < 0.01 else "*" if p < 0.05 else ""


@dataclass(frozen=True)
class Attainability:
    """What a planned run can show at best, known before sampling.

    ``smallest_p`` is the smallest p-value one test can return (``1 / (B+1)``,
    or ``1 / C(k+m, k)`` for an exact test); ``smallest_adjusted_p`` that p
    after the correction over ``n_tests``. ``min_samples`` is the smallest k
    (= m) that makes significance reachable (None when it already is), and
    ``min_permutations`` the smallest B whose ``1 / (B + 1)`` survives the
    correction at ``alpha``.
    """

    k: int
    m: int
    n_permutations: int
    n_tests: int
    correction: str
    alpha: float
    smallest_p: float
    smallest_adjusted_p: float
    min_samples: int | None = None
    min_permutations: int = 1
    exact: bool = False
    permutations_for_all_stars: int = 1000

    @property
    def reachable(self) -> bool:
        """Some result can be significant (adjusted p <= α)."""
        return self.smallest_adjusted_p <= self.alpha

    @property
    def best_stars(self) -> str:
        """The most stars any result can earn (``*`` < .05, ``**`` < .01, ``***`` < .001)."""
        return _stars(self.smallest_adjusted_p)

    @property
    def message(self) -> str | None:
        """A plain warning, or None when significance and every star are in reach."""
        corr = (
            f" and {self.correction} over {self.n_tests} tests"
            if self.correction != "none" and self.n_tests > 1
            else ""
        )
        plan = (
            f"k = {self.k}"
            + (f", m = {self.m}" if self.m != self.k else "")
            + f" responses per prompt, B = {self.n_permutations} permutations{corr}"
        )
        smallest = f"the smallest possible {'adjusted ' if corr else ''}p is {self.smallest_adjusted_p:.3g}"
        if not self.reachable:
            if self.min_samples is not None:
                how = f"Use at least k = {self.min_samples} responses per prompt."
            else:
                how = f"Use at least {self.min_permutations} permutations."
            return f"With {plan}, no result can be significant: {smallest}, above α = {self.alpha:g}. {how}"
        if self.best_stars != "***":
            if self.exact:  # every split is enumerated: only more responses help
                how = "More responses per prompt raise that ceiling."
            else:
                how = f"At least {self.permutations_for_all_stars} permutations make every star reachable."
            stars = f"at most '{self.best_stars}'" if self.best_stars else "no star"
            return f"With {plan}, {smallest}: {stars} can be reached. {how}"
        return None

    def to_dict(self) -> dict[str, Any]:
        return jsonable(
            {
                "k": self.k,
                "m": self.m,
                "n_permutations": self.n_permutations,
                "n_tests": self.n_tests,
                "correction": self.correction,
                "alpha": self.alpha,
                "smallest_p": self.smallest_p,
                "smallest_adjusted_p": self.smallest_adjusted_p,
                "reachable": self.reachable,
                "best_stars": self.best_stars,
                "min_samples": self.min_samples,
                "min_permutations": self.min_permutations,
                "exact": self.exact,
                "message": self.message,
            }
        )
