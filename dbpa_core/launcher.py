"""``dbpa ui``: start the dashboard, the same way as ``make run``.

Runs ``streamlit run app.py --server.headless true --browser.gatherUsageStats false
--server.fileWatcherType none --server.address 127.0.0.1`` in this process, with
``app.py`` from the repository or the installed ``dbpa_app`` folder
(:func:`dbpa_core.resources.app_root`); Streamlit puts that folder first on ``sys.path`` (so
the pages import ``ui`` from it). Options after ``dbpa ui`` go to ``streamlit run``
unchanged and win over these defaults, e.g. ``dbpa ui --server.port 8600``.

Safe by default: the dashboard listens on this machine only (127.0.0.1). Serving the
network is an explicit choice (``--share``, or a ``--server.address`` that is not a loopback
address) and then needs an access token before any page renders: ``$DBPA_UI_TOKEN``,
``ui_token`` in ``$DBPA_HOME/settings.yaml``, or one generated now and printed with the
link that opens the dashboard (see :mod:`ui.access`). The start-up message never looks up
the machine's external address (Streamlit asks checkip.amazonaws.com for it in headless
mode unless ``browser.serverAddress`` is set, which this launcher always sets).
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import socket
import sys
from dataclasses import dataclass

from .resources import MissingExtraError, app_root, require_extra

DEFAULTS = (
    "--server.headless",
    "true",
    "--browser.gatherUsageStats",
    "false",
    # no rerun when a source file is saved (an auditor never edits them): the watcher
    # polled every source file and walked every loaded module's path after each rerun,
    # about a tenth of the dashboard's CPU; ``--server.fileWatcherType poll`` brings it back
    "--server.fileWatcherType",
    "none",
)
LOOPBACK = "127.0.0.1"
"""The address the dashboard listens on unless told otherwise."""
ALL_INTERFACES = "0.0.0.0"
"""The address ``--share`` listens on (every interface)."""
DEFAULT_PORT = "8501"
TOKEN_ENV = "DBPA_UI_TOKEN"
"""The environment variable that holds the dashboard's access token."""
TOKEN_SETTING = "ui_token"
"""The key of ``$DBPA_HOME/settings.yaml`` that holds the dashboard's access token."""


def is_loopback(address: str | None) -> bool:
    """True for an address only this machine can reach: ``localhost``, 127.0.0.0/8,
    ``::1``, or a Unix socket (``unix://...``). None or ``""`` is not (Streamlit then
    listens on every interface)."""
    if not address:
        return False
    if address.startswith("unix://") or address.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return False


def option_value(options: list[str], name: str) -> str | None:
    """The value of Streamlit's ``--name VALUE`` or ``--name=VALUE`` in ``options`` (the
    last one given), or None."""
    flag, found = f"--{name}", None
    for i, opt in enumerate(options):
        if opt == flag and i + 1 < len(options):
            found = options[i + 1]
        elif opt.startswith(flag + "="):
            found = opt[len(flag) + 1 :]
    return found


def configured_token() -> str | None:
    """The access token set on the machine: ``$DBPA_UI_TOKEN``, else ``ui_token`` in the
    settings file; None when neither is set (or it is empty)."""
    from .home import setting

    token = os.environ.get(TOKEN_ENV, "").strip()
    if token:
        return token
    value = setting(TOKEN_SETTING)
    return str(value).strip() or None if value is not None else None


@dataclass(frozen=True)
class Serving:
    """How ``dbpa ui`` will serve: the ``streamlit`` command line (without the program
    name), the address it listens on, whether that is the network, the access token
    (None: none needed) and the link to print (with the token in it, when there is one)."""

    argv: list[str]
    address: str
    shared: bool
    token: str | None
    link: str


def plan(options: list[str], *, share: bool = False) -> Serving:
    """What ``dbpa ui [--share] OPTIONS`` runs, decided without starting anything.

    The address is ``--server.address`` when given, else 127.0.0.1 (``--share``:
    0.0.0.0); a token is required when it is not a loopback address (a configured one,
    else a new random one) and whenever one is configured. ``browser.serverAddress`` is
    set (unless given) so that Streamlit prints one URL and looks up no external address.
    """
    extra: list[str] = []
    address = option_value(options, "server.address")
    if address is None:
        address = ALL_INTERFACES if share else LOOPBACK
        extra += ["--server.address", address]
    shared = not is_loopback(address)
    token = configured_token()
    if shared and not token:
        token = secrets.token_urlsafe(18)
    shown = option_value(options, "browser.serverAddress")
    if shown is None:
        wildcard = address in (ALL_INTERFACES, "::", "")
        shown = (socket.gethostname() or "localhost") if wildcard else address
        if shown.startswith("unix://"):
            shown = "localhost"
        extra += ["--browser.serverAddress", shown]
    port = option_value(options, "server.port") or os.environ.get("STREAMLIT_SERVER_PORT") or DEFAULT_PORT
    host = f"[{shown}]" if ":" in shown and not shown.startswith("[") else shown
    link = f"http://{host}:{port}/" + (f"?token={token}" if token else "")
    argv = ["run", str(app_root() / "app.py"), *DEFAULTS, *extra, *options]
    return Serving(argv=argv, address=address, shared=shared, token=token, link=link)


def streamlit_argv(options: list[str], *, share: bool = False) -> list[str]:
    """The ``streamlit`` command line (without the program name) for ``dbpa ui OPTIONS``."""
    return plan(options, share=share).argv


def run_ui(options: list[str], *, share: bool = False, allow_key_hosts: tuple[str, ...] = ()) -> int:
    """Start the dashboard and serve until stopped; the exit status of ``streamlit run``.

    ``allow_key_hosts``: servers the dashboard may send environment keys to besides those
    of :func:`dbpa_core.keyhosts.allowed_key_hosts` (added to ``$DBPA_ALLOW_KEY_HOSTS``)."""
    require_extra("app")
    script = app_root() / "app.py"
    if not script.is_file():
        raise MissingExtraError(
            f"the dashboard's files are missing ({script} not found): reinstall dbpa-core"
        )
    from .keyhosts import ENV_VAR, problems

    if allow_key_hosts:
        os.environ[ENV_VAR] = ",".join([*filter(None, [os.environ.get(ENV_VAR, "")]), *allow_key_hosts])
    for problem in problems():  # an allowed server that allows nothing: said once, at start
        print(f"warning: {problem}", file=sys.stderr)
    serving = plan(options, share=share)
    if serving.token:  # the dashboard runs in this process and reads it from here
        os.environ[TOKEN_ENV] = serving.token
    if serving.shared:
        print(
            f"dbpa ui: serving the network on {serving.address}; only a browser with the token "
            f"gets in. Open (or share) this link:\n  {serving.link}",
            file=sys.stderr,
            flush=True,
        )
    elif serving.token:
        print(f"dbpa ui: an access token is set; open {serving.link}", file=sys.stderr, flush=True)
    from streamlit.web import cli as stcli

    try:
        stcli.main(args=serving.argv, prog_name="dbpa ui")
    except SystemExit as done:  # click ends with sys.exit
        code = done.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_ui(sys.argv[1:]))
