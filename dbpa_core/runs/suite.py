"""Suites of cases as runs: the summary a :class:`~dbpa_core.suite.SuiteResult` keeps
(``to_dict()``: its tests, pooled verdicts and checks) and the answers it wrote
(``responses.jsonl``: one line per answer with its case).

Its verdicts: one per case x perturbation (corrected over the whole suite, reported,
never gated), one pooled verdict per perturbation across the cases (what the control
gate and ``--fail-on`` read, as ``--fail-on-control`` always did), and the answer checks:
per case x perturbation x check, and pooled per perturbation x check when the suite has
them (then the pooled rows are gated, else each case's).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..compare import SuiteComparison, compare_suites
from ..fmt import fmt_p, table
from ..render import section
from ..spec import AuditSpec, model_label
from .audit import AuditRun
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
    p_is,
    perturbation_verdict,
    register,
)

POOLED = "pooled"


def read_answers(path: str | os.PathLike[str] | None) -> list[dict[str, Any]]:
    """The answers of a suite's ``responses.jsonl`` (``[]`` when there is none)."""
    if not path or not os.path.exists(path):
        return []
    out = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                try:
                    d = json.loads(line)
                except ValueError:
                    continue
                if isinstance(d, dict) and isinstance(d.get("response"), str):
                    out.append(d)
    return out


def _f(x: Any) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return float("nan")


def pooled_check_text(d: Mapping[str, Any]) -> str:
    """A pooled check in words: each arm's rate (or mean) over the cases, the difference
    with its interval, the test and its p."""
    name = str(d.get("check"))
    if d.get("difference") is None:
        return f"{name}: nothing to compare across the cases"
    ci = d.get("ci") or (float("nan"), float("nan"))
    p = d.get("p_value")
    test = f"{d.get('test')} {p_is('p', p)}" if p is not None else "not tested"
    if d.get("numeric"):
        return (
            f"{name}: mean {_f(d.get('base')):.1f} → {_f(d.get('value')):.1f} words over "
            f"{d.get('cases')} cases, {_f(d.get('difference')):+.1f} "
            f"[{_f(ci[0]):+.1f}, {_f(ci[1]):+.1f}], {test}"
        )
    return (
        f"{name}: {d.get('base_count')}/{d.get('base_n')} → {d.get('count')}/{d.get('n')} over "
        f"{d.get('cases')} cases, {100 * _f(d.get('difference')):+.0f} points "
        f"[{100 * _f(ci[0]):+.0f}, {100 * _f(ci[1]):+.0f}], {test}"
    )


def comparison_lines(cmp: SuiteComparison) -> list[str]:
    """Two suites side by side in words: the pooled verdicts, then the cases that flipped."""
    rows = [
        (
            r.perturbation,
            r.role or "-",
            *(
                fmt_p(d.get("p_adjusted", float("nan"))) + str(d.get("stars") or "") if d else "-"
                for d in (r.a, r.b)
            ),
            *(f"{d.get('mean_effect_above_chance', float('nan')):+.3f}" if d else "-" for d in (r.a, r.b)),
            r.status.upper() if r.verdict_changed else r.status,
        )
        for r in cmp.pooled
    ]
    both = sum(1 for r in cmp.tests if r.a is not None and r.b is not None)
    out = [
        "pooled over the cases (Fisher's combined test, corrected across perturbations):",
        table(
            rows,
            ("perturbation", "role", "p_adj A", "p_adj B", "above chance A", "above chance B", "verdict"),
        ),
        "",
        f"{len(cmp.changed)} of {sum(1 for r in cmp.pooled if r.a and r.b)} pooled "
        f"verdicts changed; {len(cmp.flipped)} of {both} case x perturbation tests "
        "changed verdict" + (":" if cmp.flipped else "."),
    ]
    out += [f"  {r.case} x {r.perturbation}: {r.status}" for r in cmp.flipped[:50]]
    if len(cmp.flipped) > 50:
        out.append(f"  ... and {len(cmp.flipped) - 50} more (--json lists them all)")
    only = [r for r in cmp.tests if r.a is None or r.b is None]
    if only:
        out.append(f"{len(only)} case x perturbation test(s) are in one run only (--json lists them).")
    return out


