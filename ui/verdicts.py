"""Plain-language verdicts for the dashboard: they live in :mod:`dbpa_core.verdicts` (no
Streamlit needed: the command line and the reports use them too)."""

from dbpa_core.fmt import SIZE_ANCHORS as SIZE_ANCHORS
from dbpa_core.fmt import SIZE_BELOW as SIZE_BELOW
from dbpa_core.fmt import size_d as size_d
from dbpa_core.fmt import size_text as size_text
from dbpa_core.fmt import size_word as size_word
from dbpa_core.verdicts import Gate as Gate
from dbpa_core.verdicts import control_failure_sentence as control_failure_sentence
from dbpa_core.verdicts import control_untestable_sentence as control_untestable_sentence
from dbpa_core.verdicts import gate as gate
from dbpa_core.verdicts import gates as gates
from dbpa_core.verdicts import level as level
from dbpa_core.verdicts import outcome as outcome
from dbpa_core.verdicts import summary_sentence as summary_sentence
from dbpa_core.verdicts import with_min_effect as with_min_effect
