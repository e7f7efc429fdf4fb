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

Nothing malformed is stored: every sample (text, token counts) and every batch of
embeddings (one finite, non-zero row of one width per text) is validated before
it is cached, and a cached value that does not pass is treated as missing. Each
sample is paid once even when two runs share a cache: a run claims the keys it
is about to fetch (:meth:`~dbpa_core.cache.Cache.claim`), and another run that
finds them claimed waits for the values instead of paying again.

Examples
--------
>>> sampler = Sampler(Cache(enabled=False))                      # doctest: +SKIP
>>> reqs = requests_for("Say hi", n=5, seed=0, params=GenerationParams())
>>> records = sampler.sample([Job({"backend": "local"}, r) for r in reqs])  # doctest: +SKIP
>>> vectors = sampler.embed([r.text for r in records], {"backend": "local"})  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from . import cache as _cache
from .backends import (
    Backend,
    BackendError,
    GenerationParams,
    SampleRequest,
    make_backend,
    sample_seed,
)
from .backends.decoding import local_precision
from .cache import Cache, make_key
from .embedders import Embedder, make_embedder
from .timings import record_timing, timing_key

if TYPE_CHECKING:
    from .backends.base import Sample

EMBED_BATCH = 64
WAIT_POLL = 0.25  # seconds between looks at keys another run is fetching
TOKEN_REPORT_EVERY = 0.25  # seconds between token progress reports (each is a Stop check)


@dataclass(frozen=True)
class Progress:
    """One progress report: ``done`` of ``total`` units of ``stage`` (``detail`` says which).

    Stages: ``loading`` and ``loading embedder`` (a model being converted or loaded:
    ``done`` 0 of 1, then 1 of 1), ``sampling``, ``embedding``, ``testing``. While a local
    model decodes, ``sampling`` reports also come after every decoding step with
    ``tokens`` drawn so far, ``tokens_expected`` (the current estimate of all the tokens to
    draw) and ``eta_s`` (seconds left at the rate of the last :data:`RATE_WINDOW` seconds; None
    until :func:`eta_ready`), which ``detail`` also says in words.
    """

    stage: str
    done: int
    total: int
    detail: str = ""
    tokens: int = 0
    tokens_expected: int = 0
    eta_s: float | None = None

    @property
    def fraction(self) -> float:
        """How far the stage is, in [0, 1]: by tokens while they are counted, else by units."""
        if self.tokens_expected:
            return min(1.0, self.tokens / self.tokens_expected)
        return min(1.0, self.done / self.total) if self.total else 1.0


class RunCancelled(RuntimeError):
    """The run was stopped on request; everything received so far is cached."""


# a stop condition for every Sampler made inside ``stop_when`` (see there)
_STOP_WHEN: contextvars.ContextVar[Callable[[], bool] | None] = contextvars.ContextVar(
    "dbpa_stop_when", default=None
)


@contextlib.contextmanager
def stop_when(check: Callable[[], bool]) -> Iterator[None]:
    """Every :class:`Sampler` created inside this block also stops when ``check()`` turns
    True (besides its own ``should_stop``): how a caller that runs capabilities it did not
    build (the dashboard's Stop button) cancels them all, whatever they pass."""
    token = _STOP_WHEN.set(check)
    try:
        yield
    finally:
        _STOP_WHEN.reset(token)


def _stop_condition(own: Callable[[], bool] | None) -> Callable[[], bool]:
    checks = [c for c in (own, _STOP_WHEN.get()) if c is not None]
    if not checks:
        return lambda: False
    if len(checks) == 1:
        return checks[0]
    return lambda: any(c() for c in checks)


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
    system_fingerprint: str = ""  # the server's build of the model, "" when it sent none


def requests_for(
    prompt: str,
    *,
    n: int,
    seed: int,
    params: GenerationParams,
    system_prompt: str | None = None,
    start: int = 0,
    history: tuple[tuple[str, str], ...] = (),
) -> list[SampleRequest]:
    """Requests for samples ``start .. start + n - 1`` of one (system prompt, prompt).

    Sample ``i`` has its own seed derived from ``(seed, system_prompt, prompt, i)``, so
    asking for 30 samples after 20 reuses the first 20 from the cache.
    """
    said = "".join(f"{role}\x1e{text}\x1d" for role, text in history) + prompt
    return [
        SampleRequest(
            prompt, i, sample_seed(seed, said, system_prompt, i), params, system_prompt, tuple(history)
        )
        for i in range(start, start + n)
    ]


