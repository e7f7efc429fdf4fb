"""Any OpenAI-compatible server (OpenAI, vLLM, Ollama, llama.cpp server) via ``openai``.

Concurrent requests under a semaphore, retries with exponential back-off and
jitter on 429 / 5xx / time-outs / malformed answers (honouring ``Retry-After``
up to ``max_retry_wait``), ``n > 1`` per request where the server supports it,
token usage recorded. The API key is held in memory only: it is never part of a
cache key, a value, a log line or an output file.

A hostile or broken server cannot hang a run or poison the cache:

* every request has a total deadline (``timeout``), so a server that trickles
  bytes is cut off like one that never answers, and is reported as timed out;
* a ``Retry-After`` is obeyed up to ``max_retry_wait`` seconds (default 60), and
  the wait is reported on the progress line;
* answers are read as raw JSON, at most ``max_response_mb`` of it, and validated
  (choices, messages, text; finite, non-zero, equal-width embeddings) *before*
  anything is handed on to be cached; a malformed answer is retried like a 5xx;
* text from the server is stripped of terminal escapes before it is shown, and a
  ``user:password@`` in ``base_url`` is never echoed.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import math
import random
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

import numpy as np

from .._validate import valid_unicode
from .base import (
    AuthError,
    BackendError,
    ModelNotFoundError,
    PromptTooLongError,
    ResponseTooLargeError,
    Sample,
    SampleRequest,
    ServerUnavailableError,
    chat_messages,
    clean_text,
    redact_url,
)

if TYPE_CHECKING:
    from openai import AsyncOpenAI

    from .base import OnSample

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_MAX_RESPONSE_MB = 8.0
DEFAULT_MAX_RETRY_WAIT = 60.0
# The pause before the n-th retry of a request without Retry-After: BACKOFF_BASE * 2**n
# seconds (at most the settings' backoff_max), times a random 0.5-1 (jitter). Read when a
# client's settings are made (the test suite shrinks it: its fake servers need no pause).
BACKOFF_BASE = 0.5
# A chat answer may be at most this large for the max_tokens it was asked for: the JSON
# envelope, plus per token of each choice more than any tokenizer's longest token written
# as JSON escapes (\uXXXX is 6 bytes a character). 300 tokens: about 100 KB.
ANSWER_ENVELOPE_BYTES = 64 * 1024
ANSWER_BYTES_PER_TOKEN = 128


def answer_byte_limit(max_tokens: int, n: int = 1) -> int:
    """The most bytes a chat answer of ``n`` choices of at most ``max_tokens`` tokens can
    need (see ANSWER_BYTES_PER_TOKEN); a larger one comes from a server that ignores
    ``max_tokens``."""
    return ANSWER_ENVELOPE_BYTES + ANSWER_BYTES_PER_TOKEN * max(1, int(max_tokens)) * max(1, n)


class MalformedAnswer(ValueError):
    """The server answered 200 with something that is not a valid answer."""


class StoppedWhileWaiting(BackendError):
    """``should_stop`` turned True during a retry wait (the caller raises RunCancelled)."""


class _Transport(Exception):
    """The connection failed (or a read timed out) while the body was being read."""

    def __init__(self, exc: BaseException):
        super().__init__(f"{type(exc).__name__}: {exc}")
        self.timeout = "timeout" in type(exc).__name__.lower()


def run_async(coro_factory: Callable[[], Coroutine[Any, Any, T]]) -> T:
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
    """Seconds the server asks us to wait (``retry-after-ms`` / ``Retry-After``), or
    None when it says nothing usable (junk such as ``soon`` is ignored)."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if not headers:
        return None
    try:
        ms = headers.get("retry-after-ms")
        value = headers.get("retry-after")
    except Exception:  # noqa: BLE001 - headers of a hostile server
        return None
    for raw, scale in ((ms, 1000.0), (value, 1.0)):
        if not raw:
            continue
        try:
            seconds = float(raw) / scale
        except (TypeError, ValueError):
            try:
                parsed = email.utils.parsedate_to_datetime(str(raw))
                seconds = parsed.timestamp() - time.time()
            except (TypeError, ValueError, IndexError, OverflowError):
                continue
        if math.isfinite(seconds):
            return max(0.0, seconds)
    return None


