"""Audits as runs: one or more :class:`~dbpa_core.audit.AuditResult` by job (one per model
on the multi-model pages)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import provenance
from ..audit import AuditResult
from ..checks import CheckResult, audit_checks
from ..compare import COMPARED_SETTINGS, pair_audits
from ..fmt import fmt_p, short, table
from ..render import section
from ..spec import AuditSpec, model_label
from .base import (
    Answer,
    CheckRow,
    Comparison,
    Request,
    RunRefused,
    RunResult,
    Verdict,
    check_row,
    check_verdict,
    folder_name,
    register,
    tested_verdict,
)

SETTINGS_KEYS = (
    "samples",
    "permutations",
    "measure",
    "null",
    "correction",
    "alpha",
    "seed",
    "temperature",
    "top_p",
    "max_tokens",
    "min_effect",
)


def outcomes(check: Any, texts: tuple[str, ...]) -> list[Any]:
    """Each answer's outcome of one check (None for a judge's, which is asked in bulk, or
    a check that cannot grade the text)."""
    if getattr(check, "model_graded", False):
        return [None] * len(texts)
    out: list[Any] = []
    for t in texts:
        try:
            out.append(check.outcome(t))
        except (ValueError, TypeError, KeyError):
            out.append(None)
    return out


@dataclass
class AuditRun(RunResult):
    """One audit run: ``audits`` by job. ``cache_dir``: where a judge's replies may still
    be found when the checks are computed again from a recorded run."""

    audits: Mapping[str, AuditResult] = field(default_factory=dict)
    cache_dir: str | None = None

    kind = "audit"
    label = "audit"
    command = "audit"

    def __post_init__(self) -> None:
        self._checks: dict[str, tuple[tuple[CheckResult, ...], str]] = {}

    # ---------------------------------------------------------------- parts
    def part(self, job: str) -> str:
        r = self.audits[job]
        return job if len(self.audits) > 1 else (r.spec.name or job)

    def _family(self, r: AuditResult) -> str:
        n = len(r.perturbations)
        what = "models" if r.mode == "models" else "perturbations"
        if r.spec.correction == "none":
            return f"none (each of {n} {what} alone)"
        return f"{r.spec.correction} over {n} {what}"

    def check_results(self, job: str) -> tuple[tuple[CheckResult, ...], str]:
        """The audit's check results, computed again from its answers when the run was read
        back from the history (which keeps the answers, not the check results), with a
        note when some could not be."""
        if job not in self._checks:
            r = self.audits[job]
            found: tuple[tuple[CheckResult, ...], str] = (tuple(r.checks), "")
            if not r.checks and r.spec.checks:
                found = recheck(r.spec, (r.base, *r.arms), self.cache_dir)
            self._checks[job] = found
        return self._checks[job]

    @classmethod
    def requests_of(cls, spec: Any) -> list[Request] | None:
        """An audit spec's samples (not a suite's: :class:`~dbpa_core.runs.SuiteRun`):
        every arm's k answers, as its runner asks them (sensitivity studies too)."""
        if not isinstance(spec, AuditSpec) or spec.cases:
            return None
        from ..audit import arm_requests, build_arms

        return [
            Request(arm.name, arm.model, r, arm=arm.name)
            for arm in build_arms(spec)
            for r in arm_requests(spec, arm)
        ]

    @classmethod
    def estimate_of(cls, spec: Any, cache: Any = None) -> dict[str, Any] | None:
        """The calls, tokens and cost of an audit spec (not a suite's), counted from
        :meth:`requests_of` (:func:`dbpa_core.runs.costs.audit_estimate`)."""
        reqs = cls.requests_of(spec)
        if reqs is None:
            return None
        from .costs import audit_estimate

        return audit_estimate(spec, reqs, cache)

    # ---------------------------------------------------------------- RunResult
    def verdicts(self) -> tuple[Verdict, ...]:
        out: list[Verdict] = []
        for job, r in self.audits.items():
            part, fam = self.part(job), self._family(r)
            try:
                from ..reach import reachability

                cannot_fail = set(reachability(r.spec).untestable_controls)  # known before the run
            except Exception:  # noqa: BLE001 - a spec read back from an older history
                cannot_fail = set()
            why = (
                f"not testable at k = {r.spec.samples}: no result could be significant after "
                "the correction, so no control could fail"
            )
            for p in r.perturbations:
                untestable = why if p.name in cannot_fail else ""
                v = tested_verdict(p, part=part, family=fam, alpha=r.spec.alpha, untestable=untestable)
                seq = getattr(p, "sequential", None)
                if seq is not None:  # sequential sampling: how many answers, why it stopped
                    v = dataclasses.replace(
                        v, outcome=f"{v.outcome}; {p.samples_used} answers per arm, stopped: {seq.reason}"
                    )
                out.append(v)
        out += [check_verdict(c) for c in self.checks()]
        return tuple(out)

    def checks(self) -> tuple[CheckRow, ...]:
        rows: list[CheckRow] = []
        for job in self.audits:
            results, _ = self.check_results(job)
            n = len([c for c in results if c.p_value is not None])
            for c in results:
                fam = f"{c.correction} over {n} check tests" if c.correction != "none" else "none"
                rows.append(check_row(c.to_dict(), part=self.part(job), family=fam))
        return tuple(rows)

    def answers(self) -> tuple[Answer, ...]:
        out: list[Answer] = []
        for job, r in self.audits.items():
            checks = tuple(r.spec.checks)
            for a in (r.base, *r.arms):
                marks = [outcomes(c, a.texts) for c in checks]
                for i, t in enumerate(a.texts):
                    out.append(
                        Answer(
                            job,
                            a.arm.name,
                            i,
                            t,
                            prompt=a.arm.prompt,
                            role=a.arm.role or ("base" if a is r.base else None),
                            checks=tuple((c.name, m[i]) for c, m in zip(checks, marks, strict=True)),
                        )
                    )
        return tuple(out)

    def headline(self) -> str:
        vs = [v for v in self.verdicts() if v.kind == "perturbation"]
        found = sum(bool(v.significant) for v in vs)
        gate = self.gate()
        text = f"{found} of {len(vs)} tests significant"
        if gate.controls:
            text += "; control gate " + (
                "FAILED: " + ", ".join(gate.failed)
                if gate.failed
                else ("not testable" if gate.untestable else "passed")
            )
        return text

    def served(self) -> dict[str, tuple[str, ...]]:
        """The model names and system fingerprints the answers came back with."""
        entries = [e for r in self.audits.values() for e in provenance.entries_of(r.usage)]
        return {
            "served models": provenance.served_models(entries),
            "system fingerprints": provenance.fingerprints(entries),
        }

    def compare(self, other: RunResult, *, max_asr: float | None = None) -> Comparison:
        """Each perturbation of each audit in both runs (paired by job, matched by name);
        a verdict that became significant or stopped being is a change. The settings, the
        models, the base prompt and the model builds that answered are named when they
        differ."""
        if not isinstance(other, AuditRun) or not self.audits or not other.audits:
            raise RunRefused(f"an {self.label} is compared with another {self.label} only")
        rows, pairs = pair_audits(self.audits, other.audits)
        changed_rows = [r for r in rows if r.verdict_changed]
        sa, sb = (next(iter(r.audits.values())).spec for r in (self, other))
        da, db = sa.to_dict(), sb.to_dict()
        settings = {k: (da.get(k), db.get(k)) for k in COMPARED_SETTINGS if da.get(k) != db.get(k)}
        if self.models() != other.models():
            settings["models"] = (", ".join(self.models()), ", ".join(other.models()))
        if sa.base_prompt != sb.base_prompt:
            settings["base prompt"] = (sa.base_prompt, sb.base_prompt)
        served = {
            what: (va, vb)
            for (what, va), vb in zip(self.served().items(), other.served().values(), strict=True)
            if va != vb
        }
        notes = tuple(
            f"changed: {k} the answers came back with: {short(', '.join(va) or 'not reported', 60)} -> "
            f"{short(', '.join(vb) or 'not reported', 60)}"
            for k, (va, vb) in served.items()
        )
        table_rows = [
            (
                short(r.job, 30),
                r.name,
                r.role or "-",
                fmt_p(r.a.p_adjusted) + r.a.stars if r.a else "-",
                fmt_p(r.b.p_adjusted) + r.b.stars if r.b else "-",
                f"{r.a.effect_above_chance:+.3f}" if r.a else "-",
                f"{r.b.effect_above_chance:+.3f}" if r.b else "-",
                r.status.upper() if r.verdict_changed else r.status,
            )
            for r in rows
        ]
        head = ("audit", "perturbation", "role", "p_adj A", "p_adj B", "above chance A", "above chance B")
        lines = (
            table(table_rows, (*head, "verdict")),
            "",
            f"{len(changed_rows)} of {sum(1 for r in rows if r.a and r.b)} perturbations "
            "tested in both runs changed verdict.",
        )
        several = len(pairs) > 1
        data = {
            "pairs": [list(p) for p in pairs],
            "settings_changed": {k: list(v) for k, v in settings.items()},
            "rows": [r.to_dict() for r in rows],
            "verdicts_changed": len(changed_rows),
            "served_changed": {k.replace(" ", "_"): [list(va), list(vb)] for k, (va, vb) in served.items()},
        }
        return Comparison(
            lines,
            tuple(
                f"{r.job}: {r.name} ({r.status})" if several else f"{r.name} ({r.status})"
                for r in changed_rows
            ),
            "verdict(s) changed",
            data,
            settings,
            notes,
        )

    def models(self) -> tuple[str, ...]:
        seen: list[str] = []
        for r in self.audits.values():
            seen += [m for m in (model_label(x) for x in r.spec.models) if m not in seen]
        return tuple(seen)

    def settings(self) -> dict[str, Any]:
        if not self.audits:
            return {}
        first = next(iter(self.audits.values()))
        d = first.spec.to_dict()
        out = {k: d.get(k) for k in SETTINGS_KEYS}
        out["embedder"] = d.get("embedder")
        out["mode"] = first.spec.mode
        out["source"] = first.spec.source
        return out

    def properties(self) -> dict[str, Any]:
        first = next(iter(self.audits.values()))
        s = first.spec
        return {
            "spec": s.name,
            "source": s.source,
            "mode": s.mode,
            "models": ", ".join(self.models()),
            "samples": s.samples,
            "permutations": s.permutations,
            "measure": s.measure,
            "null": s.null,
            "correction": s.correction,
            "alpha": s.alpha,
            "seed": s.seed,
            "temperature": s.temperature,
            "top_p": s.top_p,
            "max_tokens": s.max_tokens,
            "embedder": s.embedder.get("backend", "local"),
            "min_effect": s.min_effect,
        }

    def provenance(self) -> tuple[str, ...]:
        lines: list[str] = []
        for r in self.audits.values():
            lines += [x for x in provenance.summary_lines(provenance.entries_of(r.usage)) if x not in lines]
        return tuple(lines)

    @property
    def seconds(self) -> float | None:
        return sum(float(r.usage.get("seconds", 0.0) or 0.0) for r in self.audits.values())

    @property
    def used(self) -> int:
        return sum(
            int(r.usage.get("calls", 0) or 0) + int(r.usage.get("embeddings_computed", 0) or 0)
            for r in self.audits.values()
        )

    def report_parts(self) -> list[str]:
        parts: list[str] = []
        for job, r in self.audits.items():
            checks, note = self.check_results(job)
            served = sorted({a.arm.model_label for a in (r.base, *r.arms)})
            parts.append(
                section(
                    "run_audit.html.j2",
                    title=self.part(job),
                    result=r,
                    spec=r.spec,
                    arms=(r.base, *r.arms),
                    checks=checks,
                    checks_note=note,
                    models=served,
                    warnings=list(r.warnings),
                    roc=r.roc,
                    versions=provenance.summary_lines(provenance.entries_of(r.usage)),
                )
            )
        return parts

    def payload(self) -> Any:
        return dict(self.audits)

    def write(self, out_dir: str | os.PathLike[str]) -> list[str]:
        if len(self.audits) == 1:
            return next(iter(self.audits.values())).write(out_dir)
        return [p for job, r in self.audits.items() for p in r.write(os.path.join(out_dir, folder_name(job)))]

    def audit_results(self) -> Mapping[str, AuditResult] | None:
        return self.audits