@dataclass
class SuiteRun(RunResult):
    """``summary``: the suite's ``to_dict()``; ``stored_answers``: its answers as JSON lines'
    dicts (``case``, ``arm``, ``role``, ``prompt``, ``index``, ``response``, ...)."""

    summary: Mapping[str, Any] = field(default_factory=dict)
    stored_answers: list[dict[str, Any]] = field(default_factory=list)

    kind = "suite"
    label = "suite of cases"
    command = "audit"
    page = "Suite"

    @classmethod
    def requests_of(cls, spec: Any) -> list[Request] | None:
        """A suite spec's samples: every case's arms, each as that case's plain audit asks
        them (``part``: ``case ID: ARM``)."""
        if not isinstance(spec, AuditSpec) or not spec.cases:
            return None
        from ..suite import case_spec

        out: list[Request] = []
        for case in spec.cases:
            plain = AuditRun.requests_of(case_spec(spec, case)) or []
            out += [replace(r, part=f"case {case.id}: {r.part}", case=case.id) for r in plain]
        return out

    @classmethod
    def estimate_of(cls, spec: Any, cache: Any = None) -> dict[str, Any] | None:
        """The calls, tokens and cost of a suite spec, counted from :meth:`requests_of`
        (:func:`dbpa_core.runs.costs.suite_estimate`: a row per arm, summed over the cases)."""
        reqs = cls.requests_of(spec)
        if reqs is None:
            return None
        from .costs import suite_estimate

        return suite_estimate(spec, reqs, cache)

    # ---------------------------------------------------------------- reading the summary
    @property
    def spec(self) -> Mapping[str, Any]:
        s = self.summary.get("spec")
        return s if isinstance(s, Mapping) else {}

    def _list(self, key: str) -> list[dict[str, Any]]:
        v = self.summary.get(key)
        return [d for d in v if isinstance(d, dict)] if isinstance(v, list) else []

    @property
    def tests(self) -> list[dict[str, Any]]:
        return self._list("tests")

    @property
    def pooled(self) -> list[dict[str, Any]]:
        return self._list("pooled")

    @property
    def correction(self) -> str:
        return str(self.summary.get("correction") or self.spec.get("correction") or "none")

    @property
    def alpha(self) -> float:
        return _f(self.summary.get("alpha", self.spec.get("alpha", 0.05)))

    def _case_family(self) -> str:
        return f"{self.correction} over the suite's {len(self.tests)} tests"

    def compare(self, other: RunResult, *, max_asr: float | None = None) -> Comparison:
        """The pooled verdict of each perturbation in both suites (a change counts), and
        the case x perturbation tests that flipped (listed, not counted)."""
        if not isinstance(other, SuiteRun):
            raise RunRefused(f"a {self.label} is compared with another {self.label} only")
        cmp = compare_suites(self.summary, other.summary)
        return Comparison(
            tuple(comparison_lines(cmp)),
            tuple(f"{r.perturbation} ({r.status})" for r in cmp.changed),
            "pooled verdict(s) changed",
            cmp.to_dict(),
            cmp.settings_changed,
        )

    def _tested(self, d: Mapping[str, Any], **differs: Any) -> Verdict:
        """:func:`perturbation_verdict` of one stored test (a pooled row or a case's):
        what both kinds of row hold, and what ``differs`` between them."""
        return perturbation_verdict(
            name=str(d.get("perturbation")),
            role=d.get("role"),
            model=", ".join(self.models()),
            p_value=_f(d.get("p_value")),
            p_adjusted=_f(d.get("p_adjusted")),
            significant=bool(d.get("significant")),
            stars=str(d.get("stars") or ""),
            alpha=self.alpha,
            **differs,
        )

    # ---------------------------------------------------------------- RunResult
    def verdicts(self) -> tuple[Verdict, ...]:
        out: list[Verdict] = []
        fam_pooled = f"Fisher over the cases, {self.correction} over {len(self.pooled)} perturbations"
        reach = self.summary.get("reachability")
        reach = reach if isinstance(reach, Mapping) else {}
        cannot_fail = set(reach.get("untestable_controls") or ())  # known before the run
        why = (
            f"not testable at k = {reach.get('k')}: no pooled result could be significant after "
            "the correction, so no control could fail"
        )
        for d in self.pooled:
            mean, lo, hi = (_f(d.get(k)) for k in ("mean_effect_above_chance", "ci_low", "ci_high"))
            ci = f", mean above chance {mean:+.3f} [{lo:+.3f}, {hi:+.3f}] over {d.get('cases')} cases"
            v = self._tested(
                d,
                part=POOLED,
                effect_size=_f(d.get("mean_omega")),
                chance=_f(d.get("mean_omega")) - _f(d.get("mean_effect_above_chance")),
                above=_f(d.get("mean_effect_above_chance")),
                family=fam_pooled,
                kind="pooled",
                extra=ci + f", {d.get('discoveries')} of {d.get('cases')} cases discovered",
                untestable=why if d.get("perturbation") in cannot_fail else "",
            )
            out.append(v)
        fam = self._case_family()
        for t in self.tests:
            v = self._tested(
                t,
                part=f"case {t.get('case')}",
                effect_size=_f(t.get("omega")),
                chance=_f(t.get("chance")),
                above=_f(t.get("effect_above_chance")),
                family=fam,
                kind="case",
            )
            if t.get("stop_reason"):  # sequential sampling: how many answers, why it stopped
                v = Verdict(
                    **{
                        **v.__dict__,
                        "outcome": f"{v.outcome}; {t.get('samples_used')} answers per arm, "
                        f"stopped: {t['stop_reason']}",
                    }
                )
            # a case's test is reported; the gate is the pooled verdict across the cases
            flag = "changed" if v.significant else "unchanged"  # the gate's colours are the pooled rows'
            out.append(Verdict(**{**v.__dict__, "gate": None, "failed": False, "flag": flag}))
        rows = self.checks()
        pooled_checks = any(r.part == POOLED for r in rows)
        for r in rows:
            v = check_verdict(r)
            if pooled_checks and r.part != POOLED:
                v = Verdict(**{**v.__dict__, "gate": None, "failed": False})
            out.append(v)
        return tuple(out)

    def checks(self) -> tuple[CheckRow, ...]:
        case_rows = self._list("checks")
        n = sum(1 for c in case_rows if c.get("p_value") is not None)
        fam = f"{self.correction} over the suite's {n} check tests"
        pooled = self._list("pooled_checks")
        n_pooled = sum(1 for c in pooled if c.get("p_value") is not None)
        fam_pooled = f"stratified over the cases, {self.correction} over {n_pooled} pooled checks"
        rows = [
            check_row({**c, "text": c.get("text") or pooled_check_text(c)}, part=POOLED, family=fam_pooled)
            for c in pooled
        ]
        rows += [check_row(c, part=f"case {c.get('case')}", family=fam) for c in case_rows]
        return tuple(rows)

    def answers(self) -> tuple[Answer, ...]:
        from ..checks import checks_from_dicts
        from .audit import outcomes

        try:
            checks = checks_from_dicts(self.spec.get("checks") or ())
        except (ValueError, TypeError, KeyError):
            checks = ()
        out = []
        for i, a in enumerate(self.stored_answers):
            text = str(a.get("response"))
            marks = tuple((c.name, outcomes(c, (text,))[0]) for c in checks)
            out.append(
                Answer(
                    f"case {a.get('case')}",
                    str(a.get("arm") or ""),
                    int(a.get("index", i)) if isinstance(a.get("index", i), int) else i,
                    text,
                    prompt=str(a.get("prompt") or ""),
                    role=a.get("role"),
                    checks=marks,
                )
            )
        return tuple(out)

    def headline(self) -> str:
        found = sum(1 for t in self.tests if t.get("significant"))
        changed = [str(d.get("perturbation")) for d in self.pooled if d.get("significant")]
        text = (
            f"{self.summary.get('cases', 0)} cases x {len(self.pooled)} perturbations, {found} of "
            f"{len(self.tests)} tests significant; pooled over the cases: "
            + (f"changed by {', '.join(changed)}" if changed else "no change shown")
        )
        gate = self.gate()
        if gate.controls:
            text += "; control gate " + ("passed" if gate.passed else "FAILED")
        return text

    def models(self) -> tuple[str, ...]:
        ms = self.spec.get("models") or ()
        return tuple(dict.fromkeys(model_label(dict(m)) for m in ms if isinstance(m, Mapping)))

    def settings(self) -> dict[str, Any]:
        from .audit import SETTINGS_KEYS

        s = self.spec
        out = {k: s.get(k) for k in SETTINGS_KEYS}
        out["embedder"] = s.get("embedder")
        out["cases"] = self.summary.get("cases")
        out["signature"] = json.dumps(s, sort_keys=True, default=str)
        return out

    def properties(self) -> dict[str, Any]:
        s = self.spec
        props = {k: v for k, v in self.settings().items() if k != "signature"}
        emb = self.spec.get("embedder")
        props["embedder"] = emb.get("backend", "local") if isinstance(emb, Mapping) else emb
        return {"spec": s.get("name"), "mode": "suite", "models": ", ".join(self.models()), **props}

    @property
    def seconds(self) -> float | None:
        u = self.summary.get("usage") or {}
        return _f(u.get("seconds", 0.0)) if isinstance(u, Mapping) else None

    @property
    def used(self) -> int:
        u = self.summary.get("usage") or {}
        return (
            int(u.get("calls", 0) or 0) + int(u.get("embeddings_computed", 0) or 0)
            if isinstance(u, Mapping)
            else 0
        )

    def prompts(self) -> list[dict[str, Any]]:
        """Each case's prompts, one row per case x arm (from its answers)."""
        seen: dict[tuple[str, str], dict[str, Any]] = {}
        for a in self.stored_answers:
            key = (str(a.get("case")), str(a.get("arm")))
            if key not in seen:
                seen[key] = {
                    "case": key[0],
                    "arm": key[1],
                    "role": a.get("role") or "",
                    "prompt": str(a.get("prompt") or ""),
                    "system_prompt": a.get("system_prompt") or "",
                }
        return list(seen.values())

    def heat(self) -> tuple[list[str], list[str], dict[tuple[str, str], dict[str, Any]]]:
        """(cases, perturbations, {(case, perturbation): test}) for the heat map."""
        cases = list(dict.fromkeys(str(t.get("case")) for t in self.tests))
        perts = list(dict.fromkeys(str(t.get("perturbation")) for t in self.tests))
        cells = {(str(t.get("case")), str(t.get("perturbation"))): t for t in self.tests}
        return cases, perts, cells

    def report_parts(self) -> list[str]:
        cases, perts, cells = self.heat()
        peak = max((abs(_f(t.get("effect_above_chance"))) for t in self.tests), default=0.0) or 1.0
        rows = self.checks()
        return [
            section(
                "run_suite.html.j2",
                title=self.title,
                spec=self.spec,
                correction=self.correction,
                alpha=self.alpha,
                pooled=self.pooled,
                tests=self.tests,
                cases=cases,
                perturbations=perts,
                cells=cells,
                peak=peak,
                pooled_checks=[r for r in rows if r.part == POOLED],
                case_checks=[r for r in rows if r.part != POOLED],
                prompts=self.prompts(),
                family=self._case_family(),
                models=self.models(),
            )
        ]

    def report_notes(self) -> list[str]:
        return []

    def payload(self) -> Any:
        from ..types import jsonable

        return jsonable({"suite": dict(self.summary), "answers": list(self.stored_answers)})

    def write(self, out_dir: str | os.PathLike[str]) -> list[str]:
        """results.json and results.csv (as the suite wrote them), responses.jsonl (its
        answers) and checks.csv (one row per case x perturbation x check) when it has them."""
        import csv
        import io

        from ..outputs import write_files
        from ..suite import TEST_FIELDS

        def rows_csv(rows: list[dict[str, Any]], fields: Any) -> str:
            buf = io.StringIO()
            w = csv.DictWriter(buf, fieldnames=list(fields), extrasaction="ignore")
            w.writeheader()
            w.writerows(rows)
            return buf.getvalue()

        files = {
            "results.json": json.dumps(dict(self.summary), indent=2, ensure_ascii=False, default=str),
            "results.csv": rows_csv(self.tests, TEST_FIELDS),
        }
        if self.stored_answers:
            files["responses.jsonl"] = "".join(
                json.dumps(a, ensure_ascii=False) + "\n" for a in self.stored_answers
            )
        checks = self._list("checks")
        if checks:
            from ..suite import pooled_checks_csv, suite_checks_csv

            files["checks.csv"] = suite_checks_csv(checks)
            files["pooled_checks.csv"] = pooled_checks_csv(self._list("pooled_checks"))
        return write_files(out_dir, files)


