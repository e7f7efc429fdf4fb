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
# A test is one try with a short deadline: with the audit's retry policy (6 retries with
# back-off) a refused connection took 26 s to report (QA review, minor 2).
TEST_TIMEOUT = 5.0


@dataclass(frozen=True)
class Check:
    ok: bool
    message: str
    problem: str | None = None  # "key" (401/403, no key), "server" (unreachable, timed out)


def check_model(
    model: Mapping[str, Any],
    *,
    api_keys: Mapping[str, str] | None = None,
    cache_dir: str | None = None,
    timeout: float = TEST_TIMEOUT,
) -> Check:
    """Whether ``model`` answers: the embedded model needs no check, a replay file is read
    and summarised, any other model gets one call of at most two tokens, tried once with a
    deadline of ``timeout`` seconds. Messages are plain text (no markdown)."""
    from dbpa_core.backends import AuthError, BackendError, ServerUnavailableError

    kind = model.get("backend", "local")
    label = model_label(dict(model))
    if kind == "local":
        return Check(True, f"{label} runs offline inside dbpa: no connection to test.")
    if kind == "replay":
        return _check_replay(model)
    probe = dict(model)
    if kind == "openai":
        probe.update(max_retries=0, timeout=min(float(model.get("timeout", timeout)), timeout))
    req = requests_for(PROMPT, n=1, seed=0, params=GenerationParams(temperature=0.0, max_tokens=2))[0]
    sampler = Sampler(Cache(cache_dir, enabled=False), api_keys=api_keys)
    t0 = time.perf_counter()
    try:
        record = sampler.sample([Job(probe, req, "connection test")])[0]
    except AuthError as exc:  # the page says where to type the key
        text = (
            str(exc)
            .replace(" (or type it into the dashboard's Settings page)", "")
            .replace(" (or type the key into the dashboard's Settings page)", "")
        )
        return Check(False, f"{label} did not answer the test call: {text}", "key")
    except ServerUnavailableError as exc:
        text = str(exc).replace(" Raise 'timeout' in the spec if the server is just slow.", "")
        if "timed out" in text:
            text += (
                f" A test waits {timeout:g} s at most; a server that loads the model on "
                "its first call can take longer: test again in a moment."
            )
        return Check(False, f"{label} did not answer the test call: {text}", "server")
    except BackendError as exc:
        return Check(False, f"{label} did not answer the test call: {exc}")
    except Exception as exc:  # noqa: BLE001 - every failure becomes one sentence
        return Check(False, f"{label} did not answer the test call ({type(exc).__name__}: {exc}).")
    answer = " ".join(record.text.split())[:40]
    return Check(
        True,
        f"Connected: {label} answered a 2-token test call in {time.perf_counter() - t0:.1f} s ({answer!r}).",
    )


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
        return Check(
            False,
            f"No response in {model['file']} is recorded for model {name!r}; the file's models: {listed}.",
        )
    mine = {p: len(v) for (p, m), v in records.items() if not name or m in (name, None)}
    fewest = min(mine.values()) if mine else 0
    return Check(
        bool(mine),
        f"{sum(mine.values())} recorded responses for {len(mine)} prompts "
        f"(at least {fewest} per prompt, so k can be up to {fewest}); models in the "
        f"file: {', '.join(names) or 'unnamed'}.",
    )
