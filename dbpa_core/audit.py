"""The audit runner: the only place where backend -> cache -> embed -> statistics meet.

``run_audit(spec)`` samples k responses per arm (the base prompt and each
perturbation, or each model on the base prompt), embeds them, tests every
perturbation against the base, corrects for multiplicity and builds the ROC
over α when roles are given. Every sample and embedding is cached as soon as it
arrives, so a repeated run costs nothing and an interrupted one resumes with
only the missing calls.
"""
from __future__ import annotations

import csv
import io
import json
import os
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .backends import Backend, BackendError, GenerationParams, SampleRequest, make_backend, sample_seed
from .cache import Cache, make_key
from .embedders import Embedder, make_embedder
from .multitest import multiple_testing
from .permutation import DBPAWarning, dbpa_test, dbpa_test_similarity
from .pricing import estimate_tokens, price_of
from .roc import roc_over_alpha
from .similarity import TEXT_SIMILARITIES, text_similarity_matrix
from .spec import AuditSpec, model_label
from .types import DBPAResult, ROCResult, _jsonable


@dataclass(frozen=True)
class Progress:
    """One progress report: ``done`` of ``total`` units of ``stage`` (``detail`` says which)."""

    stage: str
    done: int
    total: int
    detail: str = ""


class AuditCancelled(RuntimeError):
    """The run was stopped on request; everything received so far is cached."""


@dataclass(frozen=True)
class Arm:
    """One group of k responses: a prompt on one model."""

    name: str
    prompt: str
    system_prompt: str | None
    model: dict[str, Any]
    role: str | None = None

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

    def to_dict(self) -> dict[str, Any]:
        return _jsonable({
            "name": self.name, "role": self.role, "prompt": self.prompt, "model": self.model,
            "effect_size": self.effect_size, "p_value": self.p_value,
            "p_adjusted": self.p_adjusted, "significant": self.significant, "stars": self.stars,
            "n_permutations": self.test.n_permutations, "exact": self.test.exact,
        })


@dataclass(frozen=True)
class AuditResult:
    spec: AuditSpec
    base: ArmResponses
    arms: tuple[ArmResponses, ...]
    perturbations: tuple[PerturbationResult, ...]
    roc: ROCResult | None
    usage: dict[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()

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
            "base": {"name": self.base.arm.name, "prompt": self.base.arm.prompt,
                     "model": self.base.arm.model_label},
            "perturbations": [p.to_dict() for p in self.perturbations],
            "usage": self.usage,
            "warnings": list(self.warnings),
        }
        if arrays:
            for d, p in zip(out["perturbations"], self.perturbations):
                d["test"] = p.test.to_dict()
        if self.roc is not None:
            out["roc"] = self.roc.to_dict()
        return _jsonable(out)

    def to_json(self, *, arrays: bool = False) -> str:
        return json.dumps(self.to_dict(arrays=arrays), indent=2, ensure_ascii=False)

    def to_csv(self) -> str:
        buf = io.StringIO()
        cols = ["name", "role", "model", "effect_size", "p_value", "p_adjusted", "significant",
                "stars", "prompt"]
        w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        for p in self.perturbations:
            w.writerow(p.to_dict())
        return buf.getvalue()

    def responses_jsonl(self) -> str:
        lines = []
        for a in (self.base, *self.arms):
            for i, t in enumerate(a.texts):
                lines.append(json.dumps({"arm": a.arm.name, "role": a.arm.role or
                                         ("base" if a is self.base else None),
                                         "model": a.arm.model_label, "prompt": a.arm.prompt,
                                         "system_prompt": a.arm.system_prompt, "index": i,
                                         "response": t}, ensure_ascii=False))
        return "\n".join(lines) + "\n"

    def write(self, out_dir) -> list[str]:
        """Write results.json, results.csv and responses.jsonl; returns their paths."""
        from pathlib import Path

        d = Path(out_dir)
        d.mkdir(parents=True, exist_ok=True)
        files = {"results.json": self.to_json(), "results.csv": self.to_csv(),
                 "responses.jsonl": self.responses_jsonl()}
        for name, text in files.items():
            (d / name).write_text(text, encoding="utf-8")
        return [str(d / n) for n in files]


