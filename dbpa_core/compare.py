"""Two recorded runs of a suite of cases, or of a robustness battery, side by side (what
``dbpa history compare A B`` says of them, through each kind's
:meth:`dbpa_core.runs.RunResult.compare`).

* Suites: the pooled verdict of each perturbation (significant over the cases after the
  suite's correction) and the verdict of each case x perturbation test, matched by name;
  a *verdict change* is a pooled verdict that differs between the runs. The cases whose
  own verdict flipped are listed, but they do not count as a change on their own.
* Batteries: the error rate (ER) and attack success rate (ASR) of each attack at each rho
  over every item, matched by attack name and rho, with their differences. A battery has
  no verdict of its own: given a maximum ASR, an attack *changed verdict* when it is above
  it in one run and not in the other; without one, no verdict changed.

* Audits: each perturbation (or model) of each audit, paired by job and matched by name
  (:func:`pair_audits`); a verdict change is one that became significant or stopped being.

Pure functions over what the history stores (a suite's ``to_dict()``, a
:class:`~dbpa_core.attacks.battery.BatteryResult`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .audit import AuditResult, PerturbationResult


def _status(a: bool | None, b: bool | None, *, yes: str, no: str) -> str:
    """``same verdict``, ``only in A``/``B``, or the new verdict's words."""
    if a is None:
        return "only in B"
    if b is None:
        return "only in A"
    if a == b:
        return "same verdict"
    return yes if b else no


def significance_status(a: bool | None, b: bool | None) -> str:
    """A test in two runs: ``same verdict``, ``only in A``/``B``, ``now significant`` or
    ``no longer significant``."""
    return _status(a, b, yes="now significant", no="no longer significant")


@dataclass(frozen=True)
class ComparedTest:
    """One perturbation (or model) in two runs; ``None`` where a run lacks it."""

    job: str
    name: str
    role: str | None
    a: PerturbationResult | None
    b: PerturbationResult | None

    @property
    def status(self) -> str:
        return significance_status(*(None if x is None else bool(x.significant) for x in (self.a, self.b)))

    @property
    def verdict_changed(self) -> bool:
        return self.status in ("now significant", "no longer significant")

    def to_dict(self) -> dict[str, Any]:
        def side(p: Any) -> dict[str, Any] | None:
            return (
                None
                if p is None
                else {
                    "effect_size": p.effect_size,
                    "effect_above_chance": p.effect_above_chance,
                    "p_value": p.p_value,
                    "p_adjusted": p.p_adjusted,
                    "significant": p.significant,
                    "stars": p.stars,
                }
            )

        return {
            "job": self.job,
            "name": self.name,
            "role": self.role,
            "status": self.status,
            "a": side(self.a),
            "b": side(self.b),
        }


def pair_audits(
    a: Mapping[str, AuditResult], b: Mapping[str, AuditResult]
) -> tuple[tuple[ComparedTest, ...], tuple[tuple[str, str], ...]]:
    """The perturbations of two runs' audits side by side, and the (job in A, job in B)
    pairs. Audits are paired by job name (e.g. the model label on multi-model pages); two
    runs of one audit each are paired whatever their models are called, so a model before
    and after an upgrade compare directly. Perturbations are matched by name."""
    if len(a) == 1 and len(b) == 1:
        pairs = [(next(iter(a)), next(iter(b)))]
    else:
        pairs = [(j, j) for j in a if j in b]
    rows: list[ComparedTest] = []
    for ja, jb in pairs:
        job = ja if ja == jb else f"{ja} → {jb}"
        by_b = {p.name: p for p in b[jb].perturbations}
        for p in a[ja].perturbations:
            rows.append(ComparedTest(job, p.name, p.role, p, by_b.pop(p.name, None)))
        rows += [ComparedTest(job, p.name, p.role, None, p) for p in by_b.values()]
    paired_a, paired_b = {p[0] for p in pairs}, {p[1] for p in pairs}
    for j, r in a.items():
        if j not in paired_a:
            rows += [ComparedTest(j, p.name, p.role, p, None) for p in r.perturbations]
    for j, r in b.items():
        if j not in paired_b:
            rows += [ComparedTest(j, p.name, p.role, None, p) for p in r.perturbations]
    return tuple(rows), tuple(pairs)


