"""Reachability before the run: the smallest p-value each test of a spec can reach at its
k, permutations and correction, known before anything is called.

A permutation test of k against k answers can return no p below ``1 / (B + 1)`` (or
``1 / C(2k, k)`` when every split is enumerated), an exact test of two rates at k answers
per arm none below the p of the most extreme table (every base answer passes, no
perturbed one does), and the correction over the family raises those floors (Bonferroni
and Holm to M times the smallest). When the floor after the correction is above α, no
answers whatsoever could make that test significant: a control is then *not testable*
(it cannot fail, so its passing means nothing), and a target cannot pass.

:func:`reachability` gives one :class:`ReachRow` per kind of test of a spec (each DBPA
test; a suite's pooled verdicts; the answer checks; a suite's pooled checks) and the
controls that cannot fail; ``dbpa estimate``, ``dbpa scan`` and the dashboard show it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from scipy import stats

from .checks import exact_test
from .multitest import smallest_adjusted_p
from .permutation import smallest_p_value
from .sequential import permutations_at, stop_level


@dataclass(frozen=True)
class ReachRow:
    """One kind of test: the smallest raw p it can return (``smallest_p``, with the test
    that decides it), the family it is corrected in and the smallest adjusted p."""

    what: str
    test: str
    family: int
    correction: str
    smallest_p: float
    smallest_adjusted_p: float
    alpha: float

    @property
    def reachable(self) -> bool:
        """Some result can be significant (adjusted p <= α)."""
        return self.smallest_adjusted_p <= self.alpha

    @property
    def text(self) -> str:
        corr = (
            f", {self.correction} over {self.family} tests: at best {_p(self.smallest_adjusted_p)}"
            if self.correction != "none" and self.family > 1
            else ""
        )
        verdict = "can be significant" if self.reachable else f"cannot be significant at α = {self.alpha:g}"
        return f"{self.what}: smallest p {_p(self.smallest_p)} ({self.test}){corr}; {verdict}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "what": self.what,
            "test": self.test,
            "family": self.family,
            "correction": self.correction,
            "smallest_p": self.smallest_p,
            "smallest_adjusted_p": self.smallest_adjusted_p,
            "alpha": self.alpha,
            "reachable": self.reachable,
        }


@dataclass(frozen=True)
class Reachability:
    """What a spec's tests can reach at best (:func:`reachability`)."""

    k: int
    permutations: int
    rows: tuple[ReachRow, ...]
    untestable_controls: tuple[str, ...] = ()
    gate: str = ""  # which row the control gate reads
    min_samples: int | None = None

    @property
    def testable(self) -> bool:
        """Every row can be significant."""
        return all(r.reachable for r in self.rows)

    def control_status(self, name: str) -> str | None:
        """``"not testable at k = 5"`` for a control that cannot fail, else None."""
        return f"not testable at k = {self.k}" if name in self.untestable_controls else None

    def lines(self) -> list[str]:
        """The rows in words, then one line per control that cannot fail."""
        out = [r.text for r in self.rows]
        if self.untestable_controls:
            names = ", ".join(repr(c) for c in self.untestable_controls)
            how = f" Use at least k = {self.min_samples}." if self.min_samples else ""
            out.append(
                f"Control(s) {names}: not testable at k = {self.k} ({self.gate} cannot be "
                f"significant, so a control cannot fail and its passing means nothing).{how}"
            )
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "k": self.k,
            "permutations": self.permutations,
            "rows": [r.to_dict() for r in self.rows],
            "untestable_controls": list(self.untestable_controls),
            "gate": self.gate,
            "min_samples": self.min_samples,
        }


def _p(p: float) -> str:
    return f"{p:.3g}" if p >= 1e-4 else f"{p:.1e}"


@lru_cache(maxsize=256)
def smallest_rate_p(k: int, m: int) -> tuple[float, str]:
    """The smallest p of the two-rates exact test at ``k`` and ``m`` answers per arm (the
    most extreme table: all pass in one arm, none in the other) and the test's name."""
    return exact_test(0, k, m, m)


def smallest_mean_p(k: int, m: int, n_permutations: int) -> float:
    """The smallest two-sided p of the permutation test of a mean difference."""
    splits = math.comb(k + m, k)
    return min(1.0, 2.0 / splits if splits <= n_permutations else 2.0 / (n_permutations + 1))


def _fisher_floor(p_min: float, n: int) -> float:
    """Fisher's combined p when each of ``n`` p-values is ``p_min``."""
    return float(stats.chi2.sf(-2.0 * n * math.log(p_min), 2 * n))


