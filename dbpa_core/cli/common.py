"""What every ``dbpa`` command shares: the global options, the options several commands
take, progress bars, the cache, the ``--fail-on`` / ``--junit`` gates, writing results,
recording a run in the history, and turning the library's errors into one line and an
exit code (2 a mistake in the input or setup, 3 a backend failure, 130 stopped)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..cache import Cache
    from ..sampling import Progress


class Bars:
    """tqdm bars per stage, driven by a run's progress callback."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.bars: dict[str, Any] = {}

    def __call__(self, p: Progress) -> None:
        if not self.enabled:
            return
        from tqdm import tqdm

        bar = self.bars.get(p.stage)
        if bar is None:
            bar = self.bars[p.stage] = tqdm(
                total=p.total, desc=p.stage, unit=" item", file=sys.stderr, leave=True, dynamic_ncols=True
            )
        bar.total = p.total
        bar.n = p.done
        if p.detail:
            bar.set_postfix_str(p.detail[:60], refresh=False)
        bar.refresh()

    def close(self) -> None:
        for bar in self.bars.values():
            bar.close()


def progress_bars(args: argparse.Namespace) -> Bars:
    """Bars on a terminal unless ``--quiet``, and anywhere with ``--progress``."""
    return Bars((not args.quiet and sys.stderr.isatty()) or args.progress)


def open_cache(args: argparse.Namespace) -> Cache:
    """The cache of ``--cache-dir``, switched off by the command's ``--no-cache``."""
    from ..cache import Cache

    return Cache(args.cache_dir, enabled=not getattr(args, "no_cache", False))


def spec_warnings(spec: Any) -> list[str]:
    """Print what the spec cannot show (before any call) and return the warnings."""
    from ..spec import spec_notes, spec_warnings

    found = spec_warnings(spec)
    for w in found:
        print(f"warning: {w}", file=sys.stderr)
    for n in spec_notes(spec):
        print(f"note: {n}", file=sys.stderr)
    return found


