"""JUnit XML reports for CI: one test case per tested thing, failures with their numbers.

``dbpa audit SPEC --junit FILE`` (and ``dbpa attack SPEC --junit FILE``) writes a report
that CI systems (GitHub Actions test reporters, GitLab, Jenkins, Azure DevOps) read: a
``<testsuites>`` with one ``<testsuite>`` per part of the run, each with ``<properties>``
holding the run's settings (model, k, B, measure, correction, α, seed, ...) and one
``<testcase>`` per:

* perturbation (or model against the reference). A *control* perturbation that changes the
  answers significantly (after the correction) is a failure; a *target* that does not is
  a failure only when ``target`` is among the gated kinds (``--fail-on target``); a
  perturbation without a role is reported and never fails;
* answer check on each perturbation: a significant change (after the correction across the
  checks) is a failure; a check with nothing to compare is skipped;
* attack at each ρ of a robustness battery: an attack success rate above ``max_asr`` is a
  failure (without ``--max-asr`` the rows are reported and never fail);
* in a suite of cases, case x perturbation (reported), pooled verdict per perturbation
  (gated as an audit's perturbation) and answer check (per case and pooled);
* any other verdict of any kind of run (:func:`run_suites` reads every run through
  :mod:`dbpa_core.runs`).

An audit that cannot run (a backend failure, exit 3) still leaves a report: one test case
in *error* with the reason, so that the CI page says why instead of finding no report.

Every failure message carries the numbers (ω, above chance, p, adjusted p, α; the check's
rates and interval; ASR with its interval). A test case's name is the perturbation's name;
:func:`perturbation_case` takes an optional ``case`` id so that audits of many cases can
name each case × perturbation (``case / perturbation``) in the same report.

The exit code is separate: the report marks every failure; ``dbpa`` exits 1 only for the
kinds ``--fail-on`` names (``--fail-on-control`` is ``--fail-on control``) or, for
batteries, when ``--max-asr`` is given and exceeded.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import socket
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import __version__

if TYPE_CHECKING:
    from .runs import RunResult

FAIL_KINDS = ("control", "target", "check")
# characters XML 1.0 cannot hold at all, even escaped (a model name or a check name from a
# file could contain them): dropped
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


class JUnitPathError(ValueError):
    """The report cannot be written where asked (found before any call is made)."""


@dataclass(frozen=True)
class Case:
    """One ``<testcase>``: ``failure`` (a one-line message with the numbers) makes it a
    failure, ``error`` (what went wrong) an error, ``skipped`` (why) a skipped one;
    ``details`` goes in ``<system-out>``."""

    name: str
    classname: str
    failure: str | None = None
    failure_type: str = ""
    skipped: str | None = None
    details: str = ""
    error: str | None = None


@dataclass(frozen=True)
class Suite:
    """One ``<testsuite>`` with its settings as ``<properties>``."""

    name: str
    cases: tuple[Case, ...]
    properties: Mapping[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def failures(self) -> int:
        return sum(c.failure is not None for c in self.cases)

    @property
    def errors(self) -> int:
        return sum(c.error is not None and c.failure is None for c in self.cases)

    @property
    def skipped(self) -> int:
        return sum(c.skipped is not None and c.failure is None and c.error is None for c in self.cases)


# --------------------------------------------------------------------------- options
def parse_fail_on(values: Iterable[str] | None, *, fail_on_control: bool = False) -> frozenset:
    """The gated kinds from ``--fail-on`` values (repeatable, comma-separated); raises
    ValueError naming an unknown kind."""
    kinds = {"control"} if fail_on_control else set()
    for v in values or ():
        for k in (x.strip().lower() for x in str(v).split(",")):
            if not k:
                continue
            k = {"controls": "control", "targets": "target", "checks": "check"}.get(k, k)
            if k not in FAIL_KINDS:
                raise ValueError(
                    f"--fail-on {v}: unknown kind {k!r}; use "
                    f"{', '.join(FAIL_KINDS)} (comma-separated or repeated)."
                )
            kinds.add(k)
    return frozenset(kinds)


def check_junit_path(path: str | os.PathLike) -> Path:
    """``path`` if a report can be written there (its folder exists or can be created, and
    it is not a folder), else :class:`JUnitPathError`. Called before any paid call."""
    from .outputs import OutputDirError, check_out_dir

    p = Path(path)
    if p.is_dir():
        raise JUnitPathError(f"--junit {path}: is a folder; give a file name such as {p / 'dbpa-junit.xml'}.")
    try:
        check_out_dir(p.parent if str(p.parent) else ".")
    except OutputDirError as exc:
        raise JUnitPathError(str(exc).replace("--out", "--junit", 1)) from None
    return p


# --------------------------------------------------------------------------- numbers
def _p(p: float | None) -> str:
    """p as the command line writes it (``< 0.001``, ``0.0123``)."""
    from .fmt import fmt_p

    return "nan" if p is None or p != p else fmt_p(p)


def _num(x: float | None, digits: int = 3) -> str:
    return "nan" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def case_name(name: str, case: str | None = None) -> str:
    """A test case's name: the perturbation, prefixed by the case id when there is one."""
    return f"{case} / {name}" if case else name


