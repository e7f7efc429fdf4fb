"""dbpa_core: statistical auditing of LLM robustness.

Distribution-based perturbation analysis (DBPA): sample k responses per prompt,
embed them, and test whether a perturbation changes the response distribution
beyond the model's own sampling noise.

The names below are imported on first use (PEP 562), so that a command which needs
none of the statistics (``dbpa fidelity``, ``dbpa history``, ``dbpa --help``) does not
pay for loading numba and scipy.stats.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_WHERE = {
    "DEFAULT_MEASURE": "measures",
    "MEASURES": "measures",
    "get_measure": "measures",
    "adjust_pvalues": "multitest",
    "multiple_testing": "multitest",
    "significance_stars": "multitest",
    "smallest_adjusted_p": "multitest",
    "DBPAWarning": "permutation",
    "dbpa_test": "permutation",
    "dbpa_test_similarity": "permutation",
    "smallest_p_value": "permutation",
    "PlanningWarning": "power",
    "attainable_significance": "power",
    "power_simulation": "power",
    "sample_size": "power",
    "best_model_at_fpr": "roc",
    "roc_over_alpha": "roc",
    "cosine_similarity_matrix": "similarity",
    "text_similarity_matrix": "similarity",
    "Attainability": "types",
    "DBPAResult": "types",
    "MultipleTestingResult": "types",
    "PowerResult": "types",
    "ROCResult": "types",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'dbpa_core' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])


if TYPE_CHECKING:  # for type checkers and editors: the names as plain imports
    from .measures import DEFAULT_MEASURE, MEASURES, get_measure  # noqa: F401
    from .multitest import (  # noqa: F401
        adjust_pvalues,
        multiple_testing,
        significance_stars,
        smallest_adjusted_p,
    )
    from .permutation import (  # noqa: F401
        DBPAWarning,
        dbpa_test,
        dbpa_test_similarity,
        smallest_p_value,
    )
    from .power import (  # noqa: F401
        PlanningWarning,
        attainable_significance,
        power_simulation,
        sample_size,
    )
    from .roc import best_model_at_fpr, roc_over_alpha  # noqa: F401
    from .similarity import cosine_similarity_matrix, text_similarity_matrix  # noqa: F401
    from .types import (  # noqa: F401
        Attainability,
        DBPAResult,
        MultipleTestingResult,
        PowerResult,
        ROCResult,
    )
