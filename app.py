"""The dbpa dashboard: point-and-click robustness audits of LLMs.

Run with ``make run`` (or ``streamlit run app.py``). Pages live in ``pages/``;
they read widgets, build a spec, call ``dbpa_core`` and draw figures from
``ui/figures.py``.
"""
from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import streamlit as st  # noqa: E402


ROOT = Path(__file__).parent


def main() -> None:
    st.set_page_config(page_title="dbpa — LLM robustness audits", page_icon="📊", layout="wide")
    st.html(f"<style>{(ROOT / 'assets' / 'style.css').read_text()}</style>")
    st.logo(str(ROOT / "assets" / "logo.svg"), size="large")
    pages = {
        "Audits": [
            st.Page(str(ROOT / "pages" / "perturbation_test.py"), title="Perturbation test",
                    icon=":material/science:", url_path="perturbation", default=True),
            st.Page(str(ROOT / "pages" / "persona_explorer.py"), title="Persona explorer",
                    icon=":material/grid_view:", url_path="personas"),
            st.Page(str(ROOT / "pages" / "control_target.py"), title="Control vs target",
                    icon=":material/show_chart:", url_path="roc"),
            st.Page(str(ROOT / "pages" / "model_comparison.py"), title="Model comparison",
                    icon=":material/compare_arrows:", url_path="models"),
        ],
        "Setup": [
            st.Page(str(ROOT / "pages" / "settings.py"), title="Settings",
                    icon=":material/settings:", url_path="settings"),
        ],
    }
    st.navigation(pages).run()


main()
