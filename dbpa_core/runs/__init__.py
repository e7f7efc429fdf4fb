"""One run interface that every output reads (see :mod:`dbpa_core.runs.base`).

:func:`as_run` turns a finished result of any kind (or what the history stored of it) into
a :class:`RunResult`; :meth:`dbpa_core.history.History.load_run` reads a recorded run back
as one. History, ``dbpa
report``, JUnit, ``--fail-on`` and the History page read runs only through this.

Adding a kind: one module here with a :class:`RunResult` subclass and an adapter
registered with :func:`register`, imported below.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any

from . import audit as _audit_kind  # noqa: F401 - registers its adapter
from . import battery as _battery_kind  # noqa: F401
from . import fidelity as _fidelity_kind  # noqa: F401
from . import sensitivity as _sensitivity_kind  # noqa: F401
from . import suite as _suite_kind  # noqa: F401
from .audit import AuditRun
from .base import (
    FAIL_KINDS,
    Answer,
    CheckRow,
    Gate,
    RunRefused,
    RunResult,
    Verdict,
    adapters,
    gate_failures,
    gate_of,
    register,
)
from .battery import BatteryRun
from .fidelity import FidelityRun
from .scan import ScanRun
from .sensitivity import SensitivityRun
from .suite import SuiteRun

CHECKSUM_FIELDS = ("arm", "index", "part", "response", "run")


class UnknownResult(TypeError):
    """A value no kind of run knows."""


def as_run(value: Any, *, title: str = "") -> RunResult:
    """The :class:`RunResult` of ``value``: a result of any kind, a mapping of results by
    name (as the pages keep them), or what :meth:`RunResult.payload` gave the history."""
    if isinstance(value, RunResult):
        return value
    for _kind, adapt in adapters():
        run = adapt(title, value)
        if run is not None:
            return run
    raise UnknownResult(f"{type(value).__name__} is not a result dbpa knows as a run")


def checksum_line(fields: dict[str, Any]) -> str:
    """One answer as the canonical JSON line the checksum hashes: the fields
    :data:`CHECKSUM_FIELDS`, keys sorted, UTF-8 (no ASCII escaping)."""
    return json.dumps({k: fields[k] for k in CHECKSUM_FIELDS}, ensure_ascii=False, sort_keys=True)


def checksum(lines: Iterable[dict[str, Any]]) -> str:
    """SHA-256 (hex) of the answers' canonical lines, one ``\\n`` after each."""
    return hashlib.sha256("".join(checksum_line(x) + "\n" for x in lines).encode("utf-8")).hexdigest()


__all__ = [
    "CHECKSUM_FIELDS",
    "FAIL_KINDS",
    "Answer",
    "AuditRun",
    "BatteryRun",
    "CheckRow",
    "FidelityRun",
    "Gate",
    "RunRefused",
    "RunResult",
    "ScanRun",
    "SensitivityRun",
    "SuiteRun",
    "UnknownResult",
    "Verdict",
    "as_run",
    "checksum",
    "checksum_line",
    "gate_failures",
    "gate_of",
    "register",
]
