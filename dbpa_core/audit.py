"""DBPA audits: a thin orchestrator over :mod:`dbpa_core.sampling`.

``run_audit(spec)`` samples k responses per arm (the base prompt and each
perturbation, or each model on the base prompt), embeds them, tests every
perturbation against the base, corrects for multiplicity and builds the ROC
over α when roles are given. Every sample and embedding is cached as soon as it
arrives (by :class:`~dbpa_core.sampling.Sampler`), so a repeated run costs
nothing and an interrupted one resumes with only the missing calls.
"""

from __future__ import annotations

import csv
import io
import json
import os
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

import numpy as np

from . import provenance
from .backends import Backend, GenerationParams, SampleRequest
from .cache import Cache
from .checks import CheckResult, audit_checks, checks_csv
from .embedders import Embedder
from .multitest import multiple_testing
from .outputs import OutputDirError, check_out_dir, write_files  # noqa: F401 - re-exported
from .permutation import DBPAWarning, dbpa_test, dbpa_test_similarity
from .roc import roc_over_alpha
from .sampling import (
    Job,
    Progress,
    RunCancelled,
    Sampler,
    SampleRecord,
    is_cached,
    model_key,
    requests_for,
)
from .sequential import SequentialRecord, effect_upper_bound, run_rounds, statistic_matrix, stop_level
from .similarity import TEXT_SIMILARITIES, text_similarity_matrix
from .spec import AuditSpec, model_label, spec_warnings
from .types import DBPAResult, ROCResult, jsonable

AuditCancelled = RunCancelled  # the name audits raised before sampling.py existed


@dataclass(frozen=True)
class Arm:
    """One group of k responses: a prompt on one model."""

    name: str
    prompt: str
    system_prompt: str | None
    model: dict[str, Any]
    role: str | None = None
    first_sample: int = 0  # its samples are first_sample .. first_sample + k - 1

    @property
    def model_label(self) -> str:
        return model_label(self.model)


@dataclass(frozen=True)
class ArmResponses:
    arm: Arm
    texts: tuple[str, ...]
    embeddings: np.ndarray | None
    new_samples: int
    prompt_tokens: int
    completion_tokens: int


@dataclass(frozen=True)
class PerturbationResult:
    """A perturbation (or a model) tested against the base (or the reference model)."""

    name: str
    role: str | None
    prompt: str
    model: str
    effect_size: float
    p_value: float
    p_adjusted: float
    significant: bool
    stars: str
    test: DBPAResult
    min_effect: float | None = None
    sequential: SequentialRecord | None = None  # how a test of sequential sampling went

    @property
    def samples_used(self) -> int:
        """The answers per arm behind this verdict (with sequential sampling, the k at
        which the test stopped)."""
        return self.test.m

    @property
    def detectable(self) -> bool:
        """The change is detectable: significant after the correction (p_adjusted <= α)."""
        return self.significant

    @property
    def exceeds_min_effect(self) -> bool | None:
        """The effect above chance is larger than δ (``min_effect``); None when no δ
        was set. Separate from :attr:`detectable`: with many samples nearly every
        change is detectable, but only some are larger than what matters."""
        if self.min_effect is None:
            return None
        return bool(self.effect_above_chance > self.min_effect)

    @property
    def chance_effect_size(self) -> float:
        """The ω chance alone gives at this k (the mean permutation statistic)."""
        return self.test.chance_effect_size

    @property
    def effect_above_chance(self) -> float:
        """ω minus the ω chance alone gives: about 0 when nothing changed."""
        return self.test.effect_above_chance

    def to_dict(self) -> dict[str, Any]:
        return jsonable(
            {
                "name": self.name,
                "role": self.role,
                "prompt": self.prompt,
                "model": self.model,
                "effect_size": self.effect_size,
                "chance_effect_size": self.chance_effect_size,
                "effect_above_chance": self.effect_above_chance,
                "p_value": self.p_value,
                "p_adjusted": self.p_adjusted,
                "significant": self.significant,
                "stars": self.stars,
                "min_effect": self.min_effect,
                "exceeds_min_effect": self.exceeds_min_effect,
                "measure": self.test.measure,
                "null": self.test.null,
                "n_permutations": self.test.n_permutations,
                "exact": self.test.exact,
                "samples_used": self.samples_used,
            }
            | sequential_fields(self)
            | ({} if self.sequential is None else {"sequential": self.sequential.to_dict()})
        )


