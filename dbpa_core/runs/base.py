"""What every kind of run answers: the one interface the outputs read.

A :class:`RunResult` wraps one finished run of any kind (an audit, a suite of cases, a
robustness battery, a fidelity analysis or simulation, a sensitivity study, a scan) and
answers the same questions about it:

* :meth:`~RunResult.headline`: one line for the history list and ``history show``;
* :meth:`~RunResult.verdicts`: every test as a :class:`Verdict` (raw and adjusted p, the
  family it was adjusted in, and the gate it can fail: ``control``, ``target``, ``check``
  or ``asr``) — JUnit, ``--fail-on`` and the report's summary read these;
* :meth:`~RunResult.checks`: the answer checks as :class:`CheckRow` (one per check x
  perturbation, per case in a suite, and pooled across cases when the run has them);
* :meth:`~RunResult.answers`: every answer the run keeps, as :class:`Answer` (with the
  prompt that produced it and the checks it passed) — the report's table and checksum;
* :meth:`~RunResult.models`, :meth:`~RunResult.settings`, :meth:`~RunResult.provenance`;
* :meth:`~RunResult.payload`: what the run history stores to rebuild it.

Before a run, each kind declares what it will ask: :meth:`RunResult.requests_of` turns a
spec of that kind into its :class:`Request` list (prompt x model x sample, with the
sampling parameters), and :func:`dbpa_core.runs.requests` asks each kind in turn. The
Batch API job, the replay check and the duration estimate read only that list.

Each kind is one module of :mod:`dbpa_core.runs` that subclasses :class:`RunResult` and
registers itself with :func:`register`; :func:`dbpa_core.runs.as_run` finds the adapter of
a result. No output asks which kind a run is: a kind that cannot give something says why
in :attr:`RunResult.refusals` (one line per output), and the output prints that line.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from ..fmt import fmt_p

if TYPE_CHECKING:
    from ..backends.base import SampleRequest


class RunRefused(ValueError):
    """An output this run cannot give; the message says why in one line."""


# the gates --fail-on names (and "asr", which --max-asr sets)
FAIL_KINDS = ("control", "target", "check")


@dataclass(frozen=True)
class Verdict:
    """One tested thing of a run.

    ``part`` is where in the run it lies (an audit's job, a case, an attack, a study);
    ``name`` what was tested (a perturbation, a check on a perturbation, an attack at a
    ρ); ``role`` 'control', 'target' or None. ``p_value`` and ``p_adjusted`` (None where
    the verdict is not a test, e.g. a fidelity guarantee), ``family`` the tests the
    adjustment ran over, in words ("BH over the suite's 48 tests"), and ``significant``.
    ``gate`` is the kind of ``--fail-on`` it can fail (``control``, ``target``,
    ``check``, ``asr`` or None), ``failed`` whether it fails that gate (a control that
    changed the answers, a target that did not, a check that changed, an attack above
    ``--max-asr``); ``outcome`` says it in words with the numbers, ``message`` is the
    one-line failure message (JUnit's), ``flag`` the report's colour ('changed',
    'unchanged', 'fail', 'pass' or '').
    """

    part: str
    name: str
    outcome: str
    kind: str = "test"
    role: str | None = None
    p_value: float | None = None
    p_adjusted: float | None = None
    family: str = ""
    significant: bool | None = None
    gate: str | None = None
    failed: bool = False
    message: str = ""
    flag: str = ""
    details: str = ""

    @property
    def what(self) -> str:
        """The name with its role, as the report's summary writes it."""
        return self.name + (f" ({self.role})" if self.role else "")

    def fails(self, fail_on: frozenset[str] | set[str]) -> bool:
        """Whether this verdict fails one of the gated kinds (``asr`` always gates:
        it is only set when ``--max-asr`` was given)."""
        return self.failed and self.gate is not None and (self.gate in fail_on or self.gate == "asr")


@dataclass(frozen=True)
class CheckRow:
    """One answer check on one perturbation (in one case, or pooled over the cases: then
    ``part`` is 'pooled')."""

    part: str
    check: str
    perturbation: str
    text: str
    role: str | None = None
    p_value: float | None = None
    p_adjusted: float | None = None
    significant: bool = False
    stars: str = ""
    model_graded: bool = False
    family: str = ""


@dataclass(frozen=True)
class Answer:
    """One answer a run keeps: the ``part`` and ``arm`` it belongs to, its ``index`` in the
    arm, the ``prompt`` that produced it (newlines kept) and ``checks``: (check name,
    outcome) — True/False, a number of words, or None where it could not be graded."""

    part: str
    arm: str
    index: int
    response: str
    prompt: str = ""
    role: str | None = None
    checks: tuple[tuple[str, Any], ...] = ()

    def line(self, run: int) -> dict[str, Any]:
        """The fields the checksum hashes (see :func:`dbpa_core.runs.checksum_line`)."""
        return {
            "run": run,
            "part": self.part,
            "arm": self.arm,
            "index": self.index,
            "response": self.response,
        }


@dataclass(frozen=True)
class Gate:
    """The control gate of a run, the one every output reads (the command line's
    ``--fail-on-control``, the report, JUnit, the history and every dashboard page): the
    controls tested, those that failed; the targets, those detected; the controls no result
    could have made fail (too few samples for any result to be significant after the
    correction) and why. ``model`` names the model it is about where a page shows one gate
    per model ('' otherwise). ``status`` is 'PASS', 'FAIL', 'NOT TESTABLE' (no control
    failed, but one could not have) or 'no controls'."""

    controls: tuple[str, ...]
    failed: tuple[str, ...]
    targets: tuple[str, ...]
    detected: tuple[str, ...]
    untestable: tuple[str, ...] = ()  # controls no result could make fail (too few samples)
    why_untestable: str = ""
    model: str = ""

    @property
    def passed(self) -> bool:
        """No control failed (see :attr:`testable` for whether one could have)."""
        return not self.failed

    @property
    def testable(self) -> bool:
        """Every control could have failed at this k and correction."""
        return not self.untestable

    @property
    def status(self) -> str:
        if not self.controls:
            return "no controls"
        if not self.failed and self.untestable:
            return "NOT TESTABLE"
        return "PASS" if self.passed else "FAIL"

    def control_word(self, name: str) -> str:
        """One control's outcome in words: 'fails: changed', 'not testable' or 'passes'."""
        if name in self.failed:
            return "fails: changed"
        if name in self.untestable:  # "not testable at k = 5", as the reason starts
            return self.why_untestable.split(":")[0].strip() or "not testable"
        return "passes"


def gate_of(verdicts: Sequence[Verdict]) -> Gate:
    """The control gate over ``verdicts`` (the gated perturbation verdicts: pooled ones
    for a suite, the audit's own for an audit)."""

    gated = [v for v in verdicts if v.gate in ("control", "target")]
    several = len({v.part for v in gated}) > 1

    def who(v: Verdict) -> str:
        return f"{v.part}: {v.name}" if several and v.part else v.name

    untestable = [v for v in gated if v.gate == "control" and v.flag == "untestable"]
    return Gate(
        tuple(who(v) for v in gated if v.gate == "control"),
        tuple(who(v) for v in gated if v.gate == "control" and v.failed),
        tuple(who(v) for v in gated if v.gate == "target"),
        tuple(who(v) for v in gated if v.gate == "target" and v.significant),
        tuple(who(v) for v in untestable),
        untestable[0].message if untestable else "",
    )


def gate_failures(run: RunResult, fail_on: frozenset[str] | set[str]) -> list[Verdict]:
    """The verdicts of ``run`` that fail the gated kinds (what makes ``dbpa`` exit 1)."""
    return [v for v in run.verdicts() if v.fails(fail_on)]


@dataclass(frozen=True)
class Request:
    """One sample a run will ask a model for: ``part`` is where it belongs (an audit's arm,
    ``case c1: base`` in a suite, the battery's ``answers``, ``rti`` or ``curve``, a
    simulation's ``model: scenario``), ``model`` the model's config, ``sample`` the last
    turn, the sample's index, its seed and the sampling parameters; ``prompt`` the whole
    prompt as written (every turn of a prompt sent in several), as a replay file records
    it ('' for ``sample.prompt``); ``arm`` and ``case``: the audit arm and the suite's case
    it belongs to ('' for a kind without them), the rows of the estimate."""

    part: str
    model: Mapping[str, Any]
    sample: SampleRequest
    whole: str = ""
    arm: str = ""
    case: str = ""

    @property
    def prompt(self) -> str:
        return self.whole or self.sample.prompt


@dataclass(frozen=True)
class Comparison:
    """Two runs of one kind side by side (:meth:`RunResult.compare`): ``lines`` say it in
    words and tables; ``changed`` names each changed verdict with how it changed
    ('comedian (now significant)'), ``what`` says what such a change is ('verdict(s)
    changed'); ``settings_changed`` the settings that differ (A, B); ``notes`` further
    differences in words (e.g. the model builds that answered); ``data`` all of it as JSON."""

    lines: tuple[str, ...]
    changed: tuple[str, ...]
    what: str
    data: Mapping[str, Any]
    settings_changed: Mapping[str, tuple[Any, Any]] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


@dataclass
class RunResult:
    """The base of every kind's adapter (see the module docstring). ``title`` names the
    run; subclasses set ``kind`` and override what their kind has."""

    title: str = ""
    warnings: tuple[str, ...] = ()
    # output -> one line saying why this run cannot give it (never a silent empty output)
    refusals: dict[str, str] = field(default_factory=dict)

    kind: ClassVar[str] = ""
    label: ClassVar[str] = ""  # the kind in words ("suite of cases")
    command: ClassVar[str] = ""  # the dbpa command that runs it ("audit", "attack", ...)
    page: ClassVar[str] = ""  # the dashboard page it reopens on ('' for the History page)

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        _KINDS.append(cls)  # every kind is asked for the requests of a spec

    # ---------------------------------------------------------------- what it asks
    @classmethod
    def requests_of(cls, spec: Any) -> list[Request] | None:
        """Every sample a run of this kind on ``spec`` asks its models for (calls
        nothing), or None when ``spec`` is not of this kind."""
        return None

    @classmethod
    def estimate_of(cls, spec: Any, cache: Any = None) -> dict[str, Any] | None:
        """The calls, tokens and cost of a run of this kind on ``spec`` (the answers in
        ``cache`` subtracted; calls nothing), or None when ``spec`` is not of this kind
        or the kind has no such estimate."""
        return None

    # ---------------------------------------------------------------- what it says
    def headline(self) -> str:
        """One line: what came out."""
        vs = [v for v in self.verdicts() if v.significant is not None]
        return f"{sum(bool(v.significant) for v in vs)} of {len(vs)} tests significant"

    def verdicts(self) -> tuple[Verdict, ...]:
        return ()

    def gate(self) -> Gate:
        return gate_of([v for v in self.verdicts() if v.kind in ("perturbation", "pooled")])

    def checks(self) -> tuple[CheckRow, ...]:
        return ()

    def answers(self) -> tuple[Answer, ...]:
        return ()

    def models(self) -> tuple[str, ...]:
        return ()

    def settings(self) -> dict[str, Any]:
        return {}

    def provenance(self) -> tuple[str, ...]:
        """Which model builds answered (as the servers reported them)."""
        return ()

    @property
    def seconds(self) -> float | None:
        return None

    # ---------------------------------------------------------------- what the outputs need
    def properties(self) -> dict[str, Any]:
        """The settings as JUnit ``<properties>``."""
        return {k: v for k, v in self.settings().items() if v is not None and not isinstance(v, (dict, list))}

    def report_parts(self) -> list[str]:
        """HTML sections (made by :mod:`dbpa_core.render`, safe to embed) of this run's own
        report: its tables and charts."""
        return []

    def report_notes(self) -> list[str]:
        return []

    def payload(self) -> Any:
        """What the run history stores to rebuild this run (:func:`dbpa_core.runs.as_run`
        reads it back); raises :class:`RunRefused` when the run is not stored as one."""
        raise RunRefused(
            self.refusals.get("history") or f"a {self.label or self.kind} is not stored as one run"
        )

    def write(self, out_dir: str | os.PathLike[str]) -> list[str]:
        """Write the run's files (its results, answers, checks and report) into
        ``out_dir``; returns their paths. :class:`RunRefused` when it has none."""
        raise RunRefused(self.refusals.get("export") or f"a {self.label or self.kind} has no files to write")

    def audit_results(self) -> Mapping[str, Any] | None:
        """The audits to store in the history's audit tables (by job), or None when the
        run is stored as one result (every kind but an audit)."""
        return None

    def compare(self, other: RunResult, *, max_asr: float | None = None) -> Comparison:
        """This run (A) against ``other`` (B, a run of the same kind): which verdicts
        changed and which settings differ. ``max_asr``: the attack success rate above which
        a battery's attack fails (a battery has no verdict of its own without it).
        :class:`RunRefused` for a kind that cannot be compared."""
        raise RunRefused(self.refusals.get("compare") or type(self).compare_refusal() or "")

    @classmethod
    def compare_refusal(cls) -> str | None:
        """None when two runs of this kind can be compared (:meth:`compare`), else one
        line saying why not (known from the kind alone, before a run is read)."""
        if cls.compare is not RunResult.compare:
            return None
        able = [k.label or k.kind for k in _KINDS if k.compare is not RunResult.compare]
        which = ", ".join(able[:-1]) + (" and " if len(able) > 1 else "") + able[-1] if able else "no"
        return (
            f"{_a(cls.label or cls.kind)} cannot be compared with another run: only {which} runs can "
            "(it reopens on its dashboard page)"
        )

    @property
    def used(self) -> int:
        """Fresh calls and embeddings this run made (0: everything came from the cache)."""
        return 0


# --------------------------------------------------------------------------- registry
_KINDS: list[type[RunResult]] = []


def requests(spec: Any) -> tuple[Request, ...]:
    """Every sample a run of ``spec`` (an audit or suite spec, a battery spec, a
    simulation spec, a fidelity file, a scan's specs) asks its models for, from the kind
    that knows it (:meth:`RunResult.requests_of`); calls nothing. :class:`RunRefused`
    when no kind knows ``spec``."""
    for kind in _KINDS:
        found = kind.requests_of(spec)
        if found is not None:
            return tuple(found)
    raise RunRefused(f"{type(spec).__name__} is not a spec of a kind of run dbpa knows")


def estimate(spec: Any, cache: Any = None) -> dict[str, Any]:
    """The calls, tokens and cost of a spec (:meth:`RunResult.estimate_of` of its kind,
    counted from the requests its run asks: an audit's or a suite's is ``{"arms": [...],
    "totals": {...}, "unknown_prices": [...]}``, a battery's its counts per part, see
    :mod:`dbpa_core.runs.costs`); calls nothing. :class:`RunRefused` when no kind
    estimates ``spec``."""
    for kind in _KINDS:
        found = kind.estimate_of(spec, cache)
        if found is not None:
            return found
    raise RunRefused(f"{type(spec).__name__} is not a spec dbpa estimates this way")


def kind_named(kind: str) -> type[RunResult] | None:
    """The class of the kind of run called ``kind`` (as the history records it), or None."""
    return next((k for k in _KINDS if k.kind == kind), None)


def replay_need(reqs: Sequence[Request]) -> dict[str, int]:
    """prompt -> how many recorded answers a replay file must hold for it (the highest
    sample index asked, plus one: a same-prompt control takes the answers after the
    base's), in the order first asked: what the replay check compares with the file."""
    need: dict[str, int] = {}
    for r in reqs:
        need[r.prompt] = max(need.get(r.prompt, 0), r.sample.index + 1)
    return need


def calls_by_model(
    reqs: Sequence[Request], cached: Callable[[Request], bool]
) -> list[tuple[Mapping[str, Any], int]]:
    """(model, calls not ``cached``) per model, in the order first asked: what the
    duration estimate multiplies by a local model's measured seconds per answer."""
    out: dict[str, tuple[Mapping[str, Any], int]] = {}
    for r in reqs:
        key = repr(sorted((str(k), repr(v)) for k, v in r.model.items()))
        model, n = out.get(key, (r.model, 0))
        out[key] = (model, n + (not cached(r)))
    return list(out.values())


Adapter = Callable[[str, Any], "RunResult | None"]
_ADAPTERS: list[tuple[str, Adapter]] = []


def register(kind: str) -> Callable[[Adapter], Adapter]:
    """Register an adapter: ``adapter(title, value) -> RunResult | None`` (None when the
    value is not of its kind). :func:`dbpa_core.runs.as_run` asks each in turn."""

    def deco(fn: Adapter) -> Adapter:
        _ADAPTERS.append((kind, fn))
        return fn

    return deco


def adapters() -> tuple[tuple[str, Adapter], ...]:
    return tuple(_ADAPTERS)


# --------------------------------------------------------------------------- shared wording
def _a(name: str) -> str:
    return ("an " if name[:1] in "aeiou" else "a ") + name


def folder_name(name: str) -> str:
    """A part's name as one folder name (a run of several parts writes one folder each)."""
    import re

    return re.sub(r"[^\w.-]+", "_", name).strip("_.") or "part"


def p_text(p: float | None) -> str:
    """p as the command line writes it (``< 0.001``, ``0.0123``; '–' for none)."""
    return "–" if p is None or (isinstance(p, float) and math.isnan(p)) else fmt_p(p)


def p_is(label: str, p: float | None) -> str:
    """``p = 0.0123`` or ``p < 0.001`` (never ``p = < 0.001``): ``label`` and p as the
    command line writes it."""
    text = p_text(p)
    return f"{label} {text}" if text.startswith("<") else f"{label} = {text}"


def num(x: float | None, digits: int = 3) -> str:
    return "nan" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def perturbation_verdict(
    *,
    part: str,
    name: str,
    role: str | None,
    model: str,
    effect_size: float,
    chance: float,
    above: float,
    p_value: float,
    p_adjusted: float,
    significant: bool,
    stars: str,
    family: str,
    alpha: float,
    kind: str = "perturbation",
    extra: str = "",
    untestable: str = "",
) -> Verdict:
    """The verdict of one DBPA test (an audit's perturbation, a case's, a pooled one);
    ``untestable``: why a control could not have failed (too few samples for any result
    to be significant after the correction), known before the run."""
    numbers = (
        f"omega = {num(effect_size)}, chance = {num(chance)}, above chance = {above:+.3f}, "
        f"{p_is('p', p_value)}, {p_is('p_adj', p_adjusted)} ({family}), alpha = {alpha:g}{extra}"
    )
    word = "changed the answers" if significant else "no detectable change"
    outcome = (
        f"{word}: ω above chance {above:+.3f}, {p_is('p', p_value)}, {p_is('adjusted p', p_adjusted)} {stars}"
    ).rstrip()
    gate, failed, flag, message = None, False, ("changed" if significant else "unchanged"), ""
    if role == "control":
        gate, failed, flag = "control", bool(significant), ("fail" if significant else "pass")
        if failed:
            message = f"control {name!r} changed the answers: {numbers} (p_adj <= alpha)"
        elif untestable:
            flag, message = "untestable", untestable
    elif role == "target":
        gate, failed = "target", not significant
        flag = "fail" if failed else flag
        if failed:
            message = f"target {name!r} did not detectably change the answers: {numbers} (p_adj > alpha)"
    details = (
        f"{name} (role {role or 'none'}, model {model}): "
        f"{'changed the answers' if significant else 'did not detectably change the answers'}; {numbers}"
    )
    return Verdict(
        part,
        name,
        outcome,
        kind=kind,
        role=role,
        p_value=p_value,
        p_adjusted=p_adjusted,
        family=family,
        significant=bool(significant),
        gate=gate,
        failed=failed,
        message=message or details,
        flag=flag,
        details=details,
    )


def tested_verdict(p: Any, *, part: str, family: str, alpha: float, untestable: str = "") -> Verdict:
    """:func:`perturbation_verdict` of one tested perturbation (a
    :class:`~dbpa_core.audit.PerturbationResult`, or anything with its fields), its minimum
    effect said when the spec set one."""
    extra = ""
    if getattr(p, "min_effect", None) is not None:
        word = "exceeded" if p.exceeds_min_effect else "not exceeded"
        extra = f", minimum effect {p.min_effect:g} {word}"
    return perturbation_verdict(
        part=part,
        name=p.name,
        role=p.role,
        model=p.model,
        effect_size=p.effect_size,
        chance=p.chance_effect_size,
        above=p.effect_above_chance,
        p_value=p.p_value,
        p_adjusted=p.p_adjusted,
        significant=p.significant,
        stars=getattr(p, "stars", ""),
        family=family,
        alpha=alpha,
        extra=extra,
        untestable=untestable,
    )


def check_verdict(row: CheckRow) -> Verdict:
    """The verdict of one answer check on one perturbation."""
    role = f" (role {row.role})" if row.role else ""
    name = f"{row.check} / {row.perturbation}"
    if row.p_value is None:
        return Verdict(row.part, name, row.text, kind="check", family=row.family, message=f"{row.text}{role}")
    return Verdict(
        row.part,
        name,
        row.text,
        kind="check",
        p_value=row.p_value,
        p_adjusted=row.p_adjusted,
        family=row.family,
        significant=row.significant,
        gate="check",
        failed=row.significant,
        message=(
            f"check {row.check!r} changed on {row.perturbation!r}{role}: {row.text} ({row.family})"
            if row.significant
            else f"{row.text}{role}"
        ),
        flag="changed" if row.significant else "unchanged",
    )


def check_row(d: Mapping[str, Any], *, part: str, family: str = "") -> CheckRow:
    """A :class:`CheckRow` from a check's ``to_dict()`` (or a suite's stored check)."""

    def f(k: str) -> float | None:
        v = d.get(k)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    return CheckRow(
        part=part,
        check=str(d.get("check", "")),
        perturbation=str(d.get("perturbation", "")),
        text=str(d.get("text") or ""),
        role=d.get("role"),
        p_value=f("p_value"),
        p_adjusted=f("p_adjusted"),
        significant=bool(d.get("significant")),
        stars=str(d.get("stars") or ""),
        model_graded=bool(d.get("model_graded")),
        family=family or str(d.get("family") or d.get("correction") or ""),
    )


__all__ = [
    "FAIL_KINDS",
    "Answer",
    "CheckRow",
    "Comparison",
    "Gate",
    "Request",
    "RunRefused",
    "RunResult",
    "Verdict",
    "calls_by_model",
    "check_row",
    "check_verdict",
    "estimate",
    "folder_name",
    "gate_failures",
    "gate_of",
    "kind_named",
    "num",
    "p_is",
    "p_text",
    "perturbation_verdict",
    "register",
    "replay_need",
    "requests",
    "tested_verdict",
]
