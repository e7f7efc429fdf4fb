"""Any OpenAI-compatible server (OpenAI, vLLM, Ollama, llama.cpp server) via ``openai``.

Concurrent requests under a semaphore, retries with exponential back-off and
jitter on 429 / 5xx / timeouts / malformed answers (honouring ``Retry-After``),
``n > 1`` per request where the server supports it, token usage recorded.
The API key is held in memory only: it is never part of a cache key, a value,
a log line or an output file.
"""
from __future__ import annotations

import asyncio
import email.utils
import logging
import random
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar
from urllib.parse import urlparse

from .base import (
    AuthError,
    BackendError,
    ModelNotFoundError,
    PromptTooLongError,
    Sample,
    SampleRequest,
    ServerUnavailableError,
)

log = logging.getLogger(__name__)
T = TypeVar("T")


def run_async(coro_factory: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine to completion from sync code, even inside a running loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro_factory())
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(coro_factory())
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc

    th = threading.Thread(target=target)
    th.start()
    th.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def _retry_after(exc: Exception) -> float | None:
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if not headers:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return float(ms) / 1000.0
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value)
        return max(0.0, parsed.timestamp() - time.time()) if parsed else None


def _server_message(exc: Exception) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
        if isinstance(err, str):
            return err
    return str(getattr(exc, "message", "") or exc)


class OpenAIClientSettings:
    """Connection settings shared by the chat backend and the embedder."""

    def __init__(self, *, base_url: str | None = None, api_key: str | None = None,
                 api_key_env: str | None = None, concurrency: int = 8, max_retries: int = 6,
                 timeout: float = 60.0, backoff_base: float = 0.5, backoff_max: float = 30.0):
        self.base_url = base_url or "https://api.openai.com/v1"
        self.api_key_env = api_key_env
        self._api_key = api_key
        self.concurrency = max(1, int(concurrency))
        self.max_retries = max(0, int(max_retries))
        self.timeout = float(timeout)
        self.backoff_base = float(backoff_base)
        self.backoff_max = float(backoff_max)
        self.key_missing = False

    @property
    def host(self) -> str:
        u = urlparse(self.base_url)
        return f"{u.scheme}://{u.netloc}{u.path.rstrip('/')}"

    def api_key(self) -> str:
        """The key: given in memory, else from ``api_key_env``. Self-hosted servers
        (vLLM, Ollama, llama.cpp) often need none, so an unset variable is an error
        only for api.openai.com; elsewhere a placeholder is sent and a 401 answer
        says which variable to set."""
        import os

        if self._api_key:
            return self._api_key
        if self.api_key_env:
            key = os.environ.get(self.api_key_env)
            if key:
                return key
            if "api.openai.com" in self.host:
                raise AuthError(
                    f"The environment variable {self.api_key_env} is not set: export your API "
                    "key in it (or type the key into the dashboard's Settings page).")
            self.key_missing = True
        return "not-needed"

    def client(self):
        from openai import AsyncOpenAI

        return AsyncOpenAI(base_url=self.base_url, api_key=self.api_key(), max_retries=0,
                           timeout=self.timeout)

    def __repr__(self) -> str:  # never shows the key
        return f"OpenAIClientSettings(base_url={self.base_url!r}, api_key_env={self.api_key_env!r})"

    async def with_retries(self, call: Callable[[], Awaitable[T]], *, what: str,
                           model: str) -> T:
        """Await ``call()``; retry transient failures; map the rest to clear errors."""
        import openai

        attempt = 0
        while True:
            try:
                return await call()
            except openai.AuthenticationError:
                if self.key_missing:
                    raise AuthError(
                        f"{self.host} needs an API key (401), and the environment variable "
                        f"{self.api_key_env} is not set: export the key in it (or type it "
                        "into the dashboard's Settings page).") from None
                raise AuthError(
                    f"{self.host} rejected the API key (401). Check the key"
                    + (f" in ${self.api_key_env}." if self.api_key_env else ".")) from None
            except openai.PermissionDeniedError as exc:
                raise AuthError(f"{self.host} refused access (403): {_server_message(exc)}") from None
            except openai.NotFoundError as exc:
                raise ModelNotFoundError(
                    f"{self.host} does not know the model {model!r} (404): "
                    f"{_server_message(exc)}. Check the model name.") from None
            except openai.BadRequestError as exc:
                msg = _server_message(exc)
                if any(w in msg.lower() for w in ("context", "too long", "maximum", "token")):
                    raise PromptTooLongError(
                        f"The prompt is too long for {model!r} (400): {msg}. Shorten the prompt "
                        "or lower max_tokens.") from None
                raise BackendError(f"{self.host} rejected the {what} request (400): {msg}") from None
            except (openai.RateLimitError, openai.InternalServerError, openai.APITimeoutError,
                    openai.APIConnectionError, openai.APIResponseValidationError,
                    openai.APIStatusError, ValueError) as exc:
                status = getattr(exc, "status_code", None)
                if isinstance(exc, openai.APIStatusError) and status is not None and status < 500 \
                        and status not in (408, 409, 429):
                    raise BackendError(
                        f"{self.host} answered {status} to the {what} request: "
                        f"{_server_message(exc)}") from None
                if attempt >= self.max_retries:
                    if isinstance(exc, (openai.APIConnectionError, openai.APITimeoutError)):
                        raise ServerUnavailableError(
                            f"Cannot reach {self.host} after {attempt + 1} tries "
                            f"({type(exc).__name__}). Is the server running and the base_url "
                            "right?") from None
                    raise ServerUnavailableError(
                        f"{self.host} kept failing the {what} request after {attempt + 1} tries "
                        f"(last: {status or type(exc).__name__} {_server_message(exc)[:200]})."
                    ) from None
                delay = min(self.backoff_max, self.backoff_base * 2**attempt)
                delay *= random.uniform(0.5, 1.0)  # jitter: retries of many tasks spread out
                hinted = _retry_after(exc)
                if hinted is not None:
                    delay = max(delay, hinted)
                log.info("retrying %s after %s (attempt %d, %.2fs)", what,
                         status or type(exc).__name__, attempt + 1, delay)
                attempt += 1
                await asyncio.sleep(delay)


