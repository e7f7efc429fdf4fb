"""The audit spec's schema (dbpa_core.spec_schema): one declaration that validates specs
with their own messages and lines, and the JSON Schema that editors read."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml

from dbpa_core import spec as spec_module
from dbpa_core.checks import KINDS
from dbpa_core.cli import main
from dbpa_core.spec import SpecError, load_spec, parse_spec
from dbpa_core.spec_schema import SCHEMA_FILE, json_schema, schema_text

ROOT = Path(__file__).resolve().parents[1]
# specs of dbpa attack / dbpa fidelity --simulate say so in their names, model entries for
# dbpa scan too (model_*.yaml); the rest are audits
AUDIT_EXAMPLES = sorted(
    p for p in (ROOT / "examples").glob("*.yaml") if not p.name.startswith(("attack_", "fidelity_", "model_"))
)
MODELINE = re.compile(r"^# yaml-language-server: \$schema=(\S+)$", re.MULTILINE)


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft7Validator:
    schema = json_schema()
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def test_shipped_schema_file_is_the_exported_schema():
    """dbpa_core/schemas/spec.schema.json is what json_schema() gives today (regenerate it
    with `dbpa schema --out dbpa_core/schemas/spec.schema.json` after changing a model)."""
    assert SCHEMA_FILE.read_text(encoding="utf-8") == schema_text()
    assert json.loads(SCHEMA_FILE.read_text(encoding="utf-8")) == json_schema()


def test_schema_is_draft7_with_help_for_every_key(validator):
    schema = json_schema()
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    assert "$defs" not in json.dumps(schema)  # draft-07 names them "definitions"
    sections = [schema] + list(schema["definitions"].values())
    for section in sections:
        for key, prop in section.get("properties", {}).items():
            assert prop.get("description", "").strip(), f"{section.get('title')}.{key} has no help"


def test_spec_keys_come_from_the_schema():
    """The keys spec.py accepts are the schema's, so the two cannot drift apart."""
    schema = json_schema()
    defs = schema["definitions"]
    assert spec_module.TOP_KEYS == set(schema["properties"])
    assert spec_module.MODEL_KEYS == set(defs["ModelEntry"]["properties"])
    assert spec_module.EMBEDDER_KEYS == set(defs["Embedder"]["properties"])
    assert spec_module.BASE_KEYS == set(defs["Base"]["properties"])
    assert spec_module.PERTURBATION_KEYS == set(defs["Perturbation"]["properties"])
    assert set(defs["Check"]["properties"]) == {"name", "all", "case_sensitive", *KINDS}
    assert set(defs["Judge"]["properties"]) == {"model", "question", "max_tokens"}


def test_defaults_of_the_schema_are_the_specs(validator):
    """A spec that gives only a base and a perturbation gets the schema's defaults."""
    spec = parse_spec({"base": "hi", "perturbations": [{"prefix": "Please."}]})
    props = json_schema()["properties"]
    checked = 0
    for key, prop in props.items():
        if "default" in prop and prop["default"] is not None and hasattr(spec, key):
            assert getattr(spec, key) == prop["default"], key
            checked += 1
    assert checked >= 10
    assert spec.correction == "holm" and spec.model["backend"] == "local"


@pytest.mark.parametrize("path", AUDIT_EXAMPLES, ids=lambda p: p.name)
def test_example_specs_validate_against_both(path, validator):
    text = path.read_text(encoding="utf-8")
    m = MODELINE.search(text)
    assert m, f"{path.name} has no '# yaml-language-server: $schema=...' line"
    assert (path.parent / m.group(1)).resolve() == SCHEMA_FILE.resolve()
    errors = [e.message for e in validator.iter_errors(yaml.safe_load(text))]
    assert errors == []
    load_spec(path)  # the comment is a comment: the spec reads as before


@pytest.mark.parametrize("path", AUDIT_EXAMPLES, ids=lambda p: p.name)
def test_written_specs_validate_against_the_schema(path, validator):
    """A spec as dump_spec writes it (the CLI's and the dashboard's download) passes the
    editor's check too."""
    text = spec_module.dump_spec(load_spec(path))
    assert [e.message for e in validator.iter_errors(yaml.safe_load(text))] == []


def test_examples_are_found():
    assert len(AUDIT_EXAMPLES) >= 5