def model_key(model: Mapping[str, Any]) -> str:
    """A canonical string for a model config (to group jobs and reuse backends)."""
    return json.dumps(dict(model), sort_keys=True, default=str)


def key_slot(model: Mapping[str, Any]) -> str:
    """Where a key held in memory for an OpenAI-compatible ``model`` is looked up first:
    the environment variable it names (``openai`` when none) *at its server*, e.g.
    ``OPENAI_API_KEY@http://127.0.0.1:8000/v1``. Models of one server that name one
    variable share a key; the same variable name on another server is another key. (A
    key under the bare variable name, as ``api_keys`` has always taken, is the fallback.)"""
    from .backends.openai_compat import OpenAIClientSettings

    env = model.get("api_key_env") or "openai"
    return f"{env}@{OpenAIClientSettings(base_url=model.get('base_url')).host}"


def backend_identity(model: Mapping[str, Any]) -> dict[str, Any]:
    """What identifies a backend's samples, known without loading it."""
    kind = model.get("backend", "local")
    if kind == "local":
        from .backends.local import SMOLLM2_NAME

        # the weights' precision changes the samples drawn from the same seeds
        return {"backend": "local", "model": SMOLLM2_NAME, "precision": local_precision()}
    if kind == "openai":
        from .backends.openai_compat import OpenAIClientSettings

        return {
            "backend": "openai",
            "model": model["name"],
            "host": OpenAIClientSettings(base_url=model.get("base_url")).host,
        }
    if kind == "hf":
        return {
            "backend": "hf",
            "model": model.get("name") or os.path.basename(model["path"]),
            "path": model["path"],
            "precision": local_precision(),
        }
    st = os.stat(model["file"])
    return {
        "backend": "replay",
        "model": model.get("name") or "",
        "file": model["file"],
        "mtime": st.st_mtime_ns,
        "size": st.st_size,
    }


def embedder_identity(config: Mapping[str, Any]) -> dict[str, Any]:
    """What identifies an embedder's vectors, known without loading it."""
    kind = config.get("backend", "local")
    if kind == "local":
        return {"embedder": "local", "model": "all-MiniLM-L6-v2"}
    if kind == "openai":
        from .backends.openai_compat import OpenAIClientSettings

        return {
            "embedder": "openai",
            "model": config.get("name", "text-embedding-3-small"),
            "host": OpenAIClientSettings(base_url=config.get("base_url")).host,
        }
    return {"embedder": kind, "model": config.get("name") or config.get("path")}


