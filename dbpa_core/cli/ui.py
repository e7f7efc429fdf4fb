"""``dbpa ui [STREAMLIT OPTIONS]``: start the dashboard (:mod:`dbpa_core.launcher`); every
option the command line does not know goes to ``streamlit run``."""

from __future__ import annotations

import argparse
import os


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    u = sub.add_parser(
        "ui",
        help="start the dashboard (needs the app extra)",
        description="Start the dashboard in a browser (headless, no usage "
        "statistics). Every other option goes to `streamlit run`, e.g. "
        "--server.port 8600 or --server.address 0.0.0.0.",
    )
    u.set_defaults(streamlit_options=[])
    return u


def run(args: argparse.Namespace) -> int:
    from ..launcher import run_ui

    if args.cache_dir:  # the dashboard reads it from the environment
        os.environ["DBPA_CACHE_DIR"] = os.path.abspath(os.path.expanduser(args.cache_dir))
    return run_ui(args.streamlit_options)
