"""Result folders: checked before any paid call, written atomically.

Every capability's ``write(out_dir)`` goes through :func:`write_files`: each file
is written in full to a temporary file in ``out_dir`` and only then renamed into
place, so a failure (a full disk, an error) leaves the previous results untouched,
never a folder that mixes two runs. The CLI calls :func:`check_out_dir` before it
samples anything, so that a paid run never ends unable to write its results.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any


class OutputDirError(ValueError):
    """Results cannot be written where asked (found before any call is made)."""


def _write_text(path: Path, text: str) -> None:
    with open(path, "x", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())


def check_out_dir(out_dir: str | os.PathLike) -> Path:
    """``out_dir`` if results can be written there (a folder that exists or can be
    created), else :class:`OutputDirError` saying why."""
    d = Path(out_dir)
    if d.exists() and not d.is_dir():
        raise OutputDirError(f"--out {out_dir}: is a file, not a folder.")
    existing = d.absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise OutputDirError(f"--out {out_dir}: {existing} is a file, so the folder cannot be created.")
    probe = existing / f".dbpa-write-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        _write_text(probe, "")
        probe.unlink()
    except OSError as exc:
        raise OutputDirError(
            f"--out {out_dir}: cannot write in {existing} ({exc.strerror or exc})."
        ) from None
    return d


_WRITTEN: list[str] = []


def written_files() -> list[str]:
    """Every file :func:`write_files` has put in place in this process (the CLI says so
    when a signal stops it after its results were written)."""
    return list(_WRITTEN)


_DEFERRED: dict[str, Any] = {"depth": 0, "pending": None}


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """A stretch that a stop signal must not split (the renames of a result's files). A
    signal handler that finds :func:`defer_stop` true leaves the stop to the end of the
    stretch, where its exception is raised; so an interrupted run leaves every file of a
    result or none. (Blocking the signal itself would not do: any thread may receive it.)"""
    _DEFERRED["depth"] += 1
    try:
        yield
    except BaseException:
        _DEFERRED["depth"] -= 1
        raise
    _DEFERRED["depth"] -= 1
    pending = _DEFERRED["pending"]
    if pending is not None and _DEFERRED["depth"] == 0:
        _DEFERRED["pending"] = None
        raise pending


def defer_stop(exc: BaseException) -> bool:
    """Called by a signal handler with the exception it would raise: True (and ``exc`` is
    raised at the end of the stretch) inside :func:`signals_deferred`, else False."""
    if _DEFERRED["depth"] > 0:
        _DEFERRED["pending"] = exc
        return True
    return False


def write_files(out_dir: str | os.PathLike, files: Mapping[str, str]) -> list[str]:
    """Write ``{file name: text}`` into ``out_dir`` atomically; returns the paths.

    Each file is written whole to a temporary name, then all are renamed into place
    with a stop signal held back (:func:`signals_deferred`), so an interrupted run leaves
    all of them or none."""
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    written: list[tuple[Path, Path]] = []
    try:
        for name, text in files.items():
            tmp = d / f".{name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp"
            written.append((tmp, d / name))
            _write_text(tmp, text)
        with signals_deferred():  # all the files, or none of them
            for tmp, final in written:
                os.replace(tmp, final)
            _WRITTEN.extend(str(final) for _, final in written)
    except BaseException:
        for tmp, _ in written:
            with contextlib.suppress(OSError):
                tmp.unlink()
        raise
    return [str(d / n) for n in files]
