"""One run interface that every output reads (see :mod:`dbpa_core.runs.base`).

:func:`as_run` turns a finished result of any kind (or what the history stored of it) into
a :class:`RunResult`; :meth:`dbpa_core.history.History.load_run` reads a recorded run back
as one. History, ``dbpa
report``, JUnit, ``--fail-on`` and the History page read runs only through this.

Before a run, :func:`requests` gives what a spec of any kind will ask its models for
(:class:`Request`: part, model, prompt and sample), which the estimate of calls, tokens
and cost (:func:`estimate`, counted in :mod:`dbpa_core.runs.costs`), the Batch API job
(:func:`dbpa_core.batch.jobs`), the replay check (:func:`replay_need`) and the duration
estimate (:func:`calls_by_model`) read.

Adding a kind: one module here with a :class:`RunResult` subclass (its
:meth:`~RunResult.requests_of` saying what a spec of it asks) and an adapter registered
with :func:`register`, imported below.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
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
    Comparison,
    Gate,
    Request,
    RunRefused,
    RunResult,
    Verdict,
    adapters,
    calls_by_model,
    estimate,
    gate_failures,
    gate_of,
    kind_named,
    register,
    replay_need,
    requests,
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


def uncached(reqs: Iterable[Request], cache: Any = None) -> list[Request]:
    """The requests whose answers are not in ``cache`` (a
    :class:`~dbpa_core.cache.Cache`, or None: all of them)."""
    from ..sampling import is_cached

    return [r for r in reqs if not is_cached(cache, r.model, r.sample)]


def duration_lines(reqs: Sequence[Request], cache: Any = None) -> list[str]:
    """How long the uncached ``reqs`` take on this machine: one line per local model (its
    measured seconds per answer x its calls, at the requests' max_tokens, labelled when
    there are several); nothing for a server's model, which the progress bar times."""
    from ..backends.decoding import local_precision
    from ..spec import model_label
    from ..timings import duration_estimate

    missing = {id(r) for r in uncached(reqs, cache)}
    per = calls_by_model(reqs, lambda r: id(r) not in missing)
    out = []
    for model, calls in per:
        own = [r.sample.params.max_tokens for r in reqs if r.model == model]
        line = duration_estimate(model, calls, max(own), local_precision())
        if line:
            out.append(line + (f" [{model_label(dict(model))}]" if len(per) > 1 else ""))
    return out


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
    "Comparison",
    "FidelityRun",
    "Gate",
    "Request",
    "RunRefused",
    "RunResult",
    "ScanRun",
    "SensitivityRun",
    "SuiteRun",
    "UnknownResult",
    "Verdict",
    "as_run",
    "calls_by_model",
    "checksum",
    "checksum_line",
    "duration_lines",
    "estimate",
    "gate_failures",
    "gate_of",
    "kind_named",
    "register",
    "replay_need",
    "requests",
    "uncached",
]