def _server_message(exc: BaseException) -> str:
    body = getattr(exc, "body", None)
    msg: Any = None
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            msg = err["message"]
        elif isinstance(err, str):
            msg = err
    if msg is None:
        msg = getattr(exc, "message", "") or exc
    return clean_text(msg, 200)


def _seconds(x: float) -> str:
    return f"{x:.0f}" if x >= 10 else f"{x:.1f}"


class OpenAIClientSettings:
    """Connection settings shared by the chat backend and the embedder.

    ``timeout`` is the total deadline of one request in seconds (connecting,
    waiting and reading the whole body); ``max_retry_wait`` caps every pause
    before a retry, whatever ``Retry-After`` says; ``max_response_mb`` caps the
    size of one answer.
    """

    def __init__(
        self,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        api_key_env: str | None = None,
        concurrency: int = 8,
        max_retries: int = 6,
        timeout: float = 60.0,
        backoff_base: float | None = None,
        backoff_max: float = 30.0,
        max_retry_wait: float = DEFAULT_MAX_RETRY_WAIT,
        max_response_mb: float = DEFAULT_MAX_RESPONSE_MB,
    ):
        self.base_url = base_url or "https://api.openai.com/v1"
        self.api_key_env = api_key_env
        self._api_key = api_key
        self.concurrency = max(1, int(concurrency))
        self.max_retries = max(0, int(max_retries))
        self.timeout = float(timeout)
        self.backoff_base = float(BACKOFF_BASE if backoff_base is None else backoff_base)
        self.backoff_max = float(backoff_max)
        self.max_retry_wait = max(0.0, float(max_retry_wait))
        self.max_response_bytes = int(float(max_response_mb) * 1024**2)
        self.key_missing = False

    @property
    def host(self) -> str:
        """Scheme, host, port and path of the server: never a ``user:password@``."""
        u = urlsplit(self.base_url)
        netloc = u.netloc.rsplit("@", 1)[-1]
        return f"{u.scheme}://{netloc}{u.path.rstrip('/')}"

    def api_key(self) -> str:
        """The key: given in memory, else from ``api_key_env`` (in the dashboard, only for a
        server allowed on the machine: :mod:`dbpa_core.keyhosts`). Self-hosted servers
        (vLLM, Ollama, llama.cpp) often need none, so an unset variable is an error
        only for api.openai.com; elsewhere a placeholder is sent and a 401 answer
        says which variable to set."""
        import os

        if self._api_key:
            return self._api_key
        if self.api_key_env:
            key = os.environ.get(self.api_key_env)
            if key:
                from ..keyhosts import env_key_allowed, refusal

                # in the dashboard, an environment key goes only to servers allowed on
                # the machine: a model added there may point anywhere
                if not env_key_allowed(self.base_url):
                    raise AuthError(refusal(self.api_key_env, self.base_url))
                return key
            if "api.openai.com" in self.host:
                raise AuthError(
                    f"The environment variable {self.api_key_env} is not set: export your API "
                    "key in it (or type the key into the dashboard's Settings page)."
                )
            self.key_missing = True
        return "not-needed"

    def client(self) -> AsyncOpenAI:
        from openai import AsyncOpenAI

        # the total deadline is enforced around each request; this bounds each read
        return AsyncOpenAI(
            base_url=self.base_url, api_key=self.api_key(), max_retries=0, timeout=self.timeout
        )

    def __repr__(self) -> str:  # never shows the key, nor a password in the URL
        return (
            f"OpenAIClientSettings(base_url={redact_url(self.base_url)!r}, api_key_env={self.api_key_env!r})"
        )

    # ------------------------------------------------------------------ one request
    async def read_json(self, streamed: Any, *, max_tokens: int | None = None, n: int = 1) -> Any:
        """The JSON body of ``resource.with_streaming_response.create(...)``, read at
        most ``max_response_bytes`` far, and for a chat answer at most what
        ``max_tokens`` allows for ``n`` choices (:func:`answer_byte_limit`): a larger
        answer is refused, not read."""
        limit = self.max_response_bytes
        if max_tokens is not None:
            limit = min(limit, answer_byte_limit(max_tokens, n))

        def too_large() -> ResponseTooLargeError:
            return (
                self._too_large()
                if limit == self.max_response_bytes
                else self._beyond_max_tokens(limit, max_tokens, n)
            )

        async with streamed as resp:
            length = resp.headers.get("content-length")
            if length and length.strip().isdigit() and int(length) > limit:
                raise too_large()
            buf = bytearray()
            try:
                async for chunk in resp.iter_bytes():
                    buf += chunk
                    if len(buf) > limit:
                        raise too_large()
            except ResponseTooLargeError:
                raise
            except Exception as exc:  # noqa: BLE001 - any transport failure mid-body
                raise _Transport(exc) from None
        try:
            return json.loads(bytes(buf))
        except (ValueError, UnicodeDecodeError):
            raise MalformedAnswer("the answer is not JSON") from None
        except RecursionError:
            raise MalformedAnswer("the answer is JSON nested too deeply to be one") from None

    def _too_large(self) -> ResponseTooLargeError:
        mb = self.max_response_bytes / 1024**2
        return ResponseTooLargeError(
            f"{self.host} sent an answer larger than {mb:g} MB; it was refused unread. Raise "
            "max_response_mb in the spec if that is expected, or lower max_tokens."
        )

    def _beyond_max_tokens(self, limit: int, max_tokens: int | None, n: int) -> ResponseTooLargeError:
        what = f"{n} answers of" if n > 1 else "an answer of"
        return ResponseTooLargeError(
            f"{self.host} sent more than max_tokens = {max_tokens} allows (over "
            f"{limit / 1024:.0f} KB, the most {what} {max_tokens} tokens can take): the server "
            "ignores max_tokens. The answer was refused unread and nothing of it was cached; "
            "fix the server's limit or raise max_tokens in the spec."
        )

    async def with_retries(
        self,
        call: Callable[[], Awaitable[T]],
        *,
        what: str,
        model: str,
        should_stop: Callable[[], bool] | None = None,
        on_status: Callable[[str], None] | None = None,
    ) -> T:
        """Await ``call()`` under the total deadline; retry transient failures (429,
        5xx, time-outs, dropped connections, malformed answers); map the rest to
        clear errors. ``on_status`` hears what a retry waits for; ``should_stop``
        is polled during the wait."""
        import openai

        attempt = 0
        while True:
            try:
                return await asyncio.wait_for(call(), timeout=self.timeout)
            except openai.AuthenticationError:
                if self.key_missing:
                    raise AuthError(
                        f"{self.host} needs an API key (401), and the environment variable "
                        f"{self.api_key_env} is not set: export the key in it (or type it "
                        "into the dashboard's Settings page)."
                    ) from None
                raise AuthError(
                    f"{self.host} rejected the API key (401). Check the key"
                    + (
                        " that was given for it."
                        if self._api_key
                        else f" in ${self.api_key_env}."
                        if self.api_key_env
                        else "."
                    )
                ) from None
            except openai.PermissionDeniedError as exc:
                raise AuthError(f"{self.host} refused access (403): {_server_message(exc)}") from None
            except openai.NotFoundError as exc:
                raise ModelNotFoundError(
                    f"{self.host} does not know the model {clean_text(model, 100)!r} (404): "
                    f"{_server_message(exc)}. Check the model name."
                ) from None
            except openai.BadRequestError as exc:
                msg = _server_message(exc)
                if any(w in msg.lower() for w in ("context", "too long", "maximum", "token")):
                    raise PromptTooLongError(
                        f"The prompt is too long for {clean_text(model, 100)!r} (400): {msg}. "
                        "Shorten the prompt or lower max_tokens."
                    ) from None
                raise BackendError(f"{self.host} rejected the {what} request (400): {msg}") from None
            except (
                openai.RateLimitError,
                openai.InternalServerError,
                openai.APITimeoutError,
                openai.APIConnectionError,
                openai.APIResponseValidationError,
                openai.APIStatusError,
                MalformedAnswer,
                _Transport,
                TimeoutError,
            ) as exc:
                status = getattr(exc, "status_code", None)
                if (
                    isinstance(exc, openai.APIStatusError)
                    and status is not None
                    and status < 500
                    and status not in (408, 409, 429)
                ):
                    raise BackendError(
                        f"{self.host} answered {status} to the {what} request: {_server_message(exc)}"
                    ) from None
                timed_out = isinstance(exc, (TimeoutError, openai.APITimeoutError)) or (
                    isinstance(exc, _Transport) and exc.timeout
                )
                unreachable = _unreachable(exc)
                # nothing reached the server (refused, unknown host): one quick second
                # try, not the patience a busy server gets
                limit = min(self.max_retries, CONNECT_RETRIES) if unreachable else self.max_retries
                if attempt >= limit:
                    raise self._final_error(exc, what, attempt + 1, timed_out) from None
                delay = min(self.backoff_max, self.backoff_base * 2**attempt)
                delay *= random.uniform(0.5, 1.0)  # jitter: retries of many tasks spread out
                hinted = _retry_after(exc)
                if hinted is not None:
                    delay = max(delay, hinted)
                capped = delay > self.max_retry_wait
                delay = min(delay, self.max_retry_wait)
                reason = (
                    "timed out"
                    if timed_out
                    else f"malformed answer ({exc})"
                    if isinstance(exc, MalformedAnswer)
                    else "connection dropped"
                    if isinstance(exc, (_Transport, openai.APIConnectionError))
                    else f"{status} from the server"
                    if status
                    else type(exc).__name__
                )
                asked = f" (asked {_seconds(hinted)} s)" if capped and hinted else ""
                note = f"{reason}{asked}; retry in {_seconds(delay)} s ({attempt + 1}/{self.max_retries})"
                log.info("retrying %s: %s", what, note)
                if on_status is not None:
                    on_status(note)
                attempt += 1
                await _sleep(delay, should_stop)

    def _final_error(
        self, exc: BaseException, what: str, tries: int, timed_out: bool
    ) -> ServerUnavailableError:
        import openai

        if timed_out:
            return ServerUnavailableError(
                f"{self.host} timed out: no complete answer to the {what} request within "
                f"{_seconds(self.timeout)} s, {_tries(tries)}. Raise 'timeout' in the spec if the "
                "server is just slow."
            )
        if isinstance(exc, MalformedAnswer):
            return ServerUnavailableError(
                f"{self.host} sent malformed answers to the {what} request {_times(tries)} "
                f"(last: {clean_text(exc, 150)}); nothing was cached, a later run asks again."
            )
        if isinstance(exc, (openai.APIConnectionError, _Transport)):
            why = _unreachable(exc) or type(exc).__name__
            return ServerUnavailableError(
                f"Cannot reach {self.host} after {_tries(tries)} ({why}). Is the "
                "server running and the base_url right?"
            )
        status = getattr(exc, "status_code", None)
        return ServerUnavailableError(
            f"{self.host} kept failing the {what} request after {_tries(tries)} "
            f"(last: {status or type(exc).__name__} {_server_message(exc)[:200]})."
        )


