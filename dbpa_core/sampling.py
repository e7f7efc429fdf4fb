"""Requests -> cached samples and embeddings, with progress and stop.

The only module that calls ``backends/`` and ``embedders/`` and that reads or
writes their results in the cache. Every capability that needs model output —
DBPA audits (:mod:`dbpa_core.audit`), the attack battery, the fidelity
simulator, sensitivity studies — is a thin orchestrator over :class:`Sampler`:
it says *what* to sample (a model config and :class:`SampleRequest` objects),
this module says *how*: from the cache when the sample is there, else from the
backend, each sample cached the moment it arrives, so that a stopped run
resumes with only the missing calls and a repeated run costs nothing.

Cache keys hash everything that determines a sample (backend, model, server
host or file, system prompt, prompt, generation parameters, index, seed) and
never an API key; they are derived from the model *config*, so a fully cached
run needs no backend at all.

Examples
--------
>>> sampler = Sampler(Cache(enabled=False))                      # doctest: +SKIP
>>> reqs = requests_for("Say hi", n=5, seed=0, params=GenerationParams())
>>> records = sampler.sample([Job({"backend": "local"}, r) for r in reqs])  # doctest: +SKIP
>>> vectors = sampler.embed([r.text for r in records], {"backend": "local"})  # doctest: +SKIP
"""
from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .backends import (
    Backend,
    BackendError,
    GenerationParams,
    SampleRequest,
    make_backend,
    sample_seed,
)
from .cache import Cache, make_key
from .embedders import Embedder, make_embedder

EMBED_BATCH = 64


@dataclass(frozen=True)
class Progress:
    """One progress report: ``done`` of ``total`` units of ``stage`` (``detail`` says which)."""

    stage: str
    done: int
    total: int
    detail: str = ""


class RunCancelled(RuntimeError):
    """The run was stopped on request; everything received so far is cached."""


@dataclass(frozen=True)
class Job:
    """One sample to obtain: ``request`` sent to the model described by ``model``
    (a validated model config from a spec, e.g. ``{"backend": "local"}``); ``label``
    names it on the progress line (defaults to the start of the prompt)."""

    model: Mapping[str, Any]
    request: SampleRequest
    label: str = ""


@dataclass(frozen=True)
class SampleRecord:
    """A sample as the caller sees it; ``cached`` is True when no call was made for it."""

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    model: str = ""
    cached: bool = False


def requests_for(prompt: str, *, n: int, seed: int, params: GenerationParams,
                 system_prompt: str | None = None, start: int = 0) -> list[SampleRequest]:
    """Requests for samples ``start .. start + n - 1`` of one (system prompt, prompt).

    Sample ``i`` has its own seed derived from ``(seed, system_prompt, prompt, i)``, so
    asking for 30 samples after 20 reuses the first 20 from the cache.
    """
    return [SampleRequest(prompt, i, sample_seed(seed, prompt, system_prompt, i), params,
                          system_prompt) for i in range(start, start + n)]


def model_key(model: Mapping[str, Any]) -> str:
    """A canonical string for a model config (to group jobs and reuse backends)."""
    return json.dumps(dict(model), sort_keys=True, default=str)


def backend_identity(model: Mapping[str, Any]) -> dict[str, Any]:
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


def embedder_identity(config: Mapping[str, Any]) -> dict[str, Any]:
    """What identifies an embedder's vectors, known without loading it."""
    kind = config.get("backend", "local")
    if kind == "local":
        return {"embedder": "local", "model": "all-MiniLM-L6-v2"}
    if kind == "openai":
        from .backends.openai_compat import OpenAIClientSettings

        return {"embedder": "openai", "model": config.get("name", "text-embedding-3-small"),
                "host": OpenAIClientSettings(base_url=config.get("base_url")).host}
    return {"embedder": kind, "model": config.get("name") or config.get("path")}


