"""``dbpa ui``: start the dashboard, the same way as ``make run``.

Runs ``streamlit run app.py --server.headless true --browser.gatherUsageStats false``
in this process, with ``app.py`` from the repository or the installed ``dbpa_app`` folder
(:func:`dbpa_core.resources.app_root`); Streamlit puts that folder first on ``sys.path``
(so the pages import ``ui`` from it) and reads the project's ``.streamlit/config.toml``
beside it. Options after ``dbpa ui`` go to ``streamlit run`` unchanged and win over
these defaults, e.g. ``dbpa ui --server.port 8600``.
"""

from __future__ import annotations

import sys

from .resources import MissingExtraError, app_root, require_extra

__all__ = ["MissingExtraError", "require_extra", "run_ui", "streamlit_argv"]

DEFAULTS = ("--server.headless", "true", "--browser.gatherUsageStats", "false")


def streamlit_argv(options: list[str]) -> list[str]:
    """The ``streamlit`` command line (without the program name) for ``dbpa ui OPTIONS``."""
    return ["run", str(app_root() / "app.py"), *DEFAULTS, *options]


def run_ui(options: list[str]) -> int:
    """Start the dashboard and serve until stopped; the exit status of ``streamlit run``."""
    require_extra("app")
    script = app_root() / "app.py"
    if not script.is_file():
        raise MissingExtraError(
            f"the dashboard's files are missing ({script} not found): reinstall dbpa-core"
        )
    from streamlit.web import cli as stcli

    try:
        stcli.main(args=streamlit_argv(options), prog_name="dbpa ui")
    except SystemExit as done:  # click ends with sys.exit
        code = done.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_ui(sys.argv[1:]))
