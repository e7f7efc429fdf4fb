"""Spec mistakes are rejected before any call, with the line that is wrong."""

import textwrap

import pytest

from dbpa_core.spec import SpecError, load_spec, parse_spec

GOOD = textwrap.dedent("""\
    model:
      backend: local
    samples: 5
    base:
      prompt: "John is 70."
    perturbations:
      - {name: comedian, prefix: "Act as a comedian.", role: target}
      - {name: ahmed, prompt: "Ahmed is 70.", role: control}
      - {name: terse, system_prompt: "Answer in one word."}
""")


def test_good_spec():
    s = parse_spec(GOOD)
    assert s.samples == 5 and s.measure == "energy-l2" and s.correction == "holm"
    assert s.null == "base" and s.min_effect is None
    assert [p.name for p in s.perturbations] == ["comedian", "ahmed", "terse"]
    assert s.perturbations[0].prompt == "Act as a comedian. John is 70."
    assert s.perturbations[2].prompt == "John is 70." and s.perturbations[2].system_prompt
    assert s.mode == "perturbation"


@pytest.mark.parametrize(
    "old,new,match",
    [
        (
            "samples: 5",
            "samples: 5\ntemprature: 0.5",
            r"line 4: unknown key 'temprature' in the spec \(did you mean 'temperature'\?\)",
        ),
        ("samples: 5", "samples: 1", r"line 3: samples must be >= 2, got 1"),
        ("samples: 5", "samples: five", r"line 3: samples must be a whole number"),
        ('  prompt: "John is 70."', "  system_prompt: x", r"line 4: missing base.prompt"),
        ("role: target", "role: targett", r"line 7: perturbations\[0\].role must be one of control, target"),
        ("backend: local", "backend: anthropic", r"line 2: model.backend must be one of"),
        (
            "backend: local",
            "backend: replay\n  file: nowhere.jsonl",
            r"line 3: replay file 'nowhere.jsonl' does not exist",
        ),
        ("backend: local", "backend: hf\n  path: /no/such/folder", r"line 3: Hugging Face model folder"),
        ("backend: local", "backend: openai", r"line 1: missing model.name"),
        (
            '{name: ahmed, prompt: "Ahmed is 70.", role: control}',
            "{name: ahmed, role: control}",
            r"line 8: perturbation 'ahmed' has no prompt",
        ),
        ("{name: ahmed,", "{name: comedian,", r"line 8: perturbation name 'comedian' is used twice"),
        ("samples: 5", "samples: 5\nmeasure: cosine", r"line 4: measure must be one of energy-l2"),
        ("samples: 5", "samples: 5\nnull: both", r"line 4: null must be one of base, pooled"),
        ("samples: 5", "samples: 5\nmin_effect: -0.1", r"line 4: min_effect must be >= 0.0"),
        ("samples: 5", "samples: 5\nmin_effect: big", r"line 4: min_effect must be a number"),
        (
            "backend: local",
            "backend: local\nembedder: {backend: bleu}\nmeasure: energy-l1",
            r"line 4: measure energy-l1 needs embeddings; with embedder bleu use",
        ),
        ("samples: 5", "samples: 5\ncorrection: sidak", r"line 4: correction must be one of"),
        ("samples: 5", "samples: 5\nalpha: 2", r"line 4: alpha must be <= 0.999"),
        ("samples: 5", "samples: 5\nsamples: 6", r"line 4: key 'samples' appears twice"),
        (
            "  - {name: comedian",
            "  - {nme: comedian",
            r"line 7: unknown key 'nme' in perturbation 1 \(did you mean 'name'\?\)",
        ),
    ],
)
def test_spec_mistakes_name_the_line(old, new, match):
    assert old in GOOD
    with pytest.raises(SpecError, match=match):
        parse_spec(GOOD.replace(old, new, 1), source="s.yaml")


def test_structural_mistakes():
    with pytest.raises(SpecError, match="not valid YAML"):
        parse_spec("model: [unclosed", source="s.yaml")
    with pytest.raises(SpecError, match="the spec is empty"):
        parse_spec("", source="s.yaml")
    with pytest.raises(SpecError, match="missing 'base'"):
        parse_spec("samples: 3\nperturbations: [{name: a, prompt: b}]")
    with pytest.raises(SpecError, match="nothing to compare"):
        parse_spec("base: {prompt: hi}")
    with pytest.raises(SpecError, match="'models' must list at least 2 models"):
        parse_spec("models: [{backend: local}]\nbase: {prompt: hi}")
    with pytest.raises(SpecError, match="takes no perturbations"):
        parse_spec(
            "models: [{backend: local}, {backend: openai, name: m}]\nbase: {prompt: hi}\n"
            "perturbations: [{name: a, prompt: b}]"
        )
    with pytest.raises(SpecError, match="same name"):
        parse_spec("models: [{backend: openai, name: m}, {backend: openai, name: m}]\nbase: {prompt: hi}")
    with pytest.raises(SpecError, match="no such spec file"):
        load_spec("/no/such/spec.yaml")


def test_models_mode_and_relative_replay_path(tmp_path):
    (tmp_path / "rec.jsonl").write_text('{"prompt": "hi", "response": "a"}\n')
    (tmp_path / "s.yaml").write_text(
        "models:\n  - {backend: replay, file: rec.jsonl, label: a}\n"
        "  - {backend: replay, file: rec.jsonl, label: b}\nbase: {prompt: hi}\n"
    )
    s = load_spec(tmp_path / "s.yaml")
    assert s.mode == "models" and s.models[0]["file"] == str(tmp_path / "rec.jsonl")


def test_examples_are_valid():
    from pathlib import Path

    from dbpa_core.attacks.spec import load_attack_spec
    from dbpa_core.fidelity.simulate import load_simulation_spec

    examples = sorted(Path(__file__).parent.parent.joinpath("examples").glob("*.yaml"))
    assert len(examples) >= 4
    from dbpa_core.cli.scan import read_model

    for p in examples:  # specs of dbpa attack / dbpa fidelity --simulate say so in their names
        loader = (
            load_attack_spec
            if p.name.startswith("attack_")
            else load_simulation_spec
            if p.name.startswith("fidelity_")
            else (lambda f: read_model(str(f)))
            if p.name.startswith("model_")
            else load_spec
        )
        loader(p)
    personas = load_spec(Path(__file__).parent.parent / "examples" / "nice_personas.yaml")
    assert [x.name for x in personas.perturbations] == [
        "doctor",
        "nurse",
        "medical practitioner",
        "medical supervisor",
        "comedian",
        "robot from the future",
        "NeurIPS reviewer",
        "child",
    ]
