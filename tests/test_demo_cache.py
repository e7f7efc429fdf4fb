"""The session's demo cache (tests/demo_cache.py): its recorded vectors are MiniLM's, and a
run on a copy of it never loads the embedder."""

import numpy as np
import pytest

from . import demo_cache


def test_a_cache_built_from_the_recording_serves_every_answer_without_the_embedder(tmp_path, monkeypatch):
    from dbpa_core import sampling
    from dbpa_core.cache import Cache

    built = demo_cache.build(tmp_path / "built")
    copy = demo_cache.copy_to(built, tmp_path / "copy")

    def refuse(*a, **k):
        raise AssertionError("the embedder was loaded")

    monkeypatch.setattr(sampling, "make_embedder", refuse)
    texts = demo_cache.demo_texts()
    cache = Cache(copy)
    try:
        s = sampling.Sampler(cache)
        got = s.embed(texts[::50], demo_cache.EMBEDDER)
    finally:
        cache.close()
    assert s.usage["embeddings_cached"] == len(texts[::50]) and s.usage["embeddings_computed"] == 0
    np.testing.assert_array_equal(got, demo_cache.recorded_vectors(texts)[::50])


def test_a_changed_recording_without_new_vectors_fails_loudly():
    texts = demo_cache.demo_texts()
    with pytest.raises(RuntimeError, match=r"python -m tests\.demo_cache"):
        demo_cache.recorded_vectors([*texts, "an answer recorded later"])


@pytest.mark.slow
def test_the_recorded_vectors_are_what_minilm_computes(tmp_path):
    from dbpa_core.cache import Cache
    from dbpa_core.sampling import Sampler

    texts = demo_cache.demo_texts()
    picks = [0, 1, len(texts) // 2, len(texts) - 1]
    again = Sampler(Cache(tmp_path)).embed([texts[i] for i in picks], demo_cache.EMBEDDER)
    np.testing.assert_allclose(again, demo_cache.recorded_vectors(texts)[picks], atol=1e-4)
