"""How the repository's layout becomes the wheel's (the rest of the metadata is in pyproject.toml).

The repository keeps the dashboard at its top (``app.py``, ``pages/``, ``ui/``, ``assets/``,
``.streamlit/``) and the example specs (``examples/``) next to the ``dbpa_core`` library.
The wheel installs the library as ``dbpa_core`` and the dashboard, with its assets, Streamlit
settings and the examples (``dbpa examples`` copies them out), under one folder
``dbpa_app`` (so no generic top-level package named ``ui`` lands in site-packages);
``dbpa_core.resources.app_root`` finds either layout and ``dbpa ui`` starts it.
"""

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

APP = {
    "dbpa_app": ".",
    "dbpa_app.ui": "ui",
    "dbpa_app.pages": "pages",
    "dbpa_app.assets": "assets",
    # the example specs and their cases file, which `dbpa examples` copies out for pip users
    "dbpa_app.examples": "examples",
}


class BuildPy(build_py):
    """Of the root's Python files only app.py is the dashboard (not this script)."""

    def find_package_modules(self, package, package_dir):
        found = super().find_package_modules(package, package_dir)
        return [m for m in found if package != "dbpa_app" or m[1] == "app"]


setup(
    cmdclass={"build_py": BuildPy},
    packages=find_packages(include=["dbpa_core", "dbpa_core.*"]) + list(APP),
    package_dir=APP,
    package_data={
        "dbpa_core": [
            "py.typed",
            "templates/*.j2",
            "templates/*.css",
            "schemas/*.json",
            "migrations/script.py.mako",
        ],
        # "dbpa_app" is the repository's root: of its files only app.py (a module) and the
        # Streamlit settings, which Streamlit reads next to the script it runs
        "dbpa_app": [".streamlit/config.toml"],
        # the demo's recordings included (demo_suite.json, demo_runs.sqlite3)
        "dbpa_app.assets": ["*.jsonl", "*.json", "*.npz", "*.sqlite3", "*.csv", "*.txt", "*.css", "*.svg"],
        "dbpa_app.examples": ["*.yaml", "*.csv"],
    },
)
