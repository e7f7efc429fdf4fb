"""Plain-language verdicts, shared by the pages, the History page and the HTML report (no
Streamlit here). Every sentence is derived from the same fields the table beneath it shows
(``significant`` = adjusted p <= α), so a verdict cannot disagree with its table.
Names are returned as given: the caller escapes them for where they are shown.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from dbpa_core.audit import AuditResult


def level(result: AuditResult) -> str:
    spec = result.spec
    corr = "" if spec.correction == "none" else f", {spec.correction}-adjusted"
    return f"(α = {spec.alpha}{corr})"


def summary_sentence(result: AuditResult) -> str:
    """One plain sentence: which perturbations (or models) changed the answers."""
    sig = [p.name for p in result.perturbations if p.significant]
    n = len(result.perturbations)
    lvl = level(result)
    models = result.mode == "models"
    if n == 1:
        p = result.perturbations[0]
        does, does_not = (("differs from the reference", "does not differ from the reference")
                          if models else ("changes the answers", "does not change the answers"))
        if p.significant:
            return f"{p.name} {does} significantly {lvl}."
        return (f"{p.name} {does_not} significantly {lvl}. This does not prove it has no "
                "effect: more samples may show one.")
    what = "models differ from the reference" if models else "perturbations change the answers"
    if not sig:
        return (f"None of the {n} {what} significantly {lvl}. This does not prove they have "
                "no effect: more samples may show one.")
    return f"{len(sig)} of {n} {what} significantly {lvl}: " + ", ".join(sig) + "."


@dataclass(frozen=True)
class Gate:
    """The control gate of one audit (the dashboard's ``dbpa audit --fail-on-control``):
    it fails when any perturbation marked *control* changed the answers significantly."""

    model: str
    controls: tuple[str, ...]
    failed: tuple[str, ...]
    targets: tuple[str, ...]
    detected: tuple[str, ...]

    @property
    def passed(self) -> bool:
        return not self.failed

    @property
    def status(self) -> str:
        if not self.controls:
            return "no controls"
        return "PASS" if self.passed else "FAIL"


def gate(result: AuditResult, model: str | None = None) -> Gate:
    ps = result.perturbations
    return Gate(model or result.base.arm.model_label,
                tuple(p.name for p in ps if p.role == "control"),
                tuple(p.name for p in ps if p.role == "control" and p.significant),
                tuple(p.name for p in ps if p.role == "target"),
                tuple(p.name for p in ps if p.role == "target" and p.significant))


def gates(results: Mapping[str, AuditResult]) -> list[Gate]:
    return [gate(r, m) for m, r in results.items()]


def control_failure_sentence(results: Mapping[str, AuditResult]) -> str | None:
    """None when no control is significant; else one sentence naming every failed control
    on every model."""
    failed = [g for g in gates(results) if g.failed]
    if not failed:
        return None
    n = sum(len(g.failed) for g in failed)
    several = len(results) > 1
    parts = [(f"on {g.model}: " if several else "") + ", ".join(g.failed) for g in failed]
    r = next(iter(results.values()))
    return (f"Control gate failed: {n} control perturbation{'s' if n > 1 else ''} changed the "
            f"answers significantly {level(r)} — " + "; ".join(parts) + ". A control should "
            "not change the answer, so the model reacts to what it should ignore, whatever "
            "it does with the targets.")
