"""Test a model before it is added: one tiny call (or, for a replay file, a look inside),
with a result a person can act on. Calls go through the sampler, never to a backend directly,
and nothing is cached."""
from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dbpa_core.backends import GenerationParams
from dbpa_core.cache import Cache
from dbpa_core.sampling import Job, Sampler, requests_for
from dbpa_core.spec import model_label

PROMPT = "Reply with the word OK."


@dataclass(frozen=True)
class Check:
    ok: bool
    message: str


def check_model(model: Mapping[str, Any], *, api_keys: Mapping[str, str] | None = None,
                cache_dir: str | None = None) -> Check:
    """Whether ``model`` answers: the embedded model needs no check, a replay file is read
    and summarised, any other model gets one call of at most two tokens."""
    kind = model.get("backend", "local")
    label = model_label(dict(model))
    if kind == "local":
        return Check(True, f"{label} runs offline inside dbpa: no connection to test.")
    if kind == "replay":
        return _check_replay(model)
    req = requests_for(PROMPT, n=1, seed=0, params=GenerationParams(temperature=0.0,
                                                                     max_tokens=2))[0]
    sampler = Sampler(Cache(cache_dir, enabled=False), api_keys=api_keys)
    t0 = time.perf_counter()
    try:
        record = sampler.sample([Job(dict(model), req, "connection test")])[0]
    except Exception as exc:  # noqa: BLE001 - every failure becomes one sentence
        from .runner import friendly

        return Check(False, f"{label} did not answer the test call: {friendly(exc)}")
    answer = " ".join(record.text.split())[:40]
    return Check(True, f"Connected: {label} answered a 2-token test call in "
                 f"{time.perf_counter() - t0:.1f} s ({answer!r}).")


def _check_replay(model: Mapping[str, Any]) -> Check:
    from dbpa_core.backends import BackendError
    from dbpa_core.backends.replay import load_replay_file

    try:
        records = load_replay_file(model["file"])
    except BackendError as exc:
        return Check(False, str(exc))
    names = sorted({m for _p, m in records if m})
    name = model.get("name")
    if name and name not in names and not any(m is None for _p, m in records):
        listed = ", ".join(repr(n) for n in names) or "none"
        return Check(False, f"No response in {model['file']} is recorded for model {name!r}; "
                     f"the file's models: {listed}.")
    mine = {p: len(v) for (p, m), v in records.items() if not name or m in (name, None)}
    fewest = min(mine.values()) if mine else 0
    return Check(bool(mine), f"{sum(mine.values())} recorded responses for {len(mine)} prompts "
                 f"(at least {fewest} per prompt, so k can be up to {fewest}); models in the "
                 f"file: {', '.join(names) or 'unnamed'}.")
