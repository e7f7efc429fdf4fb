"""``dbpa ui [--share] [--allow-key-host URL] [STREAMLIT OPTIONS]``: start the dashboard
(:mod:`dbpa_core.launcher`); every option the command line does not know goes to
``streamlit run``."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any


def add_parser(sub: Any) -> argparse.ArgumentParser:
    u = sub.add_parser(
        "ui",
        help="start the dashboard (needs the app extra)",
        description="Start the dashboard in a browser (headless, no usage statistics), on "
        "this machine only (127.0.0.1). Every other option goes to `streamlit run`, e.g. "
        "--server.port 8600. Serving the network (--share, or a --server.address that is not "
        "a loopback address) needs an access token: $DBPA_UI_TOKEN, ui_token in "
        "$DBPA_HOME/settings.yaml, or one generated and printed with the link at start.",
    )
    u.add_argument(
        "--share",
        action="store_true",
        help="serve every network interface (0.0.0.0), behind an access token",
    )
    u.add_argument(
        "--allow-key-host",
        action="append",
        default=[],
        metavar="URL",
        help="a server the dashboard may send API keys from the environment to (repeatable; "
        "or list it under allow_key_hosts in $DBPA_HOME/settings.yaml, or in $DBPA_ALLOW_KEY_HOSTS)",
    )
    u.set_defaults(streamlit_options=[])
    return u


def run(args: argparse.Namespace) -> int:
    from ..keyhosts import origin
    from ..launcher import run_ui

    bad = [u for u in args.allow_key_host if origin(u) is None]
    if bad:
        print(
            f"dbpa ui: --allow-key-host {bad[0]!r} is not an http(s) URL such as http://127.0.0.1:8000",
            file=sys.stderr,
        )
        return 2
    if args.cache_dir:  # the dashboard reads it from the environment
        os.environ["DBPA_CACHE_DIR"] = os.path.abspath(os.path.expanduser(args.cache_dir))
    return run_ui(args.streamlit_options, share=args.share, allow_key_hosts=tuple(args.allow_key_host))
