"""``dbpa``: run audits from spec files, for batch jobs and CI.

    dbpa audit SPEC.yaml --out DIR [--no-cache] [--fail-on control,target,check]
               [--junit FILE] [--allow-key-env NAME] [--batch]
    dbpa estimate SPEC.yaml [--allow-key-env NAME]
    dbpa attack SPEC.yaml --out DIR [--no-cache] [--estimate] [--junit FILE] [--max-asr X]
    dbpa fidelity DATA.csv --loss tv --gamma 0.5 --eta 0.05 --out DIR | --simulate SPEC.yaml [--batch]
    dbpa schema [--out FILE] [--battery]
    dbpa cache info | clear
    dbpa sensitivity SPEC.yaml --measures all --embedders spec,bleu --lengths 100,300,900 --out DIR
    dbpa import FILE [--from promptfoo|openai-batch|csv|jsonl] --out replay.jsonl [--force]
    dbpa history [--model M] [--prompt P] [--since DATE] [--until DATE] [--json]
    dbpa history show ID | compare A B [--fail-on-change] | delete ID... --yes | upgrade
    dbpa report RUN_ID [RUN_ID ...] --out FILE.html|FILE.pdf
    dbpa scan MODEL_SPEC --out DIR [--estimate]
    dbpa ui [--share] [--allow-key-host URL] [STREAMLIT OPTIONS, e.g. --server.port 8600]
    dbpa setup [EXTRA ...] [--dry-run]
    dbpa examples [DIR] [--force]

Global options, before or after the command: ``--cache-dir DIR`` (``$DBPA_CACHE_DIR``),
``--home DIR`` (``$DBPA_HOME``), ``--quiet`` (no progress bars).

A spec with ``cases:`` is a suite (:mod:`dbpa_core.suite`): ``dbpa audit`` runs every
case x perturbation, corrects them together and prints one pooled row per perturbation;
``dbpa estimate`` counts every case.

Every ``dbpa audit`` (of one base prompt or of a suite of cases) is recorded in the run history
(``$DBPA_HOME/history.sqlite3``, or the database ``$DBPA_DATABASE_URL`` names, see
:mod:`dbpa_core.history`) unless ``--no-history``.

Exit codes: 0 done, 1 a check asked for on the command line failed (``--fail-on``: a
control perturbation changed the answers detectably, a target did not, an answer check changed;
``--max-asr``: an attack's success rate was above it; ``history compare --fail-on-change``:
a verdict changed between the two runs), 2 a mistake in the spec, the arguments or the
setup (an unwritable ``--out`` or ``--junit``, a damaged cache), 3 a backend failure (key,
server, model, malformed answers), 4 a missing optional part, 130 stopped by Ctrl-C
(SIGINT), 143 stopped by SIGTERM (one line, which says whether the results were written;
answers received so far are cached, so the same command resumes). A command that needs an
optional part that is not installed (an extra: ``local``, the embedded model and its
weights; ``app``, the dashboard; ``battery``; ``postgres``) says in one line which extra and
the command that installs it (``dbpa setup EXTRA``), and exits 4. ``--junit FILE`` writes a
JUnit XML report (:mod:`dbpa_core.junit`) for CI.

The package has one module per command, and :mod:`.common` for what they share (global
options, progress bars, the cache, the CI gates, errors as exit codes). A command module
has two functions::

    def add_parser(subparsers) -> argparse.ArgumentParser:  # its name, options and help
        p = subparsers.add_parser("name", help="...")
        p.add_argument(...)
        return p

    def run(args: argparse.Namespace) -> int:  # do it; the exit code
        ...

and is registered by naming it in :data:`COMMANDS`: import it (``from . import scan``)
and add it to the tuple, two lines; the order there is the order of ``dbpa --help``. Its
``run`` prints, returns the exit code and raises the library's errors; :mod:`.common` has the
shared options (``add_progress_options``, ``add_junit``, ``add_allow_key_env``), the progress
bars, the cache and the ``--fail-on`` / ``--junit`` gates, and tables are printed with
:func:`dbpa_core.fmt.table`. ``main`` gives every command the global
options and turns the library's errors into one line and an exit code.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

from .. import __version__
from . import (
    attack,
    audit,
    cache,
    estimate,
    examples,
    fidelity,
    history,
    import_,
    report,
    scan,
    schema,
    sensitivity,
    setup,
    ui,
)
from .common import global_options, run_guarded, signals_handled, stopped, subparsers

COMMANDS = (
    audit,
    estimate,
    attack,
    fidelity,
    schema,
    cache,
    sensitivity,
    import_,
    history,
    report,
    scan,
    ui,
    setup,
    examples,
)
"""The command modules, in the order ``dbpa --help`` lists them."""


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="dbpa", description="Audit LLM robustness with distribution-based perturbation analysis."
    )
    ap.add_argument("--version", action="version", version=f"dbpa {__version__}")
    sub = ap.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(sub).set_defaults(func=command.run)
    global_options(ap, top=True)
    for p in subparsers(ap):
        global_options(p, top=False)
    return ap


def _parse(argv: list[str] | None) -> argparse.Namespace:
    """Parse the command line; unknown options are refused, except after ``ui`` (Streamlit's)."""
    ap = build_parser()
    args, rest = ap.parse_known_args(argv)
    if rest and args.command != "ui":
        ap.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.command == "ui":
        args.streamlit_options = rest
    if args.cache_dir is None:
        args.cache_dir = os.environ.get("DBPA_CACHE_DIR")
    if args.home:  # every reader of the run history and settings looks here
        os.environ["DBPA_HOME"] = os.path.abspath(os.path.expanduser(args.home))
    return args


def main(argv: list[str] | None = None) -> int:
    """Run one ``dbpa`` command; its exit code. SIGINT and SIGTERM are handled here, once
    for every command (:func:`.common.signals_handled`): one line, exit 130 or 143."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    with signals_handled(keep_after=argv is None) as state:
        try:
            args = _parse(argv)
            state.code = run_guarded(args.func, args)
            sys.stdout.flush()  # a closed pipe shows here, not in Python's flush at exit
        except KeyboardInterrupt as exc:  # before run_guarded: while parsing or importing
            state.code = stopped(exc)
        except BrokenPipeError:  # `dbpa ... | head`: the reader has gone; nothing to say
            state.code = _pipe_closed()
        return state.code


def _pipe_closed() -> int:
    """The reader of standard output left (``dbpa audit ... | head``): what was printed
    reached it, the rest has nowhere to go. No traceback, the shell's code for SIGPIPE
    (141); standard output is pointed at /dev/null so Python's own flush at exit is quiet."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    return 141


__all__ = ["COMMANDS", "build_parser", "main"]
