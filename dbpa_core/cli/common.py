"""What every ``dbpa`` command shares: the global options, the options several commands
take, progress bars, the cache, the ``--fail-on`` / ``--junit`` gates, writing results,
recording a run in the history, and turning the library's errors into one line and an
exit code (2 a mistake in the input or setup, 3 a backend failure, 130 stopped by Ctrl-C,
143 stopped by SIGTERM)."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..runs import RunResult
    from ..sampling import Progress


if TYPE_CHECKING:
    from ..cache import Cache

PROGRESS_EVERY_ENV = "DBPA_PROGRESS_EVERY"
"""Seconds between progress lines when stderr is not a terminal (default 15)."""
PROGRESS_EVERY = 15.0


class Bars:
    """A run's progress on stderr, driven by its progress callback: tqdm bars per stage
    (``enabled``), or, for logs without a terminal (``lines``), one plain line every
    ``every`` seconds (``$DBPA_PROGRESS_EVERY``, default 15) while the run lasts, saying
    where it is, also when no report came in that time; none for a run shorter than that."""

    def __init__(self, enabled: bool, *, lines: bool = False, every: float | None = None):
        self.enabled = enabled
        self.lines = lines and not enabled
        self.bars: dict[str, Any] = {}
        self.every = every if every is not None else _progress_every()
        self._last: Progress | None = None  # the newest report
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self._done = threading.Event()
        self._ticker: threading.Thread | None = None

    def __call__(self, p: Progress) -> None:
        if self.lines:
            with self._lock:
                self._last = p
            if self._ticker is None:
                self._ticker = threading.Thread(target=self._tick, name="dbpa-progress", daemon=True)
                self._ticker.start()
            return
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
            bar.set_postfix_str(fit_detail(p.detail, detail_width()), refresh=False)
        bar.refresh()

    def _tick(self) -> None:
        while not self._done.wait(self.every):
            with self._lock:
                p = self._last
            if p is not None:
                print(progress_line(p, time.monotonic() - self._started), file=sys.stderr, flush=True)

    def close(self) -> None:
        """Stop the lines (a later report starts them again) and close the bars."""
        self._done.set()
        if self._ticker is not None:
            self._ticker.join(timeout=2)
            self._ticker, self._done = None, threading.Event()
        for bar in self.bars.values():
            bar.close()


def _progress_every() -> float:
    try:
        every = float(os.environ.get(PROGRESS_EVERY_ENV, PROGRESS_EVERY))
    except ValueError:
        every = PROGRESS_EVERY
    return every if every > 0 else PROGRESS_EVERY


def progress_line(p: Progress, elapsed: float) -> str:
    """One line for a log: ``[dbpa 2m05s] sampling 120/600 (20%) - about 3 min left``."""
    minutes, seconds = divmod(int(elapsed), 60)
    share = f" ({int(100 * p.fraction)}%)" if p.total else ""
    detail = f" - {p.detail}" if p.detail else ""
    return f"[dbpa {minutes}m{seconds:02d}s] {p.stage} {p.done}/{p.total}{share}{detail}"


def detail_width() -> int:
    """Room for a bar's detail: the terminal's width less the bar and its counts."""
    import shutil

    return max(40, shutil.get_terminal_size((120, 24)).columns - 60)


def fit_detail(detail: str, width: int) -> str:
    """``detail`` in at most ``width`` characters, never losing its end: the rate and the
    time left come last (``case c7: sampling 3/30, 1,204 tokens, 52 tokens/s, about 4 min
    left``), so the label before the first comma is shortened first (with ``…``), then
    the start of the rest."""
    if len(detail) <= width:
        return detail
    head, sep, tail = detail.partition(", ")
    if sep and len(tail) + 3 <= width:
        return head[: width - len(tail) - 3] + "…, " + tail
    return "…" + detail[-(width - 1) :]


def progress_bars(args: argparse.Namespace) -> Bars:
    """Bars on a terminal unless ``--quiet``, and anywhere with ``--progress``; without a
    terminal, a plain progress line every 15 s (unless ``--quiet``)."""
    bars = (not args.quiet and sys.stderr.isatty()) or args.progress
    return Bars(bars, lines=not bars and not args.quiet)


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


def finish(args: argparse.Namespace, run: RunResult, fail_on: frozenset[str]) -> int:
    """The end of every command that runs something: the JUnit report of ``run`` (a
    :class:`~dbpa_core.runs.RunResult`, with ``--junit``) and the ``--fail-on`` gates, the
    same for every kind of run: 1 when a gated verdict failed, else 0."""
    from ..junit import run_suites

    return report(args, run_suites(run, fail_on=fail_on), fail_on)


def write_results(result: Any, out: str | os.PathLike) -> list[str] | None:
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

    cache = open_cache(args)
    # where the answers went: the cache folder, or the database with DBPA_CACHE_URL
    cache_at = None if getattr(args, "no_cache", False) else (cache.where if cache.url else cache.directory)
    try:
        h = History()
        run_id = save(h, cache_at, os.path.abspath(args.out))
    except (HistoryError, OSError, sqlite3.Error) as exc:
        print(f"warning: the run was not recorded in the history: {exc}", file=sys.stderr)
        return
    print(f"recorded as run {run_id} in {h.where} (dbpa history show {run_id})")


def record_run_in_history(args: argparse.Namespace, run: RunResult) -> None:
    """Record a finished run of any kind (a :class:`~dbpa_core.runs.RunResult`) in the run
    history, unless ``--no-history``: it reopens on its dashboard page."""
    if getattr(args, "no_history", False):
        return
    record_in_history(
        args,
        lambda h, cache_dir, out_dir: h.record_run(run, source="cli", cache_dir=cache_dir, out_dir=out_dir),
    )


def add_no_history(p: argparse.ArgumentParser, what: str = "run") -> None:
    p.add_argument(
        "--no-history", action="store_true", help=f"do not record this {what} in the run history ($DBPA_HOME)"
    )


# ---------------------------------------------------------------- options several commands take


def add_progress_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--progress", action="store_true", help="progress bars even when not a TTY")


def add_gates(p: argparse.ArgumentParser, cases: str) -> None:
    """``--fail-on-control``, ``--fail-on KINDS`` and ``--junit FILE``: the same for every
    command that runs something (a kind a run does not have never fails)."""
    p.add_argument(
        "--fail-on-control",
        action="store_true",
        help="exit 1 when a control perturbation changed the answers detectably "
        "(for CI; the same as --fail-on control)",
    )
    p.add_argument(
        "--fail-on",
        action="append",
        default=[],
        metavar="KINDS",
        help="exit 1 when any of these fails (comma-separated, repeatable): control "
        "(a control perturbation changed the answers detectably), target (a "
        "target did not), check (an answer check changed detectably)",
    )
    add_junit(p, cases)


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
        "repeatable; or list it under allow_key_env in $DBPA_HOME/settings.yaml, "
        "or in $DBPA_ALLOW_KEY_ENV)",
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
    from ..outputs import OutputDirError
    from ..resources import EXIT_MISSING_PART, MissingExtraError, extra_for, missing_extra_message
    from ..spec import SpecError

    try:
        return func(args)
    except MissingExtraError as exc:  # an extra, or the embedded model's weights: `dbpa setup`
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_MISSING_PART
    except ModuleNotFoundError as exc:  # an optional extra left out of the install
        extra = extra_for(exc.name)
        if extra is None:
            raise
        print(f"error: {missing_extra_message(extra)}", file=sys.stderr)
        return EXIT_MISSING_PART
    except (SpecError, CacheError, OutputDirError, ContextLengthError) as exc:
        print(f"error: {clean_text(exc, 1000)}", file=sys.stderr)
        return 2
    except BackendError as exc:  # server text is stripped of escapes before it is shown
        print(f"error: {clean_text(exc, 1000)}", file=sys.stderr)
        return 3
    except KeyboardInterrupt as exc:
        return stopped(exc)


# ---------------------------------------------------------------- signals
class Interrupted(KeyboardInterrupt):
    """SIGINT (Ctrl-C) or SIGTERM arrived: the command stops where it is."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def stopped(exc: BaseException) -> int:
    """The one line a stopped command prints, and its exit code: 128 + the signal's number
    (130 for SIGINT, 143 for SIGTERM). It says whether results were written before the
    signal came (they are then complete: files are written whole, then renamed all at
    once) or not, and how to resume."""
    import signal

    from ..outputs import written_files

    signum = getattr(exc, "signum", signal.SIGINT)
    name = signal.Signals(signum).name
    done = written_files()[_STATE[-1].written_before if _STATE else 0 :]
    if done:
        where = ", ".join(dict.fromkeys(os.path.dirname(f) or "." for f in done))
        what = (
            f"stopped ({name}) after the results were written to {where}: they are complete; "
            "what comes after them (the run history, the summary) may be missing."
        )
    else:
        what = (
            f"stopped ({name}); no results were written. Every answer received so far is cached: "
            "run the same command again to resume."
        )
    print(what, file=sys.stderr)
    return 128 + int(signum)


