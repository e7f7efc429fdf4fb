"""The recording behind the landing page's instant demo (ui/demo.py): what it holds, when it
applies, and that its result is what an audit of the recorded answers gives."""

import json

import numpy as np
import pytest

from dbpa_core.spec import parse_spec
from ui import demo, presets

SETTINGS = {"samples": 20, "temperature": 0.8, "max_tokens": 120, "seed": 0, "permutations": 2000}


def landing_spec(**over):
    d = {
        **SETTINGS,
        "name": "perturbation-test",
        "model": {"backend": "local"},
        "embedder": {"backend": "local"},
        "base": {"prompt": presets.NICE_PROMPT},
        "perturbations": [
            {"name": r["name"], "prefix": r["prefix"]} for r in presets.persona_rows(presets.PERSONAS)
        ],
    }
    d.update(over)
    return parse_spec(d)


@pytest.fixture(scope="module")
def rec():
    r = demo.load_recording()
    assert r is not None
    return r


def test_the_recording_says_what_when_and_how(rec):
    m = rec.meta
    assert m["model"] == "SmolLM2-135M-Instruct" and m["precision"] in ("bfloat16", "float32")
    assert m["embedder"] == "all-MiniLM-L6-v2" and len(m["recorded"]) == 10  # YYYY-MM-DD
    assert (m["samples"], m["temperature"], m["top_p"], m["max_tokens"], m["seed"]) == (20, 0.8, 1.0, 120, 0)
    # the page's defaults are the recorded settings
    from ui.state import DEFAULTS

    assert (
        DEFAULTS["w_samples"],
        DEFAULTS["w_temperature"],
        DEFAULTS["w_max_tokens"],
        DEFAULTS["w_seed"],
    ) == (20, 0.8, 120, 0)
    assert len(rec.vectors) >= 170 and {v.shape for v in rec.vectors.values()} == {(384,)}


def test_the_recorded_result_is_the_audit_of_the_recorded_answers(rec):
    spec = landing_spec()
    r = demo.recorded_result(spec, rec)
    assert r is not None and len(r.perturbations) == 8
    for arm in (r.base, *r.arms):  # sample i is the i-th recorded answer
        assert list(arm.texts) == list(rec.answers[(None, arm.arm.prompt)][:20])
        assert np.array_equal(arm.embeddings, np.stack([rec.vectors[t] for t in arm.texts]))
    assert r.usage["recorded"] == rec.date and r.usage["precision"] == rec.meta["precision"]
    # nothing was asked of a model: the 180 answers are counted as recorded, not as calls
    assert r.usage["calls"] == 0 and r.usage["recorded_answers"] == 180
    assert r.usage["embeddings_computed"] == len(set(t for a in (r.base, *r.arms) for t in a.texts))
    # text similarities need no vectors
    assert demo.recorded_result(landing_spec(embedder={"backend": "rouge1"}), rec) is not None


@pytest.mark.parametrize(
    "over",
    [
        {"samples": 10},
        {"temperature": 1.0},
        {"max_tokens": 64},
        {"seed": 1},
        {"top_p": 0.9},
        {"model": {"backend": "local", "temperature": 1.2}},
        {"model": {"backend": "openai", "name": "gpt-4o-mini"}},
        {"embedder": "a sentence-transformers folder"},
        {"perturbations": [{"name": "pirate", "prefix": "Talk like a pirate."}]},
        {"system_prompt": "Be brief."},
    ],
)
def test_the_recording_does_not_answer_other_inputs(rec, over):
    if over.get("embedder") == "a sentence-transformers folder":
        from dbpa_core.embedders import minilm_path

        over = {"embedder": {"backend": "sentence-transformers", "path": minilm_path()}}
    spec = landing_spec(**over)
    assert not demo.applies(spec, rec)
    assert demo.recorded_result(spec, rec) is None


def test_a_missing_or_broken_recording_means_no_demo(tmp_path):
    assert demo.load_recording(tmp_path / "none.jsonl", demo.EMBEDDINGS) is None
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip")
    assert demo.load_recording(demo.RESPONSES, bad) is None
    # a pickled object array is refused, not unpickled
    obj = tmp_path / "obj.npz"
    np.savez(
        obj,
        texts=np.array([{"x": 1}], dtype=object),
        vectors=np.zeros((1, 3)),
        meta=np.array(json.dumps({"model": "m"})),
    )
    assert demo.load_recording(demo.RESPONSES, obj) is None
