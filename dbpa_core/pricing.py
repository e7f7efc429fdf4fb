"""Cost estimates: calls, tokens and dollars, without calling anything.

Prices are US$ per million tokens and only a starting point: they change, so a
spec's ``prices:`` section (or the dashboard's table) overrides them.

A prompt's tokens are counted as the model reads them (:func:`prompt_token_counter`):
for a local model (the embedded SmolLM2 or an ``hf`` folder) with its own tokenizer and
chat template, loaded without the weights; for a server, whose tokenizer is not at hand,
at ~4 characters a token plus the chat format's tokens as OpenAI counts them for its
chat models (3 per message and 3 that start the answer).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

DEFAULT_PRICES: dict[str, dict[str, float]] = {
    # chat models: input / output $ per 1M tokens (public list prices, 2025)
    "gpt-4o-mini": {"input": 0.15, "output": 0.60},
    "gpt-4o": {"input": 2.50, "output": 10.00},
    "gpt-4.1": {"input": 2.00, "output": 8.00},
    "gpt-4.1-mini": {"input": 0.40, "output": 1.60},
    "gpt-4.1-nano": {"input": 0.10, "output": 0.40},
    "gpt-3.5-turbo": {"input": 0.50, "output": 1.50},
    # embedding models: input only
    "text-embedding-3-small": {"input": 0.02, "output": 0.0},
    "text-embedding-3-large": {"input": 0.13, "output": 0.0},
    "text-embedding-ada-002": {"input": 0.10, "output": 0.0},
}

# The OpenAI Batch API answers within 24 hours at half the listed price (``dbpa audit --batch``).
BATCH_DISCOUNT = 0.5


CHAT_TOKENS_PER_MESSAGE = 3  # OpenAI's count for each message of a chat request
CHAT_TOKENS_TO_ANSWER = 3  # and for the start of the answer it primes


def estimate_tokens(text: str) -> int:
    """Rough token count (~4 characters per token for English; no tokenizer needed)."""
    return max(1, (len(text) + 3) // 4)


def prompt_token_counter(
    model: Mapping[str, Any] | None = None, *, system_prompt: str | None = None, cache_dir: Any = None
) -> Callable[[str], int]:
    """``count(prompt)``: the input tokens of one request to ``model`` (a spec's model
    section), the system prompt and the chat format included.

    Local models (``local``, ``hf``) count exactly: their tokenizer and chat template,
    loaded without the weights (the embedded model's from its converted folder, looked up
    as the backend does with ``cache_dir``, else from its GGUF file). Others, and a local
    model whose tokenizer cannot be loaded, count ~4 characters a token per message plus
    :data:`CHAT_TOKENS_PER_MESSAGE` each and :data:`CHAT_TOKENS_TO_ANSWER`.
    """
    kind = (model or {}).get("backend", "local")
    if kind in ("local", "hf"):
        try:
            from .backends.base import BackendError
            from .backends.local import chat_prompt_ids, load_tokenizer, smollm2_tokenizer_source
        except ImportError:  # pragma: no cover - the local models' packages are missing
            pass
        else:
            try:
                tok, _ = load_tokenizer(
                    smollm2_tokenizer_source(cache_dir) if kind == "local" else (model or {})["path"]
                )
            except (BackendError, ImportError, KeyError):
                pass
            else:  # each prompt tokenized once, however many samples ask it
                return functools.lru_cache(maxsize=None)(
                    lambda prompt: len(chat_prompt_ids(tok, prompt, system_prompt))
                )
    fixed = CHAT_TOKENS_TO_ANSWER + CHAT_TOKENS_PER_MESSAGE
    if system_prompt:
        fixed += estimate_tokens(system_prompt) + CHAT_TOKENS_PER_MESSAGE
    return lambda prompt: estimate_tokens(prompt) + fixed


def price_of(model: str, prices: dict[str, dict[str, float]] | None = None) -> dict[str, float] | None:
    table = {**DEFAULT_PRICES, **(prices or {})}
    return table.get(model)
