"""Sensitivity studies as runs (:class:`~dbpa_core.sensitivity.SensitivityResult`, by
name): one verdict per perturbation, 'holds' when every setting agrees with the audit."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from markupsafe import Markup

from ..spec import model_label
from .base import RunResult, Verdict, folder_name, register


@dataclass
class SensitivityRun(RunResult):
    studies: Mapping[str, Any] = field(default_factory=dict)

    kind = "sensitivity"
    label = "sensitivity study"
    command = "sensitivity"
    page = "Sensitivity"

    def verdicts(self) -> tuple[Verdict, ...]:
        out: list[Verdict] = []
        for name, s in self.studies.items():
            for v in s.verdicts():
                base = {True: "changed", False: "no change", None: "–"}[v["baseline_significant"]]
                parts = ", ".join(
                    f"{st}: {v[st]['significant']}/{v[st]['settings']} significant" for st in s.studies
                )
                role, sig = v.get("role"), v["baseline_significant"]
                # the audit's own verdict gates, as the audit's would
                gate = role if role in ("control", "target") and sig is not None else None
                failed = bool(sig) if gate == "control" else (gate == "target" and not sig)
                out.append(
                    Verdict(
                        name,
                        str(v["perturbation"]),
                        f"{'holds' if v['holds'] else 'DEPENDS ON THE SETTING'} (audit: {base}; {parts})",
                        kind="sensitivity",
                        role=role,
                        p_adjusted=v.get("baseline_p_adjusted"),
                        significant=v["baseline_significant"],
                        family=f"{s.spec.correction} within each setting",
                        flag="pass" if v["holds"] else "fail",
                        gate=gate,
                        failed=failed,
                        message=f"{v['perturbation']} ({role or 'no role'}): audit {base}; {parts}",
                    )
                )
        return tuple(out)

    def headline(self) -> str:
        return "; ".join(
            f"{len(s.perturbations)} comparisons in {len(s.studies)} studies" for s in self.studies.values()
        )

    def models(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(model_label(m) for s in self.studies.values() for m in s.spec.models))

    def settings(self) -> dict[str, Any]:
        s = next(iter(self.studies.values()))
        return {
            "spec": s.spec.name,
            "samples": s.spec.samples,
            "permutations": s.spec.permutations,
            "correction": s.spec.correction,
            "alpha": s.spec.alpha,
            "seed": s.spec.seed,
            "studies": ", ".join(s.studies),
        }

    @property
    def seconds(self) -> float | None:
        return sum(float((s.usage or {}).get("seconds", 0.0) or 0.0) for s in self.studies.values())

    @property
    def used(self) -> int:
        return sum(
            int((s.usage or {}).get("calls", 0) or 0)
            + int((s.usage or {}).get("embeddings_computed", 0) or 0)
            for s in self.studies.values()
        )

    def report_parts(self) -> list[str]:
        return [Markup(s.to_html(title=name, section=True)) for name, s in self.studies.items()]

    def payload(self) -> Any:
        return dict(self.studies)

    def write(self, out_dir: str | os.PathLike[str]) -> list[str]:
        if len(self.studies) == 1:
            return next(iter(self.studies.values())).write(out_dir)
        return [p for n, s in self.studies.items() for p in s.write(os.path.join(out_dir, folder_name(n)))]


@register("sensitivity")
def adapt(title: str, value: Any) -> RunResult | None:
    from ..sensitivity import SensitivityResult

    if isinstance(value, SensitivityResult):
        value = {"sensitivity": value}
    if isinstance(value, Mapping) and value and all(isinstance(v, SensitivityResult) for v in value.values()):
        first = next(iter(value.values()))
        run = SensitivityRun(
            title or first.spec.name,
            tuple(w for s in value.values() for w in s.warnings),
            studies=dict(value),
        )
        run.refusals["answers"] = (
            "a sensitivity study keeps its numbers, not its answers (they are in its cache and "
            "the audit it varies)"
        )
        return run
    return None