def _unreachable(exc: BaseException) -> str | None:
    """Why a request reached no server at all, in a few words (``connection refused``,
    ``host not found``, ``could not connect``), or None when it did reach one (or timed
    out, or the connection dropped). Read from the chain of causes: the HTTP library's
    ``ConnectError`` (whichever httpx the SDK carries) and the socket error under it."""
    import openai

    if not isinstance(exc, openai.APIConnectionError) or isinstance(exc, openai.APITimeoutError):
        return None
    chain: list[BaseException] = []
    inner: BaseException | None = exc.__cause__ or exc.__context__
    while inner is not None and len(chain) < 16:
        chain.append(inner)
        inner = inner.__cause__ or inner.__context__
    if not any(type(e).__name__ == "ConnectError" for e in chain):
        return None
    if any(isinstance(e, ConnectionRefusedError) for e in chain):
        return "connection refused"
    if any(isinstance(e, socket.gaierror) for e in chain):
        return "host not found"
    return "could not connect"


CONNECT_RETRIES = 1
"""Retries of a request that reached no server (connection refused, unknown host)."""


def _tries(n: int) -> str:
    return "1 try" if n == 1 else f"{n} tries"


def _times(n: int) -> str:
    return "once" if n == 1 else f"{n} times"


async def _unless_stopped(work: asyncio.Future, should_stop: Callable[[], bool] | None) -> None:
    """Await ``work``, unless ``should_stop`` turns True first (checked every 0.1 s): then
    ``work`` is cancelled, so requests in flight are abandoned and no more are sent (what
    arrived before is the caller's; the caller raises RunCancelled)."""
    if should_stop is None:
        await work
        return
    while not should_stop():
        done, _ = await asyncio.wait([work], timeout=0.1)
        if done:
            work.result()
            return
    work.cancel()
    try:
        await work
    except asyncio.CancelledError:
        pass