# --------------------------------------------------------------------------- planning
def build_arms(spec: AuditSpec) -> list[Arm]:
    """Base first, then one arm per perturbation (or per non-reference model)."""
    if spec.mode == "models":  # the reference model plays the base
        return [Arm(model_label(m), spec.base_prompt, spec.system_prompt, m,
                    "reference" if i == 0 else None) for i, m in enumerate(spec.models)]
    base = Arm("base", spec.base_prompt, spec.system_prompt, spec.model)
    return [base] + [Arm(p.name, p.prompt, p.system_prompt, spec.model, p.role)
                     for p in spec.perturbations]


def _params(spec: AuditSpec, model: dict[str, Any]) -> GenerationParams:
    return GenerationParams(temperature=float(model.get("temperature", spec.temperature)),
                            top_p=spec.top_p, max_tokens=spec.max_tokens)


def _requests(spec: AuditSpec, arm: Arm) -> list[SampleRequest]:
    params = _params(spec, arm.model)
    return [SampleRequest(arm.prompt, i, sample_seed(spec.seed, arm.prompt, arm.system_prompt, i),
                          params, arm.system_prompt) for i in range(spec.samples)]


def sample_key(identity: dict[str, Any], req: SampleRequest) -> str:
    return make_key("sample", {**identity, "system_prompt": req.system_prompt,
                               "prompt": req.prompt, "params": req.params.as_dict(),
                               "index": req.index, "seed": req.seed})


def embedding_key(identity: dict[str, Any], text: str) -> str:
    return make_key("embedding", {**identity, "text": text})


def _backend_identity(model: dict[str, Any]) -> dict[str, Any]:
    """What identifies a backend's samples, known without loading it."""
    kind = model.get("backend", "local")
    if kind == "local":
        from .backends.local import SMOLLM2_NAME

        return {"backend": "local", "model": SMOLLM2_NAME}
    if kind == "openai":
        from .backends.openai_compat import OpenAIClientSettings

        return {"backend": "openai", "model": model["name"],
                "host": OpenAIClientSettings(base_url=model.get("base_url")).host}
    if kind == "hf":
        return {"backend": "hf", "model": model.get("name") or os.path.basename(model["path"]),
                "path": model["path"]}
    st = os.stat(model["file"])
    return {"backend": "replay", "model": model.get("name") or "", "file": model["file"],
            "mtime": st.st_mtime_ns, "size": st.st_size}


def _embedder_identity(config: dict[str, Any]) -> dict[str, Any]:
    """What identifies an embedder's vectors, known without loading it."""
    kind = config.get("backend", "local")
    if kind == "local":
        return {"embedder": "local", "model": "all-MiniLM-L6-v2"}
    if kind == "openai":
        from .backends.openai_compat import OpenAIClientSettings

        return {"embedder": "openai", "model": config.get("name", "text-embedding-3-small"),
                "host": OpenAIClientSettings(base_url=config.get("base_url")).host}
    return {"embedder": kind, "model": config.get("name") or config.get("path")}