def gates(args: argparse.Namespace) -> frozenset[str] | None:
    """The gated kinds (``--fail-on``, ``--fail-on-control``) and the ``--junit`` path,
    checked before anything is run; None after saying what is wrong."""
    from ..junit import JUnitPathError, check_junit_path, parse_fail_on

    try:
        fail_on = parse_fail_on(
            getattr(args, "fail_on", None), fail_on_control=getattr(args, "fail_on_control", False)
        )
        if getattr(args, "junit", None):
            check_junit_path(args.junit)
    except (ValueError, JUnitPathError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None
    return fail_on


def report(args: argparse.Namespace, suites: Sequence[Any], fail_on: frozenset[str]) -> int:
    """Write the JUnit report (with ``--junit``) and say which gated checks failed:
    1 when any did, else 0."""
    from ..junit import gate_failures, write_junit

    failed = gate_failures(suites, fail_on)
    what = {
        "control-changed": "control perturbation(s) changed the answers detectably",
        "target-unchanged": "target perturbation(s) did not detectably change the answers",
        "check-changed": "answer check(s) changed detectably",
        "asr-exceeded": f"attack success rate above --max-asr {getattr(args, 'max_asr', None)}",
    }
    for kind, words in what.items():
        names = [c.name for c in failed if c.failure_type == kind]
        if names:
            print(f"FAIL: {words}: {', '.join(names)}", file=sys.stderr)
    if args.junit:
        try:
            print(f"wrote {write_junit(args.junit, suites)} (JUnit)")
        except OSError as exc:
            print(
                f"error: cannot write the JUnit report {args.junit} "
                f"({exc.strerror or exc}); the results are written.",
                file=sys.stderr,
            )
            return 2
    return 1 if failed else 0


def write_results(result: Any, out: str | None) -> list[str] | None:
    """``result.write(out)``, or None after one line on stderr (a full disk, no permission)."""
    try:
        return result.write(out)
    except OSError as exc:
        print(
            f"error: cannot write the results to {out} ({exc.strerror or exc}); every "
            "answer is cached, so running again costs nothing.",
            file=sys.stderr,
        )
        return None


def record_in_history(args: argparse.Namespace, save: Callable[[Any, Any, str], int]) -> None:
    """Record a run in the run history with ``save(history, cache_dir, out_dir) -> run id``;
    a history that cannot be written is a warning, never a failed run (the results are
    already written)."""
    import sqlite3

    from ..history import History, HistoryError

    try:
        h = History()
        run_id = save(h, None if args.no_cache else open_cache(args).directory, os.path.abspath(args.out))
    except (HistoryError, OSError, sqlite3.Error) as exc:
        print(f"warning: the run was not recorded in the history: {exc}", file=sys.stderr)
        return
    print(f"recorded as run {run_id} in {h.where} (dbpa history show {run_id})")


def record_result_in_history(
    args: argparse.Namespace,
    kind: str,
    results: dict[str, Any],
    *,
    title: str,
    models: list[str],
    headline: str,
    spec: Any = None,
) -> None:
    """Record a battery, fidelity simulation or sensitivity study (``kind``) the way the
    dashboard does (``results`` keyed as its page keys them, so it reopens there), unless
    ``--no-history``."""
    if getattr(args, "no_history", False):
        return
    import json

    try:
        settings = json.loads(json.dumps(spec.to_dict(), default=str)) if spec is not None else {}
    except (AttributeError, TypeError, ValueError):
        settings = {}
    seconds = sum(float((getattr(r, "usage", None) or {}).get("seconds", 0) or 0) for r in results.values())
    record_in_history(
        args,
        lambda h, cache_dir, out_dir: h.record_result(
            kind,
            results,
            title=title,
            models=models,
            headline=headline,
            source="cli",
            settings={"signature": None, **settings},
            seconds=seconds,
            cache_dir=cache_dir,
            out_dir=out_dir,
        ),
    )


def add_no_history(p: argparse.ArgumentParser, what: str = "run") -> None:
    p.add_argument(
        "--no-history", action="store_true", help=f"do not record this {what} in the run history ($DBPA_HOME)"
    )


# ---------------------------------------------------------------- options several commands take


def add_progress_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--progress", action="store_true", help="progress bars even when not a TTY")


def add_junit(p: argparse.ArgumentParser, cases: str) -> None:
    p.add_argument(
        "--junit",
        metavar="FILE",
        help="also write a JUnit XML report for CI: one test case per "
        + cases
        + ", failures with their numbers",
    )


def add_allow_key_env(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--allow-key-env",
        action="append",
        default=[],
        metavar="NAME",
        help="let the spec send this environment variable as an API key although "
        "it is not an LLM provider's key variable (a spec alone never can; "
        "repeatable; or list it under allow_key_env in $DBPA_HOME/settings.yaml)",
    )


def global_options(p: argparse.ArgumentParser, *, top: bool) -> None:
    """The options every command takes, before or after its name. Below the top they
    default to SUPPRESS, so a value given before the command is not reset after it."""

    def default(value: Any) -> Any:
        return value if top else argparse.SUPPRESS

    have = p._option_string_actions
    options: tuple[tuple[str, dict[str, Any]], ...] = (
        (
            "--cache-dir",
            dict(
                default=default(None),
                metavar="DIR",
                help="cache folder (default: $DBPA_CACHE_DIR or the per-user cache)",
            ),
        ),
        (
            "--home",
            dict(
                default=default(None),
                metavar="DIR",
                help="folder for the run history, settings and saved models (default: "
                "$DBPA_HOME or the per-user data folder)",
            ),
        ),
        ("--quiet", dict(action="store_true", default=default(False), help="no progress bars")),
    )
    for flag, kw in options:
        if flag in have:  # the command declares it itself: keep its help, not its default
            have[flag].default = default(have[flag].default)
        else:
            p.add_argument(flag, **kw)


def subparsers(p: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """Every parser below ``p`` (commands and their actions), each once."""
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                yield child
                yield from subparsers(child)


# ---------------------------------------------------------------- errors


def run_guarded(func: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """``func(args)`` with the library's errors as one line on stderr and an exit code."""
    from ..backends.base import BackendError, ContextLengthError, clean_text
    from ..cache import CacheError
    from ..launcher import MissingExtraError
    from ..outputs import OutputDirError
    from ..resources import extra_for, missing_extra_message
    from ..spec import SpecError

    try:
        return func(args)
    except MissingExtraError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:  # an optional extra left out of the install
        extra = extra_for(exc.name)
        if extra is None:
            raise
        print(f"error: {missing_extra_message(extra)}", file=sys.stderr)
        return 2
    except (SpecError, CacheError, OutputDirError, ContextLengthError) as exc:
        print(f"error: {clean_text(exc, 1000)}", file=sys.stderr)
        return 2
    except BackendError as exc:  # server text is stripped of escapes before it is shown
        print(f"error: {clean_text(exc, 1000)}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        print("stopped: every response received so far is cached; run again to resume.", file=sys.stderr)
        return 130
