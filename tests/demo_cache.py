"""A cache folder that already holds the MiniLM embeddings of every recorded demo answer
(``assets/demo_replay.jsonl``), built once per test session and copied into each test that
would otherwise embed those answers again (a dashboard started with the recording, the CLI
audit of a replay example).

The embeddings are stored by the project's own :class:`~dbpa_core.sampling.Sampler`, under
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
import json
import os
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "assets" / "demo_replay.jsonl"
DONE = "complete"  # written last: a folder without it is a build that did not finish


def demo_texts(path: Path = DEMO) -> list[str]:
    """Every recorded answer, as the replay backend hands it out (invalid Unicode
    replaced), once each, in file order."""
    from dbpa_core.backends.replay import load_replay_file

    texts: dict[str, None] = {}
    for answers in load_replay_file(path).values():
        texts.update(dict.fromkeys(answers))
    return list(texts)


def build(directory: Path) -> Path:
    """Fill the cache folder ``directory`` (a ``--cache-dir``) with the local embedder's
    vectors of :func:`demo_texts`; returns it. Does nothing when it is complete already."""
    from dbpa_core.cache import Cache
    from dbpa_core.sampling import Sampler

    if (directory / DONE).is_file():
        return directory
    shutil.rmtree(directory, ignore_errors=True)
    cache = Cache(directory)
    try:
        Sampler(cache).embed(demo_texts(), {"backend": "local"})
    finally:
        cache.close()  # the database closed (its journal folded in) before anyone copies it
    (directory / DONE).write_text(json.dumps({"texts": len(demo_texts())}))
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
