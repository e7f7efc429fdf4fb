"""The LLM backend Protocol and what travels through it."""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ..resources import MissingExtraError


class BackendError(RuntimeError):
    """A backend could not produce a sample; the message says what to do."""


class MissingLocalPartError(BackendError, MissingExtraError):
    """The embedded model or embedder cannot run here: the `local` extra's packages or the
    model's weights are not installed. The message names ``dbpa setup local``; the command
    line exits with :data:`~dbpa_core.resources.EXIT_MISSING_PART`, the dashboard shows it
    as it is."""


class AuthError(BackendError):
    """The server rejected the API key (401/403)."""


class ModelNotFoundError(BackendError):
    """The server does not know the model (404)."""


class PromptTooLongError(BackendError):
    """The prompt does not fit the model's context (400)."""


class ContextLengthError(PromptTooLongError, ValueError):
    """A prompt and its ``max_tokens`` do not fit a local model's context: a mistake in the
    input (exit code 2, as a spec mistake), found before the weights are loaded."""


class ServerUnavailableError(BackendError):
    """The server could not be reached, timed out, or kept failing (or sending
    malformed answers) after all retries."""


class ResponseTooLargeError(BackendError):
    """The server's answer was larger than the configured cap (not retried)."""


# CSI (ESC [ ... final), OSC (ESC ] ... BEL or ESC \\) and two-character escapes
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\\\)?|\x1b[@-_]?")


def clean_text(text: object, limit: int = 300) -> str:
    """``text`` safe to print on a terminal: terminal escapes and control or format
    characters (C0, C1, bidi overrides) removed, whitespace runs collapsed to one
    space, cut to ``limit`` characters. For anything a server (or a file) says."""
    s = _ANSI.sub("", str(text))
    s = "".join(
        " " if c in "\t\n\r\v\f" else c
        for c in s
        if c in "\t\n\r\v\f" or unicodedata.category(c) not in ("Cc", "Cf", "Cs", "Co")
    )
    s = " ".join(s.split())
    return s if len(s) <= limit else s[: limit - 1] + "…"


# the user:password@ part: after an optional scheme and the slashes that follow it, up to
# the last "@" before the path, query or fragment
_USERINFO = re.compile(r"^((?:[A-Za-z][A-Za-z0-9+.-]*:)?/+)?[^/?#\s]*@")


def redact_url(url: object) -> str:
    """``url`` without a ``user:password@`` part (which must never be echoed), also when
    the text is not a well-formed URL (``user:key@host:8000`` with no scheme, one slash
    after it); text that urllib cannot split at all is not echoed."""
    from urllib.parse import urlsplit

    text = str(url)
    try:
        urlsplit(text)
    except ValueError:
        return "<invalid URL>"
    return _USERINFO.sub(lambda m: (m.group(1) or "") + "***@", text, count=1)


@dataclass(frozen=True)
class GenerationParams:
    """Everything besides the prompt that determines a sample's distribution."""

    temperature: float = 0.8
    top_p: float = 1.0
    max_tokens: int = 300

    def as_dict(self) -> dict[str, Any]:
        return {"temperature": self.temperature, "top_p": self.top_p, "max_tokens": self.max_tokens}


@dataclass(frozen=True)
class SampleRequest:
    """The ``index``-th independent sample for one (system prompt, prompt).

    ``history`` holds the ``(role, text)`` turns of a chat before ``prompt`` (the last
    user turn), for prompts sent in several turns; empty for a one-turn prompt.
    """

    prompt: str
    index: int
    seed: int
    params: GenerationParams
    system_prompt: str | None = None
    history: tuple[tuple[str, str], ...] = ()


def chat_messages(req: SampleRequest) -> list[dict[str, str]]:
    """The chat messages of ``req``: its system prompt, its earlier turns, its prompt."""
    msgs = [{"role": "system", "content": req.system_prompt}] if req.system_prompt else []
    msgs += [{"role": role, "content": text} for role, text in req.history]
    msgs.append({"role": "user", "content": req.prompt})
    return msgs


@dataclass(frozen=True)
class Sample:
    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    model: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    # what the server said answered: its build of the model (OpenAI's ``system_fingerprint``)
    system_fingerprint: str = ""


OnSample = Callable[[SampleRequest, Sample], None]


@runtime_checkable
class Backend(Protocol):
    """Turns prompts into sampled responses.

    Cache keys do not come from the backend object: :mod:`dbpa_core.audit` derives
    them from the model's config (backend, model, host or file) so that a cached
    run needs no backend at all.

    ``generate`` calls ``on_sample`` as soon as each sample exists (so the
    caller can cache it: an interrupted run loses nothing already received)
    and raises :class:`BackendError` for what it cannot recover from.
    """

    name: str
    model: str
    deterministic: bool

    def generate(
        self,
        requests: Sequence[SampleRequest],
        on_sample: OnSample,
        *,
        should_stop: Callable[[], bool] | None = None,
    ) -> None: ...


def sample_seed(seed: int, prompt: str, system_prompt: str | None, index: int) -> int:
    """A 63-bit seed of one sample, derived from the audit seed and the request."""
    h = hashlib.sha256(f"{seed}\x1f{system_prompt or ''}\x1f{prompt}\x1f{index}".encode())
    return int.from_bytes(h.digest()[:8], "big") >> 1