@dataclass(frozen=True)
class SuiteRow:
    """One pooled perturbation, or one case x perturbation test, in two suite runs (each
    side the stored row, None where a run lacks it)."""

    case: str | None  # None: the pooled row of the perturbation
    perturbation: str
    role: str | None
    a: Mapping[str, Any] | None
    b: Mapping[str, Any] | None

    @property
    def status(self) -> str:
        return significance_status(
            *(None if x is None else bool(x.get("significant")) for x in (self.a, self.b))
        )

    @property
    def verdict_changed(self) -> bool:
        return self.status in ("now significant", "no longer significant")

    def to_dict(self) -> dict[str, Any]:
        def side(d: Mapping[str, Any] | None) -> dict[str, Any] | None:
            if d is None:
                return None
            above = d.get("mean_effect_above_chance", d.get("effect_above_chance"))
            return {
                "p_adjusted": d.get("p_adjusted"),
                "effect_above_chance": above,
                "significant": bool(d.get("significant")),
            }

        out = {
            "perturbation": self.perturbation,
            "role": self.role,
            "status": self.status,
            "a": side(self.a),
            "b": side(self.b),
        }
        return out if self.case is None else {"case": self.case, **out}


@dataclass(frozen=True)
class SuiteComparison:
    pooled: tuple[SuiteRow, ...]
    tests: tuple[SuiteRow, ...]
    settings_changed: dict[str, tuple[Any, Any]] = field(default_factory=dict)

    @property
    def changed(self) -> tuple[SuiteRow, ...]:
        """The pooled verdicts that changed (what ``--fail-on-change`` fails on)."""
        return tuple(r for r in self.pooled if r.verdict_changed)

    @property
    def flipped(self) -> tuple[SuiteRow, ...]:
        """The case x perturbation tests whose verdict changed."""
        return tuple(r for r in self.tests if r.verdict_changed)

    def to_dict(self) -> dict[str, Any]:
        both = sum(1 for r in self.tests if r.a is not None and r.b is not None)
        return {
            "kind": "suite",
            "settings_changed": {k: list(v) for k, v in self.settings_changed.items()},
            "pooled": [r.to_dict() for r in self.pooled],
            "verdicts_changed": len(self.changed),
            "tests_in_both": both,
            "tests_flipped": len(self.flipped),
            "flipped": [r.to_dict() for r in self.flipped],
            "tests": [r.to_dict() for r in self.tests],
        }


# the settings of an audit the history keeps with a run, and that comparing two runs names
# when they differ
COMPARED_SETTINGS = (
    "samples",
    "permutations",
    "measure",
    "correction",
    "alpha",
    "seed",
    "temperature",
    "top_p",
    "max_tokens",
    "embedder",
    "sequential",
    "null",
    "min_effect",
    "sequential_sampling",
)

# the settings of a suite that comparing two suites names when they differ
SUITE_SETTINGS = tuple(k for k in COMPARED_SETTINGS if k not in ("top_p", "embedder", "sequential"))


def _pair(
    a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]], key: Callable[[Mapping[str, Any]], Any]
) -> list[tuple]:
    """Rows of ``a`` and ``b`` matched by ``key(row)``: A's order, then B's new ones."""
    by_b = {key(r): r for r in b}
    out = [(key(r), r, by_b.pop(key(r), None)) for r in a]
    return out + [(k, None, r) for k, r in by_b.items()]


def compare_suites(a: Mapping[str, Any], b: Mapping[str, Any]) -> SuiteComparison:
    """Suite run ``a`` (e.g. before a model upgrade) against ``b``: each a suite's summary
    as the history keeps it (``tests``, ``pooled``, ``spec``)."""
    pooled = [
        SuiteRow(None, str(k), (ra or rb).get("role"), ra, rb)
        for k, ra, rb in _pair(
            a.get("pooled") or [], b.get("pooled") or [], lambda r: str(r.get("perturbation"))
        )
    ]
    tests = [
        SuiteRow(k[0], k[1], (ra or rb).get("role"), ra, rb)
        for k, ra, rb in _pair(
            a.get("tests") or [],
            b.get("tests") or [],
            lambda r: (str(r.get("case")), str(r.get("perturbation"))),
        )
    ]
    sa, sb = a.get("spec") or {}, b.get("spec") or {}
    changed = {k: (sa.get(k), sb.get(k)) for k in SUITE_SETTINGS if sa.get(k) != sb.get(k)}
    models = [
        [str(m.get("name", m)) if isinstance(m, Mapping) else str(m) for m in s.get("models") or ()]
        for s in (sa, sb)
    ]
    if models[0] != models[1]:
        changed["models"] = (", ".join(models[0]), ", ".join(models[1]))
    if a.get("cases") != b.get("cases"):
        changed["cases"] = (a.get("cases"), b.get("cases"))
    return SuiteComparison(tuple(pooled), tuple(tests), changed)


