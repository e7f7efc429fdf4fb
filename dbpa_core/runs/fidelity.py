"""Fidelity runs: an analysis of a CSV (:class:`~dbpa_core.fidelity.analysis.
FidelityResult`) and a simulation (:class:`~dbpa_core.fidelity.simulate.
SimulationResult`), by name; ``dbpa fidelity --simulate`` keeps both."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from markupsafe import Markup

from .base import Answer, Request, RunResult, Verdict, register


@dataclass
class FidelityRun(RunResult):
    results: Mapping[str, Any] = field(default_factory=dict)

    kind = "fidelity"
    label = "simulator fidelity study"
    command = "fidelity"
    page = "Simulator fidelity"

    @classmethod
    def requests_of(cls, spec: Any) -> list[Request] | None:
        """A simulation spec's samples (every model x scenario x k); a file of answers
        (:class:`~dbpa_core.fidelity.data.FidelityData`) asks for none."""
        from ..fidelity.data import FidelityData
        from ..fidelity.simulate import SimulationSpec, plan_jobs

        if isinstance(spec, FidelityData):
            return []
        if not isinstance(spec, SimulationSpec):
            return None
        jobs = plan_jobs(spec.data, spec.models, **spec.settings())
        return [Request(f"{label}: {s.id}", job.model, job.request) for label, s, job in jobs]

    def _analyses(self) -> list[tuple[str, Any]]:
        from ..fidelity.analysis import FidelityResult

        return [(n, v) for n, v in self.results.items() if isinstance(v, FidelityResult)]

    def _simulations(self) -> list[tuple[str, Any]]:
        from ..fidelity.simulate import SimulationResult

        return [(n, v) for n, v in self.results.items() if isinstance(v, SimulationResult)]

    def verdicts(self) -> tuple[Verdict, ...]:
        out: list[Verdict] = []
        for name, f in self._analyses():
            out.append(Verdict(name, "guarantee", f.guarantee_text(), kind="guarantee"))
            for c in f.comparisons:
                out.append(
                    Verdict(
                        name,
                        f"{c.first} vs {c.second}",
                        c.sentence(),
                        kind="comparison",
                        flag="pass" if c.guaranteed else "",
                    )
                )
        for name, s in self._simulations():
            for m in s.models:
                out.append(
                    Verdict(
                        name,
                        f"simulated answers of {m}",
                        f"{s.parsed_total(m):,} read, {s.unparsed_total(m):,} unreadable",
                        kind="simulation",
                    )
                )
            if s.error:
                out.append(Verdict(name, "analysis", s.error, kind="simulation", flag="fail"))
        return tuple(out)

    def headline(self) -> str:
        parts = []
        for _, s in self._simulations():
            parsed = sum(s.parsed_total(m) for m in s.models)
            parts.append(
                f"{len(s.models)} simulator{'s' * (len(s.models) != 1)}, {parsed:,} answers read"
                + (f" ({s.error})" if s.error else "")
            )
        from ..fidelity.analysis import UNIFORM

        for _, f in self._analyses():
            good = sum(bool(c.guaranteed) for c in f.comparisons)
            sims = [s for s in f.simulators if s.name != UNIFORM]  # the baseline is no simulator
            baseline = " and the uniform baseline" if len(sims) < len(f.simulators) else ""
            parts.append(
                f"{len(sims)} simulator{'s' * (len(sims) != 1)}{baseline} on {f.data.m} questions, "
                f"{good} of {len(f.comparisons)} comparisons guaranteed"
            )
        return "; ".join(parts)

    def answers(self) -> tuple[Answer, ...]:
        return tuple(
            Answer(
                name,
                f"{a.model}/{a.scenario}",
                a.index,
                a.response,
                prompt=a.prompt,
                role=a.model,
                checks=(("read", a.letter is not None),),
            )
            for name, s in self._simulations()
            for a in s.answers
        )

    def models(self) -> tuple[str, ...]:
        found: list[str] = []
        for _, s in self._simulations():
            found += [m for m in s.models if m not in found]
        from ..fidelity.analysis import UNIFORM

        for _, f in self._analyses():  # the uniform baseline is no model
            found += [s.name for s in f.simulators if s.name not in found and s.name != UNIFORM]
        return tuple(found)

    def settings(self) -> dict[str, Any]:
        for _, f in self._analyses():
            return {"loss": f.loss, "gamma": f.gamma, "eta": f.eta, "alpha": f.alpha, "questions": f.data.m}
        for _, s in self._simulations():
            return {"samples": s.samples, "models": ", ".join(s.models)}
        return {}

    @property
    def seconds(self) -> float | None:
        total = sum(float(s.usage.get("seconds", 0) or 0) for _, s in self._simulations())
        return total + sum(float(f.seconds or 0) for _, f in self._analyses())

    @property
    def used(self) -> int:
        return sum(int(s.usage.get("calls", 0) or 0) for _, s in self._simulations())

    def report_parts(self) -> list[str]:
        from ..fidelity.report import report_html

        return [Markup(report_html(f, title=name, section=True)) for name, f in self._analyses()]

    def payload(self) -> Any:
        return dict(self.results)

    def write(self, out_dir: str | os.PathLike[str]) -> list[str]:
        from ..outputs import write_files

        paths: list[str] = []
        for _, f in self._analyses():
            paths += f.write(out_dir)
        for _, s in self._simulations():
            files = {"answers.jsonl": s.answers_jsonl()}
            if s.data is not None:
                files["data.csv"] = s.data.to_csv()
            paths += write_files(out_dir, files)
        return paths


@register("fidelity")
def adapt(title: str, value: Any) -> RunResult | None:
    from ..fidelity.analysis import FidelityResult
    from ..fidelity.simulate import SimulationResult

    kinds = (FidelityResult, SimulationResult)
    if isinstance(value, FidelityResult):
        value = {"analysis": value}
    elif isinstance(value, SimulationResult):
        value = {"simulation": value}
    if isinstance(value, Mapping) and value and all(isinstance(v, kinds) for v in value.values()):
        warns = tuple(w for v in value.values() for w in v.warnings)
        run = FidelityRun(title or "fidelity", warns, results=dict(value))
        if not run._simulations():
            run.refusals["dashboard"] = (
                "a fidelity analysis of a data file does not reopen on the Simulator fidelity "
                "page (it shows simulations): its report (dbpa report ID) has every table and chart"
            )
            run.refusals["answers"] = (
                "a fidelity analysis of a data file holds counts per question, not answers "
                "(they are in the file it read)"
            )
        return run
    return None
