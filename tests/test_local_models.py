"""The embedded offline models: real generation and real embeddings (slow)."""
from pathlib import Path

import numpy as np
import pytest

from dbpa_core.backends import GenerationParams, SampleRequest
from dbpa_core.backends.local import LocalBackend
from dbpa_core.embedders import LocalEmbedder

# the converted SmolLM2 is kept between test runs (conversion takes ~40 s)
MODEL_CACHE = Path(__file__).resolve().parent.parent / ".cache" / "test-models"

pytestmark = pytest.mark.slow


def test_local_backend_generates_different_reproducible_samples():
    b = LocalBackend(MODEL_CACHE, batch_size=4)
    p = GenerationParams(temperature=0.9, max_tokens=24)
    reqs = [SampleRequest("Name one fruit and say why it is healthy.", i, 100 + i, p)
            for i in range(4)]
    out = {}
    b.generate(reqs, lambda r, s: out.__setitem__(r.index, s))
    texts = [out[i].text for i in range(4)]
    assert all(t.strip() for t in texts)
    assert len(set(texts)) == 4  # independent samples differ
    assert all(0 < out[i].completion_tokens <= 24 for i in range(4))
    # a sample depends on its own seed only, not on its batch mates
    again = {}
    b.generate([reqs[2]], lambda r, s: again.__setitem__(r.index, s))
    assert again[2].text == texts[2]


def test_local_embedder_is_offline_minilm():
    e = LocalEmbedder()
    v = e.embed(["The patient should take statins.", "Statins are advised for the patient.",
                 "Why did the chicken cross the road?", ""])
    assert v.shape == (4, 384)
    v = v / np.linalg.norm(v, axis=1, keepdims=True)
    assert v[0] @ v[1] > v[0] @ v[2] + 0.2
    assert np.isfinite(v).all()


def test_hf_folder_backend_and_sentence_transformers_folder_in_an_audit(tmp_path):
    """The hf backend loads any causal-LM folder (here: the converted SmolLM2), and
    the sentence-transformers embedder any model folder (here: MiniLM's)."""
    from dbpa_core.audit import run_audit
    from dbpa_core.backends.local import converted_smollm2_dir
    from dbpa_core.cache import Cache
    from dbpa_core.embedders import minilm_path
    from dbpa_core.spec import parse_spec

    folder = converted_smollm2_dir(MODEL_CACHE)
    spec = parse_spec({
        "model": {"backend": "hf", "path": str(folder), "name": "smol-from-folder"},
        "embedder": {"backend": "sentence-transformers", "path": minilm_path()},
        "samples": 3, "max_tokens": 12, "permutations": 50, "temperature": 1.0,
        "base": {"prompt": "Say hello."},
        "perturbations": [{"name": "pirate", "prefix": "Talk like a pirate."}]})
    res = run_audit(spec, cache=Cache(tmp_path / "c"))
    assert res.usage["calls"] == 6 and res.base.embeddings.shape == (3, 384)
    assert res.base.arm.model_label == "smol-from-folder"
    assert 0 < res.perturbations[0].p_value <= 1
