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

from ui.access import gate
from ui.nav import LANDING, PAGES, ROOT


def main() -> None:
    gate()  # no page renders before the access token is shown (when one is set)
    # no icon here: Streamlit makes a page's icon its favicon, and a ":material/...:" one is
    # fetched from fonts.gstatic.com on every page load (the dashboard asks nothing of any
    # host but its own; the sidebar links draw the same icons from the bundled font)
    pages = [
        st.Page(str(ROOT / file), title=title, url_path=url) for _section, file, title, _icon, url in PAGES
    ]
    # the first page is also the landing page at "/": Streamlit serves a default page only
    # there (its own URL would answer "Page not found"), so it comes twice - at "/" and at
    # its URL, which every link and bookmark may name
    _section, file, title, _icon, _url = PAGES[0]
    pages.insert(0, st.Page(str(ROOT / file), title=title, url_path=LANDING, default=True))
    # the sidebar links are drawn by each page (see ui.widgets.navigation_links)
    st.navigation(pages, position="hidden").run()


main()