def estimate(spec: AuditSpec, *, cache: Cache | None = None) -> dict[str, Any]:
    """Calls, tokens and cost of a spec, without calling anything.

    Tokens are estimated at ~4 characters per token; output tokens are counted
    at ``max_tokens`` (an upper bound). Samples already in the cache cost
    nothing and are subtracted.
    """
    rows = []
    totals = {"calls": 0, "cached": 0, "input_tokens": 0, "output_tokens": 0, "cost": 0.0}
    unknown_price = set()
    for arm in build_arms(spec):
        ident = _backend_identity(arm.model)
        reqs = _requests(spec, arm)
        cached = sum(1 for r in reqs if cache is not None and sample_key(ident, r) in cache)
        calls = len(reqs) - cached
        system = estimate_tokens(arm.system_prompt) if arm.system_prompt else 0
        in_tok = calls * (estimate_tokens(arm.prompt) + system + 8)  # + chat-template overhead
        out_tok = calls * spec.max_tokens
        model_name = arm.model.get("name", "") if arm.model.get("backend") == "openai" else ""
        price = price_of(model_name, spec.prices) if model_name else {"input": 0.0, "output": 0.0}
        if price is None:
            unknown_price.add(model_name)
            cost = float("nan")
        else:
            cost = in_tok / 1e6 * price["input"] + out_tok / 1e6 * price["output"]
        rows.append({"arm": arm.name, "model": arm.model_label, "calls": calls, "cached": cached,
                     "input_tokens": in_tok, "output_tokens": out_tok, "cost": cost})
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
class _Runner:
    def __init__(self, spec: AuditSpec, cache: Cache, progress, should_stop, api_keys,
                 backends: dict[int, Backend] | None, embedder: Embedder | None):
        self.spec = spec
        self.cache = cache
        self.progress = progress or (lambda p: None)
        self.should_stop = should_stop or (lambda: False)
        self.api_keys = api_keys or {}
        self._backends: dict[str, Backend] = {}
        self._given_backends = backends or {}
        self._embedder = embedder
        self.usage = {"calls": 0, "cached_samples": 0, "prompt_tokens": 0, "completion_tokens": 0,
                      "embeddings_computed": 0, "embeddings_cached": 0}

    def backend(self, model: dict[str, Any]) -> Backend:
        key = json.dumps(model, sort_keys=True)
        if key not in self._backends:
            idx = list(self.spec.models).index(model)
            if idx in self._given_backends:
                self._backends[key] = self._given_backends[idx]
            else:
                self._backends[key] = make_backend(
                    model, cache_dir=str(self.cache.directory),
                    api_key=self.api_keys.get(model.get("api_key_env") or "openai"))
        return self._backends[key]

    def check_stop(self) -> None:
        if self.should_stop():
            raise AuditCancelled("Stopped: every response received so far is cached; run again "
                                 "to resume where it stopped.")

    def sample(self, arm: Arm, done_before: int, total: int) -> ArmResponses:
        reqs = _requests(self.spec, arm)
        ident = _backend_identity(arm.model)
        got: dict[int, dict[str, Any]] = {}
        for r in reqs:
            v = self.cache.get(sample_key(ident, r))
            if v is not None:
                got[r.index] = v
        cached = len(got)
        self.usage["cached_samples"] += cached
        missing = [r for r in reqs if r.index not in got]
        self.progress(Progress("sampling", done_before + cached, total, arm.name))
        if missing:
            backend = self.backend(arm.model)
            check = getattr(backend, "check", None)
            if check is not None:
                check(arm.prompt, self.spec.samples)

            def on_sample(req: SampleRequest, s) -> None:
                value = {"text": s.text, "prompt_tokens": s.prompt_tokens,
                         "completion_tokens": s.completion_tokens, "model": s.model}
                self.cache.set(sample_key(ident, req), value)  # at once: nothing lost on a stop
                got[req.index] = value
                self.usage["calls"] += 1
                self.usage["prompt_tokens"] += s.prompt_tokens
                self.usage["completion_tokens"] += s.completion_tokens
                self.progress(Progress("sampling", done_before + len(got), total, arm.name))

            backend.generate(missing, on_sample, should_stop=self.should_stop)
            self.check_stop()
            if len(got) < len(reqs):
                raise BackendError(f"The backend returned {len(got)} of {len(reqs)} samples for "
                                   f"{arm.name!r}; run again to fetch the rest.")
        texts = tuple(got[i]["text"] for i in range(len(reqs)))
        return ArmResponses(arm, texts, None, len(missing),
                            sum(int(v.get("prompt_tokens", 0)) for v in got.values()),
                            sum(int(v.get("completion_tokens", 0)) for v in got.values()))

    def embedder(self) -> Embedder:
        if self._embedder is None:
            env = self.spec.embedder.get("api_key_env")
            key = self.api_keys.get(env) if env else None
            self._embedder = make_embedder(self.spec.embedder,
                                           api_key=key or self.api_keys.get("embedder"))
        return self._embedder

    def embed(self, texts: list[str]) -> np.ndarray:
        ident = _embedder_identity(self.spec.embedder)
        unique = list(dict.fromkeys(texts))
        vecs: dict[str, np.ndarray] = {}
        for t in unique:
            v = self.cache.get(embedding_key(ident, t))
            if v is not None:
                vecs[t] = v
        self.usage["embeddings_cached"] += len(vecs)
        todo = [t for t in unique if t not in vecs]
        total = len(unique)
        self.progress(Progress("embedding", len(vecs), total))
        batch = 64
        for start in range(0, len(todo), batch):
            self.check_stop()
            chunk = todo[start:start + batch]
            out = self.embedder().embed(chunk)
            for t, v in zip(chunk, out):
                v = np.asarray(v, dtype=np.float32)
                self.cache.set(embedding_key(ident, t), v)
                vecs[t] = v
            self.usage["embeddings_computed"] += len(chunk)
            self.progress(Progress("embedding", len(vecs), total))
        return np.vstack([vecs[t] for t in texts]) if texts else np.zeros((0, 0))