def smallest_sequential_p(spec: Any) -> tuple[float, str]:
    """With ``sequential_sampling``: the smallest sequential p a DBPA test can reach, and
    the look that gives it.

    At look j the permutation test of ``k_j`` against ``k_j`` answers, with the look's
    raised permutation count (:func:`~dbpa_core.sequential.permutations_at`), returns no p
    below its floor ``p_j``; the sequential p is ``min_j p_j / w_j``, so its floor is the
    smallest ``p_j / w_j`` over the looks (a look of weight 0 counts for nothing).

    Examples
    --------
    >>> from dbpa_core.spec import parse_spec
    >>> text = "samples: 40\\nsequential_sampling: true\\nbase: hi\\nperturbations: [{name: c, prefix: x}]"
    >>> smallest_sequential_p(parse_spec(text))  # 1 / 2001 at the last look, weight 0.5
    (0.0009995002498750624, 'at k = 40 of looks 12, 18, 40')
    """
    plan = spec.sequential_sampling.plan(spec.samples)
    level = stop_level(spec.alpha, spec.correction, spec.n_tests)
    best, where = math.inf, plan.looks[-1]
    for k, w in zip(plan.looks, plan.weights, strict=True):
        if w <= 0:
            continue
        b = permutations_at(level, w, spec.permutations)
        p = smallest_p_value(k, k, n_permutations=b, measure=spec.measure, null=spec.null) / w
        if p < best:
            best, where = p, k
    looks = ", ".join(str(k) for k in plan.looks)
    return min(1.0, best), f"at k = {where} of looks {looks}"


def reachability(spec: Any) -> Reachability:
    """The smallest p-values a spec's tests can reach, before any call.

    ``spec`` is an :class:`~dbpa_core.spec.AuditSpec` (a single audit, a model comparison
    or a suite with ``cases``). Rows: the DBPA test of each perturbation (per case x
    perturbation in a suite), a suite's pooled verdict per perturbation (Fisher's combined
    test over the cases, corrected across perturbations), the answer checks (one family:
    every perturbation x check, times the cases in a suite) and a suite's pooled checks
    (the exact stratified test over the cases). The control gate reads the DBPA tests of
    a single audit and the pooled verdicts of a suite; the controls it cannot fail are
    ``untestable_controls``.

    Examples
    --------
    >>> from dbpa_core.spec import parse_spec
    >>> s = parse_spec("samples: 3\\nbase: hi\\nperturbations: [{name: c, prefix: x, role: control}]")
    >>> reachability(s).untestable_controls
    ('c',)
    """
    reach = spec.attainability()
    k, b, alpha, corr = spec.samples, spec.permutations, spec.alpha, spec.correction
    n_cases = len(spec.cases)
    n_perts = max(1, len(spec.perturbations) or len(spec.models) - 1)
    test = f"exact: all {math.comb(2 * k, k):,} splits" if reach.exact else f"{b:,} permutations"
    p_test, adj_test = reach.smallest_p, reach.smallest_adjusted_p
    if spec.sequential_sampling is not None:  # the sequential p's floor, over the looks
        p_test, look = smallest_sequential_p(spec)
        adj_test = smallest_adjusted_p(p_test, reach.n_tests, corr)
        test = f"sequential p, {look}"
    rows = [
        ReachRow(
            "each DBPA test" + (" (case x perturbation)" if n_cases else ""),
            test,
            reach.n_tests,
            corr,
            p_test,
            adj_test,
            alpha,
        )
    ]
    gate = rows[0]
    if n_cases:
        floor = _fisher_floor(p_test, n_cases)
        rows.append(
            ReachRow(
                "each pooled verdict (perturbation over the cases)",
                f"Fisher's combined test of {n_cases} cases",
                n_perts,
                corr,
                floor,
                smallest_adjusted_p(floor, n_perts, corr),
                alpha,
            )
        )
        gate = rows[-1]
    checks = list(getattr(spec, "checks", ()))
    if checks:
        floors = []
        for c in checks:
            if c.numeric:
                floors.append((smallest_mean_p(k, k, b), "permutation test of the mean"))
            else:
                p, name = smallest_rate_p(k, k)
                floors.append((p, f"{name}'s exact test at {k} vs {k} answers"))
        p_min, name = min(floors)
        family = n_perts * len(checks) * max(1, n_cases)
        rows.append(
            ReachRow(
                "each answer check" + (" (case x perturbation x check)" if n_cases else ""),
                name,
                family,
                corr,
                p_min,
                smallest_adjusted_p(p_min, family, corr),
                alpha,
            )
        )
        if n_cases:
            rate = [c for c in checks if not c.numeric]
            if rate:
                log_p = math.log(2.0) - n_cases * math.log(math.comb(2 * k, k))
                p_min = max(math.exp(log_p), 5e-324)
                what = "the exact stratified test over the cases"
            else:
                p_min, what = _fisher_floor(smallest_mean_p(k, k, b), n_cases), "Fisher's combined test"
            family = n_perts * len(checks)
            rows.append(
                ReachRow(
                    "each pooled check (perturbation x check over the cases)",
                    what,
                    family,
                    corr,
                    min(1.0, p_min),
                    smallest_adjusted_p(min(1.0, p_min), family, corr),
                    alpha,
                )
            )
    controls = tuple(p.name for p in spec.perturbations if p.role == "control")
    untestable = controls if not gate.reachable else ()
    return Reachability(
        k,
        b,
        tuple(rows),
        untestable,
        gate.what.removeprefix("each "),
        reach.min_samples,
    )


__all__ = [
    "ReachRow",
    "Reachability",
    "reachability",
    "smallest_mean_p",
    "smallest_rate_p",
    "smallest_sequential_p",
]
