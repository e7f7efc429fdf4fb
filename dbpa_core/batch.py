"""The OpenAI Batch API: every uncached call of an OpenAI-compatible model as one job.

A thin orchestrator in front of :mod:`dbpa_core.sampling`: :func:`fill_cache` takes
``(model config, SampleRequest)`` pairs, sends those not yet in the cache as one Batch
API job per model (a JSONL file of chat completion requests, ``custom_id`` = the
sample's cache key), waits for it with growing pauses, downloads the output and error
files, validates every answer exactly as a live answer is validated
(:func:`~dbpa_core.backends.openai_compat.parse_chat_answer`) and stores each in the
cache as a normal sample. The audit then runs from the cache through the usual
:class:`~dbpa_core.sampling.Sampler`, with no further call.

Resumable: the job's id is saved in the cache folder (``batches/``), under a hash of
the server, the model and the set of requests, the moment the job is created. A run
stopped while the job is pending finds it there and waits for the same job: nothing is
uploaded or paid twice. Finding or creating a job happens under a claim in the cache, so
two runs started together share one job. A finished job's record is removed.

Failures: lines that failed (an error from the server, or an answer that does not
validate) are reported and left uncached, so a rerun sends only them. A job that
expired, failed or was cancelled is reported in one line; whatever it had answered
before is stored.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from ._validate import valid_unicode
from .backends.base import BackendError, ModelNotFoundError, Sample, SampleRequest, clean_text
from .backends.openai_compat import (
    MalformedAnswer,
    OpenAIBackend,
    OpenAIClientSettings,
    answer_fingerprint,
    chat_request_body,
    parse_chat_answer,
    run_async,
)
from .cache import Cache
from .pricing import BATCH_DISCOUNT
from .sampling import (
    Progress,
    RunCancelled,
    Sampler,
    backend_identity,
    cached_record,
    model_key,
    sample_key,
    sample_value,
)

if TYPE_CHECKING:
    from .attacks.spec import BatterySpec
    from .spec import AuditSpec


class ProgressBars(Protocol):
    """What the command line's progress bars offer a Batch run (``dbpa_core.cli.common.Bars``,
    named here by shape: the library never imports the command line)."""

    def __call__(self, p: Any) -> None: ...

    def close(self) -> None: ...


ENDPOINT = "/v1/chat/completions"
COMPLETION_WINDOW = "24h"
POLL_FIRST = 5.0  # seconds before the first look at a job
POLL_MAX = 120.0  # the longest pause between two looks
CREATE_TTL = 900.0  # how long a run may hold the right to create a job (a dead run's lapses)
CREATE_WAIT = 1.0  # seconds between looks while another run creates the same job
FAILED_SHOWN = 5  # failed lines named in a message (all are in BatchOutcome.failed)


class BatchError(BackendError):
    """The Batch API job did not answer every request (what it answered is cached)."""


class BatchPending(RunCancelled):
    """Stopped while the job runs at the server; the same job is picked up next time."""


@dataclass
class BatchOutcome:
    """What :func:`fill_cache` did: the jobs used, answers stored, lines that failed."""

    batch_ids: list[str] = field(default_factory=list)
    requests: int = 0  # uncached requests sent (or already pending) as batch lines
    stored: int = 0  # answers validated and cached
    failed: list[tuple[str, str]] = field(default_factory=list)  # (custom_id, why)
    resumed: list[str] = field(default_factory=list)  # jobs picked up from an earlier run
    prompt_tokens: int = 0
    completion_tokens: int = 0


# --------------------------------------------------------------------------- planning
def jobs(spec: Any) -> list[tuple[Mapping[str, Any], SampleRequest]]:
    """Every sample a spec of any kind asks its models for, as (model, request): the
    requests its run declares (:func:`dbpa_core.runs.requests`; a suite: every case; a
    battery: RTI at its upper bound, which the battery then reads from the cache). The
    answer checks' judges are not among them: they read the answers, so they are asked
    live."""
    from .runs import requests

    return [(r.model, r.sample) for r in requests(spec)]


def battery_batch_cost(est: Mapping[str, Any], spec: BatterySpec) -> float:
    """A battery estimate's cost (:func:`dbpa_core.runs.estimate` of a battery spec)
    through the Batch API: every call is its one model's, at the batch price when that
    model is OpenAI-compatible (RTI at its upper bound, as the job asks it)."""
    batched = spec.model.get("backend") == "openai"
    return est["cost"] * (BATCH_DISCOUNT if batched else 1.0)


def batch_cost(est: Mapping[str, Any], spec: AuditSpec) -> float:
    """The estimate's cost when the audit's own samples of OpenAI-compatible models go
    through the Batch API (at :data:`~dbpa_core.pricing.BATCH_DISCOUNT` of the listed
    price); the embeddings and the judges stay at the listed price."""
    from .audit import build_arms

    arms = {a.name for a in build_arms(spec)}
    batched = sum(r["cost"] for r in est["arms"] if r["arm"] in arms and r["cost"] == r["cost"])
    return est["totals"]["cost"] - batched * (1 - BATCH_DISCOUNT)


def _state_dir(cache: Cache) -> Path:
    return Path(cache.directory) / "batches"


def _state_path(cache: Cache, model: Mapping[str, Any], keys: Sequence[str]) -> Path:
    ident = json.dumps([backend_identity(model), sorted(keys)], sort_keys=True, default=str)
    return _state_dir(cache) / f"{hashlib.sha256(ident.encode()).hexdigest()[:32]}.json"


def _load_state(path: Path) -> dict[str, Any] | None:
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) and isinstance(state.get("batch_id"), str) else None


def _save_state(path: Path, state: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(state), encoding="utf-8")
    os.replace(tmp, path)


# --------------------------------------------------------------------------- running
def fill_cache(
    jobs: Sequence[tuple[Mapping[str, Any], SampleRequest]],
    cache: Cache,
    *,
    api_keys: Mapping[str, str] | None = None,
    progress: Callable[[Progress], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    poll_first: float | None = None,
    poll_max: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> BatchOutcome:
    """Put the answers of ``jobs`` of OpenAI-compatible models into ``cache`` through the
    Batch API (one job per model); samples of other backends and cached ones are left
    alone. Raises :class:`BatchPending` when ``should_stop`` turns True while a job runs
    (its id is saved), :class:`BatchError` when lines failed or the job ended without
    answering everything (after storing what it answered). The pauses between looks at
    a job start at ``poll_first`` seconds and double up to ``poll_max``."""
    poll_first = POLL_FIRST if poll_first is None else poll_first
    poll_max = POLL_MAX if poll_max is None else poll_max
    if not cache.enabled:
        raise BackendError(
            "--batch needs the cache (the answers of the job are stored there); leave out --no-cache."
        )
    progress = progress or (lambda p: None)
    by_model: dict[str, tuple[Mapping[str, Any], dict[str, SampleRequest]]] = {}
    for model, req in jobs:
        if model.get("backend") != "openai":
            continue
        entry = by_model.setdefault(model_key(model), (model, {}))
        entry[1].setdefault(sample_key(backend_identity(model), req), req)
    outcome = BatchOutcome()
    errors: list[str] = []
    for model, reqs in by_model.values():
        found = cache.get_many(list(reqs))
        todo = {k: r for k, r in reqs.items() if cached_record(found.get(k)) is None}
        if not todo:
            continue
        outcome.requests += len(todo)
        settings = _settings(model, api_keys or {}, cache)
        try:
            run_async(
                functools.partial(
                    _one_job,
                    model,
                    todo,
                    cache,
                    settings,
                    outcome,
                    progress,
                    should_stop,
                    poll_first,
                    poll_max,
                    sleep,
                )
            )
        except BatchError as exc:
            errors.append(str(exc))
    if outcome.failed:
        shown = "; ".join(f"{cid}: {why}" for cid, why in outcome.failed[:FAILED_SHOWN])
        more = (
            f" (and {len(outcome.failed) - FAILED_SHOWN} more)" if len(outcome.failed) > FAILED_SHOWN else ""
        )
        errors.append(
            f"{len(outcome.failed)} of {outcome.requests} batch request(s) failed and "
            f"were not cached: {shown}{more}. The {outcome.stored} answered are cached; "
            "run again with --batch to send only the failed ones."
        )
    if errors:
        raise BatchError(" ".join(dict.fromkeys(errors)))
    return outcome


def _settings(model: Mapping[str, Any], api_keys: Mapping[str, str], cache: Cache) -> OpenAIClientSettings:
    """The model's connection settings and key, as the sampler's backend would use them."""
    backend = Sampler(cache, api_keys=api_keys).backend(model)
    return cast(OpenAIBackend, backend).settings  # only openai models reach a batch


async def _one_job(
    model: Mapping[str, Any],
    todo: dict[str, SampleRequest],
    cache: Cache,
    settings: OpenAIClientSettings,
    outcome: BatchOutcome,
    progress: Callable[[Progress], None],
    should_stop: Callable[[], bool] | None,
    poll_first: float,
    poll_max: float,
    sleep: Callable[[float], None],
) -> None:
    name = model["name"]
    client = settings.client()

    async def call(what: str, make: Callable[[], Awaitable[Any]]) -> Any:
        return await settings.with_retries(make, what=what, model=name)

    try:
        path = _state_path(cache, model, list(todo))
        lock, owner = f"batch-create:{path.stem}", cache.new_owner()
        while not cache.claim(lock, owner, ttl=CREATE_TTL):  # another run is creating it
            if should_stop is not None and should_stop():
                raise BatchPending(
                    "Stopped while another run creates the same batch job; "
                    "run again with --batch to pick it up."
                )
            sleep(CREATE_WAIT)
        try:  # one run at a time finds or creates the job: never two jobs for one set
            batch = await _find_or_create(client, call, path, name, todo, settings, outcome, cache)
        finally:
            cache.release([lock], owner)
            cache.end_beat(owner)
        if batch is None:  # nothing left to ask
            return
        outcome.batch_ids.append(batch.id)
        wait = poll_first
        while batch.status not in ("completed", "failed", "expired", "cancelled"):
            counts = batch.request_counts
            done = (counts.completed + counts.failed) if counts else 0
            progress(Progress("batch", done, len(todo), f"{batch.id}: {batch.status}"))
            if should_stop is not None and should_stop():
                raise BatchPending(
                    f"Stopped while the batch {batch.id} is {batch.status} at {settings.host}; "
                    "it goes on there. Run the same command again with --batch to pick it up "
                    "(nothing is sent or paid twice)."
                )
            sleep(wait)
            wait = min(poll_max, wait * 2)
            batch = await call("batch", functools.partial(client.batches.retrieve, batch.id))
        for file_id in (batch.output_file_id, batch.error_file_id):
            if file_id:
                raw = await call("batch file", functools.partial(client.files.content, file_id))
                _store_lines(raw.content, todo, cache, outcome)
        progress(Progress("batch", len(todo), len(todo), f"{batch.id}: {batch.status}"))
        path.unlink(missing_ok=True)  # a finished job: a rerun sends what is still missing
        found = cache.get_many(list(todo))
        unanswered = [k for k in todo if cached_record(found.get(k)) is None]
        if batch.status != "completed":
            why = "; ".join(
                clean_text(getattr(e, "message", e), 120)
                for e in ((batch.errors.data or []) if batch.errors else [])[:2]
            )
            raise BatchError(
                f"The batch {batch.id} at {settings.host} {batch.status}"
                + (f" ({why})" if why else "")
                + f" with {len(unanswered)} of {len(todo)} "
                "request(s) unanswered; what it answered is cached, run again with --batch to "
                "send the rest."
            )
        reported = {cid for cid, _ in outcome.failed}
        for key in unanswered:  # a completed job that left lines out of both files
            if key not in reported:
                outcome.failed.append((key, "no answer in the output or error file"))
    finally:
        await client.close()


async def _find_or_create(
    client: Any,
    call: Callable[..., Awaitable[Any]],
    path: Path,
    name: str,
    todo: dict[str, SampleRequest],
    settings: OpenAIClientSettings,
    outcome: BatchOutcome,
    cache: Cache,
) -> Any:
    """The job saved at ``path`` (a resumed run), else a new one: upload, create, save."""
    state = _load_state(path)
    if state is not None:
        try:
            batch = await call("batch", lambda: client.batches.retrieve(state["batch_id"]))
            outcome.resumed.append(batch.id)
            return batch
        except ModelNotFoundError:  # the server no longer knows it (nothing was paid)
            pass
    found = cache.get_many(list(todo))
    done = [k for k in todo if cached_record(found.get(k)) is not None]
    for key in done:  # answered meanwhile, by the job of a run that held the claim before
        del todo[key]
    outcome.requests -= len(done)
    if not todo:
        return None
    lines = "".join(
        json.dumps(
            {"custom_id": key, "method": "POST", "url": ENDPOINT, "body": chat_request_body(name, req)}
        )
        + "\n"
        for key, req in todo.items()
    )
    upload = await call(
        "file upload",
        lambda: client.files.create(
            file=("dbpa-batch.jsonl", lines.encode("utf-8"), "application/jsonl"), purpose="batch"
        ),
    )
    batch = await call(
        "batch",
        lambda: client.batches.create(
            input_file_id=upload.id,
            endpoint=ENDPOINT,
            completion_window=COMPLETION_WINDOW,
            metadata={"dbpa": f"{len(todo)} samples of {clean_text(name, 100)}"},
        ),
    )
    _save_state(
        path,
        {
            "batch_id": batch.id,
            "input_file_id": upload.id,
            "model": name,
            "host": settings.host,
            "requests": len(todo),
            "created": time.time(),
        },
    )
    return batch


def _store_lines(data: bytes, todo: dict[str, SampleRequest], cache: Cache, outcome: BatchOutcome) -> None:
    """Validate each line of an output or error file; cache the answers, list the rest."""
    values: dict[str, Any] = {}
    for raw in data.decode("utf-8", errors="replace").splitlines():
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
        except ValueError:
            continue  # a line we cannot read names no request: its request stays missing
        cid = line.get("custom_id") if isinstance(line, dict) else None
        if cid not in todo or cid in values:
            continue
        try:
            values[cid] = _answer(line)
        except MalformedAnswer as exc:
            outcome.failed.append((cid, clean_text(exc, 150)))
            continue
        outcome.prompt_tokens += values[cid]["prompt_tokens"]
        outcome.completion_tokens += values[cid]["completion_tokens"]
    if values:
        cache.set_many(values)
        outcome.stored += len(values)


def _answer(line: dict[str, Any]) -> dict[str, Any]:
    """The cache value of one batch output line, validated as a live answer is."""
    err = line.get("error")
    response = line.get("response")
    status = response.get("status_code") if isinstance(response, dict) else None
    body = response.get("body") if isinstance(response, dict) else None
    if err or status != 200:
        if not err and isinstance(body, dict):
            err = body.get("error")
        msg = err.get("message") or err.get("code") if isinstance(err, dict) else err
        raise MalformedAnswer(f"{status or 'no status'}: {clean_text(msg or 'no answer', 120)}")
    texts, pt, ct, model = parse_chat_answer(body, 1)
    text, _ = valid_unicode(texts[0])
    sample = Sample(
        text,
        prompt_tokens=pt,
        completion_tokens=ct,
        model=clean_text(model, 200) if model else "",
        system_fingerprint=answer_fingerprint(body),
    )
    try:
        return sample_value(sample, None)
    except BackendError as exc:
        raise MalformedAnswer(str(exc)) from None


def run_batch_cli(spec: AuditSpec, args: argparse.Namespace, cache: Cache, bars: ProgressBars) -> int | None:
    """``dbpa audit --batch``: fill the cache through the Batch API before the audit runs;
    None to go on with the audit, else the exit code (after one line on stderr)."""
    import sys

    from .runs import estimate

    if not cache.enabled:
        return jobs_cli([], cache, bars)
    est = estimate(spec, cache=cache)
    if est["totals"]["calls"]:
        print(
            f"Batch API: {est['totals']['calls']} uncached calls, estimated "
            f"${batch_cost(est, spec):.4f} at the batch price (listed: "
            f"${est['totals']['cost']:.4f}).",
            file=sys.stderr,
        )
    return jobs_cli(jobs(spec), cache, bars)


STOPPED_WHILE_PENDING = (
    "Stopped: a created batch job goes on at the server and its id is saved in the cache "
    "folder. Run the same command again with --batch to pick it up (nothing is sent or paid "
    "twice)."
)


def round_fetch(
    cache: Cache, bars: ProgressBars
) -> Callable[[Sequence[tuple[Mapping[str, Any], SampleRequest]]], None]:
    """``dbpa audit --batch`` with ``sequential_sampling``: the audit's ``fetch_round`` (a
    suite's: :func:`dbpa_core.suite.fill_rounds`'s ``fetch``), which sends each round's
    uncached samples (the base and the arms still open, of every case) as one
    Batch API job per model and stores the answers in the cache before the round reads
    them. One line per round that sent a job; a stop while a job is pending raises
    :class:`BatchPending` (the job's id is saved, a rerun waits for the same job), failed
    lines raise :class:`BatchError`."""
    import sys

    def fetch(jobs: Sequence[tuple[Mapping[str, Any], SampleRequest]]) -> None:
        outcome = fill_cache(jobs, cache, progress=bars)
        if outcome.batch_ids:
            again = f" (picked up {', '.join(outcome.resumed)})" if outcome.resumed else ""
            print(
                f"Batch API, round of {len(jobs)} samples: {outcome.stored} answers of "
                f"{outcome.requests} requests cached from {', '.join(outcome.batch_ids)}{again}.",
                file=sys.stderr,
            )

    return fetch


def suite_rounds_cli(spec: AuditSpec, cache: Cache, bars: ProgressBars) -> int | None:
    """``dbpa audit --batch`` of a suite with ``sequential_sampling``: each round of all the
    cases as one Batch API job per model (:func:`dbpa_core.suite.fill_rounds`, with
    :func:`round_fetch`), before the suite runs from the cache. None to go on with the
    suite, else the exit code (after one line on stderr); a :class:`BatchError` goes up."""
    import sys

    from .suite import fill_rounds

    if not cache.enabled:
        return jobs_cli([], cache, bars)
    try:
        fill_rounds(
            spec,
            cache,
            round_fetch(cache, bars),
            deferred=lambda m: m.get("backend") == "openai",
            progress=bars,
        )
    except BatchPending as exc:
        print(str(exc), file=sys.stderr)
        return 130
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM while waiting: the job's id is saved
        print(STOPPED_WHILE_PENDING, file=sys.stderr)
        return 128 + int(getattr(exc, "signum", 2))
    return None


def jobs_cli(
    jobs: Sequence[tuple[Mapping[str, Any], SampleRequest]], cache: Cache, bars: ProgressBars
) -> int | None:
    """The ``--batch`` step of a command: :func:`fill_cache` with its outcome in one line;
    None to go on (the command then runs from the cache), else the exit code. A
    :class:`BatchError` goes up (exit 3, in one line)."""
    import sys

    if not cache.enabled:
        print(
            "error: --batch stores the job's answers in the cache, so it cannot run with --no-cache.",
            file=sys.stderr,
        )
        return 2
    try:
        outcome = fill_cache(jobs, cache, progress=bars)
    except BatchPending as exc:
        print(str(exc), file=sys.stderr)
        return 130
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM while waiting: the job's id is saved
        print(STOPPED_WHILE_PENDING, file=sys.stderr)
        return 128 + int(getattr(exc, "signum", 2))  # 130 for Ctrl-C, 143 for SIGTERM
    finally:
        bars.close()
    if outcome.batch_ids:
        again = f" (picked up {', '.join(outcome.resumed)})" if outcome.resumed else ""
        print(
            f"Batch API: {outcome.stored} answers of {outcome.requests} requests cached from "
            f"{', '.join(outcome.batch_ids)}{again}; {outcome.prompt_tokens} input and "
            f"{outcome.completion_tokens} output tokens."
        )
    return None


__all__ = [
    "STOPPED_WHILE_PENDING",
    "BatchError",
    "BatchOutcome",
    "BatchPending",
    "batch_cost",
    "battery_batch_cost",
    "fill_cache",
    "jobs",
    "jobs_cli",
    "round_fetch",
    "run_batch_cli",
    "suite_rounds_cli",
]
