"""The dashboard's pages, in one list used by app.py (st.navigation) and by the
sidebar links every page draws."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# (section, file, title, icon, url_path)
PAGES = [
    ("Audits", "pages/perturbation_test.py", "Perturbation test", ":material/science:",
     "perturbation"),
    ("Audits", "pages/persona_explorer.py", "Persona explorer", ":material/grid_view:",
     "personas"),
    ("Audits", "pages/control_target.py", "Control vs target", ":material/show_chart:", "roc"),
    ("Audits", "pages/model_comparison.py", "Model comparison", ":material/compare_arrows:",
     "models"),
    ("Setup", "pages/settings.py", "Settings", ":material/settings:", "settings"),
]