def sample_key(identity: Mapping[str, Any], req: SampleRequest) -> str:
    extra = {"history": [list(t) for t in req.history]} if req.history else {}
    return make_key(
        "sample",
        {
            **identity,
            **extra,
            "system_prompt": req.system_prompt,
            "prompt": req.prompt,
            "params": req.params.as_dict(),
            "index": req.index,
            "seed": req.seed,
        },
    )


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
        (``"openai"`` when a model names none; ``"embedder"`` for the embedder), or by
        :func:`key_slot` (that variable at one server: the dashboard keeps keys so, so
        that two servers cannot replace each other's key); a slot wins over a name.
    backends, embedders : dict, optional
        Ready-made objects by :func:`model_key` of their config (tests, and callers
        that keep models loaded).
    """

    def __init__(
        self,
        cache: Cache | None = None,
        *,
        progress: Callable[[Progress], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
        api_keys: Mapping[str, str] | None = None,
        backends: Mapping[str, Backend] | None = None,
        embedders: Mapping[str, Embedder] | None = None,
    ):
        self.cache = cache if cache is not None else Cache()
        self.progress = progress or (lambda p: None)
        self.should_stop = _stop_condition(should_stop)  # and any stop_when around it
        self.api_keys = dict(api_keys or {})
        self._backends: dict[str, Backend] = dict(backends or {})
        self._embedders: dict[str, Embedder] = dict(embedders or {})
        self._claims = _Claims(self.cache)
        self.usage: dict[str, Any] = {
            "calls": 0,
            "cached_samples": 0,
            "prompt_tokens": 0,
            "completion_tokens": 0,
            "embeddings_computed": 0,
            "embeddings_cached": 0,
        }

    # ------------------------------------------------------------------ plumbing
    def check_stop(self) -> None:
        if self.should_stop():
            raise RunCancelled(
                "Stopped: every response received so far is cached; run again to resume where it stopped."
            )

    def backend(self, model: Mapping[str, Any]) -> Backend:
        key = model_key(model)
        if key not in self._backends:
            api_key = None
            if model.get("backend") == "openai":
                api_key = self.api_keys.get(key_slot(model))
            api_key = api_key or self.api_keys.get(model.get("api_key_env") or "openai")
            self._backends[key] = make_backend(
                dict(model), cache_dir=str(self.cache.directory), api_key=api_key
            )
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
        job_of: dict[str, Job] = {}
        for job, key in zip(jobs, keys, strict=False):
            job_of.setdefault(key, job)
        got: dict[str, SampleRecord] = {}

        def accept(key: str, value: Any) -> bool:
            record = cached_record(value)
            if record is None:
                return False
            got[key] = record
            self.usage["cached_samples"] += 1
            return True

        found = self.cache.get_many(job_of)
        missing = [key for key in job_of if not accept(key, found.get(key))]
        total = len(job_of)
        if any(j.model.get("backend", "local") in ("local", "hf") for j in jobs):
            self.usage["precision"] = local_precision()  # of the weights: part of the keys
        self.progress(Progress(stage, len(got), total))

        def produce(mine: list[str]) -> None:
            todo: dict[str, dict[str, tuple[Job, str]]] = {}  # model -> sample key -> (job, key)
            for key in mine:
                todo.setdefault(model_key(job_of[key].model), {})[key] = (job_of[key], key)
            # one token count for the whole call: models sampled one after the other add up
            meter = _TokenMeter()
            bounds = [sum(job.request.params.max_tokens for job, _ in g.values()) for g in todo.values()]
            for g_index, group in enumerate(todo.values()):
                self.check_stop()
                model = next(iter(group.values()))[0].model
                backend = self.backend(model)
                check = getattr(backend, "check", None)
                if check is not None:
                    need: dict[tuple[str | None, str], int] = {}
                    askers: dict[tuple[str | None, str], list[str]] = {}
                    for job, _ in group.values():
                        r = job.request
                        need[(r.system_prompt, r.prompt)] = max(
                            need.get((r.system_prompt, r.prompt), 0), r.index + 1
                        )
                        names = askers.setdefault((r.system_prompt, r.prompt), [])
                        if job.label and job.label not in names:
                            names.append(job.label)
                    for (sys_prompt, prompt), n in need.items():
                        _check_shared(check, prompt, n, askers[(sys_prompt, prompt)])
                by_request = {job.request: (key, job.label) for job, key in group.values()}
                what = getattr(backend, "model", "") or "the model"
                precision = getattr(backend, "precision", None)
                if precision:
                    what += f" ({precision})"
                check_requests = getattr(backend, "check_requests", None)  # before loading
                if check_requests is not None:
                    if not getattr(backend, "ready", True):
                        self.progress(Progress("loading", 0, 1, f"reading the prompts for {what}"))
                    check_requests(list(by_request))
                self._prepare(backend, "loading", what)
                meter.start_group(later=sum(bounds[g_index + 1 :]))

                def on_sample(
                    req: SampleRequest,
                    s: Sample,
                    _by_request: Any = by_request,
                    _backend: Any = backend,
                    _meter: Any = meter,
                ) -> None:
                    key, label = _by_request[req]
                    value = sample_value(s, _backend)  # validated before it is stored
                    self._claims.store({key: value})  # at once: nothing lost on a stop
                    got[key] = SampleRecord(
                        value["text"],
                        value["prompt_tokens"],
                        value["completion_tokens"],
                        value["model"],
                        system_fingerprint=value["system_fingerprint"],
                    )
                    self.usage["calls"] += 1
                    self.usage["prompt_tokens"] += value["prompt_tokens"]
                    self.usage["completion_tokens"] += value["completion_tokens"]
                    self.progress(_meter.report(stage, len(got), total, label or _label(req)))

                self._hook(backend, stage, lambda: len(got), total)
                if hasattr(backend, "on_tokens"):

                    def on_tokens(drawn: int, expected: int, _meter: Any = meter) -> None:
                        if _meter.update(drawn, expected):  # each report is a chance to stop
                            self.progress(_meter.report(stage, len(got), total))

                    backend.on_tokens = on_tokens
                t_gen, n_before = time.perf_counter(), self.usage["calls"]
                try:
                    backend.generate(list(by_request), on_sample, should_stop=self.should_stop)
                except BackendError:
                    self.check_stop()  # an error caused by the stop is a stop
                    raise
                self.check_stop()
                if timing_key(model) is not None:  # how long a local model takes here
                    record_timing(
                        model,
                        seconds=time.perf_counter() - t_gen,
                        calls=self.usage["calls"] - n_before,
                        max_tokens=max(job.request.params.max_tokens for job, _ in group.values()),
                        precision=local_precision(),
                    )
                n_missing = sum(1 for _, key in group.values() if key not in got)
                if n_missing:
                    raise BackendError(
                        f"The backend returned {len(group) - n_missing} of {len(group)} samples; "
                        "run again to fetch the rest."
                    )

        self._fetch_once(
            missing, accept, produce, stage=stage, done=lambda: len(got), total=total, noun="samples"
        )
        return [got[k] for k in keys]

    def _prepare(self, obj: Any, stage: str, what: str) -> None:
        """Load the model behind a backend or an embedder (``obj.prepare()``) on a progress
        line of its own, unless it is ready; what loading does (e.g. converting the
        embedded model) comes through ``obj.on_status``."""
        prepare = getattr(obj, "prepare", None)
        if prepare is None or getattr(obj, "ready", True):
            return
        self.check_stop()
        t = time.perf_counter()
        self.progress(Progress(stage, 0, 1, f"loading {what}"))
        if hasattr(obj, "on_status"):
            obj.on_status = lambda msg: self.progress(Progress(stage, 0, 1, msg))
        prepare()
        self.progress(Progress(stage, 1, 1, f"{what} ready ({time.perf_counter() - t:.1f} s)"))

    def _hook(self, obj: Any, stage: str, done: Callable[[], int], total: int) -> None:
        """Let a backend or embedder report what a retry waits for, and stop the wait."""
        if hasattr(obj, "on_status"):
            obj.on_status = lambda msg: self.progress(Progress(stage, done(), total, msg))
        if hasattr(obj, "should_stop"):
            obj.should_stop = self.should_stop

    def _fetch_once(
        self,
        missing: list[str],
        accept: Callable[[str, Any], bool],
        produce: Callable[[list[str]], None],
        *,
        stage: str,
        done: Callable[[], int],
        total: int,
        noun: str,
    ) -> None:
        """Fetch the values of ``missing`` keys so that each is paid once, even when
        another run on the same cache wants them too.

        Each key is claimed first (:meth:`~dbpa_core.cache.Cache.claim_many`, which
        also finds values stored since the first look; ``accept(key, value)`` takes a
        valid one); ``produce`` fetches the keys this run holds (and stores each
        value, which gives its claim up); keys that another run holds are waited for
        and read from the cache. A key whose claim vanishes without a value (that run
        failed or stopped) is claimed again.
        """
        pending = list(missing)
        try:
            while pending:
                self.check_stop()
                mine, theirs = [], []
                state, values = self.cache.claim_many(pending, self._claims.owner)
                for key in pending:
                    if state[key] == "mine":
                        mine.append(key)
                    elif state[key] == "theirs":
                        theirs.append(key)
                    elif not accept(key, values[key]):  # stored, but not a valid value
                        self.cache.delete(key)
                        theirs.append(key)  # claimed again on the next round
                if mine:
                    self._claims.hold(mine)
                    try:
                        produce(mine)
                    finally:
                        self._claims.release_all()
                pending = (
                    self._wait_for_others(
                        theirs,
                        lambda k: accept(k, self.cache.get(k)),
                        stage=stage,
                        done=done,
                        total=total,
                        noun=noun,
                    )
                    if theirs
                    else []
                )
        finally:
            if missing:
                self.cache.end_beat(self._claims.owner)

    def _wait_for_others(
        self,
        keys: list[str],
        lookup: Callable[[str], bool],
        *,
        stage: str,
        done: Callable[[], int],
        total: int,
        noun: str,
    ) -> list[str]:
        """Wait until another run has stored ``keys``; returns those whose claim was
        given up without a value (to be claimed and fetched here)."""
        left = list(keys)
        while True:
            left = [k for k in left if not lookup(k)]
            if not left:
                return []
            holders = [self.cache.claim_holder(k) for k in left]
            if any(h is None for h in holders):
                return left
            pids = sorted({str(h.get("pid")) for h in holders if h})
            self.progress(
                Progress(
                    stage,
                    done(),
                    total,
                    f"waiting for another run (pid {', '.join(pids[:3])}) to fetch {len(left)} {noun}",
                )
            )
            self.check_stop()
            time.sleep(WAIT_POLL)

    # ------------------------------------------------------------------ embeddings
    def embed(
        self, texts: Sequence[str], config: Mapping[str, Any], *, stage: str = "embedding"
    ) -> np.ndarray:
        """``(len(texts), dim)`` float32 embeddings, each text embedded once and cached.

        Each batch is validated before it is stored (one row per text, finite, not
        all zero, one width); a malformed batch raises :class:`BackendError` and
        nothing of it is cached."""
        ident = embedder_identity(config)
        unique = list(dict.fromkeys(texts))
        key_of = {t: embedding_key(ident, t) for t in unique}
        text_of = {k: t for t, k in key_of.items()}
        vecs: dict[str, np.ndarray] = {}

        def accept(key: str, v: Any) -> bool:
            if not (
                isinstance(v, np.ndarray) and v.ndim == 1 and v.size and np.isfinite(v).all() and v.any()
            ):
                return False
            vecs[text_of[key]] = v.astype(np.float32, copy=False)
            self.usage["embeddings_cached"] += 1
            return True

        found = self.cache.get_many(key_of.values())
        missing = [key_of[t] for t in unique if not accept(key_of[t], found.get(key_of[t]))]
        total = len(unique)
        self.progress(Progress(stage, len(vecs), total))

        def produce(mine: list[str]) -> None:
            todo = [text_of[k] for k in mine]
            embedder = self.embedder(config)
            self._prepare(
                embedder,
                "loading embedder",
                getattr(embedder, "label", "") or ident.get("model") or "the embedder",
            )
            self._hook(embedder, stage, lambda: len(vecs), total)
            for start in range(0, len(todo), EMBED_BATCH):
                self.check_stop()
                chunk = todo[start : start + EMBED_BATCH]
                try:
                    out = embedder.embed(chunk)
                except BackendError:
                    self.check_stop()  # an error caused by the stop is a stop
                    raise
                arr = _valid_embeddings(out, len(chunk), getattr(embedder, "name", "the"))
                self._claims.store({key_of[t]: v for t, v in zip(chunk, arr, strict=True)})
                vecs.update(zip(chunk, arr, strict=True))
                self.usage["embeddings_computed"] += len(chunk)
                self.progress(Progress(stage, len(vecs), total))

        self._fetch_once(
            missing, accept, produce, stage=stage, done=lambda: len(vecs), total=total, noun="embeddings"
        )
        if not texts:
            return np.zeros((0, 0), np.float32)
        widths = sorted({v.shape[0] for v in vecs.values()})
        if len(widths) > 1:
            raise BackendError(
                f"The cached and new embeddings of this embedder have different widths "
                f"({', '.join(map(str, widths))}): the server changed its model. Run "
                "`dbpa cache clear` (or use another cache folder) and run again."
            )
        return np.vstack([vecs[t] for t in texts])


class _Claims:
    """The keys this sampler holds claims on: each released as its value is stored,
    all given up when the fetch ends. While any are held, a daemon thread beats the
    cache's heartbeat, so that other runs know this one is alive (and break the
    claims within a minute if it dies)."""

    def __init__(self, cache: Cache):
        self.cache = cache
        self.owner = cache.new_owner()  # this sampler's own: runs sharing a Cache stay apart
        self.held: set[str] = set()
        self._stop: threading.Event | None = None
        self._beater: threading.Thread | None = None

    def hold(self, keys: list[str]) -> None:
        self.held.update(keys)
        if self._stop is None and self.cache.enabled:
            self._stop = threading.Event()
            self._beater = threading.Thread(
                target=self._beat, args=(self._stop,), daemon=True, name="dbpa-claims-heartbeat"
            )
            self._beater.start()

    def _beat(self, stop: threading.Event) -> None:
        while not stop.wait(_cache.HEARTBEAT_EVERY):
            try:
                self.cache.beat(self.owner)
            except Exception:  # noqa: BLE001 - a failed beat must not kill the run
                pass

    def store(self, values: dict[str, Any]) -> None:
        """Store fetched values and give up their claims, in one transaction."""
        self.cache.set_many(values, self.owner)
        self.held.difference_update(values)

    def release_all(self) -> None:
        held, self.held = list(self.held), set()
        if self._stop is not None:
            self._stop.set()
            self._stop = None
        if self._beater is not None:
            # a beat under way when the stop came would otherwise write the heartbeat
            # after end_beat removed it (one left behind until it expires)
            self._beater.join(timeout=10)
            self._beater = None
        if held:
            self.cache.release(held, self.owner)


class _TokenMeter:
    """Tokens drawn in one :meth:`Sampler.sample` call, their rate and the time left, for
    the progress line: reports at most every :data:`TOKEN_REPORT_EVERY` seconds. Models
    sampled one after the other (one backend call each) add up: the expected total counts
    the groups not started yet at their ``max_tokens``.

    The time left is said only once it can be estimated: after :func:`eta_ready` answers
    are complete (until then the expected total counts every open answer at its
    ``max_tokens``, and the first steps include loading and reading the prompts), from
    the rate over the last :data:`RATE_WINDOW` seconds (so a slow start or a pause does
    not hang on for the whole run)."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self.t0: float | None = None
        self.last = -float("inf")
        self.tokens = 0
        self.expected = 0
        self.base = 0  # tokens of the groups already done
        self.later = 0  # upper bound of the groups not started
        self.seen: list[tuple[float, int]] = []  # (time, tokens) in the rate window

    def start_group(self, *, later: int) -> None:
        """A backend call starts (its model is loaded); ``later``: the most tokens the
        groups after it can draw."""
        self.base, self.later = self.tokens, int(later)
        if self.t0 is None:
            self.t0 = self.clock()

    def update(self, drawn: int, expected: int) -> bool:
        """Record the counts of the current call; True when a report is due."""
        self.tokens = self.base + int(drawn)
        self.expected = max(self.base + int(expected) + self.later, self.tokens)
        now = self.clock()
        if now - self.last < TOKEN_REPORT_EVERY:
            return False
        self.last = now
        return True

    def rate(self) -> float:
        """Tokens per second over the last :data:`RATE_WINDOW` seconds (0 before any)."""
        now = self.clock()
        self.seen.append((now, self.tokens))
        while len(self.seen) > 2 and now - self.seen[1][0] >= RATE_WINDOW:
            self.seen.pop(0)
        (t_old, n_old) = self.seen[0]
        if now - t_old <= 0:
            return 0.0
        return (self.tokens - n_old) / (now - t_old)

    def report(self, stage: str, done: int, total: int, label: str = "") -> Progress:
        if not self.tokens or self.t0 is None:
            return Progress(stage, done, total, label)
        if not self.seen:  # the rate counts from the first token, not from the start
            self.seen.append((self.t0, 0))
        rate = self.rate()
        eta = None
        if rate > 0 and eta_ready(done, total):
            eta = (self.expected - self.tokens) / rate
        detail = f"{self.tokens:,} tokens, {rate:.0f} tokens/s"
        detail += f", about {_duration(eta)} left" if eta is not None else ", estimating the time left"
        return Progress(stage, done, total, detail, self.tokens, self.expected, eta)