async def _sleep(seconds: float, should_stop: Callable[[], bool] | None) -> None:
    """Sleep, checking ``should_stop`` every 0.1 s (a long wait never blocks Stop)."""
    end = time.monotonic() + seconds
    while True:
        if should_stop is not None and should_stop():
            raise StoppedWhileWaiting("Stopped while waiting to retry.")
        left = end - time.monotonic()
        if left <= 0:
            return
        await asyncio.sleep(min(0.1, left))


# --------------------------------------------------------------------------- validation
def parse_chat_answer(data: Any, n: int) -> tuple[list[str], int, int, str | None]:
    """The texts of the first ``n`` choices of a chat completion (at least one), its
    token usage and model, or :class:`MalformedAnswer` saying what is wrong.

    An empty text is only accepted when the server says why (``finish_reason``
    ``length`` or ``content_filter``); a request never asks for one otherwise.
    """
    if not isinstance(data, dict):
        raise MalformedAnswer("the answer is not a JSON object")
    choices = data.get("choices")
    if choices is None and "error" in data:
        err = data["error"]
        msg = err.get("message") if isinstance(err, dict) else err
        raise MalformedAnswer(f"an error instead of choices: {clean_text(msg, 100)}")
    if not isinstance(choices, list):
        raise MalformedAnswer(f"'choices' is {type(choices).__name__}, not a list")
    if not choices:
        raise MalformedAnswer("'choices' is empty")
    if all(isinstance(c, dict) and type(c.get("index")) is int for c in choices):
        choices = sorted(choices, key=lambda c: c["index"])
    texts = []
    for i, ch in enumerate(choices[:n]):
        if not isinstance(ch, dict):
            raise MalformedAnswer(f"choice {i} is not an object")
        message = ch.get("message")
        if not isinstance(message, dict):
            raise MalformedAnswer(f"choice {i} has no message")
        content = message.get("content")
        finish = ch.get("finish_reason")
        explained = finish in ("length", "content_filter")
        if content is None and explained:
            content = ""
        if not isinstance(content, str):
            raise MalformedAnswer(f"the content of choice {i} is {type(content).__name__}, not text")
        if not content.strip() and not explained:
            raise MalformedAnswer(f"choice {i} is empty (finish_reason {clean_text(finish, 30)!r})")
        texts.append(content)  # lone surrogates are replaced by the backend (valid_unicode)
    usage = data.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    pt, ct = (usage.get(k) for k in ("prompt_tokens", "completion_tokens"))
    pt = pt if type(pt) is int and pt >= 0 else 0
    ct = ct if type(ct) is int and ct >= 0 else 0
    model = data.get("model")
    return texts, pt, ct, model if isinstance(model, str) else None


