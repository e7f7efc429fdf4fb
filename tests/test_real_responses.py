"""The default ω on the shipped real responses (assets/real_responses.jsonl, SmolLM2
answers embedded with MiniLM): at least as powerful as the papers' jsd, calibrated,
and its effect above chance averages 0 under the null at k = 5, 10, 20.

The embeddings are the recorded ones (tests/data/real_responses_minilm.npz, made by
assets/embed_real_responses.py: embedding all 510 answers takes minutes of CPU); one test
re-embeds a few answers with the real offline MiniLM and compares. Slow: that test loads
MiniLM, the others run many permutation tests.
"""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from dbpa_core import DEFAULT_MEASURE, dbpa_test

pytestmark = pytest.mark.slow
ASSETS = Path(__file__).resolve().parent.parent / "assets"
RESPONSES = ASSETS / "real_responses.jsonl"


def _recorder():
    """assets/embed_real_responses.py, which wrote the recorded embeddings."""
    spec = importlib.util.spec_from_file_location("embed_real_responses", ASSETS / "embed_real_responses.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def recorded():
    rec = _recorder()
    with np.load(rec.EMBEDDINGS) as f:
        emb, sha = f["embeddings"], str(f["responses_sha256"])
    texts = rec.responses()
    assert sha == rec.responses_sha256(texts), (
        "assets/real_responses.jsonl changed after its embeddings were recorded: run "
        "assets/embed_real_responses.py"
    )
    return texts, emb


def test_the_recorded_embeddings_are_minilms(recorded, tmp_path):
    from dbpa_core.cache import Cache
    from dbpa_core.sampling import Sampler

    texts, emb = recorded
    assert emb.shape == (len(texts), 384) and emb.dtype == np.float32
    roles = [json.loads(line)["role"] for line in RESPONSES.read_text(encoding="utf-8").splitlines()]
    picks = sorted({role: i for i, role in reversed(list(enumerate(roles)))}.values())  # one of each
    picks.append(len(texts) - 1)
    again = Sampler(Cache(tmp_path)).embed([texts[i] for i in picks], _recorder().EMBEDDER)
    np.testing.assert_allclose(again, emb[picks], atol=1e-4)


@pytest.fixture(scope="module")
def arms(recorded):
    _texts, emb = recorded
    rows = [json.loads(line) for line in RESPONSES.read_text(encoding="utf-8").splitlines()]
    out: dict[str, dict] = {}
    for r, v in zip(rows, emb.astype(np.float64), strict=True):
        a = out.setdefault(r["arm"], {"role": r["role"], "emb": []})
        a["emb"].append(v)
    for a in out.values():
        a["emb"] = np.asarray(a["emb"])
    return out


def test_the_recording_is_complete_and_documented(arms):
    roles = {a["role"] for a in arms.values()}
    assert roles == {"base", "persona", "near-null", "off-topic"}
    assert sum(a["role"] == "persona" for a in arms.values()) == 8
    assert arms["base"]["emb"].shape[0] >= 60
    assert all(a["emb"].shape[0] >= 40 for a in arms.values() if a["role"] != "off-topic")
    first = json.loads(RESPONSES.read_text(encoding="utf-8").splitlines()[0])
    assert first["model"] == "SmolLM2-135M-Instruct" and first["max_tokens"] == 100


def test_default_is_at_least_as_powerful_as_jsd(arms):
    """Paired: the same draws of k = 10 base and persona responses for both measures."""
    gen = np.random.default_rng(8)
    base = arms["base"]["emb"]
    hits = {DEFAULT_MEASURE: 0, "jsd": 0}
    n = 0
    for a in arms.values():
        if a["role"] != "persona":
            continue
        for _ in range(8):
            x = base[gen.choice(base.shape[0], 10, replace=False)]
            y = a["emb"][gen.choice(a["emb"].shape[0], 10, replace=False)]
            seed = int(gen.integers(2**32))
            for m in hits:
                hits[m] += dbpa_test(x, y, measure=m, n_permutations=499, rng=seed).p_value <= 0.05
            n += 1
    assert hits[DEFAULT_MEASURE] >= hits["jsd"], hits
    assert hits[DEFAULT_MEASURE] / n >= 0.5, hits


@pytest.mark.parametrize("k", [5, 10, 20])
def test_default_is_calibrated_and_centred_above_chance(arms, k):
    """Two disjoint groups of responses to one prompt: a true null."""
    gen = np.random.default_rng(k)
    pvals, above = [], []
    for a in arms.values():
        if a["role"] == "off-topic":
            continue
        for _ in range(12):
            z = a["emb"][gen.choice(a["emb"].shape[0], 2 * k, replace=False)]
            r = dbpa_test(z[:k], z[k:], n_permutations=199, rng=gen)
            pvals.append(r.p_value)
            above.append(r.effect_above_chance)
    pvals, above = np.asarray(pvals), np.asarray(above)
    lo, hi = stats.binom.ppf([0.0005, 0.9995], pvals.size, 0.05)
    assert lo <= np.sum(pvals <= 0.05) <= hi
    assert abs(above.mean()) <= 4 * above.std(ddof=1) / np.sqrt(above.size)
