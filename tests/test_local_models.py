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


FRUIT = "Name one fruit and say why it is healthy."
NICE = (
    "John has these features: Age: 70, Sex: male, Total cholesterol: 6.2 mmol/L, "
    "HDL cholesterol: 1.1 mmol/L, Systolic blood pressure: 150 mmHg, Smoker: yes, "
    "Diabetes: no. Provide recommendations on CVD guidelines based on NICE for this person."
)


def _generate(backend, reqs, **kw):
    out = {}
    backend.generate(reqs, lambda r, s: out.__setitem__(r, s), **kw)
    return out


def test_local_backend_generates_different_reproducible_samples():
    b = LocalBackend(MODEL_CACHE, batch_size=4)
    p = GenerationParams(temperature=0.9, max_tokens=12)
    reqs = [SampleRequest(FRUIT, i, 100 + i, p) for i in range(4)]
    out = _generate(b, reqs)
    texts = [out[r].text for r in reqs]
    assert all(t.strip() for t in texts)
    assert len(set(texts)) == 4  # independent samples differ
    assert all(0 < out[r].completion_tokens <= 12 for r in reqs)
    assert {out[r].extra["precision"] for r in reqs} == {b.precision}
    # the same seeds give the same samples
    assert [_generate(b, reqs)[r].text for r in reqs] == texts


def test_a_sample_is_the_same_alone_and_in_a_batch_with_other_prompts():
    """Sample i depends on its own seed only: drawn alone, or among samples of three other
    prompts (longer and shorter, other temperatures) in a batch whose rows keep changing
    as samples finish and others join, it has the same tokens — word for word."""
    # 10 samples in 4 rows: the short hot ones end first and others take their rows
    b = LocalBackend(MODEL_CACHE, batch_size=4)
    p = GenerationParams(temperature=0.8, max_tokens=12)
    hot = GenerationParams(temperature=1.3, max_tokens=5)
    reqs = (
        [SampleRequest(FRUIT, i, 100 + i, p) for i in range(2)]
        + [SampleRequest(NICE, i, 200 + i, p) for i in range(3)]
        + [SampleRequest("Say hi.", i, 300 + i, hot) for i in range(3)]
        + [SampleRequest("Act as a comedian. " + NICE, i, 400 + i, p, "Be brief.") for i in range(2)]
    )
    together = _generate(b, reqs)
    assert b.last_stats.samples == len(reqs) and b.last_stats.prompts == 4
    assert len({s.text for s in together.values()}) == len(reqs)
    for r in (reqs[1], reqs[3], reqs[6], reqs[9]):  # one of each prompt
        alone = _generate(LocalBackend(MODEL_CACHE), [r])[r]
        assert (alone.text, alone.completion_tokens) == (together[r].text, together[r].completion_tokens), r


def test_stop_returns_within_a_step_and_hands_over_the_finished_samples():

    b = LocalBackend(MODEL_CACHE)
    b.prepare()
    p = GenerationParams(temperature=0.8, max_tokens=200)
    short = GenerationParams(temperature=0.8, max_tokens=3)
    reqs = [SampleRequest(NICE, i, 500 + i, short) for i in range(4)] + [
        SampleRequest(NICE, i, 600 + i, p) for i in range(4, 20)
    ]
    got, asked, drawn = {}, {}, [0]
    b.on_tokens = lambda tokens, _total: drawn.append(tokens)

    def should_stop():
        if len(got) >= 4:
            asked.setdefault("tokens", drawn[-1])
            return True
        return False

    b.generate(reqs, lambda r, s: got.__setitem__(r, s), should_stop=should_stop)
    # tokens drawn after Stop was asked: at most the step the last report lagged by (one
    # token per live sample), not the 16 long answers' 3,200
    assert b.last_stats.tokens - asked["tokens"] <= len(reqs), (b.last_stats.tokens, asked)
    assert set(got) == set(reqs[:4]) and b.last_stats.stopped


