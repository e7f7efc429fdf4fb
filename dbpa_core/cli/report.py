"""``dbpa report RUN_ID ... --out FILE.html|FILE.pdf``: one document with every verdict of
recorded runs (:mod:`dbpa_core.report`)."""

from __future__ import annotations

import argparse
import sys


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    r = sub.add_parser(
        "report", help="one HTML or PDF report with every verdict of recorded runs (an audit file)"
    )
    r.add_argument("ids", type=int, nargs="+", metavar="RUN_ID", help="runs (dbpa history lists them)")
    r.add_argument(
        "--out", required=True, metavar="FILE", help="FILE.html, or FILE.pdf (printed by headless Chromium)"
    )
    r.add_argument("--title", help="the report's title (default: the runs' titles)")
    return r


def run(args: argparse.Namespace) -> int:
    """One HTML (or PDF) document with every verdict of the named runs."""
    from ..report import ReportError, write_report

    try:
        path = write_report(args.ids, args.out, title=args.title)
    except ReportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {path}")
    return 0