# --------------------------------------------------------------------------- batteries
@dataclass(frozen=True)
class AttackDiff:
    """One attack at one rho (over every item) in two battery runs; ER and ASR are shares
    (None where a run lacks the attack)."""

    attack: str
    rho: float
    er_a: float | None
    er_b: float | None
    asr_a: float | None
    asr_b: float | None
    max_asr: float | None = None

    @property
    def status(self) -> str:
        if self.er_a is None:
            return "only in B"
        if self.er_b is None:
            return "only in A"
        if self.max_asr is None or self.asr_a is None or self.asr_b is None:
            return "compared"
        return _status(
            self.asr_a > self.max_asr,
            self.asr_b > self.max_asr,
            yes="now above the maximum ASR",
            no="now within the maximum ASR",
        )

    @property
    def verdict_changed(self) -> bool:
        return self.status.startswith("now ")

    @staticmethod
    def _diff(x: float | None, y: float | None) -> float | None:
        return None if x is None or y is None else y - x

    def to_dict(self) -> dict[str, Any]:
        return {
            "attack": self.attack,
            "rho": self.rho,
            "status": self.status,
            "er_a": self.er_a,
            "er_b": self.er_b,
            "er_change": self._diff(self.er_a, self.er_b),
            "asr_a": self.asr_a,
            "asr_b": self.asr_b,
            "asr_change": self._diff(self.asr_a, self.asr_b),
        }


@dataclass(frozen=True)
class BatteryComparison:
    clean_er: tuple[float | None, float | None]
    rows: tuple[AttackDiff, ...]
    max_asr: float | None
    settings_changed: dict[str, tuple[Any, Any]] = field(default_factory=dict)

    @property
    def changed(self) -> tuple[AttackDiff, ...]:
        """Attacks that crossed the maximum ASR (none without one)."""
        return tuple(r for r in self.rows if r.verdict_changed)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "battery",
            "max_asr": self.max_asr,
            "settings_changed": {k: list(v) for k, v in self.settings_changed.items()},
            "clean_er_a": self.clean_er[0],
            "clean_er_b": self.clean_er[1],
            "rows": [r.to_dict() for r in self.rows],
            "verdicts_changed": len(self.changed),
        }


BATTERY_SETTINGS = ("model", "items", "seed", "temperature", "max_tokens", "template", "system_prompt")


def compare_batteries(a: Any, b: Any, *, max_asr: float | None = None) -> BatteryComparison:
    """Battery results ``a`` and ``b`` (:class:`~dbpa_core.attacks.battery.BatteryResult`):
    ER and ASR of each attack at each rho over every item, matched by attack and rho."""

    def rates(result: Any) -> list[dict[str, Any]]:
        return [
            {
                "key": (r.attack, float(r.rho)),
                "er": float(r.er.value),
                "asr": None if r.asr is None else float(r.asr.value),
            }
            for r in result.attacks()
        ]

    rows = [
        AttackDiff(k[0], k[1], ra and ra["er"], rb and rb["er"], ra and ra["asr"], rb and rb["asr"], max_asr)
        for k, ra, rb in _pair(rates(a), rates(b), lambda r: r["key"])
    ]
    da, db = a.spec.to_dict(), b.spec.to_dict()
    changed = {k: (da.get(k), db.get(k)) for k in BATTERY_SETTINGS if da.get(k) != db.get(k)}
    return BatteryComparison(
        (float(a.clean().er.value), float(b.clean().er.value)), tuple(rows), max_asr, changed
    )


__all__ = [
    "COMPARED_SETTINGS",
    "AttackDiff",
    "BatteryComparison",
    "ComparedTest",
    "SuiteComparison",
    "SuiteRow",
    "compare_batteries",
    "compare_suites",
    "pair_audits",
    "significance_status",
]