def perturbation_case(
    p: Any, *, alpha: float, correction: str, fail_on: frozenset, classname: str, case: str | None = None
) -> Case:
    """The test case of one tested perturbation (a :class:`~dbpa_core.audit.PerturbationResult`
    or anything with its fields), as :func:`run_suites` writes it."""
    from .runs.base import tested_verdict

    v = tested_verdict(p, part=case or "", family=correction, alpha=alpha)
    name = case_name(p.name, case)
    if v.failed and v.gate is not None and (v.gate != "target" or "target" in fail_on):
        return Case(name, classname, v.message, FAILURE_TYPES[v.gate], details=v.details)
    return Case(name, classname, details=v.details)


def check_case(c: Any, *, classname: str, case: str | None = None) -> Case:
    """The test case of one answer check on one perturbation
    (a :class:`~dbpa_core.checks.CheckResult`)."""
    from .runs.base import check_row, check_verdict

    v = check_verdict(check_row(c.to_dict(), part=case or "", family=c.correction))
    name = case_name(v.name, case)
    if v.p_value is None:
        return Case(name, classname, skipped=v.message, details=c.text)
    if v.failed:
        return Case(name, classname, v.message, "check-changed", details=c.text)
    return Case(name, classname, details=v.message)


def _spec_properties(spec: Any, fail_on: frozenset) -> dict[str, Any]:
    from .spec import model_label

    return {
        "dbpa.version": __version__,
        "spec": spec.name,
        "source": spec.source,
        "mode": spec.mode,
        "models": ", ".join(model_label(m) for m in spec.models),
        "samples": spec.samples,
        "permutations": spec.permutations,
        "measure": spec.measure,
        "null": spec.null,
        "correction": spec.correction,
        "alpha": spec.alpha,
        "seed": spec.seed,
        "temperature": spec.temperature,
        "top_p": spec.top_p,
        "max_tokens": spec.max_tokens,
        "embedder": spec.embedder.get("backend", "local"),
        "min_effect": spec.min_effect,
        "fail_on": ",".join(sorted(fail_on)) or "none",
    }


def audit_suites(result: Any, *, fail_on: frozenset = frozenset(), case: str | None = None) -> list[Suite]:
    """The suites of an :class:`~dbpa_core.audit.AuditResult`: its perturbations, and its
    answer checks when the spec has any (:func:`run_suites` of its run)."""
    from .runs import as_run

    if case is not None:  # one case of many: its cases named "case / perturbation"
        spec = result.spec
        props = _spec_properties(spec, fail_on)
        cls = f"dbpa.audit.{_ident(spec.name)}"
        kw = dict(alpha=spec.alpha, correction=spec.correction, fail_on=fail_on, classname=cls, case=case)
        suites = [
            Suite(
                f"dbpa audit {spec.name}",
                tuple(perturbation_case(p, **kw) for p in result.perturbations),
                props,
            )
        ]
        if result.checks:
            checks = tuple(check_case(c, classname=f"{cls}.checks", case=case) for c in result.checks)
            suites.append(Suite(f"dbpa audit {spec.name}: answer checks", checks, props))
        return suites
    return run_suites(as_run(result), fail_on=fail_on)


def battery_suites(result: Any, *, max_asr: float | None = None) -> list[Suite]:
    """The suite of a :class:`~dbpa_core.attacks.battery.BatteryResult`: one test case per
    attack and ρ (over every item), a failure when its ASR exceeds ``max_asr``."""
    from .runs import BatteryRun

    run = BatteryRun(result.spec.name, batteries={result.spec.name: result}, max_asr=max_asr)
    return run_suites(run)


# what a failed gate is called in the report (the failure's type)
FAILURE_TYPES = {
    "control": "control-changed",
    "target": "target-unchanged",
    "check": "check-changed",
    "asr": "asr-exceeded",
}
# the test suites a run's verdicts are grouped in, by the verdict's kind
SUITE_SUFFIX = {
    "check": ": answer checks",
    "case": ": each case",
    "pooled": ": pooled over the cases",
}