def answer_fingerprint(data: Any) -> str:
    """The ``system_fingerprint`` of a chat completion (the server's build of the model: it
    changes when the provider changes what answers under one model name), made safe to show;
    "" when the server sends none or something that is not text."""
    fp = data.get("system_fingerprint") if isinstance(data, dict) else None
    return clean_text(fp, 100) if isinstance(fp, str) else ""


def parse_embedding_answer(data: Any, n: int) -> np.ndarray:
    """``(n, dim)`` float32 embeddings of an embeddings answer, or
    :class:`MalformedAnswer`: each row a list of finite numbers, not all zero, all
    rows of one width, exactly ``n`` rows."""
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise MalformedAnswer("the answer has no 'data' list")
    rows = data["data"]
    if len(rows) != n:
        raise MalformedAnswer(f"{len(rows)} embeddings for {n} texts")
    if not all(isinstance(r, dict) for r in rows):
        raise MalformedAnswer("an embedding entry is not an object")
    if sorted(r.get("index") if type(r.get("index")) is int else -1 for r in rows) == list(range(n)):
        rows = sorted(rows, key=lambda r: r["index"])
    vectors = [r.get("embedding") for r in rows]
    if not all(isinstance(v, list) and v for v in vectors):
        raise MalformedAnswer("an embedding is not a non-empty list of numbers")
    widths = {len(v) for v in vectors}
    if len(widths) > 1:
        raise MalformedAnswer(f"embeddings of uneven width ({', '.join(map(str, sorted(widths)))})")
    if not all(type(x) in (int, float) for v in vectors for x in v):
        raise MalformedAnswer("an embedding holds something other than numbers")
    with np.errstate(over="ignore", invalid="ignore"):
        arr = np.asarray(vectors, dtype=np.float32)
    bad = ~np.isfinite(arr).all(axis=1)
    if bad.any():
        raise MalformedAnswer(f"embedding {int(np.argmax(bad))} holds NaN or infinite values")
    zero = ~arr.any(axis=1)
    if zero.any():
        raise MalformedAnswer(f"embedding {int(np.argmax(zero))} is all zeros")
    return arr