# an invalid spec, and the line and words spec.py reports (the JSON Schema refuses it too)
INVALID = [
    (
        "base: hi\nperturbations: [{prefix: a}]\nsampels: 5\n",
        3,
        "unknown key 'sampels' in the spec (did you mean 'samples'?)",
    ),
    ("base: hi\nperturbations: [{prefix: a}]\nsamples: 1\n", 3, "samples must be >= 2, got 1"),
    (
        "base: hi\nperturbations: [{prefix: a}]\nsamples: many\n",
        3,
        "samples must be a whole number, got 'many'",
    ),
    (
        "base: hi\nperturbations: [{prefix: a}]\nmeasure: cosine\n",
        3,
        "measure must be one of energy-l2, energy-l1, energy-cosine, jsd, wasserstein, ks; got 'cosine'",
    ),
    ("base: hi\nperturbations: [{prefix: a}]\nalpha: 1.5\n", 3, "alpha must be <= 0.999, got 1.5"),
    (
        "base: hi\nmodel:\n  backend: openia\nperturbations: [{prefix: a}]\n",
        3,
        "model.backend must be one of local, openai, hf, replay; got 'openia'",
    ),
    (
        "base: hi\nmodel: {backend: openai, name: m, timeout: 0}\nperturbations: [{prefix: a}]\n",
        2,
        "model.timeout must be >= 0.1, got 0.0",
    ),
    (
        "base: hi\nperturbations:\n  - prefix: a\n    role: targt\n",
        4,
        "perturbations[0].role must be one of control, target; got 'targt'",
    ),
    ("base: hi\nperturbations:\n  - {prefix: a, colour: red}\n", 3, "unknown key 'colour' in perturbation 1"),
    ("perturbations: [{prefix: a}]\n", None, "missing 'base' with the base prompt (base: {prompt: ...})"),
    ("base: {prompt: 5}\nperturbations: [{prefix: a}]\n", 1, "base.prompt must be text, got 5"),
    (
        "base: hi\nmodels: [{backend: local}]\n",
        2,
        "'models' must list at least 2 models; the first is the reference",
    ),
    (
        "base: hi\nperturbations: [{prefix: a}]\nchecks:\n  - {name: c, contains: []}\n",
        4,
        "check 'c': 'contains' must be a list of words or phrases (not empty)",
    ),
    (
        "base: hi\nperturbations: [{prefix: a}]\nchecks:\n  - {name: c, refusal: 1}\n",
        4,
        "check 'c': write 'refusal: true' (checks[0].refusal is 1)",
    ),
    (
        "base: hi\nperturbations: [{prefix: a}]\nchecks:\n  - {name: c, contains: a, words: true}\n",
        4,
        "check 'c' needs exactly one of contains, absent, regex, refusal, words, json, choice, judge "
        "(got contains, words)",
    ),
    (
        "base: hi\nperturbations: [{prefix: a}]\nchecks:\n  - {name: c, json_: true}\n",
        4,
        "unknown key 'json_' in check 1 (did you mean 'json'?)",
    ),
    (
        "base: hi\nperturbations: [{prefix: a}]\nchecks:\n  - {name: c, judge: {question: q}}\n",
        4,
        "check 'c': the judge needs a 'model'",
    ),
    (
        "base: hi\nperturbations: [{prefix: a}]\nprices: {m: {input: -1}}\n",
        3,
        "'prices' maps a model name to {input: $ per 1M tokens, output: $ per 1M tokens}",
    ),
    (
        "base: hi\nperturbations: [{prefix: a}]\nembedder: [local]\n",
        3,
        "embedder must be a mapping of keys to values",
    ),
]


@pytest.mark.parametrize("text,line,message", INVALID, ids=[m[:40] for _, _, m in INVALID])
def test_invalid_specs_are_refused_by_both(text, line, message, validator):
    with pytest.raises(SpecError) as info:
        parse_spec(text, source="s.yaml")
    where = f"s.yaml, line {line}: " if line else "s.yaml: "
    assert str(info.value).startswith(where + message), str(info.value)
    assert list(validator.iter_errors(yaml.safe_load(text))), "the JSON Schema accepts it"


def test_unknown_key_is_said_before_the_values_of_its_mapping():
    """A mapping's keys are checked before its values, at every level."""
    text = "base: hi\nsamples: x\nperturbations:\n  - {prefix: 5, prfix: a}\nfoo: 1\n"
    with pytest.raises(SpecError, match=r"line 5: unknown key 'foo' in the spec"):
        parse_spec(text, source="s.yaml")
    text = "base: hi\nperturbations:\n  - {prefix: 5, prfix: a}\n"
    with pytest.raises(
        SpecError,
        match=r"line 3: unknown key 'prfix' in perturbation 1 "
        r"\(did you mean 'prefix'\?\)",
    ):
        parse_spec(text, source="s.yaml")


def test_null_means_the_default():
    spec = parse_spec("base: hi\nperturbations: [{prefix: a, role: null}]\nsamples:\nembedder: null\n")
    assert spec.samples == 20 and spec.embedder == {"backend": "local"}
    assert spec.perturbations[0].role is None