@dataclass(frozen=True)
class AuditResult:
    spec: AuditSpec
    base: ArmResponses
    arms: tuple[ArmResponses, ...]
    perturbations: tuple[PerturbationResult, ...]
    roc: ROCResult | None
    usage: dict[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    checks: tuple[CheckResult, ...] = ()  # the spec's answer checks, per arm

    @property
    def mode(self) -> str:
        return self.spec.mode

    def responses(self, name: str) -> tuple[str, ...]:
        for a in (self.base, *self.arms):
            if a.arm.name == name:
                return a.texts
        raise KeyError(name)

    def to_dict(self, *, arrays: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "spec": self.spec.to_dict(),
            "mode": self.mode,
            "base": {
                "name": self.base.arm.name,
                "prompt": self.base.arm.prompt,
                "model": self.base.arm.model_label,
            },
            "perturbations": [p.to_dict() for p in self.perturbations],
            "usage": self.usage,
            "warnings": list(self.warnings),
            "attainable": self.spec.attainability().to_dict(),
            "checks": [c.to_dict() for c in self.checks],
        }
        if self.spec.sequential_sampling is not None:
            out["sequential"] = self.spec.sequential_sampling.plan(self.spec.samples).describe()
        if arrays:
            for d, p in zip(out["perturbations"], self.perturbations, strict=False):
                d["test"] = p.test.to_dict()
        if self.roc is not None:
            out["roc"] = self.roc.to_dict()
        return jsonable(out)

    def to_json(self, *, arrays: bool = False) -> str:
        return json.dumps(self.to_dict(arrays=arrays), indent=2, ensure_ascii=False)

    def to_csv(self) -> str:
        buf = io.StringIO()
        cols = [
            "name",
            "role",
            "model",
            "effect_size",
            "chance_effect_size",
            "effect_above_chance",
            "p_value",
            "p_adjusted",
            "significant",
            "stars",
            "exceeds_min_effect",
            "prompt",
        ]
        if self.spec.sequential_sampling is not None:
            cols[-1:-1] = ["samples_used", "stop_reason"]
        w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        for p in self.perturbations:
            w.writerow(p.to_dict())
        return buf.getvalue()

    def responses_jsonl(self) -> str:
        lines = []
        served = provenance.entries_of(self.usage)  # which model and build answered each
        for a in (self.base, *self.arms):
            for i, t in enumerate(a.texts):
                lines.append(
                    json.dumps(
                        {
                            "arm": a.arm.name,
                            "role": a.arm.role or ("base" if a is self.base else None),
                            "model": a.arm.model_label,
                            "prompt": a.arm.prompt,
                            "system_prompt": a.arm.system_prompt,
                            "index": a.arm.first_sample + i,
                            "response": t,
                            **provenance.sample_of(served, a.arm.name, i),
                        },
                        ensure_ascii=False,
                    )
                )
        return "\n".join(lines) + "\n"

    def write(self, out_dir: str | os.PathLike) -> list[str]:
        """Write results.json, results.csv and responses.jsonl (and checks.csv when the spec
        has checks); returns their paths.

        Atomic: every file is written in full to a temporary file in ``out_dir``
        first and only then renamed into place, so a failure (a full disk, an
        error) leaves the previous results untouched, never a mix of two runs.
        """
        files = {
            "results.json": self.to_json(),
            "results.csv": self.to_csv(),
            "responses.jsonl": self.responses_jsonl(),
        }
        if self.spec.checks:
            files["checks.csv"] = checks_csv(self.checks)
        return write_files(out_dir, files)


def sequential_fields(result: PerturbationResult) -> dict[str, Any]:
    """A test's sequential-sampling fields for a flat record (a suite's test, a history
    row): the answers per arm it used, why it stopped and the sentence that says so;
    empty for a fixed-k test."""
    if result.sequential is None:
        return {}
    return {
        "samples_used": result.samples_used,
        "stop_reason": result.sequential.reason,
        "sequential_statement": result.sequential.statement,
    }


# --------------------------------------------------------------------------- planning
def build_arms(spec: AuditSpec) -> list[Arm]:
    """Base first, then one arm per perturbation (or per non-reference model).

    Every arm draws its own samples. Arms that send the same model the same prompt (a
    same-prompt control: the base's prompt again, to check the false-positive rate)
    would otherwise get the same cached answers, word for word, and could never differ;
    so the second such arm takes sample indices k .. 2k-1, the third 2k .. 3k-1, and so
    on (``first_sample``): fresh, independent draws of the same prompt.
    """
    if spec.mode == "models":  # the reference model plays the base
        arms = [
            Arm(_arm_label(spec, m), spec.base_prompt, spec.system_prompt, m, "reference" if i == 0 else None)
            for i, m in enumerate(spec.models)
        ]
    else:
        arms = [Arm("base", spec.base_prompt, spec.system_prompt, spec.model)] + [
            Arm(p.name, p.prompt, p.system_prompt, spec.model, p.role) for p in spec.perturbations
        ]
    seen: dict[tuple[str, str, str], int] = {}
    out = []
    for arm in arms:
        same = (model_key(arm.model), arm.system_prompt or "", arm.prompt)
        n = seen[same] = seen.get(same, -1) + 1
        out.append(replace(arm, first_sample=n * spec.samples) if n else arm)
    return out


def _arm_label(spec: AuditSpec, model: dict[str, Any]) -> str:
    """A model's name in a comparison. When the models sample at different temperatures
    (e.g. the embedded model at its default and at T=1.2), one that sets none is named
    with the spec's, so that the reference is not the only one without it. A replay model
    samples nothing: it keeps its name."""
    label = model_label(model)
    temps = {
        float(m.get("temperature", spec.temperature)) for m in spec.models if m.get("backend") != "replay"
    }
    if (
        len(temps) > 1
        and "temperature" not in model
        and model.get("backend") != "replay"
        and "T=" not in label
    ):
        label += f" T={spec.temperature:g}"
    return label


def _params(spec: AuditSpec, model: dict[str, Any]) -> GenerationParams:
    return GenerationParams(
        temperature=float(model.get("temperature", spec.temperature)),
        top_p=spec.top_p,
        max_tokens=spec.max_tokens,
    )


def arm_requests(spec: AuditSpec, arm: Arm) -> list[SampleRequest]:
    """The samples an audit asks for one arm (its prompt, ``spec.samples`` of them, from the
    arm's first sample on): the one definition the runners share, and through
    :meth:`dbpa_core.runs.AuditRun.requests_of` the estimate and the batch jobs."""
    return requests_for(
        arm.prompt,
        n=spec.samples,
        seed=spec.seed,
        params=_params(spec, arm.model),
        system_prompt=arm.system_prompt,
        start=arm.first_sample,
    )


def sequential_estimate(
    spec: AuditSpec, totals: Mapping[str, Any], pilot: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """What an estimate says of sequential sampling: the plan, and the calls at best (every
    test stops at the first look) and at worst (every test runs to ``samples``, the
    estimate's totals); with ``pilot`` (:func:`sequential_pilot`), what the cached rounds
    already decided."""
    assert spec.sequential_sampling is not None
    return {
        "plan": spec.sequential_sampling.plan(spec.samples).describe(),
        "best_calls": int(totals["sequential_best_calls"]),
        "worst_calls": int(totals["sequential_worst_calls"]),
    } | ({} if pilot is None else {"pilot": dict(pilot)})


class _NotCached(Exception):
    """A pilot replay needs an answer or an embedding that is not in the cache."""


class _CacheOnly:
    """A backend and an embedder that answer nothing: the pilot replay calls no model."""

    name = model = "cache-only"
    deterministic = True

    def generate(self, requests: Any, on_sample: Any, *, should_stop: Any = None) -> None:
        raise _NotCached

    def embed(self, texts: Any) -> np.ndarray:
        raise _NotCached


def sequential_pilot(
    spec: AuditSpec,
    cache: Cache | None,
    *,
    permutation_seed: int | None = None,
    family_size: int | None = None,
) -> dict[str, Any] | None:
    """With ``sequential_sampling``: replay the rounds whose answers (and embeddings) are
    all in the cache, as the audit would decide them, and say what is left to call.
    ``permutation_seed`` and ``family_size`` are :func:`run_audit`'s (a suite's case is
    run with its own: :func:`dbpa_core.suite.case_run_options`).

    The first round's cached answers are a pilot: its tests are decided exactly as the run
    will decide them (the same answers, the same seeds), so the tests it stops cost nothing
    more, and only the ones still open can need the next rounds. Nothing is called: the
    replay's models and embedder refuse every call, and a round that would need one ends
    it. None when not even the first round is cached (no pilot).

    Returns
    -------
    dict or None
        ``rounds`` (cached rounds replayed), ``k`` (answers per arm after them), ``open``
        (tests still open), ``stopped`` (reason -> count), and ``best_calls`` /
        ``worst_calls``: the calls still to make when every open test stops at the next
        look, or runs to ``samples``; both 0 when the whole run is cached (a rerun calls
        nothing).
    """
    if spec.sequential_sampling is None or cache is None or not cache.enabled or spec.cases:
        return None
    plan = spec.sequential_sampling.plan(spec.samples)
    n = len(build_arms(spec)) - 1
    seen = {"round": 0, "open": n, "answered": -1}  # the round replayed, its open tests

    def fetch(jobs: Sequence[tuple[Mapping[str, Any], SampleRequest]]) -> None:
        j = seen["round"] = seen["answered"] + 1
        step = plan.looks[j] - (plan.looks[j - 1] if j else 0)
        seen["open"] = len(jobs) // step - 1  # the base and each open arm ask `step` answers
        if not all(is_cached(cache, m, r) for m, r in jobs):
            raise _NotCached
        seen["answered"] = j

    quiet = replace(spec, checks=())  # the judges read the answers: not part of the replay
    try:
        result = run_audit(
            quiet,
            cache=cache,
            backends=dict.fromkeys(range(len(spec.models)), cast("Backend", _CacheOnly())),
            embedder=cast("Embedder", _CacheOnly()),
            fetch_round=fetch,
            permutation_seed=permutation_seed,
            family_size=family_size,
        )
    except _NotCached:  # round j needs a call: the rounds before it are decided
        j, open_ = seen["round"], seen["open"]
        if j == 0:
            return None
        paid = plan.looks[j] if seen["answered"] == j else plan.looks[j - 1]  # answers cached
        return {
            "rounds": j,
            "k": plan.looks[j - 1],
            "open": open_,
            "stopped": {"decided": n - open_},
            "best_calls": (1 + open_) * (plan.looks[j] - paid),
            "worst_calls": (1 + open_) * (plan.looks[-1] - paid),
        }
    reasons: dict[str, int] = {}
    for p in result.perturbations:
        if p.sequential is not None:
            reasons[p.sequential.reason] = reasons.get(p.sequential.reason, 0) + 1
    return {
        "rounds": seen["answered"] + 1,
        "k": max(p.samples_used for p in result.perturbations),
        "open": 0,
        "stopped": reasons,
        "best_calls": 0,
        "worst_calls": 0,
    }


# --------------------------------------------------------------------------- drawing and testing
RoundFetch = Callable[[Sequence[tuple[Mapping[str, Any], SampleRequest]]], None]
"""``fetch(jobs)``: called with a round's ``(model, request)`` pairs before the sampler
asks for them (``dbpa audit --batch`` sends them as one Batch API job into the cache)."""


class _Drawn:
    """The answers (and embeddings) drawn so far for each arm, topped up round by round:
    a round asks only for the samples an arm does not have yet (the next indices, the same
    cache keys a fixed-k run uses), so a rerun reads every round from the cache."""

    def __init__(
        self,
        spec: AuditSpec,
        sampler: Sampler,
        arms: list[Arm],
        text_sim: bool,
        fetch: RoundFetch | None = None,
    ) -> None:
        self.spec, self.sampler, self.arms, self.text_sim = spec, sampler, arms, text_sim
        self.fetch = fetch
        self.records: list[list[SampleRecord]] = [[] for _ in arms]
        self.embeddings: list[list[np.ndarray]] = [[] for _ in arms]

    @property
    def n_answers(self) -> int:
        return sum(len(r) for r in self.records)

    def top_up(self, counts: list[int]) -> None:
        """Bring arm ``i`` to ``counts[i]`` answers (an arm that has as many keeps its own)."""
        jobs: list[Job] = []
        owner: list[int] = []
        for i, (arm, want) in enumerate(zip(self.arms, counts, strict=True)):
            have = len(self.records[i])
            if want > have:
                reqs = requests_for(
                    arm.prompt,
                    n=want - have,
                    seed=self.spec.seed,
                    params=_params(self.spec, arm.model),
                    system_prompt=arm.system_prompt,
                    start=arm.first_sample + have,
                )
                jobs += [Job(arm.model, r, arm.name) for r in reqs]
                owner += [i] * len(reqs)
        if not jobs:
            return
        if self.fetch is not None:  # e.g. the round as one Batch API job into the cache
            self.fetch([(j.model, j.request) for j in jobs])
        # every arm's samples in one call, so that a backend can batch across prompts
        recs = self.sampler.sample(jobs)
        emb = None if self.text_sim else self.sampler.embed([r.text for r in recs], self.spec.embedder)
        for n, (i, rec) in enumerate(zip(owner, recs, strict=True)):
            self.records[i].append(rec)
            if emb is not None:
                self.embeddings[i].append(emb[n])

    def responses(self, i: int, k: int | None = None) -> ArmResponses:
        """Arm ``i``'s first ``k`` answers (all it has by default)."""
        recs = self.records[i][:k]
        emb = None if self.text_sim else np.asarray(self.embeddings[i][: len(recs)])
        return ArmResponses(
            self.arms[i],
            tuple(r.text for r in recs),
            emb,
            sum(not r.cached for r in recs),
            sum(r.prompt_tokens for r in recs),
            sum(r.completion_tokens for r in recs),
        )

    def served(self) -> list[dict[str, Any]]:
        """Per arm, the model name and system fingerprint each answer came with."""
        return [
            provenance.arm_entry(a.name, a.model_label, r)
            for a, r in zip(self.arms, self.records, strict=True)
        ]


def _draw_all(
    spec: AuditSpec, sampler: Sampler, arms: list[Arm], counts: list[int], text_sim: bool
) -> tuple[list[ArmResponses], list[dict[str, Any]]]:
    drawn = _Drawn(spec, sampler, arms, text_sim)
    drawn.top_up(counts)
    return [drawn.responses(i) for i in range(len(arms))], drawn.served()


def _test_pair(
    spec: AuditSpec,
    base: ArmResponses,
    other: ArmResponses,
    j: int,
    k: int,
    n_permutations: int,
    permutation_seed: int | None,
) -> tuple[DBPAResult, list[str]]:
    """Test arm ``j`` (counted from 0, the base left out) against the base on their first
    ``k`` answers; returns the result and the warnings it raised."""
    rng = np.random.default_rng(
        [spec.seed, j] if permutation_seed is None else [spec.seed, permutation_seed, j]
    )
    with warnings.catch_warnings(record=True) as wlist:
        warnings.simplefilter("always", DBPAWarning)
        if spec.embedder.get("backend") in TEXT_SIMILARITIES:
            s = text_similarity_matrix(list(base.texts[:k]) + list(other.texts[:k]), spec.embedder["backend"])
            r = dbpa_test_similarity(
                s,
                k,
                measure=spec.measure,
                n_permutations=n_permutations,
                rng=rng,
                sequential=spec.sequential,
                null=spec.null,
            )
        else:
            assert base.embeddings is not None and other.embeddings is not None
            r = dbpa_test(
                base.embeddings[:k],
                other.embeddings[:k],
                measure=spec.measure,
                n_permutations=n_permutations,
                rng=rng,
                sequential=spec.sequential,
                null=spec.null,
            )
    return r, [f"{other.arm.name}: {w.message}" for w in wlist]


def _run_sequential(
    spec: AuditSpec,
    sampler: Sampler,
    arms: list[Arm],
    text_sim: bool,
    permutation_seed: int | None,
    family_size: int | None,
    fetch: RoundFetch | None = None,
) -> tuple[list[ArmResponses], list[dict[str, Any]], list[DBPAResult], list[str], list[SequentialRecord]]:
    """The answers drawn in rounds, each open test decided after each round
    (:func:`dbpa_core.sequential.run_rounds`)."""
    assert spec.sequential_sampling is not None
    plan = spec.sequential_sampling.plan(spec.samples)
    drawn = _Drawn(spec, sampler, arms, text_sim, fetch)
    n = len(arms) - 1
    level = stop_level(spec.alpha, spec.correction, family_size or spec.n_tests)
    most = len(arms) * spec.samples
    said: dict[int, list[str]] = {}

    def draw(k: int, open_tests: list[int]) -> None:
        sampler.check_stop()
        drawn.top_up([k] + [k if i in open_tests else 0 for i in range(n)])
        sampler.progress(
            Progress(
                "sampling",
                drawn.n_answers,
                most,
                f"look at k = {k}: {drawn.n_answers} answers saved, {len(open_tests)} of {n} tests open",
            )
        )
        sampler.progress(Progress("testing", 0, len(open_tests)))

    def test(i: int, k: int, b: int, confidence: float | None) -> tuple[DBPAResult, float | None]:
        sampler.check_stop()
        base, other = drawn.responses(0, k), drawn.responses(i + 1, k)
        r, said[i] = _test_pair(spec, base, other, i, k, b, permutation_seed)
        if confidence is None:
            return r, None
        if text_sim:
            s = text_similarity_matrix(list(base.texts) + list(other.texts), spec.embedder["backend"])
            matrix = statistic_matrix(similarity=s, measure=spec.measure)
        else:
            assert base.embeddings is not None and other.embeddings is not None
            matrix = statistic_matrix(np.vstack([base.embeddings, other.embeddings]), measure=spec.measure)
        upper = effect_upper_bound(
            matrix,
            k,
            measure=spec.measure,
            effect_above_chance=r.effect_above_chance,
            confidence=confidence,
            null=spec.null,
        )
        return r, upper

    def on_round(j: int, open_tests: list[int]) -> None:
        sampler.progress(Progress("testing", 1, 1))

    tests, records = run_rounds(
        plan,
        n,
        level=level,
        min_effect=spec.min_effect,
        permutations=spec.permutations,
        draw=draw,
        test=test,
        on_round=on_round,
    )
    sampled = [drawn.responses(i) for i in range(len(arms))]
    return sampled, drawn.served(), tests, [w for i in sorted(said) for w in said[i]], records


# --------------------------------------------------------------------------- running
def run_audit(
    spec: AuditSpec,
    *,
    cache: Cache | None = None,
    progress: Callable[[Progress], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    api_keys: dict[str, str] | None = None,
    backends: dict[int, Backend] | None = None,
    embedder: Embedder | None = None,
    permutation_seed: int | None = None,
    family_size: int | None = None,
    fetch_round: RoundFetch | None = None,
) -> AuditResult:
    """Run an audit spec end to end.

    Parameters
    ----------
    spec : AuditSpec
        From :func:`dbpa_core.spec.load_spec` / :func:`~dbpa_core.spec.parse_spec`.
    cache : Cache, optional
        Defaults to ``Cache()`` (``$DBPA_CACHE_DIR`` or the per-user cache folder).
        ``Cache(enabled=False)`` turns caching off.
    progress : callable, optional
        Called with a :class:`Progress` as work advances (stages: sampling,
        embedding, testing).
    should_stop : callable, optional
        Polled between calls; when it returns True the run raises
        :class:`AuditCancelled` (what arrived is cached).
    api_keys : dict, optional
        Keys held in memory only, by the name of their environment variable
        (``"openai"`` when the spec names none; ``"embedder"`` for the embedder).
    backends, embedder : optional
        Ready-made objects (index in ``spec.models`` -> backend), for tests and
        for callers that keep models loaded.
    permutation_seed : int, optional
        Mixed into the seed of the permutations (a suite gives each case its own, so
        that its cases' p-values are independent).
    family_size : int, optional
        The number of tests corrected together, when it is more than this audit's (a
        suite's case): with ``sequential_sampling``, a test stops as significant at
        ``α / family_size``.
    fetch_round : callable, optional
        With ``sequential_sampling``: called with each round's uncached and cached
        ``(model, request)`` pairs before the sampler asks for them (``dbpa audit --batch``
        sends each round as one Batch API job into the cache, so the round then reads it).
    """
    if spec.cases:
        raise ValueError("this spec has cases (a suite): run it with dbpa_core.suite.run_suite")
    t0 = time.perf_counter()
    given = {model_key(spec.models[i]): b for i, b in (backends or {}).items()}
    embedders = {model_key(spec.embedder): embedder} if embedder is not None else None
    sampler = Sampler(
        cache,
        progress=progress,
        should_stop=should_stop,
        api_keys=api_keys,
        backends=given,
        embedders=embedders,
    )
    arms = build_arms(spec)
    sampler.check_stop()
    text_sim = spec.embedder.get("backend") in TEXT_SIMILARITIES
    records: list[SequentialRecord] | None = None
    if spec.sequential_sampling is None:
        sampled, served = _draw_all(spec, sampler, arms, [spec.samples] * len(arms), text_sim)
        base, others = sampled[0], sampled[1:]
        tests: list[DBPAResult] = []
        caught: list[str] = []
        for j, other in enumerate(others):
            sampler.check_stop()
            sampler.progress(Progress("testing", j, len(others), other.arm.name))
            r, said = _test_pair(spec, base, other, j, spec.samples, spec.permutations, permutation_seed)
            caught += said
            tests.append(r)
        sampler.progress(Progress("testing", len(others), len(others)))
    else:
        sampled, served, tests, caught, records = _run_sequential(
            spec, sampler, arms, text_sim, permutation_seed, family_size, fetch_round
        )
        base, others = sampled[0], sampled[1:]

    results: tuple[PerturbationResult, ...] = ()
    if tests:
        # sequential: the correction runs on each test's sequential p-value
        ps = [t.p_value for t in tests] if records is None else [rec.p_value for rec in records]
        mt = multiple_testing(ps, spec.correction, alpha=spec.alpha)
        results = tuple(
            PerturbationResult(
                o.arm.name,
                o.arm.role,
                o.arm.prompt,
                o.arm.model_label,
                t.effect_size,
                ps[i],
                float(mt.p_adjusted[i]),
                bool(mt.reject[i]),
                mt.stars[i],
                t,
                spec.min_effect,
                None if records is None else records[i],
            )
            for i, (o, t) in enumerate(zip(others, tests, strict=False))
        )
    roc = None
    controls = [r.p_value for r in results if r.role == "control"]
    targets = [r.p_value for r in results if r.role == "target"]
    if controls and targets:
        roc = roc_over_alpha(controls, targets)
    checks = audit_checks(spec, sampled, sampler)  # judges asked through the sampler
    usage = dict(sampler.usage, seconds=round(time.perf_counter() - t0, 3))
    usage[provenance.KEY] = served
    return AuditResult(
        spec,
        base,
        tuple(others),
        results,
        roc,
        usage,
        tuple(spec_warnings(spec)) + tuple(caught) + tuple(provenance.change_warnings(served)),
        checks,
    )