def _check_shared(check: Callable[[str, int], None], prompt: str, n: int, askers: list[str]) -> None:
    """``check(prompt, n)`` of a backend that holds a fixed number of answers per prompt
    (a replay file); when several arms ask the same prompt, its error says that each of
    them draws answers of its own (samples 0 .. n-1 in all), never the others'."""
    try:
        check(prompt, n)
    except BackendError as exc:
        if len(askers) < 2:
            raise
        shown = ", ".join(repr(a) for a in askers[:4]) + (", ..." if len(askers) > 4 else "")
        raise BackendError(
            f"{exc} The {len(askers)} arms {shown} ask this same prompt, and each draws "
            f"answers of its own (the next recorded ones, {n} in all), never another arm's "
            "copies."
        ) from None


RATE_WINDOW = 20.0  # seconds of tokens the rate (and so the time left) is measured over


def eta_ready(done: int, total: int) -> bool:
    """True once enough answers are complete for the time left to mean something: 5 %
    of them, and at least two (or all, for fewer)."""
    return done >= min(total, max(2, -(-total // 20)))


def _duration(seconds: float) -> str:
    """'40 s', '2 min 10 s', '1 h 5 min' (rounded: an estimate)."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        m, s = divmod(s, 60)
        s = 10 * round(s / 10)
        return f"{m} min {s} s" if s and s < 60 else f"{m + (s == 60)} min"
    h, m = divmod(round(s / 60), 60)
    return f"{h} h {m} min" if m else f"{h} h"


def cached_record(v: Any) -> SampleRecord | None:
    """A cached sample, or None when the value is not a valid one (then it is fetched again)."""
    if not (isinstance(v, dict) and isinstance(v.get("text"), str)):
        return None
    pt, ct, model = v.get("prompt_tokens", 0), v.get("completion_tokens", 0), v.get("model", "")
    if not (type(pt) is int and type(ct) is int and pt >= 0 and ct >= 0 and isinstance(model, str)):
        return None
    fp = v.get("system_fingerprint", "")  # absent in values cached before it was recorded
    return SampleRecord(
        v["text"], pt, ct, model, cached=True, system_fingerprint=fp if isinstance(fp, str) else ""
    )


def sample_value(s: Any, backend: Any) -> dict[str, Any]:
    """The cache value of a sample, or :class:`BackendError` when it is malformed."""
    text = getattr(s, "text", None)
    if not isinstance(text, str):
        raise BackendError(
            f"The {getattr(backend, 'name', '')} backend returned {type(text).__name__} instead of "
            "a text; nothing was cached."
        )

    def count(x: Any) -> int:
        return int(x) if isinstance(x, (int, np.integer)) and not isinstance(x, bool) and x >= 0 else 0

    model = getattr(s, "model", "")
    fp = getattr(s, "system_fingerprint", "")
    return {
        "text": text,
        "prompt_tokens": count(getattr(s, "prompt_tokens", 0)),
        "completion_tokens": count(getattr(s, "completion_tokens", 0)),
        "model": model if isinstance(model, str) else "",
        "system_fingerprint": fp if isinstance(fp, str) else "",
    }


def _valid_embeddings(out: Any, n: int, name: str) -> np.ndarray:
    """``out`` as an ``(n, dim)`` float32 array, or :class:`BackendError` (nothing is cached)."""

    def bad(what: str) -> BackendError:
        return BackendError(
            f"The {name} embedder returned malformed embeddings ({what}); nothing was cached."
        )

    try:
        with np.errstate(over="ignore", invalid="ignore"):
            arr = np.asarray(out, dtype=np.float32)
    except (TypeError, ValueError):
        raise bad("not a rectangular array of numbers") from None
    if arr.ndim != 2 or arr.shape[0] != n or arr.shape[1] < 1:
        raise bad(f"shape {arr.shape} for {n} texts")
    if not np.isfinite(arr).all():
        raise bad("NaN or infinite values")
    if not arr.any(axis=1).all():
        raise bad("an all-zero vector")
    return arr


def _label(req: SampleRequest) -> str:
    p = " ".join(req.prompt.split())
    return p if len(p) <= 40 else p[:37] + "..."


__all__ = [
    "EMBED_BATCH",
    "Job",
    "Progress",
    "RunCancelled",
    "SampleRecord",
    "Sampler",
    "backend_identity",
    "embedder_identity",
    "embedding_key",
    "is_cached",
    "key_slot",
    "model_key",
    "requests_for",
    "sample_key",
    "stop_when",
]
