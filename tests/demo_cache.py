"""A cache folder that already holds the MiniLM embeddings of every recorded demo answer
(``assets/demo_replay.jsonl``), built once per test session and copied into each test that
would otherwise embed those answers again (a dashboard started with the recording, the CLI
audit of a replay example).

The vectors themselves are recorded once, in ``tests/data/demo_replay_minilm.npz`` (made by
``python -m tests.demo_cache``; it carries the SHA-256 of the texts it was made from, so a
re-recorded demo without new vectors fails loudly), and a test compares a few of them with
what MiniLM computes today (``tests/test_demo_cache.py``). Embedding the 1,203 answers took
half a minute of a quiet machine and many minutes of a busy one, at the start of every
session. They are stored by the project's own :class:`~dbpa_core.sampling.Sampler`, under
the keys a run looks up (embedder and text), so a run on a copy finds them and never loads
the embedder; anything else it needs (samples, texts the recording does not hold) it makes
and stores as usual. A copy, not the folder itself, so that no test sees what another one
added: every test starts from the same cache whatever ran before it.

Under pytest-xdist every worker uses the one folder built by the first worker that gets
there (a file lock around the build); without xdist the session builds its own.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "assets" / "demo_replay.jsonl"
VECTORS = ROOT / "tests" / "data" / "demo_replay_minilm.npz"
EMBEDDER = {"backend": "local"}
DONE = "complete"  # written last: a folder without it is a build that did not finish


def demo_texts(path: Path = DEMO) -> list[str]:
    """Every recorded answer, as the replay backend hands it out (invalid Unicode
    replaced), once each, in file order."""
    from dbpa_core.backends.replay import load_replay_file

    texts: dict[str, None] = {}
    for answers in load_replay_file(path).values():
        texts.update(dict.fromkeys(answers))
    return list(texts)


def texts_sha256(texts: Sequence[str]) -> str:
    """SHA-256 of the texts as JSON (what the recorded vectors were made from)."""
    return hashlib.sha256(json.dumps(list(texts), ensure_ascii=False).encode("utf-8")).hexdigest()


def recorded_vectors(texts: Sequence[str]) -> np.ndarray:
    """The recorded MiniLM vectors of ``texts`` (:func:`demo_texts`), one row each."""
    with np.load(VECTORS) as f:
        vectors, sha = f["embeddings"], str(f["texts_sha256"])
    if sha != texts_sha256(texts):
        raise RuntimeError(
            f"{DEMO.name} changed after its embeddings were recorded: run `python -m tests.demo_cache` "
            f"to record {VECTORS.relative_to(ROOT)} again"
        )
    return vectors


class RecordedEmbedder:
    """The local embedder's vectors of the recorded answers, read from :data:`VECTORS`
    (no model is loaded); any other text is an error."""

    name = "all-MiniLM-L6-v2 (recorded)"

    def __init__(self, texts: Sequence[str]):
        self.rows = {t: i for i, t in enumerate(texts)}
        self.vectors = recorded_vectors(texts)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self.vectors[[self.rows[t] for t in texts]]


def build(directory: Path) -> Path:
    """Fill the cache folder ``directory`` (a ``--cache-dir``) with the local embedder's
    recorded vectors of :func:`demo_texts`; returns it. Does nothing when it is complete
    already."""
    from dbpa_core.cache import Cache
    from dbpa_core.sampling import Sampler, model_key

    if (directory / DONE).is_file():
        return directory
    shutil.rmtree(directory, ignore_errors=True)
    texts = demo_texts()
    cache = Cache(directory)
    try:
        Sampler(cache, embedders={model_key(EMBEDDER): RecordedEmbedder(texts)}).embed(texts, EMBEDDER)
    finally:
        cache.close()  # the database closed (its journal folded in) before anyone copies it
    (directory / DONE).write_text(json.dumps({"texts": len(texts)}))
    return directory


def shared_root(basetemp: Path) -> Path:
    """The folder all workers of this session share: the session's temporary root, which
    is the parent of a worker's own under xdist (never the parent of a plain session's: that
    one is shared with other sessions of the same user)."""
    return basetemp.parent if os.environ.get("PYTEST_XDIST_WORKER") else basetemp


def build_shared(basetemp: Path) -> Path:
    """:func:`build` in :func:`shared_root`, one worker at a time."""
    root = shared_root(basetemp)
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "demo-cache.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return build(root / "demo-cache")
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def copy_to(source: Path, cache_dir: Path) -> Path:
    """A copy of the cache folder ``source`` at ``cache_dir`` (which must not exist yet)."""
    shutil.copytree(source, cache_dir, ignore=shutil.ignore_patterns(DONE))
    with contextlib.suppress(OSError):
        (cache_dir / DONE).unlink()
    return cache_dir


def record() -> int:
    """Embed :func:`demo_texts` with the real local embedder and write :data:`VECTORS`."""
    from dbpa_core.cache import Cache
    from dbpa_core.sampling import Sampler

    texts = demo_texts()
    vectors = Sampler(Cache(enabled=False)).embed(texts, EMBEDDER)
    np.savez_compressed(
        VECTORS, embeddings=vectors.astype(np.float32), texts_sha256=np.array(texts_sha256(texts))
    )
    print(f"{VECTORS}: {vectors.shape[0]} x {vectors.shape[1]} embeddings", file=sys.stderr)
    return 0


if __name__ == "__main__":  # python -m tests.demo_cache (after a new assets/demo_replay.jsonl)
    raise SystemExit(record())