def sample_key(identity: Mapping[str, Any], req: SampleRequest) -> str:
    return make_key("sample", {**identity, "system_prompt": req.system_prompt,
                               "prompt": req.prompt, "params": req.params.as_dict(),
                               "index": req.index, "seed": req.seed})


def embedding_key(identity: Mapping[str, Any], text: str) -> str:
    return make_key("embedding", {**identity, "text": text})


def is_cached(cache: Cache | None, model: Mapping[str, Any], req: SampleRequest) -> bool:
    """True when ``req`` on ``model`` would be served from ``cache`` (no call)."""
    return cache is not None and sample_key(backend_identity(model), req) in cache


class Sampler:
    """Obtain samples and embeddings through the cache, reporting progress.

    Parameters
    ----------
    cache : Cache, optional
        Defaults to ``Cache()`` (``$DBPA_CACHE_DIR`` or the per-user cache folder);
        ``Cache(enabled=False)`` turns caching off.
    progress : callable, optional
        Called with a :class:`Progress` as work advances.
    should_stop : callable, optional
        Polled between calls; when it returns True, :meth:`check_stop` raises
        :class:`RunCancelled` (what arrived is cached).
    api_keys : dict, optional
        Keys held in memory only, by the name of their environment variable
        (``"openai"`` when a model names none; ``"embedder"`` for the embedder).
    backends, embedders : dict, optional
        Ready-made objects by :func:`model_key` of their config (tests, and callers
        that keep models loaded).
    """

    def __init__(self, cache: Cache | None = None, *,
                 progress: Callable[[Progress], None] | None = None,
                 should_stop: Callable[[], bool] | None = None,
                 api_keys: Mapping[str, str] | None = None,
                 backends: Mapping[str, Backend] | None = None,
                 embedders: Mapping[str, Embedder] | None = None):
        self.cache = cache if cache is not None else Cache()
        self.progress = progress or (lambda p: None)
        self.should_stop = should_stop or (lambda: False)
        self.api_keys = dict(api_keys or {})
        self._backends: dict[str, Backend] = dict(backends or {})
        self._embedders: dict[str, Embedder] = dict(embedders or {})
        self.usage: dict[str, int] = {"calls": 0, "cached_samples": 0, "prompt_tokens": 0,
                                      "completion_tokens": 0, "embeddings_computed": 0,
                                      "embeddings_cached": 0}

    # ------------------------------------------------------------------ plumbing
    def check_stop(self) -> None:
        if self.should_stop():
            raise RunCancelled("Stopped: every response received so far is cached; run again "
                               "to resume where it stopped.")

    def backend(self, model: Mapping[str, Any]) -> Backend:
        key = model_key(model)
        if key not in self._backends:
            self._backends[key] = make_backend(
                dict(model), cache_dir=str(self.cache.directory),
                api_key=self.api_keys.get(model.get("api_key_env") or "openai"))
        return self._backends[key]

    def embedder(self, config: Mapping[str, Any]) -> Embedder:
        key = model_key(config)
        if key not in self._embedders:
            env = config.get("api_key_env")
            api_key = (self.api_keys.get(env) if env else None) or self.api_keys.get("embedder")
            self._embedders[key] = make_embedder(dict(config), api_key=api_key)
        return self._embedders[key]

    # ------------------------------------------------------------------ samples
    def sample(self, jobs: Sequence[Job], *, stage: str = "sampling") -> list[SampleRecord]:
        """One record per job, in order: from the cache, else from the backend.

        Missing samples of one model go to its backend in one call (so a backend
        can batch across prompts); each is cached the moment it arrives.

        Raises
        ------
        RunCancelled
            When ``should_stop`` turned True (what arrived is cached).
        BackendError
            When a backend fails or returns fewer samples than asked for.
        """
        keys = [sample_key(backend_identity(j.model), j.request) for j in jobs]
        got: dict[str, SampleRecord] = {}
        for key in dict.fromkeys(keys):
            v = self.cache.get(key)
            if v is not None:
                got[key] = SampleRecord(v["text"], int(v.get("prompt_tokens", 0)),
                                        int(v.get("completion_tokens", 0)),
                                        str(v.get("model", "")), cached=True)
        self.usage["cached_samples"] += len(got)
        total = len(dict.fromkeys(keys))
        self.progress(Progress(stage, len(got), total))

        todo: dict[str, dict[str, tuple[Job, str]]] = {}   # model -> sample key -> (job, key)
        for job, key in zip(jobs, keys, strict=False):
            if key not in got:
                todo.setdefault(model_key(job.model), {})[key] = (job, key)
        for group in todo.values():
            self.check_stop()
            model = next(iter(group.values()))[0].model
            backend = self.backend(model)
            check = getattr(backend, "check", None)
            if check is not None:
                need: dict[tuple[str | None, str], int] = {}
                for job, _ in group.values():
                    r = job.request
                    need[(r.system_prompt, r.prompt)] = max(need.get((r.system_prompt, r.prompt), 0),
                                                            r.index + 1)
                for (_sys, prompt), n in need.items():
                    check(prompt, n)
            by_request = {job.request: (key, job.label) for job, key in group.values()}

            def on_sample(req: SampleRequest, s, _by_request=by_request) -> None:
                key, label = _by_request[req]
                value = {"text": s.text, "prompt_tokens": s.prompt_tokens,
                         "completion_tokens": s.completion_tokens, "model": s.model}
                self.cache.set(key, value)  # at once: nothing lost on a stop
                got[key] = SampleRecord(s.text, s.prompt_tokens, s.completion_tokens, s.model)
                self.usage["calls"] += 1
                self.usage["prompt_tokens"] += s.prompt_tokens
                self.usage["completion_tokens"] += s.completion_tokens
                self.progress(Progress(stage, len(got), total, label or _label(req)))

            backend.generate(list(by_request), on_sample, should_stop=self.should_stop)
            self.check_stop()
            missing = sum(1 for _, key in group.values() if key not in got)
            if missing:
                raise BackendError(
                    f"The backend returned {len(group) - missing} of {len(group)} samples; "
                    "run again to fetch the rest.")
        return [got[k] for k in keys]

    # ------------------------------------------------------------------ embeddings
    def embed(self, texts: Sequence[str], config: Mapping[str, Any], *,
              stage: str = "embedding") -> np.ndarray:
        """``(len(texts), dim)`` float32 embeddings, each text embedded once and cached."""
        ident = embedder_identity(config)
        unique = list(dict.fromkeys(texts))
        vecs: dict[str, np.ndarray] = {}
        for t in unique:
            v = self.cache.get(embedding_key(ident, t))
            if v is not None:
                vecs[t] = np.asarray(v, dtype=np.float32)
        self.usage["embeddings_cached"] += len(vecs)
        todo = [t for t in unique if t not in vecs]
        total = len(unique)
        self.progress(Progress(stage, len(vecs), total))
        for start in range(0, len(todo), EMBED_BATCH):
            self.check_stop()
            chunk = todo[start:start + EMBED_BATCH]
            out = self.embedder(config).embed(chunk)
            for t, v in zip(chunk, out, strict=False):
                v = np.asarray(v, dtype=np.float32)
                self.cache.set(embedding_key(ident, t), v)
                vecs[t] = v
            self.usage["embeddings_computed"] += len(chunk)
            self.progress(Progress(stage, len(vecs), total))
        return np.vstack([vecs[t] for t in texts]) if texts else np.zeros((0, 0), np.float32)


def _label(req: SampleRequest) -> str:
    p = " ".join(req.prompt.split())
    return p if len(p) <= 40 else p[:37] + "..."


__all__ = ["EMBED_BATCH", "Job", "Progress", "RunCancelled", "SampleRecord", "Sampler",
           "backend_identity", "embedder_identity", "embedding_key", "is_cached", "model_key",
           "requests_for", "sample_key"]
