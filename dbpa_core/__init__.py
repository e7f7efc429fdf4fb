"""dbpa_core: statistical auditing of LLM robustness.

Distribution-based perturbation analysis (DBPA): sample k responses per prompt,
embed them, and test whether a perturbation changes the response distribution
beyond the model's own sampling noise.
"""
from .measures import DEFAULT_MEASURE, MEASURES, get_measure
from .multitest import adjust_pvalues, multiple_testing, significance_stars, smallest_adjusted_p
from .permutation import DBPAWarning, dbpa_test, dbpa_test_similarity, smallest_p_value
from .power import PlanningWarning, attainable_significance, power_simulation, sample_size
from .roc import best_model_at_fpr, roc_over_alpha
from .similarity import cosine_similarity_matrix, text_similarity_matrix
from .types import Attainability, DBPAResult, MultipleTestingResult, PowerResult, ROCResult

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_MEASURE", "MEASURES", "Attainability", "DBPAResult", "DBPAWarning",
    "MultipleTestingResult", "PlanningWarning", "PowerResult", "ROCResult", "adjust_pvalues",
    "attainable_significance", "best_model_at_fpr", "cosine_similarity_matrix", "dbpa_test",
    "dbpa_test_similarity", "get_measure", "multiple_testing", "power_simulation",
    "roc_over_alpha", "sample_size", "significance_stars", "smallest_adjusted_p",
    "smallest_p_value", "text_similarity_matrix",
]
