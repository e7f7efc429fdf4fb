"""The on-disk cache of raw material: LLM samples and embeddings (the only module
that touches ``diskcache``).

A sample is stored under a hash of everything that determines it — backend,
model, server host, system prompt, prompt, generation parameters, sample index
and seed — so samples stay independent, k = 30 after k = 20 draws only 10 new
ones, and an interrupted run resumes without repeating a call. Embeddings are
keyed by embedder and text. API keys are never part of a key or a value.
Statistics are not cached: they are cheap to recompute.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

DEFAULT_SIZE_LIMIT = 2 * 1024**3  # 2 GiB


def default_cache_dir() -> Path:
    """``$DBPA_CACHE_DIR`` or the per-user cache folder."""
    env = os.environ.get("DBPA_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("dbpa"))


def make_key(kind: str, fields: dict[str, Any]) -> str:
    """A stable key: ``kind`` plus a SHA-256 of the canonical JSON of ``fields``."""
    blob = json.dumps(fields, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return f"{kind}:{hashlib.sha256(blob.encode()).hexdigest()}"


class Cache:
    """A disk cache under ``directory/store`` (the folder also holds converted models)."""

    def __init__(self, directory: str | os.PathLike | None = None, *,
                 size_limit: int = DEFAULT_SIZE_LIMIT, enabled: bool = True):
        self.directory = Path(directory) if directory else default_cache_dir()
        self.enabled = enabled
        self.size_limit = size_limit
        self._store = None

    @property
    def store(self):
        if self._store is None:
            import diskcache

            self.directory.mkdir(parents=True, exist_ok=True)
            self._store = diskcache.Cache(str(self.directory / "store"),
                                          size_limit=self.size_limit, eviction_policy="least-recently-used")
        return self._store

    def get(self, key: str) -> Any:
        if not self.enabled:
            return None
        return self.store.get(key)

    def set(self, key: str, value: Any) -> None:
        if self.enabled:
            self.store.set(key, value)

    def __contains__(self, key: str) -> bool:
        return self.enabled and key in self.store

    def volume(self) -> int:
        """Bytes on disk used by the store."""
        if not (self.directory / "store").exists():
            return 0
        return int(self.store.volume())

    def count(self) -> int:
        if not (self.directory / "store").exists():
            return 0
        return len(self.store)

    def clear(self) -> int:
        """Remove every cached sample and embedding; returns how many were removed."""
        if not (self.directory / "store").exists():
            return 0
        return int(self.store.clear())

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None
