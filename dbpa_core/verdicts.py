"""Plain-language verdicts of an audit, shared by the pages, the History page, the HTML
report and the command line (``ui.verdicts`` re-exports them for the dashboard). Every
sentence is derived from the same fields the table beneath it shows (``significant`` =
adjusted p <= α), so a verdict cannot disagree with its table. Names are returned as
given: the caller escapes them for where they are shown.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from .audit import AuditResult, PerturbationResult
from .fmt import SIZE_ANCHORS as SIZE_ANCHORS  # the sizes in words live in the library,
from .fmt import SIZE_BELOW as SIZE_BELOW  # shared with the command line
from .fmt import size_d as size_d
from .fmt import size_text as size_text
from .fmt import size_word as size_word
from .runs.base import Gate as Gate  # the one control gate of every output


def level(result: AuditResult) -> str:
    spec = result.spec
    corr = "" if spec.correction == "none" else f", {spec.correction}-adjusted"
    return f"(α = {spec.alpha}{corr})"


def with_min_effect(result: AuditResult, delta: float | None) -> AuditResult:
    """``result`` read against another minimum effect of interest δ: no sample, ω or p
    changes, only whether each effect above chance exceeds δ."""
    if result.spec.min_effect == delta:
        return result
    return dataclasses.replace(
        result,
        spec=dataclasses.replace(result.spec, min_effect=delta),
        perturbations=tuple(dataclasses.replace(p, min_effect=delta) for p in result.perturbations),
    )


def _named(p: PerturbationResult) -> str:
    word = size_word(size_d(p))
    return f"{p.name} ({word})" if word else p.name


def _beyond_delta(result: AuditResult, detected: list[PerturbationResult]) -> str:
    delta = result.spec.min_effect
    if delta is None or not detected:
        return ""
    n = sum(bool(p.exceeds_min_effect) for p in detected)
    return (
        f" {n} of {len(detected)} exceed{'s' if len(detected) == 1 else ''} the minimum "
        f"effect of interest δ = {delta:g}."
    )


def summary_sentence(result: AuditResult) -> str:
    """One plain sentence: which perturbations (or models) changed the answers detectably,
    and how much, in words (see :func:`size_word`). "Detectably": the test tells the change
    apart from the model's own randomness (adjusted p <= α); that says nothing about its
    size, which is given beside it."""
    sig = [p for p in result.perturbations if p.significant]
    n = len(result.perturbations)
    lvl = level(result)
    models = result.mode == "models"
    if n == 1:
        p = result.perturbations[0]
        does, does_not = (
            ("differs from the reference", "does not differ from the reference")
            if models
            else ("changes the answers", "does not change the answers")
        )
        if p.significant:
            d = size_d(p)
            size = "." if d is None else f": a {size_word(d)} change (d = {d:.2f})."
            return f"{p.name} {does} detectably {lvl}{size}" + _beyond_delta(result, sig)
        return (
            f"{p.name} {does_not} detectably {lvl}. This does not prove it has no "
            "effect: more samples may show one."
        )
    what = "models differ from the reference" if models else "perturbations change the answers"
    if not sig:
        return (
            f"None of the {n} {what} detectably {lvl}. This does not prove they have "
            "no effect: more samples may show one."
        )
    return (
        f"{len(sig)} of {n} {what} detectably {lvl}: "
        + ", ".join(map(_named, sig))
        + "."
        + _beyond_delta(result, sig)
    )


def outcome(p: PerturbationResult, gate: Gate | None = None) -> str:
    """A control 'passes', 'fails: changed' or, read with its audit's ``gate``, is 'not
    testable at k = 5' (no result could have made it fail); a target is 'detected' or
    'not detected'."""
    if p.role == "control":
        if p.significant:
            return "fails: changed"
        return gate.control_word(p.name) if gate is not None else "passes"
    if p.role == "target":
        return "detected" if p.significant else "not detected"
    return "changed" if p.significant else "no change shown"


def gate(result: AuditResult, model: str | None = None) -> Gate:
    """The control gate of one audit, as every output computes it
    (:meth:`dbpa_core.runs.RunResult.gate`: 'NOT TESTABLE' where a control could not have
    failed), with the model it is about."""
    from .runs import as_run

    return dataclasses.replace(as_run(result).gate(), model=model or result.base.arm.model_label)


def gates(results: Mapping[str, AuditResult]) -> list[Gate]:
    return [gate(r, m) for m, r in results.items()]


def control_failure_sentence(results: Mapping[str, AuditResult]) -> str | None:
    """None when no control changed the answers detectably; else one sentence naming every failed control
    on every model."""
    failed = [g for g in gates(results) if g.failed]
    if not failed:
        return None
    n = sum(len(g.failed) for g in failed)
    several = len(results) > 1
    parts = [(f"on {g.model}: " if several else "") + ", ".join(g.failed) for g in failed]
    r = next(iter(results.values()))
    return (
        f"Control gate failed: {n} control perturbation{'s' if n > 1 else ''} changed the "
        f"answers detectably {level(r)} — " + "; ".join(parts) + ". A control should "
        "not change the answer, so the model reacts to what it should ignore, whatever "
        "it does with the targets."
    )


def control_untestable_sentence(results: Mapping[str, AuditResult]) -> str | None:
    """None unless a gate that did not fail could not have failed (too few samples for any
    result to be significant after the correction); else one sentence naming those
    controls and why, so a page never shows such a gate as passed."""
    open_gates = [g for g in gates(results) if g.untestable and not g.failed]
    if not open_gates:
        return None
    several = len(results) > 1
    parts = [(f"on {g.model}: " if several else "") + ", ".join(g.untestable) for g in open_gates]
    return (
        "Control gate NOT TESTABLE: " + "; ".join(parts) + f" — {open_gates[0].why_untestable}. "
        "No control changed the answers, but none could have: take more samples."
    )
