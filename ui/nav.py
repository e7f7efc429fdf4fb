"""The dashboard's pages, in one list used by app.py (st.navigation) and by the
sidebar links every page draws."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LANDING = "start"
"""The url_path of the landing page at "/" (the first page again; never shown: "/" is its URL)."""

# (section, file, title, icon, url_path). The url_path is the file's stem: with a pages/
# folder Streamlit's legacy router serves the stems too, so one URL works in every case.
PAGES = [
    ("Audits", "pages/perturbation_test.py", "Perturbation test", ":material/science:", "perturbation_test"),
    ("Audits", "pages/persona_explorer.py", "Persona explorer", ":material/grid_view:", "persona_explorer"),
    ("Audits", "pages/control_target.py", "Control vs target", ":material/show_chart:", "control_target"),
    (
        "Audits",
        "pages/model_comparison.py",
        "Model comparison",
        ":material/compare_arrows:",
        "model_comparison",
    ),
    ("Audits", "pages/sensitivity.py", "Sensitivity", ":material/tune:", "sensitivity"),
    ("Audits", "pages/suite.py", "Suite of cases", ":material/table_view:", "suite"),
    ("Robustness", "pages/robustness.py", "Robustness battery", ":material/spellcheck:", "robustness"),
    ("Simulators", "pages/fidelity.py", "Simulator fidelity", ":material/groups:", "fidelity"),
    ("Records", "pages/history.py", "History", ":material/history:", "history"),
    ("Setup", "pages/settings.py", "Settings", ":material/settings:", "settings"),
]
