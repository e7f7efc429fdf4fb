"""Every hostile spec ends in a spec or in one SpecError line that names the line:
never a traceback, a hang or a silent default (issue 7)."""

import json
import textwrap

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dbpa_core.cli import main
from dbpa_core.spec import (
    EMBEDDER_KEYS,
    MODEL_KEYS,
    TOP_KEYS,
    AuditSpec,
    SpecError,
    load_spec,
    parse_spec,
)

GOOD = textwrap.dedent("""\
    model:
      backend: openai
      name: m
      api_key_env: OPENAI_API_KEY
      timeout: 30
    samples: 5
    temperature: 0.8
    top_p: 1.0
    alpha: 0.05
    base:
      prompt: "John is 70."
    perturbations:
      - {name: comedian, prefix: "Act as a comedian.", role: target}
""")


def test_good_spec_still_parses():
    s = parse_spec(GOOD)
    assert s.model["timeout"] == 30 and s.alpha == 0.05


@pytest.mark.parametrize(
    "old,new,line",
    [
        ("alpha: 0.05", "alpha: .nan", 9),
        ("alpha: 0.05", "alpha: .inf", 9),
        ("temperature: 0.8", "temperature: .NaN", 7),
        ("top_p: 1.0", "top_p: -.inf", 8),
        ("timeout: 30", "timeout: .inf", 5),
        ("timeout: 30", "timeout: .nan", 5),
        ("timeout: 30", "max_retry_wait: .inf", 5),
    ],
)
def test_nan_and_inf_are_refused(old, new, line):
    with pytest.raises(SpecError, match=rf"s.yaml, line {line}: .* must be a finite number, got"):
        parse_spec(GOOD.replace(old, new), source="s.yaml")


def test_nan_price_is_refused():
    with pytest.raises(SpecError, match="'prices'"):
        parse_spec(GOOD + "prices: {m: {input: .nan, output: 1}}\n", source="s.yaml")


@pytest.mark.parametrize(
    "section,value",
    [
        ("model", "[]"),
        ("model", "0"),
        ("model", "gpt-4o"),
        ("model", "false"),
        ("embedder", "[]"),
        ("embedder", "0"),
        ("prices", "0"),
        ("prices", "[]"),
    ],
)
def test_a_model_that_is_not_a_mapping_never_runs_the_local_model(section, value):
    text = GOOD.replace(
        "model:\n  backend: openai\n  name: m\n  api_key_env: OPENAI_API_KEY\n  timeout: 30\n", ""
    )
    text = f"{section}: {value}\n" + text
    with pytest.raises(SpecError, match=rf"s.yaml, line 1: .*{section}.* (must be a mapping|maps a model)"):
        parse_spec(text, source="s.yaml")


def test_perturbations_that_are_not_a_list():
    with pytest.raises(SpecError, match="'perturbations' must be a list"):
        parse_spec("base: hi\nperturbations: 0\n")


@pytest.mark.parametrize("key,value", [("label", "[1, 2]"), ("name", "{a: 1}"), ("base_url", "5")])
def test_model_fields_of_the_wrong_type(tmp_path, key, value):
    (tmp_path / "r.jsonl").write_text('{"prompt": "hi", "response": "a"}\n')
    text = (
        f"model: {{backend: replay, file: r.jsonl, {key}: {value}}}\n"
        "base: hi\nperturbations: [{prompt: ho}]\n"
    )
    with pytest.raises(SpecError, match=rf"model.{key} must be text"):
        parse_spec(text, base_dir=tmp_path)


def test_base_url_must_be_http():
    with pytest.raises(SpecError, match=r"model.base_url must be an http\(s\) URL"):
        parse_spec(
            "model: {backend: openai, name: m, base_url: 'file:///etc/passwd'}\n"
            "base: hi\nperturbations: [{prompt: ho}]\n"
        )


# --------------------------------------------------------------------------- files
def test_a_spec_that_is_not_utf8(tmp_path, capsys):
    p = tmp_path / "s.yaml"
    p.write_bytes(GOOD.encode().replace(b"John", b"J\xf6hn"))
    with pytest.raises(SpecError, match=r"s.yaml, line 11: not UTF-8 text \(byte 0xf6"):
        load_spec(p)
    assert main(["estimate", str(p)]) == 2
    err = capsys.readouterr().err
    assert "not UTF-8" in err and err.count("\n") == 1