def _quiet_teardown() -> None:
    """After a stop signal, the work being torn down says nothing: asyncio's tasks that
    are cancelled mid-request (``CancelledError`` in a semaphore's ``await fut``) and
    worker threads would otherwise print tracebacks after the one line of :func:`stopped`."""
    import logging
    import threading

    logging.getLogger("asyncio").disabled = True
    threading.excepthook = lambda args: None
    sys.unraisablehook = lambda unraisable: None


class SignalState:
    """What :func:`signals_handled` knows about the command it guards: the files written
    before it started (so :func:`stopped` names only this command's) and, once it is
    done, its exit code."""

    def __init__(self, written_before: int) -> None:
        self.written_before = written_before
        self.code: int | None = None


_STATE: list[SignalState] = []


@contextlib.contextmanager
def signals_handled(*, keep_after: bool = False) -> Iterator[SignalState]:
    """SIGINT and SIGTERM, handled once for every command: the first raises
    :class:`Interrupted` in the main thread (so cleanup runs and :func:`stopped` prints one
    line); a second one while stopping ends the process at once. With ``keep_after`` (the
    ``dbpa`` program itself), a signal that comes after the command finished, while the
    process exits, says so and keeps the command's exit code (``state.code``) instead of
    being lost. Outside the main thread (a test calling ``main``) nothing is changed."""
    import signal
    import threading

    from ..outputs import defer_stop, written_files

    state = SignalState(len(written_files()))
    if threading.current_thread() is not threading.main_thread():
        yield state
        return
    first: list[int] = []

    def handler(signum: int, frame: object) -> None:
        if first:  # stopping already takes too long for the user: go now
            os.write(2, b"stopped again: exiting at once.\n")
            os._exit(128 + first[0])
        first.append(signum)
        _quiet_teardown()
        stop = Interrupted(signum)
        if defer_stop(stop):  # a result's files are being put in place: stop right after
            return
        raise stop

    def finished(signum: int, frame: object) -> None:
        name = signal.Signals(signum).name
        with contextlib.suppress(Exception):  # what the command printed, then the line
            sys.stdout.flush()
            sys.stderr.flush()
        os.write(2, f"{name} came after the command had finished; its output is complete.\n".encode())
        os._exit(state.code or 0)

    wanted = (signal.SIGINT, signal.SIGTERM)
    previous = {s: signal.getsignal(s) for s in wanted}
    for s in wanted:
        signal.signal(s, handler)
    _STATE.append(state)
    try:
        yield state
    finally:
        _STATE.remove(state)
        for s, h in previous.items():
            signal.signal(s, finished if keep_after and state.code is not None else h)