def run_suites(run: RunResult, *, fail_on: frozenset = frozenset()) -> list[Suite]:
    """The suites of any run (a :class:`~dbpa_core.runs.RunResult`): one test case per
    verdict (a perturbation, a case x perturbation, a pooled verdict, an answer check, an
    attack at a ρ, a fidelity comparison, ...), grouped by what they test. A verdict that
    fails its gate is a failure whether or not the gate is asked for (``fail_on`` decides
    the exit code, see :func:`gate_failures`), except a target, which fails only when
    ``target`` is gated; a check with nothing to compare is skipped."""
    props = {"dbpa.version": __version__, **run.properties(), "fail_on": ",".join(sorted(fail_on)) or "none"}
    base = f"dbpa {run.command or run.kind} {run.title}"
    cls = f"dbpa.{run.command or run.kind}.{_ident(run.title)}"
    groups: dict[str, list] = {}
    for v in run.verdicts():
        if v.kind == "info":
            continue
        groups.setdefault(SUITE_SUFFIX.get(v.kind, ""), []).append(v)
    suites = []
    for i, (suffix, verdicts) in enumerate(groups.items()):
        several = len({v.part for v in verdicts}) > 1
        cases = []
        for v in verdicts:
            name = case_name(v.name, v.part if several else None)
            classname = cls + (".checks" if v.kind == "check" else "")
            details = v.details or v.message or v.outcome
            gated = v.failed and v.gate is not None and (v.gate != "target" or "target" in fail_on)
            if gated:
                cases.append(Case(name, classname, v.message, FAILURE_TYPES[v.gate], details=details))
            elif v.kind == "check" and v.p_value is None:
                cases.append(Case(name, classname, skipped=v.message or v.outcome, details=v.outcome))
            else:
                cases.append(Case(name, classname, details=details))
        suites.append(Suite(base + suffix, tuple(cases), props, float(run.seconds or 0.0) if i == 0 else 0.0))
    if not suites:
        why = run.refusals.get("junit") or f"this {run.label or run.kind} holds no verdicts to report"
        suites.append(Suite(base, (Case(run.kind, cls, skipped=why),), props))
    return suites


def error_suites(spec: Any, message: str, *, fail_on: frozenset = frozenset()) -> list[Suite]:
    """The report of an audit that could not run (a backend failure: key, server, model,
    malformed answers): one test case in error, with the message, so that CI shows why."""
    return [
        Suite(
            f"dbpa audit {spec.name}",
            (Case("audit", f"dbpa.audit.{_ident(spec.name)}", error=message),),
            _spec_properties(spec, fail_on),
        )
    ]


def gate_failures(suites: Sequence[Suite], fail_on: frozenset) -> list[Case]:
    """The failed cases of the gated kinds (what makes ``dbpa`` exit 1)."""
    kinds = {
        "control-changed": "control",
        "target-unchanged": "target",
        "check-changed": "check",
        "asr-exceeded": "asr",
    }
    return [
        c
        for s in suites
        for c in s.cases
        if c.failure is not None and kinds.get(c.failure_type) in (*fail_on, "asr")
    ]


# --------------------------------------------------------------------------- XML
def _ident(name: str) -> str:
    """A name as a dotted class-name part (letters, digits, _ and -)."""
    return re.sub(r"[^\w-]+", "_", name).strip("_") or "unnamed"


def _text(x: Any) -> str:
    return _NOT_XML.sub("", "" if x is None else str(x))


def to_xml(suites: Sequence[Suite], *, name: str = "dbpa", timestamp: datetime | None = None) -> str:
    """The report as a string (UTF-8 XML declaration included)."""
    when = (timestamp or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")
    root = ET.Element("testsuites", name=_text(name))
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    seconds = 0.0
    for i, s in enumerate(suites):
        counts = {"tests": len(s.cases), "failures": s.failures, "errors": s.errors, "skipped": s.skipped}
        el = ET.SubElement(
            root,
            "testsuite",
            {
                "id": str(i),
                "package": "dbpa",
                "name": _text(s.name),
                **{k: str(v) for k, v in counts.items()},
                "time": f"{s.seconds:.3f}",
                "timestamp": when,
                "hostname": _text(socket.gethostname()),
            },
        )
        if s.properties:
            props = ET.SubElement(el, "properties")
            for k, v in s.properties.items():
                ET.SubElement(props, "property", name=_text(k), value=_text("" if v is None else v))
        for c in s.cases:
            tc = ET.SubElement(el, "testcase", name=_text(c.name), classname=_text(c.classname), time="0")
            if c.failure is not None:
                f = ET.SubElement(
                    tc, "failure", message=_text(c.failure), type=_text(c.failure_type or "failure")
                )
                f.text = _text(c.failure)
            elif c.error is not None:
                e = ET.SubElement(tc, "error", message=_text(c.error), type="run-failed")
                e.text = _text(c.error)
            elif c.skipped is not None:
                ET.SubElement(tc, "skipped", message=_text(c.skipped))
            if c.details:
                ET.SubElement(tc, "system-out").text = _text(c.details)
        for k in totals:
            totals[k] += counts[k]
        seconds += s.seconds
    for k, v in totals.items():
        root.set(k, str(v))
    root.set("time", f"{seconds:.3f}")
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def write_junit(path: str | os.PathLike, suites: Sequence[Suite], **kw: Any) -> str:
    """Write the report to ``path`` atomically (a temporary file renamed into place, so a
    reader never sees half a report); returns the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.parent / f".{p.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp"
    try:
        with open(tmp, "x", encoding="utf-8") as fh:
            fh.write(to_xml(suites, **kw))
        os.replace(tmp, p)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return str(p)


__all__ = [
    "FAIL_KINDS",
    "Case",
    "JUnitPathError",
    "Suite",
    "audit_suites",
    "battery_suites",
    "case_name",
    "check_case",
    "check_junit_path",
    "error_suites",
    "gate_failures",
    "parse_fail_on",
    "perturbation_case",
    "run_suites",
    "to_xml",
    "write_junit",
]
