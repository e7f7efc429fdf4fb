"""Scans as runs: ``dbpa scan`` runs an audit and a robustness battery and records each
(so the history lists two runs); together they are one :class:`ScanRun`, whose verdicts,
checks and answers are its parts', each part named by its own title."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .base import Answer, CheckRow, Request, RunResult, Verdict, requests


@dataclass
class ScanRun(RunResult):
    """``parts``: the runs a scan made (its audit, its battery)."""

    parts: Sequence[RunResult] = field(default_factory=tuple)

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

    def verdicts(self) -> tuple[Verdict, ...]:
        return tuple(replace(v, part=f"{p.title}: {v.part}") for p in self.parts for v in p.verdicts())

    def checks(self) -> tuple[CheckRow, ...]:
        return tuple(replace(c, part=f"{p.title}: {c.part}") for p in self.parts for c in p.checks())

    def answers(self) -> tuple[Answer, ...]:
        return tuple(replace(a, part=f"{p.title}: {a.part}") for p in self.parts for a in p.answers())

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
