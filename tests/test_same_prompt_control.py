"""A same-prompt control (a perturbation whose prompt equals the base's) draws its own
answers, so it can fail: its p-value is about uniform over seeds, never a fixed 1."""

import json
import textwrap

import numpy as np
import pytest

from dbpa_core.audit import build_arms, run_audit
from dbpa_core.backends import BackendError
from dbpa_core.cache import Cache
from dbpa_core.runs import estimate
from dbpa_core.spec import parse_spec

from .word_model import BASE, BagOfWords, noisy_model


def spec(
    seed=0,
    samples=8,
    permutations=199,
    model="{backend: openai, name: noisy, base_url: 'http://127.0.0.1:9/v1'}",
    extra="",
):
    return parse_spec(
        textwrap.dedent(f"""\
        model: {model}
        embedder: {{backend: openai, name: bow, base_url: 'http://127.0.0.1:9/v1'}}
        samples: {samples}
        permutations: {permutations}
        seed: {seed}
        measure: energy-cosine
        base: {{prompt: "{BASE}"}}
        perturbations:
          - {{name: same, prompt: "{BASE}", role: control}}
          - {{name: same-again, prompt: "{BASE}", role: control}}
          - {{name: comedian, prefix: "Act as a comedian.", role: target}}
        {extra}"""),
        source="test",
        allow_key_env=True,
    )


def test_each_arm_of_one_prompt_draws_its_own_samples(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "x")
    s = spec()
    arms = build_arms(s)
    assert [a.first_sample for a in arms] == [0, 8, 16, 0]
    model = noisy_model()
    r = run_audit(s, cache=Cache(enabled=False), backends={0: model}, embedder=BagOfWords())
    base, same, again = r.responses("base"), r.responses("same"), r.responses("same-again")
    # 24 different draws of one prompt, none served twice
    assert len({q.index for q in model.asked if q.prompt == BASE}) == 24
    assert not set(base) & set(same) and not set(same) & set(again)
    p = {x.name: x for x in r.perturbations}
    assert p["same"].effect_size > 0 and p["same"].p_value < 1.0
    # the responses file names each answer's own sample index
    rows = [json.loads(x) for x in r.responses_jsonl().splitlines()]
    assert [x["index"] for x in rows if x["arm"] == "same"] == list(range(8, 16))
    # the estimate counts the control's own calls
    assert estimate(s)["totals"]["calls"] == 32
    from dbpa_core.sensitivity import SensitivityConfig, parse_measures, plan

    assert plan(s, SensitivityConfig(measures=parse_measures("jsd")))["calls"] == 32


def test_same_prompt_control_is_calibrated_over_seeds(monkeypatch):
    """Under the null (the same prompt, fresh draws) p is about uniform: a control that
    reused the base's answers had p = 1 every time."""
    monkeypatch.setenv("OPENAI_API_KEY", "x")
    ps = []
    for seed in range(60):
        s = spec(seed=seed, samples=6, permutations=99)
        r = run_audit(s, cache=Cache(enabled=False), backends={0: noisy_model()}, embedder=BagOfWords())
        ps += [x.p_value for x in r.perturbations if x.role == "control"]
    ps = np.array(ps)
    assert len(ps) == 120
    assert 0.38 < ps.mean() < 0.62  # uniform: 0.5
    assert 0.02 <= (ps <= 0.1).mean() <= 0.2  # uniform: 0.1
    assert (ps >= 0.99).mean() < 0.1  # never stuck at 1
    from scipy.stats import kstest

    assert kstest(ps, "uniform").pvalue > 0.001


def test_a_replay_file_serves_the_next_recorded_answers(tmp_path, monkeypatch):
    path = tmp_path / "rec.jsonl"

    def record(n):
        with open(path, "w") as fh:
            for i in range(n):
                fh.write(json.dumps({"prompt": BASE, "response": f"answer {i}"}) + "\n")
            for i in range(8):
                fh.write(
                    json.dumps({"prompt": "Act as a comedian.\n\n" + BASE, "response": f"joke {i}"}) + "\n"
                )

    record(6)
    one_control = parse_spec(
        textwrap.dedent(f"""\
        model: {{backend: replay, file: '{path}'}}
        embedder: {{backend: openai, name: bow, base_url: 'http://127.0.0.1:9/v1'}}
        samples: 4
        permutations: 99
        base: {{prompt: "{BASE}"}}
        perturbations:
          - {{name: same, prompt: "{BASE}", role: control}}
        """),
        source="test",
        allow_key_env=True,
    )
    with pytest.raises(BackendError) as err:
        run_audit(one_control, cache=Cache(tmp_path / "c"), embedder=BagOfWords())
    msg = str(err.value)
    assert "6 recorded responses" in msg and "8 samples were asked for" in msg
    assert "'base', 'same' ask this same prompt" in msg and "answers of its own" in msg
    record(8)
    r = run_audit(one_control, cache=Cache(tmp_path / "c2"), embedder=BagOfWords())
    base, same = r.responses("base"), r.responses("same")
    assert sorted(base + same) == sorted(f"answer {i}" for i in range(8))


def test_a_same_prompt_control_is_a_note_not_a_warning():
    from dbpa_core.spec import spec_notes, spec_warnings

    s = spec()  # 'same' and 'same-again' are marked control
    assert not any("same prompt" in w for w in spec_warnings(s))
    assert any("Control 'same' asks the base prompt again" in n for n in spec_notes(s))
    unmarked = spec(extra='  - {name: copy, prompt: "' + BASE + '"}')
    assert any("'copy' has the same prompt as the base" in w for w in spec_warnings(unmarked))
