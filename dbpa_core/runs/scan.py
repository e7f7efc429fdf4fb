"""Scans as runs: ``dbpa scan`` runs an audit and a robustness battery and records each
(so the history lists two runs); together they are one :class:`ScanRun`, whose verdicts,
checks and answers are its parts', each named by its part (its name in the scan) once."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .base import Answer, CheckRow, Request, RunResult, Verdict, requests


@dataclass
class ScanRun(RunResult):
    """``parts``: the runs a scan made (its audit, its battery); ``names``: each part's name
    within the scan (``personas and controls``; missing or '': the part's title)."""

    parts: Sequence[RunResult] = field(default_factory=tuple)
    names: Sequence[str] = ()

    kind = "scan"
    label = "scan"
    command = "scan"

    @classmethod
    def requests_of(cls, spec: Any) -> list[Request] | None:
        """A scan's specs (a tuple: its audit's and its battery's): each part's samples,
        ``part`` prefixed with the part's kind."""
        if not isinstance(spec, tuple) or not spec:
            return None
        out: list[Request] = []
        for s in spec:
            name = type(s).__name__.removesuffix("Spec").lower()  # 'audit', 'battery'
            out += [replace(r, part=f"{name}: {r.part}") for r in requests(s)]
        return out

    def part_of(self, i: int, part: str) -> str:
        """Where a verdict, check or answer of the ``i``-th part stands in the scan: the
        part's name, then its own ``part`` unless the name already says it (an audit of
        one job names its verdicts' part after itself: said once, not twice)."""
        name = self.names[i] if i < len(self.names) and self.names[i] else self.parts[i].title
        if not name or not part:
            return name or part
        return name if name == part or name.endswith(f": {part}") else f"{name}: {part}"

    def verdicts(self) -> tuple[Verdict, ...]:
        return tuple(
            replace(v, part=self.part_of(i, v.part)) for i, p in enumerate(self.parts) for v in p.verdicts()
        )

    def checks(self) -> tuple[CheckRow, ...]:
        return tuple(
            replace(c, part=self.part_of(i, c.part)) for i, p in enumerate(self.parts) for c in p.checks()
        )

    def answers(self) -> tuple[Answer, ...]:
        return tuple(
            replace(a, part=self.part_of(i, a.part)) for i, p in enumerate(self.parts) for a in p.answers()
        )

    def headline(self) -> str:
        return "; ".join(f"{p.title}: {p.headline()}" for p in self.parts)

    def models(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(m for p in self.parts for m in p.models()))

    def settings(self) -> dict[str, Any]:
        return {f"{p.kind}.{k}": v for p in self.parts for k, v in p.settings().items()}

    def properties(self) -> dict[str, Any]:
        return {f"{p.kind}.{k}": v for p in self.parts for k, v in p.properties().items()}

    def provenance(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(x for p in self.parts for x in p.provenance()))

    @property
    def seconds(self) -> float | None:
        return sum(float(p.seconds or 0.0) for p in self.parts)

    def report_parts(self) -> list[str]:
        return [h for p in self.parts for h in p.report_parts()]

    def __post_init__(self) -> None:
        self.refusals.setdefault(
            "history", "a scan is recorded as its parts (its audit and its battery), each its own run"
        )

    def write(self, out_dir: str | os.PathLike[str]) -> list[str]:
        return [p for part in self.parts for p in part.write(os.path.join(out_dir, part.kind))]
