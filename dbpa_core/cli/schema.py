"""``dbpa schema [--out FILE] [--battery]``: the JSON Schema of audit (or battery) specs,
for editors (``# yaml-language-server: $schema=FILE`` on a spec's first line)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("schema", help="print (or write) the JSON Schema of audit specs, for editors")
    p.add_argument("--out", metavar="FILE", help="write it to FILE instead of printing it")
    p.add_argument("--battery", action="store_true", help="the schema of battery specs (dbpa attack) instead")
    return p


def run(args: argparse.Namespace) -> int:
    from ..spec_schema import schema_text  # here: `dbpa --help` loads no numpy

    if getattr(args, "battery", False):
        from ..attacks.schema import json_schema as battery_schema

        text = schema_text(battery_schema())
    else:
        text = schema_text()
    if not getattr(args, "out", None):
        sys.stdout.write(text)
        return 0
    out = Path(args.out)
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as exc:
        print(f"dbpa: cannot write {out} ({exc.strerror or exc})", file=sys.stderr)
        return 2
    print(f"wrote {out}; start a spec with: # yaml-language-server: $schema={out.resolve()}", file=sys.stderr)
    return 0
