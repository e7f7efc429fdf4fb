"""``dbpa examples [DIR] [--force]``: copy the example specs into a folder (default ``examples``).

The wheel carries the repository's ``examples/`` (in ``dbpa_app/examples``, see
``setup.py``); a pip user gets them with this command and runs them as the manual does
(``dbpa audit examples/nice_personas.yaml``). The copies are made to stand on their own:
the suite's cases file, the recorded answers the replay examples read
(``demo_replay.jsonl``) and the two JSON Schemas land beside them, and the specs' lines
that point into the repository (``$schema=../dbpa_core/schemas/...``,
``file: ../assets/demo_replay.jsonl``) are pointed at those copies.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..resources import asset, examples_dir, schemas_dir

# the files the examples read, copied beside them (from assets/ and dbpa_core/schemas/)
REPLAY_FILE = "demo_replay.jsonl"
SCHEMAS = ("spec.schema.json", "attack.schema.json")


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "examples",
        help="copy the example specs (with their data and schemas) into a folder",
        description=(
            "Copy the example specs into DIR (default: examples), with the suite's cases file, "
            "the recorded answers the replay examples read and the JSON Schemas for editors."
        ),
    )
    p.add_argument("dir", nargs="?", default="examples", metavar="DIR", help="where (default: examples)")
    p.add_argument("--force", action="store_true", help="overwrite files of the same name in DIR")
    return p


def standalone(text: str) -> str:
    """An example spec's text with its repository paths pointed at the copies beside it."""
    for schema in SCHEMAS:
        text = text.replace(f"$schema=../dbpa_core/schemas/{schema}", f"$schema={schema}")
    text = text.replace(f"../assets/{REPLAY_FILE}", REPLAY_FILE)
    return text.replace(f"assets/{REPLAY_FILE}", REPLAY_FILE)


def files() -> dict[str, Path]:
    """Every file ``dbpa examples`` writes: its name -> where it comes from."""
    src = examples_dir()
    if not src.is_dir():
        return {}
    out = {p.name: p for p in sorted(src.iterdir()) if p.suffix in (".yaml", ".csv")}
    out[REPLAY_FILE] = asset(REPLAY_FILE)
    out.update({s: schemas_dir() / s for s in SCHEMAS})
    return out


def run(args: argparse.Namespace) -> int:
    todo = files()
    missing = [str(p) for p in todo.values() if not p.is_file()]
    if not todo or missing:
        where = missing[0] if missing else str(examples_dir())
        print(f"error: the examples are missing ({where} not found): reinstall dbpa-core", file=sys.stderr)
        return 2
    out = Path(args.dir).expanduser()
    clash = [n for n in todo if (out / n).exists()]
    if clash and not args.force:
        print(
            f"error: {out / clash[0]} exists ({len(clash)} of the {len(todo)} files do): "
            "choose another folder or add --force to overwrite them",
            file=sys.stderr,
        )
        return 2
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name, src in todo.items():
            if src.suffix == ".yaml":
                (out / name).write_text(standalone(src.read_text(encoding="utf-8")), encoding="utf-8")
            else:
                (out / name).write_bytes(src.read_bytes())
    except OSError as exc:
        print(f"error: cannot write into {out} ({exc.strerror or exc})", file=sys.stderr)
        return 2
    specs = sorted(n for n in todo if n.endswith(".yaml"))
    print(f"wrote {len(todo)} files into {out}: {len(specs)} specs, their data and schemas")
    print(f"  dbpa audit {out / 'replay_checks.yaml'} --out out/checks      # recorded answers, seconds")
    print(f"  dbpa audit {out / 'nice_personas.yaml'} --out out/personas    # the embedded model")
    return 0