class _CachedReplies:
    """Stands in for the sampler when checks are computed again: a judge's replies come
    from the run's cache only; a reply that is not there stops it (never a call)."""

    def __init__(self, cache: Any) -> None:
        self.cache = cache

    def sample(self, jobs: Any, stage: str = "") -> list[Any]:
        from types import SimpleNamespace

        from ..sampling import backend_identity, sample_key

        keys = [sample_key(backend_identity(j.model), j.request) for j in jobs]
        found = self.cache.get_many(keys)
        texts = [v.get("text") if isinstance(v := found.get(k), dict) else None for k in keys]
        if any(not isinstance(t, str) for t in texts):
            raise LookupError("a judge's reply is not in the cache")
        return [SimpleNamespace(text=t) for t in texts]


def recheck(
    spec: AuditSpec, arms: tuple[Any, ...], cache_dir: str | None
) -> tuple[tuple[CheckResult, ...], str]:
    """The spec's answer checks computed again from the answers kept (with the audit's
    seed and settings, so the numbers are the audit's): model-graded ones with the judges'
    replies from the run's cache; when they are not there, the others alone (the note
    says so: their adjusted p is then corrected over fewer tests)."""
    judged = [c.name for c in spec.checks if c.model_graded]
    if judged and cache_dir and Path(cache_dir).is_dir():  # never makes a cache
        try:
            from ..cache import Cache

            return audit_checks(spec, arms, _CachedReplies(Cache(cache_dir))), ""
        except Exception:  # noqa: BLE001 - no cache, a damaged one, a reply not kept
            pass
    plain = tuple(c for c in spec.checks if not c.model_graded)
    checks = audit_checks(dataclasses.replace(spec, checks=plain), arms, None) if plain else ()
    note = ""
    if judged:
        note = (
            "Model-graded checks (" + ", ".join(judged) + ") asked a judge model when the "
            "audit ran and their replies are no longer in its cache: they are left out "
            "here (see the run's checks.csv), and the other checks' adjusted p-values are "
            "corrected over the checks shown."
        )
    return checks, note


@register("audit")
def adapt(title: str, value: Any) -> RunResult | None:
    if isinstance(value, AuditResult):
        return AuditRun(title or value.spec.name, tuple(value.warnings), audits={value.spec.name: value})
    if isinstance(value, Mapping) and value and all(isinstance(v, AuditResult) for v in value.values()):
        first = next(iter(value.values()))
        warns = tuple(w for r in value.values() for w in r.warnings)
        return AuditRun(title or first.spec.name, warns, audits=dict(value))
    return None