def test_audit_progress_counts_tokens_and_records_the_precision(tmp_path):
    from dbpa_core.audit import run_audit
    from dbpa_core.backends.decoding import local_precision
    from dbpa_core.cache import Cache
    from dbpa_core.spec import parse_spec

    seen = []
    spec = parse_spec(
        {
            "samples": 3,
            "max_tokens": 12,
            "permutations": 50,
            "embedder": {"backend": "rouge1"},
            "base": {"prompt": "Say hello."},
            "perturbations": [{"name": "pirate", "prefix": "Talk like a pirate."}],
        }
    )
    res = run_audit(spec, cache=Cache(tmp_path / "c"), progress=seen.append)
    assert res.usage["precision"] == local_precision()
    assert '"precision"' in res.to_json()
    ticks = [p for p in seen if p.stage == "sampling" and p.tokens]
    assert ticks and all(p.tokens_expected >= p.tokens for p in ticks)
    assert ticks[-1].tokens == res.usage["completion_tokens"]


def test_the_recorded_demo_is_what_the_local_backend_draws():
    """The landing page's recorded answers (assets/demo_replay.jsonl) are this backend's:
    on a CPU with the recording's precision and kind of matrix kernels, sampling them again
    gives them word for word."""
    import json

    import numpy as np

    from dbpa_core.backends.decoding import cpu_kernels, local_precision
    from dbpa_core.sampling import requests_for
    from ui import presets

    root = Path(__file__).resolve().parent.parent
    with np.load(root / "assets" / "demo_landing.npz", allow_pickle=False) as f:
        meta = json.loads(str(f["meta"]))
    if meta["precision"] != local_precision():
        pytest.skip(f"recorded in {meta['precision']}, this CPU samples in {local_precision()}")
    # the recording of 2026-11-23 predates the field: it was made with AVX-512 BF16, no AMX
    recorded_on = meta.get("kernels", "avx512_bf16")
    if recorded_on != cpu_kernels():
        pytest.skip(
            f"recorded with {recorded_on} kernels; this CPU's ({cpu_kernels()}) round "
            "a product differently, so the same seeds draw other words"
        )
    recorded = [
        json.loads(line)["response"]
        for line in open(root / "assets" / "demo_replay.jsonl", encoding="utf-8")
        if json.loads(line)["prompt"] == presets.NICE_PROMPT and json.loads(line)["model"] == meta["model"]
    ]
    params = GenerationParams(
        temperature=meta["temperature"], top_p=meta["top_p"], max_tokens=meta["max_tokens"]
    )
    reqs = requests_for(presets.NICE_PROMPT, n=2, seed=meta["seed"], params=params)
    out = _generate(LocalBackend(MODEL_CACHE), reqs)
    assert [out[r].text for r in reqs] == recorded[:2]


def test_the_converted_model_is_looked_up_in_the_environment_first(tmp_path):
    from dbpa_core.backends.local import converted_smollm2_dir, installed_smollm2_dir

    if not (installed_smollm2_dir() / "model.safetensors").is_file():
        pytest.skip("make venv has not converted the model into this environment")
    assert converted_smollm2_dir(tmp_path / "empty-cache") == installed_smollm2_dir()
    assert not (tmp_path / "empty-cache").exists()


def test_local_embedder_is_offline_minilm():
    e = LocalEmbedder()
    v = e.embed(
        [
            "The patient should take statins.",
            "Statins are advised for the patient.",
            "Why did the chicken cross the road?",
            "",
        ]
    )
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
    spec = parse_spec(
        {
            "model": {"backend": "hf", "path": str(folder), "name": "smol-from-folder"},
            "embedder": {"backend": "sentence-transformers", "path": minilm_path()},
            "samples": 3,
            "max_tokens": 12,
            "permutations": 50,
            "temperature": 1.0,
            "base": {"prompt": "Say hello."},
            "perturbations": [{"name": "pirate", "prefix": "Talk like a pirate."}],
        }
    )
    res = run_audit(spec, cache=Cache(tmp_path / "c"))
    assert res.usage["calls"] == 6 and res.base.embeddings.shape == (3, 384)
    assert res.base.arm.model_label == "smol-from-folder"
    assert 0 < res.perturbations[0].p_value <= 1
