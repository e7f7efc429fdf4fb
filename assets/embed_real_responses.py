"""Record tests/data/real_responses_minilm.npz: the MiniLM embeddings of
``assets/real_responses.jsonl``, one row per line of that file, in its order.

The tests of the default effect size on real responses (``tests/test_real_responses.py``)
read them instead of embedding the 510 responses again (minutes of CPU on a small
machine); one of those tests re-embeds a few responses with the real MiniLM and compares
them with the recorded rows, and the file carries the SHA-256 of the responses it was
made from, so a re-recorded ``real_responses.jsonl`` without new embeddings fails loudly.
The file lives with the tests' data, not in ``assets/`` (whose files the wheel ships).

Arrays: ``embeddings`` (float32, shape (510, 384): all-MiniLM-L6-v2, the ``local``
embedder, unit rows) and ``responses_sha256`` (a 0-d string).

Re-record after ``assets/record_real_responses.py`` (a few minutes)::

    DBPA_CACHE_DIR=/tmp/dbpa-record .venv/bin/python assets/embed_real_responses.py
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

RESPONSES = Path(__file__).with_name("real_responses.jsonl")
EMBEDDINGS = Path(__file__).resolve().parent.parent / "tests" / "data" / "real_responses_minilm.npz"
EMBEDDER = {"backend": "local"}


def responses() -> list[str]:
    """The ``response`` of every line of ``real_responses.jsonl``, in order."""
    lines = RESPONSES.read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["response"] for line in lines]


def responses_sha256(texts: list[str]) -> str:
    """SHA-256 of the responses as JSON (what the embeddings were made from)."""
    return hashlib.sha256(json.dumps(texts, ensure_ascii=False).encode("utf-8")).hexdigest()


def main() -> int:
    from dbpa_core.cache import Cache
    from dbpa_core.sampling import Sampler

    texts = responses()
    emb = Sampler(Cache()).embed(texts, EMBEDDER)
    np.savez_compressed(
        EMBEDDINGS, embeddings=emb.astype(np.float32), responses_sha256=np.array(responses_sha256(texts))
    )
    print(f"{EMBEDDINGS}: {emb.shape[0]} x {emb.shape[1]} embeddings", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
