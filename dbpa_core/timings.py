"""How long a local model takes per answer on this machine: measured on every run, kept in
``$DBPA_HOME/timings.json``, read by ``dbpa estimate`` and ``dbpa scan`` for a duration.

A server's time depends on the server; a local model's (the embedded SmolLM2, a
transformers folder) on this machine, its precision and ``max_tokens``. Each time the
sampler draws answers from a local model it records the seconds the generation took
(loading the model excluded), the answers drawn and their ``max_tokens``; the estimate of a
later run is ``calls x seconds per answer``, scaled by its ``max_tokens`` over the
measured one (an answer's time grows about linearly with its length; short answers that
stop early make it an upper bound). The latest measurement of a model replaces the one
before. Nothing here is needed for a run: a file that cannot be read or written is
ignored.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .home import dbpa_home

TIMINGS_FILE = "timings.json"
LOCAL_BACKENDS = ("local", "hf")
MIN_CALLS = 4  # fewer answers than this measure loading more than answering


def timing_key(model: Mapping[str, Any], precision: str | None = None) -> str | None:
    """The name a local model's timing is kept under (None for a server's model)."""
    backend = str(model.get("backend", "local"))
    if backend not in LOCAL_BACKENDS:
        return None
    what = str(model.get("path") or model.get("name") or "smollm2-135m")
    return f"{backend}:{what}:{precision or 'default'}"


@dataclass(frozen=True)
class Timing:
    """One measurement: ``seconds`` for ``calls`` answers at ``max_tokens``, when."""

    seconds: float
    calls: int
    max_tokens: int
    when: str = ""

    @property
    def per_call(self) -> float:
        return self.seconds / self.calls

    def estimate(self, calls: int, max_tokens: int) -> float:
        """Seconds for ``calls`` answers at ``max_tokens``."""
        return calls * self.per_call * max(max_tokens, 1) / max(self.max_tokens, 1)

    def to_dict(self) -> dict[str, Any]:
        return {
            "seconds": self.seconds,
            "calls": self.calls,
            "max_tokens": self.max_tokens,
            "when": self.when,
        }


def _path() -> str:
    return os.path.join(str(dbpa_home()), TIMINGS_FILE)


def _read() -> dict[str, Any]:
    try:
        with open(_path(), encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def record_timing(
    model: Mapping[str, Any], *, seconds: float, calls: int, max_tokens: int, precision: str | None = None
) -> bool:
    """Keep a local model's measured time (True when it was written)."""
    key = timing_key(model, precision)
    if key is None or calls < MIN_CALLS or not seconds > 0:
        return False
    data = _read()
    data[key] = Timing(
        round(float(seconds), 3), int(calls), int(max_tokens), time.strftime("%Y-%m-%d")
    ).to_dict()
    try:
        os.makedirs(os.path.dirname(_path()), exist_ok=True)
        tmp = f"{_path()}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=1, sort_keys=True)
        os.replace(tmp, _path())
    except OSError:
        return False
    return True


def measured_timing(model: Mapping[str, Any], precision: str | None = None) -> Timing | None:
    """The latest measurement of a local model on this machine, or None."""
    key = timing_key(model, precision)
    entry = _read().get(key) if key else None
    if not isinstance(entry, dict):
        return None
    try:
        t = Timing(
            float(entry["seconds"]), int(entry["calls"]), int(entry["max_tokens"]), str(entry.get("when", ""))
        )
    except (KeyError, TypeError, ValueError):
        return None
    return t if t.calls > 0 and t.seconds > 0 else None


def duration_text(seconds: float) -> str:
    """``45 s``, ``4.2 min``, ``1.5 h``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def duration_estimate(
    model: Mapping[str, Any], calls: int, max_tokens: int, precision: str | None = None
) -> str | None:
    """One line on how long ``calls`` new answers of a local ``model`` take here, from the
    latest measurement; None for a server's model. Says when nothing was measured yet."""
    if timing_key(model, precision) is None:
        return None
    if calls == 0:
        return "duration: nothing to generate (every answer is cached)"
    t = measured_timing(model, precision)
    if t is None:
        return (
            "duration: not known yet for this local model on this machine (it is measured on "
            "each run and used by later estimates)"
        )
    return (
        f"duration: about {duration_text(t.estimate(calls, max_tokens))} for {calls} answers "
        f"({t.per_call:.2f} s per answer at max_tokens {t.max_tokens}, measured on this machine "
        f"{t.when or 'earlier'} over {t.calls} answers; loading the model adds a few seconds)"
    )


__all__ = ["Timing", "duration_estimate", "duration_text", "measured_timing", "record_timing", "timing_key"]
