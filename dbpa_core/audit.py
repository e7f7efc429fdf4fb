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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from . import provenance
from .backends import Backend, GenerationParams, SampleRequest
from .cache import Cache
from .checks import CheckResult, audit_checks, checks_csv, judge_estimate
from .embedders import Embedder
from .multitest import multiple_testing
from .outputs import OutputDirError, check_out_dir, write_files  # noqa: F401 - re-exported
from .permutation import DBPAWarning, dbpa_test, dbpa_test_similarity
from .pricing import estimate_tokens, price_of
from .roc import roc_over_alpha
from .sampling import Job, Progress, RunCancelled, Sampler, is_cached, model_key, requests_for
from .similarity import TEXT_SIMILARITIES, text_similarity_matrix
from .spec import AuditSpec, model_label, spec_warnings
from .types import DBPAResult, ROCResult, _jsonable

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
        return _jsonable(
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
            }
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
        if arrays:
            for d, p in zip(out["perturbations"], self.perturbations, strict=False):
                d["test"] = p.test.to_dict()
        if self.roc is not None:
            out["roc"] = self.roc.to_dict()
        return _jsonable(out)

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
    arm's first sample on): the one definition the runners, the estimate and the batch
    jobs share."""
    return requests_for(
        arm.prompt,
        n=spec.samples,
        seed=spec.seed,
        params=_params(spec, arm.model),
        system_prompt=arm.system_prompt,
        start=arm.first_sample,
    )


def estimate(spec: AuditSpec, *, cache: Cache | None = None) -> dict[str, Any]:
    """Calls, tokens and cost of a spec, without calling anything.

    Tokens are estimated at ~4 characters per token; output tokens are counted
    at ``max_tokens`` (an upper bound). Samples already in the cache cost
    nothing and are subtracted.
    """
    if spec.cases:  # a suite: every case's arms
        from .suite import estimate_suite

        return estimate_suite(spec, cache=cache)
    rows: list[dict[str, Any]] = []
    totals: dict[str, float] = {"calls": 0, "cached": 0, "input_tokens": 0, "output_tokens": 0, "cost": 0.0}
    unknown_price = set()
    # (arm, model, calls, cached, input tokens, output tokens)
    lines: list[tuple[str, Mapping[str, Any], int, int, int, int]] = []
    for arm in build_arms(spec):
        reqs = arm_requests(spec, arm)
        cached = sum(1 for r in reqs if is_cached(cache, arm.model, r))
        calls = len(reqs) - cached
        system = estimate_tokens(arm.system_prompt) if arm.system_prompt else 0
        in_tok = calls * (estimate_tokens(arm.prompt) + system + 8)  # + chat-template overhead
        lines.append((arm.name, arm.model, calls, cached, in_tok, calls * spec.max_tokens))
    lines += judge_estimate(spec, cache)  # the judges of model-graded checks
    for name, model, calls, cached, in_tok, out_tok in lines:
        model_name = model.get("name", "") if model.get("backend") == "openai" else ""
        price = price_of(model_name, spec.prices) if model_name else {"input": 0.0, "output": 0.0}
        if price is None:
            unknown_price.add(model_name)
            cost = float("nan")
        else:
            cost = in_tok / 1e6 * price["input"] + out_tok / 1e6 * price["output"]
        rows.append(
            {
                "arm": name,
                "model": model_label(dict(model)),
                "calls": calls,
                "cached": cached,
                "input_tokens": in_tok,
                "output_tokens": out_tok,
                "cost": cost,
            }
        )
        for k in ("calls", "cached", "input_tokens", "output_tokens"):
            totals[k] += rows[-1][k]
        totals["cost"] += cost if cost == cost else 0.0
    emb_cost = 0.0
    emb_tokens = totals["output_tokens"]
    if spec.embedder.get("backend") == "openai":
        p = price_of(spec.embedder.get("name", "text-embedding-3-small"), spec.prices)
        if p is None:
            unknown_price.add(spec.embedder.get("name", ""))
        else:
            emb_cost = emb_tokens / 1e6 * p["input"]
    totals["embedding_tokens"] = emb_tokens
    totals["embedding_cost"] = emb_cost
    totals["cost"] += emb_cost
    return {"arms": rows, "totals": totals, "unknown_prices": sorted(unknown_price)}


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
    k = spec.samples
    sampler.check_stop()
    # every arm's samples in one call, so that a backend can batch across prompts
    records = sampler.sample([Job(arm.model, r, arm.name) for arm in arms for r in arm_requests(spec, arm)])
    sampled: list[ArmResponses] = []
    served = []  # per arm, the model name and system fingerprint each answer came with
    for i, arm in enumerate(arms):
        recs = records[i * k : (i + 1) * k]
        served.append(provenance.arm_entry(arm.name, arm.model_label, recs))
        sampled.append(
            ArmResponses(
                arm,
                tuple(r.text for r in recs),
                None,
                sum(not r.cached for r in recs),
                sum(r.prompt_tokens for r in recs),
                sum(r.completion_tokens for r in recs),
            )
        )

    text_sim = spec.embedder.get("backend") in TEXT_SIMILARITIES
    if not text_sim:
        all_texts = [t for a in sampled for t in a.texts]
        emb = sampler.embed(all_texts, spec.embedder)
        sampled = [
            ArmResponses(
                a.arm, a.texts, emb[i * k : (i + 1) * k], a.new_samples, a.prompt_tokens, a.completion_tokens
            )
            for i, a in enumerate(sampled)
        ]

    base, others = sampled[0], sampled[1:]
    tests: list[DBPAResult] = []
    caught: list[str] = []
    for j, other in enumerate(others):
        sampler.check_stop()
        sampler.progress(Progress("testing", j, len(others), other.arm.name))
        rng = np.random.default_rng(
            [spec.seed, j] if permutation_seed is None else [spec.seed, permutation_seed, j]
        )
        with warnings.catch_warnings(record=True) as wlist:
            warnings.simplefilter("always", DBPAWarning)
            if text_sim:
                s = text_similarity_matrix(list(base.texts) + list(other.texts), spec.embedder["backend"])
                r = dbpa_test_similarity(
                    s,
                    k,
                    measure=spec.measure,
                    n_permutations=spec.permutations,
                    rng=rng,
                    sequential=spec.sequential,
                    null=spec.null,
                )
            else:  # embedded arms carry their embeddings
                assert base.embeddings is not None and other.embeddings is not None
                r = dbpa_test(
                    base.embeddings,
                    other.embeddings,
                    measure=spec.measure,
                    n_permutations=spec.permutations,
                    rng=rng,
                    sequential=spec.sequential,
                    null=spec.null,
                )
        for w in wlist:
            caught.append(f"{other.arm.name}: {w.message}")
        tests.append(r)
    sampler.progress(Progress("testing", len(others), len(others)))

    results: tuple[PerturbationResult, ...] = ()
    if tests:
        mt = multiple_testing([t.p_value for t in tests], spec.correction, alpha=spec.alpha)
        results = tuple(
            PerturbationResult(
                o.arm.name,
                o.arm.role,
                o.arm.prompt,
                o.arm.model_label,
                t.effect_size,
                t.p_value,
                float(mt.p_adjusted[i]),
                bool(mt.reject[i]),
                mt.stars[i],
                t,
                spec.min_effect,
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
