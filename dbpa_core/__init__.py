"""dbpa_core: statistical auditing of LLM robustness.

Distribution-based perturbation analysis (DBPA): sample k responses per prompt,
embed them, and test whether a perturbation changes the response distribution
beyond the model's own sampling noise.
"""
from .measures import MEASURES, get_measure
from .multitest import adjust_pvalues, multiple_testing, significance_stars
from .permutation import DBPAWarning, dbpa_test, dbpa_test_similarity
from .power import power_simulation, sample_size
from .roc import best_model_at_fpr, roc_over_alpha
from .similarity import cosine_similarity_matrix, text_similarity_matrix
from .types import DBPAResult, MultipleTestingResult, PowerResult, ROCResult

__version__ = "0.1.0"

__all__ = [
    "MEASURES", "DBPAResult", "DBPAWarning", "MultipleTestingResult", "PowerResult",
    "ROCResult", "adjust_pvalues", "best_model_at_fpr", "cosine_similarity_matrix",
    "dbpa_test", "dbpa_test_similarity", "get_measure", "multiple_testing",
    "power_simulation", "roc_over_alpha", "sample_size", "significance_stars",
    "text_similarity_matrix",
]
