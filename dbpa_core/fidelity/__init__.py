"""Simulator fidelity: calibrated quantile curves for LLMs that stand in for survey
respondents (Iyengar, Lin & Wang, 2025).

Per scenario (question) j, a confidence set C_j for the real answer distribution
(:mod:`.sets`), the worst case ``Δ̂_j = sup_{u in C_j} L(u, q̂_j)`` of the loss between it
and the simulator's distribution (:mod:`.discrepancy`), and the calibrated quantile curve
of the Δ̂_j with its finite-sample guarantee, AUC_cal, CVaR, the pairwise comparison and
the tightness band (:mod:`.curve`), and how many questions a verdict needs (:mod:`.plan`).
:func:`run_fidelity` does it all for every simulator
and the uniform baseline (:mod:`.analysis`); :mod:`.data` reads and writes the long CSV
and the OpinionQA layout; :mod:`.simulate` asks a model to answer as respondents.

Examples
--------
>>> from dbpa_core.fidelity import run_fidelity, sample_data
>>> result = run_fidelity(sample_data(), loss="tv", gamma=0.5, eta=0.05)
>>> [s.name for s in result.simulators][-1]
'uniform'
"""

from .analysis import (
    CVAR_ALPHA,
    Comparison,
    FidelityResult,
    FidelityWarning,
    SimulatorCurve,
    UnseenSet,
    run_fidelity,
)
from .curve import auc_cal, band, calibrated, cvar, epsilon, guaranteed_level, quantile
from .data import (
    UNIFORM,
    FidelityData,
    FidelityDataError,
    Scenario,
    from_arrays,
    load_csv,
    load_data,
    load_opinionqa,
    parse_csv,
)
from .discrepancy import LOSSES
from .plan import FidelityPlan, plan_study
from .sample import sample_data

__all__ = [
    "CVAR_ALPHA",
    "LOSSES",
    "UNIFORM",
    "Comparison",
    "FidelityData",
    "FidelityDataError",
    "FidelityPlan",
    "FidelityResult",
    "FidelityWarning",
    "Scenario",
    "SimulatorCurve",
    "UnseenSet",
    "auc_cal",
    "band",
    "calibrated",
    "cvar",
    "epsilon",
    "from_arrays",
    "guaranteed_level",
    "load_csv",
    "load_data",
    "load_opinionqa",
    "parse_csv",
    "plan_study",
    "quantile",
    "run_fidelity",
    "sample_data",
]