def test_a_replay_file_that_is_not_utf8(tmp_path, capsys):
    (tmp_path / "r.jsonl").write_bytes(
        b'{"prompt": "hi", "response": "a"}\n{"prompt": "hi", "response": "\xff\xfe"}\n'
    )
    spec = tmp_path / "s.yaml"
    spec.write_text(
        "model: {backend: replay, file: r.jsonl}\nembedder: {backend: rouge1}\n"
        "samples: 2\nbase: hi\nperturbations: [{prompt: ho}]\n"
    )
    with pytest.raises(SpecError, match=r"s.yaml, line 1: .*r.jsonl, line 2: not UTF-8 text"):
        load_spec(spec)
    assert (
        main(
            ["--cache-dir", str(tmp_path / "c"), "audit", str(spec), "--out", str(tmp_path / "o"), "--quiet"]
        )
        == 2
    )
    assert "not UTF-8" in capsys.readouterr().err


def test_a_replay_file_with_bad_json_is_a_spec_error(tmp_path):
    (tmp_path / "r.jsonl").write_text('{"prompt": "hi", "response": "a"}\n{oops\n')
    with pytest.raises(SpecError, match=r"r.jsonl, line 2: not valid JSON"):
        parse_spec(
            "model: {backend: replay, file: r.jsonl}\nbase: hi\nperturbations: [{prompt: ho}]\n",
            base_dir=tmp_path,
        )


def test_a_spec_that_is_a_folder_or_huge(tmp_path):
    with pytest.raises(SpecError, match="is a folder, not a file"):
        load_spec(tmp_path)
    big = tmp_path / "big.yaml"
    big.write_text("# " + "x" * (11 * 1024**2))
    with pytest.raises(SpecError, match="larger than 10 MB"):
        load_spec(big)


# --------------------------------------------------------------------------- hostile YAML
BOMB = textwrap.dedent("""\
    a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
    b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
    c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
    d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
    e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
    f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
    g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
    h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
    i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
    base: hi
""")


@pytest.mark.timeout(60)
def test_a_yaml_alias_bomb_is_refused_at_once():
    # expanded, the bomb holds 9**9 (387 million) strings: building it would take minutes
    # and gigabytes; refused as the aliases are counted, it allocates next to nothing
    import tracemalloc

    tracemalloc.start()
    try:
        with pytest.raises(SpecError, match=r"s.yaml, line \d+: the spec expands to more than"):
            parse_spec(BOMB, source="s.yaml")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024**2, f"{peak / 1024**2:.0f} MB"


def test_aliases_for_shared_settings_still_work():
    s = parse_spec(
        "models:\n  - &m {backend: openai, name: m, concurrency: 3}\n  - {<<: *m, name: n}\nbase: hi\n"
    )
    assert [m["name"] for m in s.models] == ["m", "n"] and s.models[1]["concurrency"] == 3


@pytest.mark.timeout(30)
@pytest.mark.parametrize("opener,closer", [("[", "]"), ("{a: ", "}")])
def test_deep_nesting_is_refused_not_a_recursion_error(opener, closer):
    text = "base: " + opener * 3000 + "1" + closer * 3000 + "\n"
    with pytest.raises(SpecError, match=r"line 1: nested more than \d+ levels deep"):
        parse_spec(text, source="s.yaml")


def test_complex_keys_are_refused():
    with pytest.raises(SpecError, match="keys must be plain text"):
        parse_spec("? [a, b]\n: c\nbase: hi\n")


def test_non_text_input_is_refused():
    with pytest.raises(SpecError, match="the spec must be a mapping"):
        parse_spec(["base", "hi"])
    with pytest.raises(SpecError, match="the spec must be a mapping"):
        parse_spec("- just\n- a list\n")