def test_cli_schema_prints_and_writes(tmp_path, capsys):
    assert main(["schema"]) == 0
    assert json.loads(capsys.readouterr().out) == json_schema()
    out = tmp_path / "spec.schema.json"
    assert main(["schema", "--out", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == schema_text()
    assert main(["schema", "--out", str(tmp_path / "no" / "such" / "x.json")]) == 2
    assert "cannot write" in capsys.readouterr().err


@pytest.mark.parametrize(
    "embedder,message",
    [
        (
            "{backend: openai, name: e, api_key_env: AWS_SECRET_ACCESS_KEY}",
            "embedder.api_key_env 'AWS_SECRET_ACCESS_KEY' is not an LLM provider's API key variable",
        ),
        (
            "{backend: openai, name: e, base_url: 'ftp://example.org'}",
            "embedder.base_url must be an http(s) URL",
        ),
        ("{backend: local, concurrency: 0}", "embedder.concurrency must be >= 1, got 0"),
        ("{backend: glove}", "embedder.backend must be one of local, sentence-transformers"),
    ],
)
def test_battery_embedder_is_checked_like_an_audits(embedder, message):
    """A battery spec's embedder is the audit's section: the same schema and the same
    checks of its server (before, its URL and key variable went unchecked)."""
    from dbpa_core.attacks.spec import parse_attack_spec

    text = f"data: sample\nembedder: {embedder}\nattacks: [{{level: char, rho: [0.5]}}]\n"
    with pytest.raises(SpecError) as info:
        parse_attack_spec(text, source="b.yaml")
    assert str(info.value).startswith(f"b.yaml, line 2: {message}"), str(info.value)
    audit = f"base: hi\nembedder: {embedder}\nperturbations: [{{prefix: a}}]\n"
    with pytest.raises(SpecError) as same:
        parse_spec(audit, source="b.yaml")
    assert str(same.value) == str(info.value)


# --------------------------------------------------------------------------- battery specs
def test_battery_schema_is_shipped_and_declares_the_keys():
    from dbpa_core.attacks import spec as battery_spec
    from dbpa_core.attacks.schema import SCHEMA_FILE as BATTERY_FILE
    from dbpa_core.attacks.schema import json_schema as battery_schema

    schema = battery_schema()
    jsonschema.Draft7Validator.check_schema(schema)
    assert BATTERY_FILE.read_text(encoding="utf-8") == schema_text(schema)
    defs = schema["definitions"]
    assert battery_spec.TOP_KEYS == set(schema["properties"])
    assert battery_spec.ATTACK_KEYS == set(defs["Attack"]["properties"])
    assert battery_spec.DATA_KEYS == set(defs["DataEntry"]["properties"])
    assert battery_spec.CURVE_KEYS == set(defs["Curve"]["properties"])
    assert battery_spec.CONSISTENCY_KEYS == set(defs["Consistency"]["properties"])
    for section in [schema, *defs.values()]:
        for key, prop in section.get("properties", {}).items():
            assert prop.get("description", "").strip(), f"{section.get('title')}.{key}"


BATTERY_INVALID = [
    ("data: sample\nattacks: [{level: char, rho: 0.5}]\nsamples: 1\n", 3, "samples must be >= 2, got 1"),
    ("data: sample\nattacks: [{level: char, rho: 0.5}]\nturns: 3\n", 3, "turns must be <= 2, got 3"),
    (
        "data: sample\nattacks: [{level: chars, rho: 0.5}]\n",
        2,
        "attacks[0].level must be one of char, word, visual; got 'chars'",
    ),
    ("data: sample\nattacks:\n  - {level: char}\n", 3, "missing attacks[0].rho (a list of ρ in [0, 1])"),
    ("data: sample\nattacks: [{level: char, rho: 0.5, rate: 1}]\n", 2, "unknown key 'rate' in attack 1"),
    (
        "data: sample\nattacks: [{level: char, rho: 0.5}]\nconfidence: 0.2\n",
        3,
        "confidence must be >= 0.5, got 0.2",
    ),
    (
        "data: sample\nattack: [{level: char, rho: 0.5}]\n",
        2,
        "unknown key 'attack' in the spec (did you mean 'attacks'?)",
    ),
]


@pytest.mark.parametrize("text,line,message", BATTERY_INVALID, ids=[m[:40] for _, _, m in BATTERY_INVALID])
def test_invalid_battery_specs_are_refused_by_both(text, line, message):
    from dbpa_core.attacks.schema import json_schema as battery_schema
    from dbpa_core.attacks.spec import parse_attack_spec

    with pytest.raises(SpecError) as info:
        parse_attack_spec(text, source="b.yaml")
    assert str(info.value).startswith(f"b.yaml, line {line}: {message}"), str(info.value)
    validator = jsonschema.Draft7Validator(battery_schema())
    assert list(validator.iter_errors(yaml.safe_load(text))), "the JSON Schema accepts it"


def test_battery_example_validates_against_both():
    from dbpa_core.attacks.schema import SCHEMA_FILE as BATTERY_FILE
    from dbpa_core.attacks.schema import json_schema as battery_schema
    from dbpa_core.attacks.spec import load_attack_spec

    path = ROOT / "examples" / "attack_sample.yaml"
    text = path.read_text(encoding="utf-8")
    m = MODELINE.search(text)
    assert m and (path.parent / m.group(1)).resolve() == BATTERY_FILE.resolve()
    validator = jsonschema.Draft7Validator(battery_schema())
    assert [e.message for e in validator.iter_errors(yaml.safe_load(text))] == []
    load_attack_spec(path)


def test_cli_schema_battery(capsys):
    from dbpa_core.attacks.schema import json_schema as battery_schema

    assert main(["schema", "--battery"]) == 0
    assert json.loads(capsys.readouterr().out) == battery_schema()
