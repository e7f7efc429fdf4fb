"""The dbpa dashboard: point-and-click robustness audits of LLMs.

Run with ``make run`` (or ``streamlit run app.py``). Pages live in ``pages/``;
they read widgets, build a spec, call ``dbpa_core`` and draw figures from
``ui/figures.py``. Each page sets itself up (``ui.widgets.page_setup``): with a
``pages/`` folder, Streamlit also serves a page file on its own when its URL is
opened directly, and the page must look the same either way.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import streamlit as st

from ui.nav import PAGES, ROOT


def main() -> None:
    # no icon here: Streamlit makes a page's icon its favicon, and a ":material/...:" one is
    # fetched from fonts.gstatic.com on every page load (the dashboard asks nothing of any
    # host but its own; the sidebar links draw the same icons from the bundled font)
    pages = [
        st.Page(str(ROOT / file), title=title, url_path=url, default=i == 0)
        for i, (_section, file, title, _icon, url) in enumerate(PAGES)
    ]
    # the sidebar links are drawn by each page (see ui.widgets.navigation_links)
    st.navigation(pages, position="hidden").run()


main()
