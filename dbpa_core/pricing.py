"""Cost estimates: calls, tokens and dollars, without calling anything.

Prices are US$ per million tokens and only a starting point: they change, so a
spec's ``prices:`` section (or the dashboard's table) overrides them.
"""
from __future__ import annotations

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


def estimate_tokens(text: str) -> int:
    """Rough token count (~4 characters per token for English; no tokenizer needed)."""
    return max(1, (len(text) + 3) // 4)


def price_of(model: str, prices: dict[str, dict[str, float]] | None = None) -> dict[str, float] | None:
    table = {**DEFAULT_PRICES, **(prices or {})}
    return table.get(model)
