"""Suites: one spec, many cases, error control across the whole suite.

A spec with ``cases:`` (see :mod:`dbpa_core.cases`) is a suite. Each case x perturbation
is one DBPA test of the perturbed prompt against the case's base prompt. :func:`run_suite`
is a thin orchestrator: it runs each case as an ordinary audit (:func:`~dbpa_core.audit.
run_audit`, through the same :class:`~dbpa_core.sampling.Sampler`, cache and loaded
model), keeps a few numbers per test and lets the responses go (to ``responses.jsonl``
as they arrive, or nowhere), then

* corrects all the tests together (``correction``: Benjamini–Hochberg unless the spec
  says otherwise), so that the error control covers the suite, not one case;
* pools each perturbation across cases (:func:`pool`): Fisher's combined test, the mean
  effect above chance with a bootstrap interval over cases, and the share of cases the
  perturbation changes (discoveries, and Storey's estimate of the true share).

What is held in memory per case: its samples, embeddings and permutation statistics only
while the case is tested; after it, ``omega``, the chance level, the effect above chance
and the p-value of each of its tests (and its answer checks' summaries, when the spec has
checks). A 1,000-case suite keeps a few thousand numbers, whatever ``samples`` is.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import IO, Any

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats

from .audit import RoundFetch, arm_requests, build_arms, run_audit, sequential_fields
from .backends import Backend
from .backends.base import BackendError, SampleRequest
from .cache import Cache
from .cases import Case, case_arm
from .checks import CheckResult, fill_check, pooled_rate_test
from .embedders import Embedder
from .multitest import multiple_testing
from .outputs import write_files
from .reach import reachability
from .sampling import Job, Progress, Sampler, is_cached, model_key
from .similarity import TEXT_SIMILARITIES
from .spec import AuditSpec, Perturbation
from .timings import duration_text
from .types import jsonable

PREFETCH_JOBS = 512  # samples asked for together (several cases), to fill a server's
#                           concurrency or a local model's batches
BOOTSTRAP = 2000  # resamples of the cases for the interval of the mean effect
STOREY_LAMBDA = 0.5  # p-values above it count as true nulls in Storey's estimate
TEST_FIELDS = (
    "case",
    "perturbation",
    "role",
    "omega",
    "chance",
    "effect_above_chance",
    "p_value",
    "p_adjusted",
    "significant",
    "stars",
)


def case_spec(spec: AuditSpec, case: Case) -> AuditSpec:
    """The plain audit of one case: its filled base prompt and perturbed prompts, and its
    checks with their placeholders filled (a choice check with each arm's options)."""
    options, seed = spec.options, spec.seed
    base = case_arm(spec.base_prompt, None, case, options=options, seed=seed)
    arms = {"base": base}
    perts = []
    for p in spec.perturbations:
        arms[p.name] = case_arm(spec.base_prompt, p, case, options=options, seed=seed)
        perts.append(Perturbation(p.name, arms[p.name].prompt, p.role, p.system_prompt))
    shown = {name: arm.options for name, arm in arms.items()}
    checks = tuple(fill_check(c, case.values, shown) for c in spec.checks)
    return replace(
        spec,
        base_prompt=base.prompt,
        perturbations=tuple(perts),
        cases=(),
        options=(),
        expect=None,
        checks=checks,
        name=f"{spec.name} [{case.id}]",
    )


def case_run_options(spec: AuditSpec, i: int) -> dict[str, Any]:
    """What :func:`~dbpa_core.audit.run_audit` of the suite's case ``i`` (from 0) is given
    besides the case's spec: its own permutation seed (so that the cases' p-values are
    independent) and the suite's number of tests (a sequential test stops at α over the
    whole suite's tests). Whatever replays a case (the Batch API's rounds, the estimate's
    pilot) passes the same, so it decides the case as the suite's run does."""
    return {"permutation_seed": i + 1, "family_size": spec.n_tests}


# --------------------------------------------------------------------------- statistics
def storey_pi0(pvalues: ArrayLike, lam: float = STOREY_LAMBDA) -> float:
    """Storey's estimate of the share of true null hypotheses among ``pvalues``:
    ``#{p > λ} / ((1 - λ) m)``, at most 1.

    True nulls give p-values spread evenly over [0, 1], so about ``(1 - λ) m π0`` of them
    lie above λ; changed cases mostly have small p-values and add few there. The estimate
    leans high (a changed case with a large p-value counts as a null), so ``1 - π̂0`` is a
    cautious estimate of the share of changed cases.

    Examples
    --------
    >>> storey_pi0([0.001] * 20 + [0.25, 0.75] * 40)
    0.8
    """
    p = np.asarray(pvalues, dtype=float)
    if p.size == 0:
        return float("nan")
    if not 0.0 < lam < 1.0:
        raise ValueError(f"`lam` must lie in (0, 1), got {lam!r}.")
    return float(min(1.0, np.count_nonzero(p > lam) / ((1.0 - lam) * p.size)))


def fisher_combined(pvalues: ArrayLike) -> tuple[float, float]:
    """Fisher's combined test of independent p-values: ``X = -2 Σ ln p_i``, which is
    chi-squared with ``2m`` degrees of freedom when no case changed. Returns (X, p)."""
    p = np.asarray(pvalues, dtype=float)
    x = float(-2.0 * np.log(np.clip(p, 1e-300, 1.0)).sum())
    return x, float(stats.chi2.sf(x, 2 * p.size))


def fisher_log10_p(statistic: float, n: int) -> float:
    """log10 of Fisher's p-value, still finite where the p-value underflows to 0: with an
    even number of degrees of freedom, ``P(χ²_2n > x) = exp(-x/2) Σ_{k<n} (x/2)^k / k!``."""
    from scipy.special import gammaln, logsumexp

    h = statistic / 2.0
    if h <= 0:
        return 0.0
    k = np.arange(n)
    return float((-h + logsumexp(k * np.log(h) - gammaln(k + 1))) / np.log(10))


def bootstrap_mean(
    values: ArrayLike, *, rng: np.random.Generator, n: int = BOOTSTRAP, level: float = 0.95
) -> tuple[float, float, float]:
    """Mean of ``values`` and its percentile bootstrap interval over the cases."""
    v = np.asarray(values, dtype=float)
    mean = float(v.mean())
    if v.size < 2:
        return mean, mean, mean
    means = np.empty(n)
    chunk = max(1, 2_000_000 // v.size)  # bounded memory for large suites
    for start in range(0, n, chunk):
        m = min(chunk, n - start)
        means[start : start + m] = v[rng.integers(0, v.size, (m, v.size))].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return mean, float(lo), float(hi)


def correct_tests(tests: list[dict[str, Any]], method: str, alpha: float) -> None:
    """Adjust the p-values of all the suite's tests together (in place)."""
    if not tests:
        return
    mt = multiple_testing([t["p_value"] for t in tests], method, alpha=alpha)
    for t, adj, rej, star in zip(tests, mt.p_adjusted, mt.reject, mt.stars, strict=True):
        t.update(p_adjusted=float(adj), significant=bool(rej), stars=star)


def pool(
    tests: list[dict[str, Any]], perturbations: Sequence[Any], *, correction: str, alpha: float, seed: int = 0
) -> list[dict[str, Any]]:
    """One pooled verdict per perturbation across the cases (``tests`` already corrected).

    ``p_value``: Fisher's combined test of the perturbation's p-values over the cases,
    ``p_adjusted``: those corrected across perturbations (``correction``).
    """
    out = []
    for j, p in enumerate(perturbations):
        mine = [t for t in tests if t["perturbation"] == p.name]
        if not mine:
            continue
        ps = [t["p_value"] for t in mine]
        stat, p_comb = fisher_combined(ps)
        mean, lo, hi = bootstrap_mean(
            [t["effect_above_chance"] for t in mine], rng=np.random.default_rng([seed, 20, j])
        )
        found = sum(t["significant"] for t in mine)
        pi0 = storey_pi0(ps)
        out.append(
            {
                "perturbation": p.name,
                "role": p.role,
                "cases": len(mine),
                "method": "fisher",
                "statistic": stat,
                "p_value": p_comb,
                "log10_p_value": fisher_log10_p(stat, len(ps)),
                "mean_omega": float(np.mean([t["omega"] for t in mine])),
                "mean_effect_above_chance": mean,
                "ci_low": lo,
                "ci_high": hi,
                "discoveries": int(found),
                "share_discovered": found / len(mine),
                "pi0": pi0,
                "share_changed": 1.0 - pi0,
            }
        )
    if out:
        mt = multiple_testing([d["p_value"] for d in out], correction, alpha=alpha)
        for d, adj, rej, star in zip(out, mt.p_adjusted, mt.reject, mt.stars, strict=True):
            d.update(p_adjusted=float(adj), significant=bool(rej), stars=star)
    return out


def check_flag(row: dict[str, Any]) -> str:
    """A check row's verdict in one word: changed (significant after the correction), no
    detectable change, or not tested (an arm without answers to compare)."""
    if row.get("p_value") is None:
        return "not tested"
    return "changed" if row.get("significant") else "no detectable change"


def correct_checks(checked: list[tuple[str, CheckResult]], method: str, alpha: float) -> list[dict[str, Any]]:
    """The suite's check rows, one per case x perturbation x check, corrected as ONE
    family: every tested row of every case together, with ``method`` at ``alpha``
    (a case's own correction, over its few checks, would find false discoveries)."""
    tested = [i for i, (_, c) in enumerate(checked) if c.p_value is not None]
    results = [c for _, c in checked]
    if tested:
        pvalues = [p for _, c in checked if (p := c.p_value) is not None]  # tested's order
        mt = multiple_testing(pvalues, method, alpha=alpha)
        for k, i in enumerate(tested):
            results[i] = replace(
                results[i],
                p_adjusted=float(mt.p_adjusted[k]),
                significant=bool(mt.reject[k]),
                stars=mt.stars[k],
                correction=method,
            )
    rows = []
    for (case_id, _), c in zip(checked, results, strict=True):
        d = dict(c.to_dict(), name=c.check, case=case_id, family=len(tested))
        d["flag"] = check_flag(d)
        rows.append(d)
    return rows


def pool_checks(
    checks: list[dict[str, Any]],
    perturbations: Sequence[Perturbation],
    spec_checks: Sequence[Any] = (),
    *,
    correction: str,
    alpha: float,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """One pooled row per perturbation x check across the cases (``checks``: the rows of
    :func:`correct_checks`).

    A rate: each arm's rate over all its answers with a Wilson interval (the benchmark's
    own metric, e.g. the accuracy), the difference with Newcombe's interval, and the
    stratified test over the cases (:func:`~dbpa_core.checks.pooled_rate_test`: exact
    conditional, or Cochran–Mantel–Haenszel beyond its size). A number (words): the mean
    of each arm over the cases, the mean difference with a bootstrap interval over cases,
    and Fisher's combined test of the cases' p-values. The pooled rows are corrected
    together (``correction``), apart from the per-case rows.
    """
    out = []
    names = list(dict.fromkeys([c.name for c in spec_checks] + [r["check"] for r in checks]))
    for j, p in enumerate(perturbations):
        for i, name in enumerate(names):
            mine = [r for r in checks if r["perturbation"] == p.name and r["check"] == name]
            if not mine:
                continue
            head = {
                "name": name,
                "check": name,
                "kind": mine[0]["kind"],
                "perturbation": p.name,
                "role": p.role,
                "numeric": mine[0]["numeric"],
                "model_graded": mine[0]["model_graded"],
            }
            if head["numeric"]:
                rows = [r for r in mine if r.get("difference") is not None]
                d: dict[str, Any] = {"cases": len(rows), "test": "fisher", "interval": "bootstrap over cases"}
                if rows:
                    d["base"] = float(np.mean([r["base"] for r in rows]))
                    d["value"] = float(np.mean([r["value"] for r in rows]))
                    mean, lo, hi = bootstrap_mean(
                        [r["difference"] for r in rows], rng=np.random.default_rng([seed, 31, j, i])
                    )
                    d.update(
                        difference=mean, ci=[lo, hi], p_value=fisher_combined([r["p_value"] for r in rows])[1]
                    )
            else:
                d = pooled_rate_test([(r["base_count"], r["base_n"], r["count"], r["n"]) for r in mine])
                d["base_unparsed"] = sum(r["base_unparsed"] for r in mine)
                d["unparsed"] = sum(r["unparsed"] for r in mine)
            out.append(head | d)
    tested = [d for d in out if d.get("p_value") is not None]
    if tested:
        mt = multiple_testing([d["p_value"] for d in tested], correction, alpha=alpha)
        for d, adj, rej, star in zip(tested, mt.p_adjusted, mt.reject, mt.stars, strict=True):
            d.update(p_adjusted=float(adj), significant=bool(rej), stars=star)
    for d in out:
        d.setdefault("p_value", None)
        d.setdefault("p_adjusted", None)
        d.setdefault("significant", False)
        d.setdefault("stars", "")
        d["correction"] = correction
        d["flag"] = check_flag(d)
    return out


POOLED_CHECK_COLUMNS = (
    "check",
    "kind",
    "perturbation",
    "role",
    "cases",
    "base",
    "base_ci_low",
    "base_ci_high",
    "base_count",
    "base_n",
    "value",
    "value_ci_low",
    "value_ci_high",
    "count",
    "n",
    "difference",
    "ci_low",
    "ci_high",
    "test",
    "p_value",
    "cmh_statistic",
    "cmh_p_value",
    "odds_ratio",
    "p_adjusted",
    "significant",
    "stars",
    "flag",
)


def suite_checks_csv(rows: list[dict[str, Any]]) -> str:
    """The suite's check rows as CSV: the case, then :data:`~dbpa_core.checks.CSV_COLUMNS`,
    the size of the family they were corrected in, and the flag."""
    from .checks import CSV_COLUMNS

    buf = io.StringIO()
    w = csv.DictWriter(
        buf, fieldnames=("case", *CSV_COLUMNS, "correction", "family", "flag"), extrasaction="ignore"
    )
    w.writeheader()
    for r in rows:
        ci = r.get("ci") or (None, None)
        w.writerow(dict(r, ci_low=ci[0], ci_high=ci[1]))
    return buf.getvalue()


def pooled_checks_csv(rows: list[dict[str, Any]]) -> str:
    """The pooled checks as CSV (columns :data:`POOLED_CHECK_COLUMNS`)."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=POOLED_CHECK_COLUMNS, extrasaction="ignore")
    w.writeheader()
    for r in rows:
        flat = dict(r)
        for key, prefix in (("ci", ""), ("base_ci", "base_"), ("value_ci", "value_")):
            lo, hi = r.get(key) or (None, None)
            flat[f"{prefix}ci_low"], flat[f"{prefix}ci_high"] = lo, hi
        w.writerow(flat)
    return buf.getvalue()


# --------------------------------------------------------------------------- running
@dataclass
class SuiteResult:
    """What a suite keeps: one small record per test, one per perturbation, the usage."""

    spec: AuditSpec
    tests: list[dict[str, Any]]
    pooled: list[dict[str, Any]]
    usage: dict[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    checks: list[dict[str, Any]] = field(default_factory=list)
    responses_file: str | None = None  # responses written while it ran, moved by write()
    pooled_checks: list[dict[str, Any]] = field(default_factory=list)

    mode = "suite"

    @property
    def n_cases(self) -> int:
        return len(self.spec.cases)

    def to_dict(self) -> dict[str, Any]:
        return jsonable(
            {
                "spec": self.spec.to_dict(),
                "mode": "suite",
                "cases": self.n_cases,
                "n_tests": len(self.tests),
                "correction": self.spec.correction,
                "alpha": self.spec.alpha,
                "pooled_method": "fisher",
                "tests": self.tests,
                "pooled": self.pooled,
                "usage": self.usage,
                "warnings": list(self.warnings),
                "attainable": self.spec.attainability().to_dict(),
                "reachability": reachability(self.spec).to_dict(),
                "checks": self.checks,
                "checks_correction": self.spec.correction,
                "checks_family": sum(c.get("p_value") is not None for c in self.checks),
                "pooled_checks": self.pooled_checks,
            }
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=False)

    def to_csv(self) -> str:
        buf = io.StringIO()
        cols = TEST_FIELDS + (("samples_used", "stop_reason") if self.spec.sequential_sampling else ())
        w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        w.writerows(self.tests)
        return buf.getvalue()

    def write(self, out_dir: str | os.PathLike[str]) -> list[str]:
        """results.json and results.csv (atomically), with checks: checks.csv (one row per
        case x perturbation x check) and pooled_checks.csv (one per perturbation x check),
        and the responses.jsonl written while the suite ran (moved into ``out_dir``)."""
        files = {"results.json": self.to_json(), "results.csv": self.to_csv()}
        if self.checks:
            files["checks.csv"] = suite_checks_csv(self.checks)
            files["pooled_checks.csv"] = pooled_checks_csv(self.pooled_checks)
        paths = write_files(out_dir, files)
        if self.responses_file and os.path.exists(self.responses_file):
            final = os.path.join(str(out_dir), "responses.jsonl")
            os.replace(self.responses_file, final)
            self.responses_file = final
            paths.append(final)
        return paths


_CALL_ETA = re.compile(r", (?:about [^,]+ left|estimating the time left)$")


class _CaseProgress:
    """Turns one case's progress into the suite's: a ``cases`` bar that moves while
    samples are drawn (several cases' samples are fetched together, so the bar counts the
    cases whose samples are in, a fraction of the fetched ones as they arrive), the
    suite's time left (not one fetch's), the case's retries and loading messages on it,
    and the time its tests took."""

    def __init__(
        self,
        progress: Callable[[Progress], None],
        total: int,
        arms: Sequence[str] = (),
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.progress, self.total = progress, total
        self.done, self.case = 0, ""
        self.arms = set(arms)  # arm names: the label of a sample, not news
        self.test_seconds = self.test_cpu_seconds = 0.0
        self._t: tuple[float, float] | None = None
        self.clock = clock
        self.t0: float | None = None
        self.chunk: tuple[int, int] = (0, 0)  # (first case, cases) being fetched together
        self.position = 0.0  # cases whose samples are in (a fraction while fetching)
        self.chunk_t0: float | None = None

    def __call__(self, p: Progress) -> None:
        if p.stage == "testing":
            if p.done == 0:
                self._t = (time.perf_counter(), time.process_time())
            elif p.done == p.total and self._t is not None:
                self.test_seconds += time.perf_counter() - self._t[0]
                self.test_cpu_seconds += time.process_time() - self._t[1]
                self._t = None
            return
        if p.stage.startswith("loading"):
            self.progress(p)
            return
        if self.t0 is None:
            self.t0 = self.clock()
        start, size = self.chunk
        if p.total and size and p.stage == "sampling":  # by tokens while a local model decodes
            self.position = max(self.position, start + size * p.fraction)
        news = p.detail if p.detail and p.detail not in self.arms else ""
        if p.done < p.total or news:  # samples being fetched, a retry, tokens drawn
            news = _CALL_ETA.sub("", news)  # one fetch's time left is not the suite's
            what = f"{self.case}: {p.stage} {p.done}/{p.total}" + (f", {news}" if news else "")
            left = self.time_left(p.eta_s if p.stage == "sampling" else None)
            if left is not None:
                what += f", about {duration_text(left)} left"
            self.progress(Progress("cases", self.bar, self.total, what, eta_s=left))

    @property
    def bar(self) -> int:
        return min(self.total, max(self.done, int(self.position)))

    def time_left(self, fetch_left: float | None = None) -> float | None:
        """The suite's time left (None until it can be told): with the time left of the
        cases being fetched (``fetch_left``, the sampler's, from its recent rate), that time
        plus as long per case for the cases after them; else from the suite's pace so far."""
        start, size = self.chunk
        if fetch_left is not None and size and self.chunk_t0 is not None:
            per_case = (self.clock() - self.chunk_t0 + fetch_left) / size
            return fetch_left + per_case * max(0, self.total - start - size)
        if self.t0 is None:
            return None
        elapsed = self.clock() - self.t0
        share = max(self.done, self.position) / self.total if self.total else 0.0
        if share <= 0 or elapsed < 2.0 or share >= 1:
            return None
        return elapsed * (1 - share) / share

    def start(self, i: int, case: Case) -> None:
        self.done, self.case = i, case.id
        self.progress(Progress("cases", self.bar, self.total, case.id))

    def fetching(self, i: int, cases: Sequence[Case]) -> None:
        self.chunk = (i, len(cases))
        self.chunk_t0 = self.clock()
        self.case = f"cases {cases[0].id}..{cases[-1].id}" if len(cases) > 1 else cases[0].id


def run_suite(
    spec: AuditSpec,
    *,
    cache: Cache | None = None,
    progress: Callable[[Progress], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    api_keys: dict[str, str] | None = None,
    backends: dict[int, Backend] | None = None,
    embedder: Embedder | None = None,
    responses: IO[str] | None = None,
) -> SuiteResult:
    """Run every case x perturbation of a suite spec and pool the results.

    The arguments are :func:`~dbpa_core.audit.run_audit`'s; ``responses`` (an open text
    file), when given, receives each case's responses as JSON lines as soon as the case
    is done (each with its ``case``); otherwise responses are not kept.
    Raises :class:`~dbpa_core.sampling.RunCancelled` when stopped (what arrived is cached).
    """
    if not spec.cases:
        raise ValueError("this spec has no cases: run it with dbpa_core.audit.run_audit")
    t0 = time.perf_counter()
    cache = cache if cache is not None else Cache()
    # one backend and one embedder for every case: a local model is loaded once
    given = {model_key(spec.models[i]): b for i, b in (backends or {}).items()}
    bar = _CaseProgress(
        progress or (lambda p: None), len(spec.cases), ["base", *(p.name for p in spec.perturbations)]
    )
    shared = Sampler(
        cache,
        progress=bar,
        should_stop=should_stop,
        api_keys=api_keys,
        backends=given,
        embedders={model_key(spec.embedder): embedder} if embedder else None,
    )
    backend = shared.backend(spec.model)
    if embedder is None and spec.embedder.get("backend") not in TEXT_SIMILARITIES:
        embedder = shared.embedder(spec.embedder)
    # Several cases' samples are fetched (and embedded) together into the cache, so that a
    # server gets enough requests at once and a local model full batches; each case's audit
    # then reads them from the cache. Without a cache, each case fetches its own.
    per_case = (1 + len(spec.perturbations)) * spec.samples
    # (not with sequential sampling: its cases draw round by round what their tests need)
    chunk = max(1, PREFETCH_JOBS // per_case) if cache.enabled and spec.sequential_sampling is None else 1
    tests: list[dict[str, Any]] = []
    checked: list[tuple[str, CheckResult]] = []
    usage: dict[str, Any] = {}
    found: dict[str, list] = {}  # warning -> [number of cases, the first 5 of them]
    # what one case's k, B and correction could reach is not the suite's (its own note says it)
    per_case_reach = case_spec(spec, spec.cases[0]).attainability().message
    for i, case in enumerate(spec.cases):
        bar.start(i, case)
        if chunk == 1:
            bar.fetching(i, [case])  # each case fetches its own samples
        if chunk > 1 and i % chunk == 0:
            bar.fetching(i, spec.cases[i : i + chunk])
            _prefetch(shared, spec, spec.cases[i : i + chunk], embedder)
            bar.case = case.id
        r = run_audit(
            case_spec(spec, case),
            cache=cache,
            progress=bar,
            should_stop=should_stop,
            api_keys=api_keys,
            backends={0: backend},
            embedder=embedder,
            **case_run_options(spec, i),
        )
        for p in r.perturbations:
            tests.append(
                {
                    "case": case.id,
                    "perturbation": p.name,
                    "role": p.role,
                    "omega": p.effect_size,
                    "chance": p.chance_effect_size,
                    "effect_above_chance": p.effect_above_chance,
                    "p_value": p.p_value,
                }
                | sequential_fields(p)
            )
        checked += [(case.id, c) for c in r.checks]
        for key, value in r.usage.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                usage[key] = usage.get(key, 0) + value
            else:
                usage[key] = value
        for w in r.warnings:
            if w != per_case_reach:
                seen = found.setdefault(w, [0, []])
                seen[0] += 1
                seen[1] = seen[1] if len(seen[1]) >= 5 else [*seen[1], case.id]
        if responses is not None:
            for line in r.responses_jsonl().splitlines():
                responses.write(json.dumps({"case": case.id, **json.loads(line)}, ensure_ascii=False) + "\n")
        del r  # the case's responses, embeddings and permutations go now
    bar.progress(Progress("cases", len(spec.cases), len(spec.cases)))
    for key in ("calls", "prompt_tokens", "completion_tokens", "embeddings_computed"):
        usage[key] = usage.get(key, 0) + shared.usage[key]  # what the prefetch fetched
    usage["cached_samples"] = usage.get("cached_samples", 0) - shared.usage["calls"]
    usage["embeddings_cached"] = usage.get("embeddings_cached", 0) - shared.usage["embeddings_computed"]
    t1 = time.perf_counter()
    correct_tests(tests, spec.correction, spec.alpha)
    pooled = pool(tests, spec.perturbations, correction=spec.correction, alpha=spec.alpha, seed=spec.seed)
    checks = correct_checks(checked, spec.correction, spec.alpha)
    pooled_checks = pool_checks(
        checks, spec.perturbations, spec.checks, correction=spec.correction, alpha=spec.alpha, seed=spec.seed
    )
    usage["test_seconds"] = round(bar.test_seconds, 3)
    usage["test_cpu_seconds"] = round(bar.test_cpu_seconds, 3)  # this process's CPU time
    usage["pool_seconds"] = round(time.perf_counter() - t1, 3)
    usage["seconds"] = round(time.perf_counter() - t0, 3)
    n = len(spec.cases)
    said = [
        w
        if count == n
        else f"{w} (case{'s' if count > 1 else ''} {', '.join(ids)}"
        f"{f' and {count - 5} more' if count > 5 else ''})"
        for w, (count, ids) in found.items()
    ]
    return SuiteResult(spec, tests, pooled, usage, tuple(said), checks, pooled_checks=pooled_checks)


def _prefetch(sampler: Sampler, spec: AuditSpec, cases: Sequence[Any], embedder: Embedder | None) -> None:
    """Fetch the samples (and embeddings) of ``cases`` into the cache in one call."""
    specs = [case_spec(spec, c) for c in cases]
    records = sampler.sample(
        [Job(arm.model, r, arm.name) for cs in specs for arm in build_arms(cs) for r in arm_requests(cs, arm)]
    )
    if embedder is not None:
        sampler.embed([r.text for r in records], spec.embedder)


class _RoundNeeded(Exception):
    """A replayed case reached a round whose answers are not all in the cache."""

    def __init__(self, jobs: list[tuple[Mapping[str, Any], SampleRequest]]) -> None:
        super().__init__(f"{len(jobs)} samples not cached")
        self.jobs = jobs


def fill_rounds(
    spec: AuditSpec,
    cache: Cache,
    fetch: RoundFetch,
    *,
    deferred: Callable[[Mapping[str, Any]], bool] = lambda model: True,
    progress: Callable[[Progress], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    api_keys: dict[str, str] | None = None,
    backends: dict[int, Backend] | None = None,
    embedder: Embedder | None = None,
) -> int:
    """With ``sequential_sampling``: bring every round every case of the suite will read
    into the cache, one ``fetch`` per round for all the cases together (``dbpa audit
    --batch``: one Batch API job per round instead of one per case and round).

    Each pass replays every case not yet finished from the cache, exactly as
    :func:`run_suite` runs it (the same spec, seeds and stop level,
    :func:`case_run_options`), up to the first round with an uncached sample of a
    ``deferred`` model; the samples that round asks for (the base and the tests still
    open) of all the cases are then handed to ``fetch(jobs)`` at once, which must put them
    in the cache. Samples of other models are drawn on the way, as a live run draws them.
    It ends when every case replays to its end from the cache: :func:`run_suite` then
    reads every answer from there, with the p-values of a run answered live, and a rerun
    fetches nothing. The answer checks' judges are not replayed (they read the final
    answers and are asked by the run).

    Returns the number of ``fetch`` calls (0 when everything was cached). Raises
    :class:`~dbpa_core.backends.base.BackendError` when a fetch left some of its samples
    out of the cache.
    """
    if spec.sequential_sampling is None or not spec.cases:
        raise ValueError("fill_rounds is for a suite with sequential_sampling")
    report = progress or (lambda p: None)
    # one backend and one embedder for every case and pass, as run_suite has them
    shared = Sampler(
        cache,
        should_stop=should_stop,
        api_keys=api_keys,
        backends={model_key(spec.models[i]): b for i, b in (backends or {}).items()},
        embedders={model_key(spec.embedder): embedder} if embedder else None,
    )
    given = {0: shared.backend(spec.model)}
    if embedder is None and spec.embedder.get("backend") not in TEXT_SIMILARITIES:
        embedder = shared.embedder(spec.embedder)
    finished: set[int] = set()
    fetches = 0
    while True:
        needed: list[tuple[Mapping[str, Any], SampleRequest]] = []
        waiting: list[str] = []
        for i, case in enumerate(spec.cases):
            if i in finished:
                continue
            report(Progress("cases", i, len(spec.cases), f"round {fetches + 1}: {case.id}"))

            def hold(jobs: Sequence[tuple[Mapping[str, Any], SampleRequest]]) -> None:
                todo = [(m, r) for m, r in jobs if deferred(m) and not is_cached(cache, m, r)]
                if todo:
                    raise _RoundNeeded(todo)

            try:
                run_audit(
                    replace(case_spec(spec, case), checks=()),
                    cache=cache,
                    should_stop=should_stop,
                    api_keys=api_keys,
                    backends=given,
                    embedder=embedder,
                    fetch_round=hold,
                    **case_run_options(spec, i),
                )
            except _RoundNeeded as need:
                needed += need.jobs
                waiting.append(case.id)
                continue
            finished.add(i)
        report(Progress("cases", len(spec.cases), len(spec.cases)))
        if not needed:
            return fetches
        fetch(needed)
        fetches += 1
        missing = sum(not is_cached(cache, m, r) for m, r in needed)
        if missing:
            raise BackendError(
                f"{missing} of the {len(needed)} samples of round {fetches} (cases "
                f"{', '.join(waiting[:5])}{' ...' if len(waiting) > 5 else ''}) did not reach the cache."
            )


# --------------------------------------------------------------------------- estimate
def suite_pilot(cases: Sequence[Mapping[str, Any]], n_perturbations: int) -> dict[str, Any] | None:
    """The suite's pilot from its cases' sequential estimates (each an estimate's
    ``sequential``, with its ``pilot`` when the case's first round is cached): the cases
    piloted, the tests decided and open, and the calls still to make summed over every
    case: a piloted case's ``best_calls``/``worst_calls`` from its pilot, any other
    case's from its plan (every test stopping at the first look, or running to
    ``samples``). None when no case has a pilot.

    Examples
    --------
    >>> one = {"best_calls": 30, "worst_calls": 60}
    >>> left = {"rounds": 2, "open": 0, "stopped": {"rejected": 2}, "best_calls": 0, "worst_calls": 0}
    >>> done = dict(one, pilot=left)
    >>> suite_pilot([done, one], 2)["best_calls"]
    30
    >>> suite_pilot([one, one], 2) is None
    True
    """
    pilots = [c["pilot"] for c in cases if c.get("pilot")]
    if not pilots:
        return None
    stopped: dict[str, int] = {}
    for p in pilots:
        for why, n in p["stopped"].items():
            stopped[why] = stopped.get(why, 0) + n
    rest = [c for c in cases if not c.get("pilot")]
    return {
        "cases": len(cases),
        "piloted": len(pilots),
        "rounds": min(p["rounds"] for p in pilots),
        "open": sum(p["open"] for p in pilots) + len(rest) * n_perturbations,
        "stopped": stopped,
        "best_calls": sum(p["best_calls"] for p in pilots) + sum(int(c["best_calls"]) for c in rest),
        "worst_calls": sum(p["worst_calls"] for p in pilots) + sum(int(c["worst_calls"]) for c in rest),
    }


__all__ = [
    "SuiteResult",
    "bootstrap_mean",
    "case_run_options",
    "case_spec",
    "correct_checks",
    "correct_tests",
    "fill_rounds",
    "fisher_combined",
    "pool",
    "pool_checks",
    "pooled_checks_rows",
    "run_suite",
    "storey_pi0",
    "suite_pilot",
]


# --------------------------------------------------------------------------- the pooled table
def pooled_rows(result: SuiteResult | list[dict[str, Any]]) -> list[tuple[str, ...]]:
    """The pooled table (header first) as text cells, of a result or of its ``pooled``."""
    from .fmt import fmt_p as _fmt_p

    rows: list[tuple[str, ...]] = [
        (
            "perturbation",
            "role",
            "cases",
            "p (Fisher)",
            "p_adj",
            "",
            "above chance [95% CI]",
            "discoveries",
            "share changed",
        )
    ]
    for d in result if isinstance(result, list) else result.pooled:
        p = _fmt_p(d["p_value"]) if d["p_value"] > 0 else f"1e{d['log10_p_value']:.0f}"
        rows.append(
            (
                d["perturbation"],
                d["role"] or "-",
                str(d["cases"]),
                p,
                _fmt_p(d["p_adjusted"]),
                d["stars"],
                f"{d['mean_effect_above_chance']:+.3f} [{d['ci_low']:+.3f}, {d['ci_high']:+.3f}]",
                f"{d['discoveries']}/{d['cases']}",
                f"{d['share_changed']:.0%}",
            )
        )
    return rows


def pooled_checks_rows(result: SuiteResult | list[dict[str, Any]]) -> list[tuple[str, ...]]:
    """The pooled checks as a text table (header first): each arm's rate over the cases
    with its 95 % interval (a number: the mean), the difference, the stratified p, its
    adjusted p and stars."""
    from .fmt import fmt_p as _fmt_p

    rows: list[tuple[str, ...]] = [
        ("check", "perturbation", "cases", "base [95% CI]", "perturbed [95% CI]", "diff", "p", "p_adj", "")
    ]

    def rate(v: float | None, ci: list[float] | None) -> str:
        if v is None:
            return "-"
        return f"{v:.0%}" + (f" [{ci[0]:.0%}, {ci[1]:.0%}]" if ci else "")

    for d in result if isinstance(result, list) else result.pooled_checks:
        if d["numeric"]:
            base = "-" if d.get("base") is None else f"{d['base']:.1f} words"
            value = "-" if d.get("value") is None else f"{d['value']:.1f} words"
            diff = "-" if d.get("difference") is None else f"{d['difference']:+.1f}"
        else:
            base, value = rate(d.get("base"), d.get("base_ci")), rate(d.get("value"), d.get("value_ci"))
            base += f" +{d['base_unparsed']}?" if d.get("base_unparsed") else ""
            value += f" +{d['unparsed']}?" if d.get("unparsed") else ""
            diff = "-" if d.get("difference") is None else f"{d['difference'] * 100:+.0f} pts"
        rows.append(
            (
                d["check"],
                d["perturbation"],
                str(d["cases"]),
                base,
                value,
                diff,
                "-" if d["p_value"] is None else _fmt_p(d["p_value"]),
                "-" if d["p_adjusted"] is None else _fmt_p(d["p_adjusted"]),
                d["stars"],
            )
        )
    return rows