class OpenAIBackend:
    """Chat completions from an OpenAI-compatible server."""

    name = "openai"
    deterministic = False

    def __init__(self, model: str, settings: OpenAIClientSettings, *, n_per_request: int = 1):
        if not model:
            raise BackendError("The openai backend needs a model name.")
        self.model = model
        self.settings = settings
        self.n_per_request = max(1, int(n_per_request))
        self.calls = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0

    def generate(self, requests: Sequence[SampleRequest], on_sample, *,
                 should_stop: Callable[[], bool] | None = None) -> None:
        if requests:
            run_async(lambda: self._generate(list(requests), on_sample, should_stop))

    def _groups(self, requests: list[SampleRequest]) -> list[list[SampleRequest]]:
        by_prompt: dict[tuple, list[SampleRequest]] = {}
        for r in requests:
            by_prompt.setdefault((r.system_prompt, r.prompt, r.params), []).append(r)
        n = self.n_per_request
        return [reqs[i:i + n] for reqs in by_prompt.values() for i in range(0, len(reqs), n)]

    async def _generate(self, requests, on_sample, should_stop) -> None:
        client = self.settings.client()
        sem = asyncio.Semaphore(self.settings.concurrency)
        fatal: list[BaseException] = []

        async def one(group: list[SampleRequest]) -> None:
            async with sem:
                if fatal or (should_stop is not None and should_stop()):
                    return
                try:
                    samples = await self._complete(client, group)
                except BackendError as exc:
                    fatal.append(exc)
                    return
                for req, sample in zip(group, samples, strict=False):
                    on_sample(req, sample)
                rest = group[len(samples):]
                if rest:  # the server gave fewer choices than asked: ask for the rest one by one
                    await asyncio.gather(*(one([r]) for r in rest))

        try:
            await asyncio.gather(*(one(g) for g in self._groups(requests)))
        finally:
            await client.close()
        if fatal:
            raise fatal[0]

    async def _complete(self, client, group: list[SampleRequest]) -> list[Sample]:
        req = group[0]
        messages = []
        if req.system_prompt:
            messages.append({"role": "system", "content": req.system_prompt})
        messages.append({"role": "user", "content": req.prompt})
        kwargs: dict[str, Any] = dict(model=self.model, messages=messages,
                                      temperature=req.params.temperature,
                                      top_p=req.params.top_p, max_tokens=req.params.max_tokens,
                                      seed=req.seed % (2**31))
        if len(group) > 1:
            kwargs["n"] = len(group)

        async def call():
            resp = await client.chat.completions.create(**kwargs)
            if not getattr(resp, "choices", None):
                raise ValueError("the answer has no choices")
            return resp

        try:
            resp = await self.settings.with_retries(call, what="chat completion", model=self.model)
        except BackendError as exc:
            msg = str(exc)
            if len(group) > 1 and isinstance(exc, BackendError) and type(exc) is BackendError \
                    and ("'n'" in msg or "`n`" in msg or " n " in msg):
                self.n_per_request = 1  # the server does not support n > 1
                return []
            raise
        self.calls += 1
        usage = getattr(resp, "usage", None)
        pt = int(getattr(usage, "prompt_tokens", 0) or 0)
        ct = int(getattr(usage, "completion_tokens", 0) or 0)
        self.prompt_tokens += pt
        self.completion_tokens += ct
        choices = sorted(resp.choices, key=lambda c: getattr(c, "index", 0) or 0)[:len(group)]
        out = []
        for ch in choices:
            text = (getattr(ch.message, "content", None) or "") if ch.message else ""
            out.append(Sample(text, prompt_tokens=pt // max(1, len(choices)),
                              completion_tokens=ct // max(1, len(choices)),
                              model=getattr(resp, "model", None) or self.model))
        return out
