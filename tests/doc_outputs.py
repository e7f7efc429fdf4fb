"""What the manual shows a command print, against what the command prints today.

A page shows a command (in a ```bash block, or on a ``$ dbpa ...`` line of an output block)
and then its output in a fenced block. :func:`documented_block` finds that block;
:func:`run_documented` runs the command in this process, from the repository's root, with
its ``--out`` and cache in temporary folders; :func:`assert_shown` checks that every line the
page shows is printed, in the same order and next to each other (a page may show a part of
the output: the table it explains). What differs between two honest runs is masked on both
sides (:func:`comparable`): the seconds a run took, and the temporary folders, which the page
writes as the ``--out`` it documents.
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^```[\w-]*$", re.MULTILINE)
SECONDS = re.compile(r"\b\d+(?:\.\d+)? s\b")


def documented_block(page: str | Path, after: str, *, nth: int = 1, inside: bool = False) -> str:
    """The text of the ``nth`` fenced block that opens after the first occurrence of
    ``after`` in ``page`` (a path relative to the repository, or a Path). When ``after`` is
    itself inside a fenced block (a ```bash block that holds the command), that block does
    not count, unless ``inside``: then it is the block returned (a terminal session, whose
    ``$ command`` lines are followed by their output)."""
    path = page if isinstance(page, Path) else REPO / page
    text = path.read_text(encoding="utf-8")
    at = text.index(after)
    fences = list(FENCE.finditer(text))
    before = sum(1 for f in fences if f.start() < at)
    # fences alternate open, close: the openings after `at` are every other one from here
    opening = before + (before % 2)
    if inside:
        assert before % 2, f"{after!r} is not inside a fenced block of {path.name}"
        opening = before - 1
    index = opening + 2 * (nth - 1)
    start, end = fences[index].end() + 1, fences[index + 1].start()
    return text[start:end]


def session(block: str) -> dict[str, str]:
    """A block that shows a terminal session (``$ command`` lines, each followed by what it
    printed) as {command: its output}."""
    out: dict[str, str] = {}
    command = None
    for line in block.splitlines(keepends=True):
        if line.startswith("$ "):
            command = line[2:].strip()
            out[command] = ""
        elif command is not None:
            out[command] += line
    return {c: text.strip("\n") + "\n" for c, text in out.items()}


def run_dbpa(argv: list[str], *, stderr: bool = False) -> str:
    """What ``dbpa ARGV`` prints on stdout (and stderr after it, with ``stderr``), run in
    this process from the repository's root. Fails unless it exits 0."""
    from dbpa_core.cli import main

    printed, errors = io.StringIO(), io.StringIO()
    with contextlib.chdir(REPO), contextlib.redirect_stdout(printed), contextlib.redirect_stderr(errors):
        code = main(argv)
    assert code == 0, f"dbpa {' '.join(argv)} exited {code}:\n{errors.getvalue()}"
    return printed.getvalue() + (errors.getvalue() if stderr else "")


def run_documented(command: str, tmp: Path, *, cache: Path | None = None, stderr: bool = False) -> str:
    """What ``command`` (``dbpa ...`` as a page writes it) prints, run by :func:`run_dbpa`
    with its ``--out``, ``--home`` and ``--junit`` in ``tmp`` (written back as the page writes them), its
    cache in ``cache`` (default: a new one in ``tmp``), no progress bars, and not recorded in
    the run history unless the page gives it a ``--home``."""
    argv = command.split()[1:]
    places: dict[str, str] = {}
    for option in ("--out", "--home", "--junit"):
        if option in argv:
            i = argv.index(option) + 1
            places[str(tmp / option.strip("-"))], argv[i] = argv[i], str(tmp / option.strip("-"))
    argv += ["--cache-dir", str(cache or tmp / "cache"), "--quiet"]
    if "--out" in argv and "--home" not in argv:
        argv.append("--no-history")
    text = run_dbpa(argv, stderr=stderr)
    for path, shown in places.items():
        text = text.replace(path, shown)
    return text


def comparable(text: str) -> list[str]:
    """``text``'s lines without what two honest runs may differ in: the seconds a run took
    (``16.4 s`` -> ``… s``) and trailing blanks."""
    return [SECONDS.sub("… s", line).rstrip() for line in text.strip("\n").splitlines()]


def assert_shown(shown: str, printed: str) -> None:
    """Every line of ``shown`` (a block of the manual) is in ``printed``, in order and next
    to each other. On failure the message holds what was printed, to paste into the page."""
    want, got = comparable(shown), comparable(printed)
    for i in range(len(got) - len(want) + 1):
        if got[i : i + len(want)] == want:
            return
    raise AssertionError(
        "the manual shows lines the command no longer prints.\n--- the manual:\n"
        + "\n".join(want)
        + "\n--- printed today:\n"
        + printed
    )


DATE_TIME = re.compile(r"\b\d{4}-\d\d-\d\d \d\d:\d\d\b")


def undated(text: str) -> str:
    """``text`` with each date and time of day (``2026-11-28 12:31``) written
    ``YYYY-MM-DD hh:mm``: when a run was recorded differs between two honest runs (the
    width stays, so the tables' columns still line up)."""
    return DATE_TIME.sub("YYYY-MM-DD hh:mm", text)


def run_documented_in_turn(commands: list[str], tmp: Path) -> list[str]:
    """What each of ``commands`` (``dbpa ...`` as a page writes them) prints, run in turn as
    :func:`run_documented` runs one, all with one ``--home`` and one cache in ``tmp`` (so a
    later command reads the runs the earlier ones recorded) and each ``--out`` a folder of
    its own; the folders are written back as the page writes them."""
    out = []
    for i, command in enumerate(commands):
        argv = command.split()[1:]
        places: dict[str, str] = {}
        for option, folder in (("--out", tmp / f"out-{i}"), ("--home", tmp / "home")):
            if option in argv:
                at = argv.index(option) + 1
                places[str(folder)], argv[at] = argv[at], str(folder)
        argv += ["--cache-dir", str(tmp / "cache"), "--quiet"]
        if "--out" in argv and "--home" not in argv:
            argv.append("--no-history")
        text = run_dbpa(argv)
        for path, shown in places.items():
            text = text.replace(path, shown)
        out.append(text)
    return out
