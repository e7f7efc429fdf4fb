"""dump_spec: the dashboard's "download spec" writes YAML that parse_spec reads back to the
same audit (perturbations, model comparisons, system prompts, prices, key names)."""

from pathlib import Path

import pytest
import yaml

from dbpa_core.spec import dump_spec, parse_spec

DEMO = str(Path(__file__).resolve().parents[1] / "assets" / "demo_replay.jsonl")

CASES = {
    "perturbations": {
        "name": "p",
        "model": {
            "backend": "openai",
            "name": "gpt",
            "api_key_env": "DBPA_MY_KEY",
            "base_url": "http://127.0.0.1:1/v1",
            "concurrency": 4,
        },
        "base": {"prompt": "Hi: 'quoted' \"x\" # not a comment", "system_prompt": "Be brief."},
        "perturbations": [
            {"name": "pre", "prefix": "Act as a pirate."},
            {"name": "suf", "suffix": "Answer in French.", "role": "target"},
            {"name": "sys", "system_prompt": "Be verbose.", "role": "control"},
            {"name": "full", "prompt": "Bonjour\nsecond line"},
        ],
        "samples": 7,
        "permutations": 123,
        "measure": "ks",
        "correction": "bh",
        "alpha": 0.01,
        "seed": 9,
        "temperature": 1.1,
        "top_p": 0.9,
        "max_tokens": 50,
        "sequential": 5,
        "prices": {"gpt": {"input": 1.5, "output": 3}},
        "description": "a test",
    },
    "models": {
        "name": "m",
        "models": [
            {"backend": "replay", "file": DEMO, "label": "a"},
            {"backend": "local", "temperature": 1.2},
        ],
        "embedder": {"backend": "rouge1"},
        "base": {"prompt": "Explain statins."},
    },
}


@pytest.mark.parametrize("case", list(CASES))
def test_dump_spec_round_trips(case):
    spec = parse_spec(CASES[case])
    text = dump_spec(spec, header="made by a test")
    assert text.startswith("# made by a test\n")
    back = parse_spec(text, source="back.yaml")
    assert back.to_dict() == spec.to_dict()
    assert back.prices == spec.prices
    raw = yaml.safe_load(text)
    assert ("models" in raw) == (case == "models") and "mode" not in raw
    assert None not in raw.values()


def test_dump_spec_never_holds_a_key():
    spec = parse_spec(CASES["perturbations"])
    text = dump_spec(spec)
    assert "DBPA_MY_KEY" in text and "sk-" not in text
    # an inherited system prompt is not repeated on every perturbation
    raw = yaml.safe_load(text)
    assert [p.get("system_prompt") for p in raw["perturbations"]] == [None, None, "Be verbose.", None]