# --------------------------------------------------------------------------- memory
def test_samples_beyond_memory_are_refused_before_any_call(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("DBPA_MEMORY_LIMIT_GB", "1")
    ok = GOOD.replace("samples: 5", "samples: 1000")
    parse_spec(ok)
    too_big = GOOD.replace("samples: 5", "samples: 5000")
    with pytest.raises(
        SpecError,
        match=r"line 6: samples: 5000 needs about \d+(\.\d)? GB .* more than "
        r"the 1(\.0)? GB .*DBPA_MEMORY_LIMIT_GB.*lower samples to at most \d+",
    ):
        parse_spec(too_big, source="s.yaml")
    p = tmp_path / "s.yaml"
    p.write_text(too_big)
    assert main(["--cache-dir", str(tmp_path / "c"), "audit", str(p), "--out", str(tmp_path / "o")]) == 2
    assert "lower samples" in capsys.readouterr().err


def test_the_memory_limit_defaults_to_half_the_machine(monkeypatch):
    import os

    from dbpa_core.spec import memory_limit_bytes

    monkeypatch.delenv("DBPA_MEMORY_LIMIT_GB", raising=False)
    phys = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert memory_limit_bytes() == pytest.approx(phys / 2)
    monkeypatch.setenv("DBPA_MEMORY_LIMIT_GB", "lots")
    with pytest.raises(SpecError, match="DBPA_MEMORY_LIMIT_GB must be a number of GB"):
        memory_limit_bytes()


# --------------------------------------------------------------------------- key variables
@pytest.mark.parametrize(
    "name",
    [
        "AWS_SECRET_ACCESS_KEY",
        "GITHUB_TOKEN",
        "HOME",
        "PATH",
        "openai_api_key",
        "SSH_AUTH_SOCK",
        "NPM_TOKEN",
        "ACTIONS_RUNTIME_TOKEN",
        "DATABASE_PASSWORD",
        "MY_VLLM_TOKEN",
        "TF_API_TOKEN",
        "HCLOUD_TOKEN",
    ],
)
def test_key_variables_that_do_not_look_like_an_llm_key_are_refused(name):
    as_model = GOOD.replace("api_key_env: OPENAI_API_KEY", f"api_key_env: {name}")
    as_embedder = GOOD + f"embedder: {{backend: openai, api_key_env: {name}}}\n"
    for where, text in (("model", as_model), ("embedder", as_embedder)):
        with pytest.raises(
            SpecError,
            match=rf"{where}.api_key_env {name!r} is not an LLM "
            r"provider's API key variable .*--allow-key-env",
        ):
            parse_spec(text, source="s.yaml")
    allowed = parse_spec(as_model, allow_key_env=[name])
    assert allowed.model["api_key_env"] == name


@pytest.mark.parametrize(
    "name",
    [
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "GROQ_API_KEY",
        "HF_TOKEN",
        "TOGETHER_API_KEY",
        "DBPA_VLLM_TOKEN",
        "DBPA_TEST_KEY",
    ],
)
def test_llm_key_variables_are_allowed(name):
    assert parse_spec(GOOD.replace("OPENAI_API_KEY", name)).model["api_key_env"] == name


def test_cli_allow_key_env(tmp_path, capsys):
    p = tmp_path / "s.yaml"
    p.write_text(GOOD.replace("OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY"))
    assert main(["estimate", str(p)]) == 2
    assert "--allow-key-env" in capsys.readouterr().err
    assert main(["estimate", str(p), "--allow-key-env", "AWS_SECRET_ACCESS_KEY"]) == 0


# --------------------------------------------------------------------------- property test
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**20), 10**20),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
)
KEYS = st.one_of(
    st.sampled_from(
        sorted(TOP_KEYS | MODEL_KEYS | EMBEDDER_KEYS | {"prompt", "role", "prefix", "input", "output"})
    ),
    st.text(max_size=8),
)
VALUES = st.recursive(
    SCALARS,
    lambda kids: st.one_of(st.lists(kids, max_size=3), st.dictionaries(KEYS, kids, max_size=4)),
    max_leaves=12,
)
TOP_SEEDS = {
    "base": st.one_of(st.text(max_size=10), st.fixed_dictionaries({"prompt": SCALARS})),
    "perturbations": st.lists(st.dictionaries(KEYS, VALUES, max_size=4), max_size=3),
    "model": st.dictionaries(KEYS, VALUES, max_size=6),
}


def _check(text: str) -> None:
    try:
        assert isinstance(parse_spec(text, source="p.yaml"), AuditSpec)
    except SpecError as exc:
        assert str(exc).startswith("p.yaml") and "\n" not in str(exc).strip(), str(exc)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.fixed_dictionaries(
        {}, optional={**TOP_SEEDS, **{k: VALUES for k in sorted(TOP_KEYS) if k not in TOP_SEEDS}}
    )
)
def test_random_yaml_specs_end_in_a_spec_or_a_spec_error(doc):
    _check(yaml.safe_dump(doc, allow_unicode=True))
    _check(json.dumps(doc, default=str))  # JSON is YAML too (NaN, Infinity included)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_random_text_ends_in_a_spec_or_a_spec_error(text):
    _check(text)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, len(GOOD) - 1), st.integers(0, 40), st.text(max_size=6))
def test_mutated_good_specs_end_in_a_spec_or_a_spec_error(at, cut, insert):
    _check(GOOD[:at] + insert + GOOD[at + cut :])
