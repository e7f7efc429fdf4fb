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
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import IO, Any

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats

from .audit import arm_requests, build_arms, estimate, run_audit
from .backends import Backend
from .cache import Cache
from .cases import Case, fill, perturbed_prompt
from .embedders import Embedder
from .multitest import multiple_testing
from .outputs import write_files
from .sampling import Job, Progress, Sampler, model_key
from .similarity import TEXT_SIMILARITIES
from .spec import AuditSpec, Perturbation
from .types import _jsonable

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
    """The plain audit of one case: its filled base prompt and perturbed prompts."""
    perts = []
    base = fill(spec.base_prompt, case.values)
    for p in spec.perturbations:
        perts.append(
            Perturbation(p.name, perturbed_prompt(spec.base_prompt, p, case)[1], p.role, p.system_prompt)
        )
    return replace(
        spec, base_prompt=base, perturbations=tuple(perts), cases=(), name=f"{spec.name} [{case.id}]"
    )


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

    mode = "suite"

    @property
    def n_cases(self) -> int:
        return len(self.spec.cases)

    def to_dict(self) -> dict[str, Any]:
        return _jsonable(
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
                "checks": self.checks,
            }
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=False)

    def to_csv(self) -> str:
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=TEST_FIELDS, extrasaction="ignore")
        w.writeheader()
        w.writerows(self.tests)
        return buf.getvalue()

    def write(self, out_dir: str | os.PathLike) -> list[str]:
        """results.json and results.csv (atomically), and the responses.jsonl written while
        the suite ran (moved into ``out_dir``)."""
        import os

        paths = write_files(out_dir, {"results.json": self.to_json(), "results.csv": self.to_csv()})
        if self.responses_file and os.path.exists(self.responses_file):
            final = os.path.join(str(out_dir), "responses.jsonl")
            os.replace(self.responses_file, final)
            self.responses_file = final
            paths.append(final)
        return paths


class _CaseProgress:
    """Turns one case's progress into the suite's: a ``cases`` bar, the case's retries and
    loading messages on it, and the time its tests took."""

    def __init__(self, progress: Callable[[Progress], None], total: int, arms: Sequence[Any] = ()) -> None:
        self.progress, self.total = progress, total
        self.done, self.case = 0, ""
        self.arms = set(arms)  # arm names: the label of a sample, not news
        self.test_seconds = self.test_cpu_seconds = 0.0
        self._t: tuple[float, float] | None = None

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
        news = p.detail if p.detail and p.detail not in self.arms else ""
        if p.done < p.total or news:  # samples being fetched, a retry, tokens drawn
            what = f"{self.case}: {p.stage} {p.done}/{p.total}" + (f", {news}" if news else "")
            self.progress(Progress("cases", self.done, self.total, what))

    def start(self, i: int, case: Case) -> None:
        self.done, self.case = i, case.id
        self.progress(Progress("cases", i, self.total, case.id))

    def fetching(self, cases: Sequence[Any]) -> None:
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
    chunk = max(1, PREFETCH_JOBS // per_case) if cache.enabled else 1
    tests: list[dict[str, Any]] = []
    checks: list[dict[str, Any]] = []
    usage: dict[str, Any] = {}
    found: dict[str, list] = {}  # warning -> [number of cases, the first 5 of them]
    # what one case's k, B and correction could reach is not the suite's (its own note says it)
    per_case_reach = case_spec(spec, spec.cases[0]).attainability().message
    for i, case in enumerate(spec.cases):
        bar.start(i, case)
        if chunk > 1 and i % chunk == 0:
            bar.fetching(spec.cases[i : i + chunk])
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
            permutation_seed=i + 1,
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
            )
        checks += [dict(c.to_dict(), case=case.id) for c in r.checks]
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
    return SuiteResult(spec, tests, pooled, usage, tuple(said), checks)


def _prefetch(sampler: Sampler, spec: AuditSpec, cases: Sequence[Any], embedder: Embedder | None) -> None:
    """Fetch the samples (and embeddings) of ``cases`` into the cache in one call."""
    specs = [case_spec(spec, c) for c in cases]
    records = sampler.sample(
        [Job(arm.model, r, arm.name) for cs in specs for arm in build_arms(cs) for r in arm_requests(cs, arm)]
    )
    if embedder is not None:
        sampler.embed([r.text for r in records], spec.embedder)


# --------------------------------------------------------------------------- estimate
def estimate_suite(spec: AuditSpec, *, cache: Cache | None = None) -> dict[str, Any]:
    """Calls, tokens and cost of every case of a suite (one row per arm, summed over the
    cases), without calling anything."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    totals: dict[str, float] = {}
    unknown: set[str] = set()
    for case in spec.cases:
        est = estimate(case_spec(spec, case), cache=cache)
        for r in est["arms"]:
            row = rows.setdefault(
                (r["arm"], r["model"]), dict(r, calls=0, cached=0, input_tokens=0, output_tokens=0, cost=0.0)
            )
            for k in ("calls", "cached", "input_tokens", "output_tokens", "cost"):
                row[k] += r[k]
        for k, v in est["totals"].items():
            totals[k] = totals.get(k, 0) + v
        unknown.update(est["unknown_prices"])
    return {
        "arms": list(rows.values()),
        "totals": totals,
        "unknown_prices": sorted(unknown),
        "cases": len(spec.cases),
        "tests": len(spec.cases) * len(spec.perturbations),
    }


__all__ = [
    "SuiteResult",
    "bootstrap_mean",
    "case_spec",
    "correct_tests",
    "estimate_suite",
    "fisher_combined",
    "pool",
    "run_suite",
    "storey_pi0",
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