# --------------------------------------------------------------------------- chat backend
def chat_request_body(model: str, req: SampleRequest, *, n: int = 1) -> dict[str, Any]:
    """The chat completion request for ``req`` (``n`` choices): what a live call sends and
    what a Batch API line (:mod:`dbpa_core.batch`) asks for, so both answer one question."""
    body: dict[str, Any] = dict(
        model=model,
        messages=chat_messages(req),
        temperature=req.params.temperature,
        top_p=req.params.top_p,
        max_tokens=req.params.max_tokens,
        seed=req.seed % (2**31),
    )
    if n > 1:
        body["n"] = n
    return body


class OpenAIBackend:
    """Chat completions from an OpenAI-compatible server.

    ``on_status`` (set by the caller, e.g. :class:`~dbpa_core.sampling.Sampler`)
    hears what a retry is waiting for.
    """

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
        self.on_status: Callable[[str], None] | None = None
        self.replaced = [0, 0]  # characters that were not valid Unicode, in how many answers
        self.over_max = [0, 0]  # answers longer than max_tokens (by the server's count), most

    def _valid(self, text: str) -> str:
        """``text`` with lone surrogates (not valid Unicode, not storable) replaced, counted."""
        text, n = valid_unicode(text)
        if n:
            self.replaced[0] += n
            self.replaced[1] += 1
        return text

    def generate(
        self,
        requests: Sequence[SampleRequest],
        on_sample: OnSample,
        *,
        should_stop: Callable[[], bool] | None = None,
    ) -> None:
        if requests:
            run_async(lambda: self._generate(list(requests), on_sample, should_stop))

    def _groups(self, requests: Sequence[SampleRequest]) -> list[list[SampleRequest]]:
        by_prompt: dict[tuple, list[SampleRequest]] = {}
        for r in requests:
            by_prompt.setdefault((r.system_prompt, r.history, r.prompt, r.params), []).append(r)
        n = self.n_per_request
        return [reqs[i : i + n] for reqs in by_prompt.values() for i in range(0, len(reqs), n)]

    async def _generate(
        self, requests: Sequence[SampleRequest], on_sample: OnSample, should_stop: Callable[[], bool] | None
    ) -> None:
        client = self.settings.client()
        sem = asyncio.Semaphore(self.settings.concurrency)
        fatal: list[BaseException] = []

        async def one(group: list[SampleRequest]) -> None:
            async with sem:
                if fatal or (should_stop is not None and should_stop()):
                    return
                try:
                    samples = await self._complete(client, group, should_stop)
                except StoppedWhileWaiting:
                    return
                except BackendError as exc:
                    fatal.append(exc)
                    return
            # the slot is released: a follow-up below must never wait for its parent
            try:
                for req, sample in zip(group, samples, strict=False):
                    on_sample(req, sample)
            except BackendError as exc:
                fatal.append(exc)
                return
            rest = group[len(samples) :]
            if rest:  # fewer choices than asked (or n refused): the rest one by one
                await asyncio.gather(*(one([r]) for r in rest))

        try:
            await _unless_stopped(asyncio.gather(*(one(g) for g in self._groups(requests))), should_stop)
        finally:
            await client.close()
            if self.replaced[0]:
                log.warning(
                    "warning: %s sent %d character(s) that are not valid Unicode (lone "
                    "surrogates) in %d answer(s); each was stored with U+FFFD in their "
                    "place.",
                    self.settings.host,
                    *self.replaced,
                )
                self.replaced = [0, 0]
            if self.over_max[0]:
                log.warning(
                    "warning: %s reported more completion tokens than max_tokens = %d "
                    "allows in %d answer(s) (up to %d): the server ignores max_tokens, "
                    "so its answers are not the length the spec asked for.",
                    self.settings.host,
                    requests[0].params.max_tokens,
                    *self.over_max,
                )
                self.over_max = [0, 0]
        if fatal:
            raise fatal[0]

    async def _complete(
        self, client: AsyncOpenAI, group: list[SampleRequest], should_stop: Callable[[], bool] | None = None
    ) -> list[Sample]:
        """Samples for ``group`` (one request): at least one, or [] when the server
        refused ``n > 1`` (the caller then asks one by one)."""
        req = group[0]
        kwargs = chat_request_body(self.model, req, n=len(group))

        async def call() -> tuple[Any, ...]:
            data = await self.settings.read_json(
                client.chat.completions.with_streaming_response.create(**kwargs),
                max_tokens=req.params.max_tokens,
                n=len(group),
            )
            return (*parse_chat_answer(data, len(group)), answer_fingerprint(data))

        try:
            texts, pt, ct, model, fingerprint = await self.settings.with_retries(
                call,
                what="chat completion",
                model=self.model,
                should_stop=should_stop,
                on_status=self.on_status,
            )
        except BackendError as exc:
            msg = str(exc)
            if (
                len(group) > 1
                and type(exc) is BackendError
                and ("'n'" in msg or "`n`" in msg or " n " in msg)
            ):
                self.n_per_request = 1  # the server does not support n > 1
                return []
            raise
        self.calls += 1
        self.prompt_tokens += pt
        self.completion_tokens += ct
        texts = [self._valid(t) for t in texts]
        k = len(texts)
        if ct > req.params.max_tokens * k:  # within the byte bound, yet longer than asked
            self.over_max = [self.over_max[0] + 1, max(self.over_max[1], ct // k)]
        return [
            Sample(
                t,
                prompt_tokens=pt // k,
                completion_tokens=ct // k,
                model=clean_text(model, 200) if model else self.model,
                system_fingerprint=fingerprint,
            )
            for t in texts
        ]