def run_audit(spec: AuditSpec, *, cache: Cache | None = None,
              progress: Callable[[Progress], None] | None = None,
              should_stop: Callable[[], bool] | None = None,
              api_keys: dict[str, str] | None = None,
              backends: dict[int, Backend] | None = None,
              embedder: Embedder | None = None) -> AuditResult:
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
    """
    t0 = time.perf_counter()
    cache = cache if cache is not None else Cache()
    runner = _Runner(spec, cache, progress, should_stop, api_keys, backends, embedder)
    arms = build_arms(spec)
    k = spec.samples
    total = k * len(arms)
    sampled: list[ArmResponses] = []
    for i, arm in enumerate(arms):
        runner.check_stop()
        sampled.append(runner.sample(arm, i * k, total))

    text_sim = spec.embedder.get("backend") in TEXT_SIMILARITIES
    if not text_sim:
        all_texts = [t for a in sampled for t in a.texts]
        emb = runner.embed(all_texts)
        sampled = [ArmResponses(a.arm, a.texts, emb[i * k:(i + 1) * k], a.new_samples,
                                a.prompt_tokens, a.completion_tokens)
                   for i, a in enumerate(sampled)]

    base, others = sampled[0], sampled[1:]
    tests: list[DBPAResult] = []
    caught: list[str] = []
    for j, other in enumerate(others):
        runner.check_stop()
        runner.progress(Progress("testing", j, len(others), other.arm.name))
        rng = np.random.default_rng([spec.seed, j])
        with warnings.catch_warnings(record=True) as wlist:
            warnings.simplefilter("always", DBPAWarning)
            if text_sim:
                s = text_similarity_matrix(list(base.texts) + list(other.texts),
                                           spec.embedder["backend"])
                r = dbpa_test_similarity(s, k, measure=spec.measure,
                                         n_permutations=spec.permutations, rng=rng,
                                         sequential=spec.sequential)
            else:
                r = dbpa_test(base.embeddings, other.embeddings, measure=spec.measure,
                              n_permutations=spec.permutations, rng=rng,
                              sequential=spec.sequential)
        for w in wlist:
            caught.append(f"{other.arm.name}: {w.message}")
        tests.append(r)
    runner.progress(Progress("testing", len(others), len(others)))

    mt = multiple_testing([t.p_value for t in tests], spec.correction, alpha=spec.alpha) \
        if tests else None
    results = tuple(
        PerturbationResult(o.arm.name, o.arm.role, o.arm.prompt, o.arm.model_label,
                           t.effect_size, t.p_value, float(mt.p_adjusted[i]), bool(mt.reject[i]),
                           mt.stars[i], t)
        for i, (o, t) in enumerate(zip(others, tests)))
    roc = None
    controls = [r.p_value for r in results if r.role == "control"]
    targets = [r.p_value for r in results if r.role == "target"]
    if controls and targets:
        roc = roc_over_alpha(controls, targets)
    usage = dict(runner.usage, seconds=round(time.perf_counter() - t0, 3))
    return AuditResult(spec, base, tuple(others), results, roc, usage, tuple(caught))
