"""LLM backends behind one Protocol: local (embedded SmolLM2), openai, hf, replay."""

from __future__ import annotations

from typing import Any

from .base import (
    AuthError,
    Backend,
    BackendError,
    ContextLengthError,
    GenerationParams,
    ModelNotFoundError,
    PromptTooLongError,
    ResponseTooLargeError,
    Sample,
    SampleRequest,
    ServerUnavailableError,
    sample_seed,
)

BACKENDS = ("local", "openai", "hf", "replay")


def make_backend(config: dict[str, Any], *, cache_dir: str, api_key: str | None = None) -> Backend:
    """Build a backend from a spec's ``model`` section (already validated)."""
    kind = config.get("backend", "local")
    if kind == "local":
        from .local import LocalBackend

        return LocalBackend(cache_dir, batch_size=config.get("batch_size"))
    if kind == "hf":
        from .local import TransformersBackend

        return TransformersBackend(
            config["path"], model_name=config.get("name"), batch_size=config.get("batch_size")
        )
    if kind == "replay":
        from .replay import ReplayBackend

        return ReplayBackend(config["file"], model=config.get("name"))
    if kind == "openai":
        from .openai_compat import OpenAIBackend, OpenAIClientSettings

        settings = OpenAIClientSettings(
            base_url=config.get("base_url"),
            api_key=api_key,
            api_key_env=config.get("api_key_env"),
            concurrency=config.get("concurrency", 8),
            max_retries=config.get("max_retries", 6),
            timeout=config.get("timeout", 60.0),
            max_retry_wait=config.get("max_retry_wait", 60.0),
            max_response_mb=config.get("max_response_mb", 8.0),
        )
        return OpenAIBackend(config["name"], settings, n_per_request=config.get("n_per_request", 1))
    raise BackendError(f"Unknown backend {kind!r}: choose one of {', '.join(BACKENDS)}.")


__all__ = [
    "BACKENDS",
    "AuthError",
    "Backend",
    "BackendError",
    "ContextLengthError",
    "GenerationParams",
    "ModelNotFoundError",
    "PromptTooLongError",
    "ResponseTooLargeError",
    "Sample",
    "SampleRequest",
    "ServerUnavailableError",
    "make_backend",
    "sample_seed",
]