def from_result(result: Any, *, title: str = "") -> SuiteRun:
    """The run of a finished :class:`~dbpa_core.suite.SuiteResult` (its answers read from
    the ``responses.jsonl`` it wrote, when it wrote one)."""
    summary = result.to_dict()
    return _make(
        title or str(summary.get("spec", {}).get("name") or "suite"),
        summary,
        read_answers(result.responses_file),
    )


def _make(title: str, summary: Mapping[str, Any], answers: list[dict[str, Any]]) -> SuiteRun:
    warns = tuple(str(w) for w in summary.get("warnings") or ())
    run = SuiteRun(title, warns, summary=dict(summary), stored_answers=list(answers))
    if not answers:
        run.refusals["answers"] = (
            "this suite's answers were not kept with it (a suite run before dbpa kept them, or "
            "without an output folder): they are in its cache and responses.jsonl"
        )
    return run


@register("suite")
def adapt(title: str, value: Any) -> RunResult | None:
    from ..suite import SuiteResult

    if isinstance(value, SuiteResult):
        return from_result(value, title=title)
    if isinstance(value, Mapping) and isinstance(value.get("suite"), Mapping):
        answers = value.get("answers")
        summary = value["suite"]
        return _make(
            title or str(summary.get("spec", {}).get("name") or "suite"),
            summary,
            [a for a in answers if isinstance(a, dict)] if isinstance(answers, list) else [],
        )
    if isinstance(value, Mapping) and value.get("mode") == "suite" and "tests" in value:
        answers = value.get("answers")
        return _make(
            title or str((value.get("spec") or {}).get("name") or "suite"),
            {k: v for k, v in value.items() if k != "answers"},
            [a for a in answers if isinstance(a, dict)] if isinstance(answers, list) else [],
        )
    return None
