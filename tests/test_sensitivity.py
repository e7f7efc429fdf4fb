"""Sensitivity studies: zero model calls after an audit (counted on a local server),
only new embeddings, prompt padding that keeps the prompt, the cost table, the CLI."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dbpa_core.audit import run_audit
from dbpa_core.cache import Cache
from dbpa_core.cli import main
from dbpa_core.measures import DEFAULT_MEASURE, MEASURES
from dbpa_core.pricing import estimate_tokens
from dbpa_core.sensitivity import (
    SensitivityConfig,
    SensitivityError,
    neutral_text,
    pad_prompt,
    padding,
    parse_embedders,
    parse_lengths,
    parse_measures,
    plan,
    run_sensitivity,
)
from dbpa_core.spec import parse_spec

from .fake_openai import FakeOpenAI

BASE = "John has these features: Age: 70, Smoker: yes. Provide recommendations."
MODELS = ("gpt-4o-mini", "fake-embed", "other-embed")


def spec_text(server, *, samples=6, perts=None, model="gpt-4o-mini"):
    perts = (
        perts
        or """
  - {name: name-change, prompt: "Ahmed has these features: Age: 70, Smoker: yes. Provide recommendations.", role: control}
  - {name: comedian, prefix: "Act as a comedian.", role: target}
"""
    )
    return f"""
model: {{backend: openai, name: {model}, base_url: "{server.base_url}", max_retries: 2}}
embedder: {{backend: openai, name: fake-embed, base_url: "{server.base_url}"}}
samples: {samples}
temperature: 0.8
max_tokens: 40
permutations: 300
base: {{prompt: "{BASE}"}}
perturbations:{perts}
"""


@pytest.fixture
def cache(tmp_path):
    return Cache(tmp_path / "cache")


# --------------------------------------------------------------------------- padding
@pytest.mark.parametrize("target", [40, 100, 300, 900, 3000])
def test_padding_keeps_the_prompt_and_reaches_the_length(target):
    padded = pad_prompt(BASE, target)
    assert padded.endswith("\n\n" + BASE)
    assert padded.count(BASE) == 1
    assert abs(estimate_tokens(padded) - target) <= max(3, 0.06 * target)
    pars = padded[: -len(BASE)].strip().split("\n\n")  # only the neutral text
    neutral = neutral_text().split("\n\n")
    assert all(p in neutral for p in pars[:-1])
    assert any(n.startswith(pars[-1]) for n in neutral)


def test_no_padding_when_the_prompt_is_long_enough():
    assert padding(BASE, 5) == ""
    assert pad_prompt(BASE, 5) == BASE


def test_base_and_perturbations_share_the_padding():
    pad = padding(BASE, 300)
    other = "Act as a comedian. " + BASE
    assert pad_prompt(other, 300, pad=pad) == pad + "\n\n" + other


@settings(max_examples=40, deadline=None)
@given(st.text(min_size=1, max_size=400), st.integers(1, 1500))
def test_padding_property(prompt, target):
    padded = pad_prompt(prompt, target)
    assert padded.endswith(prompt)
    assert estimate_tokens(padded) <= max(target, estimate_tokens(prompt)) + 1


# --------------------------------------------------------------------------- settings
def test_parsers():
    assert parse_measures("all") == tuple(MEASURES)
    assert parse_measures("none") == () and parse_measures("jsd, ks") == ("jsd", "ks")
    assert parse_lengths("900, 100,300,100") == (100, 300, 900)
    assert parse_embedders("local,bleu,rouge,openai:text-embedding-3-large") == (
        {"backend": "local"},
        {"backend": "bleu"},
        {"backend": "rougeL"},
        {"backend": "openai", "name": "text-embedding-3-large", "api_key_env": "OPENAI_API_KEY"},
    )


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: parse_measures("jsd,cosine"), "unknown measure 'cosine'"),
        (lambda: parse_embedders("glove"), "unknown embedder 'glove'"),
        (lambda: parse_embedders("st:/no/such/folder"), "does not exist"),
        (lambda: parse_embedders("spec"), "no spec"),
        (lambda: parse_lengths("100,lots"), "'lots' is not a whole number"),
        (lambda: parse_lengths("0"), "between 1 and"),
    ],
)
def test_parser_errors(call, match):
    with pytest.raises(SensitivityError, match=match):
        call()


def test_nothing_to_vary_and_replay_lengths(tmp_path):
    replay = tmp_path / "r.jsonl"
    replay.write_text(json.dumps({"prompt": BASE, "response": "x"}) + "\n")
    spec = parse_spec(
        {
            "model": {"backend": "replay", "file": str(replay)},
            "base": BASE,
            "perturbations": [{"name": "p", "prefix": "Hi."}],
        }
    )
    with pytest.raises(SensitivityError, match="nothing to vary"):
        run_sensitivity(spec, SensitivityConfig())
    with pytest.raises(SensitivityError, match="replays recorded answers only"):
        plan(spec, SensitivityConfig(lengths=(100,)))
    with pytest.raises(SensitivityError, match="no price known for 'gpt-17'"):
        plan(spec, SensitivityConfig(measures=("jsd",), cost_models=("gpt-17",)))


# --------------------------------------------------------------------------- zero calls
def test_after_an_audit_measures_and_embedders_make_zero_model_calls(cache):
    with FakeOpenAI(models=MODELS) as srv:
        spec = parse_spec(spec_text(srv))
        audit = run_audit(spec, cache=cache)
        chat_calls, embed_calls = srv.chat_ok, srv.embedding_ok
        assert chat_calls > 0
        cfg = SensitivityConfig(
            measures=parse_measures("all"),
            embedders=parse_embedders("spec,bleu,rouge1,openai:other-embed", spec),
            cost_models=("gpt-4o",),
        )
        need = plan(spec, cfg, cache=cache)
        assert need["calls"] == 0 and need["cached"] == 3 * 6
        res = run_sensitivity(spec, cfg, cache=cache)
        assert srv.chat_ok == chat_calls, "a sensitivity run after the audit called the model"
        assert res.usage["calls"] == 0 and res.usage["cached_samples"] == 18
        # only the new embedder's vectors were computed; the spec's came from the cache
        assert res.usage["embeddings_computed"] == len(
            set(audit.base.texts) | {t for a in audit.arms for t in a.texts}
        )
        assert srv.embedding_ok > embed_calls
        again = run_sensitivity(spec, cfg, cache=cache)
        assert again.usage["calls"] == 0 and again.usage["embeddings_computed"] == 0

    # one row per perturbation × setting
    assert len(res.study("measure")) == 2 * len(MEASURES)
    assert len(res.study("embedder")) == 2 * 4
    # the baseline rows reproduce the audit exactly
    by_name = {p.name: p for p in audit.perturbations}
    for study in ("measure", "embedder"):
        base_rows = [r for r in res.study(study) if r.baseline]
        assert {r.perturbation for r in base_rows} == {"name-change", "comedian"}
        for r in base_rows:
            assert r.p_value == by_name[r.perturbation].p_value
            assert r.effect_size == by_name[r.perturbation].effect_size
            assert r.p_adjusted == by_name[r.perturbation].p_adjusted
    # energy-l1 needs vectors; the default energy-l2 runs on BLEU similarities (sqrt(2 (1 - S)))
    bleu = {r.perturbation: r for r in res.study("embedder") if r.setting == "BLEU"}
    assert bleu["comedian"].applicable
    # the fake comedian answers from another vocabulary: every setting sees it
    v = {x["perturbation"]: x for x in res.verdicts()}
    assert v["comedian"]["baseline_significant"] is True
    assert v["comedian"]["measure"]["settings"] == len(MEASURES)
    # cost: recorded token usage × price; nothing paid now
    gen = next(c for c in res.cost if c.kind == "generation")
    assert gen.model == "gpt-4o-mini" and gen.items == 18 and gen.new == 0
    assert gen.input_tokens > 0 and gen.cost == pytest.approx(
        gen.input_tokens / 1e6 * 0.15 + gen.output_tokens / 1e6 * 0.60
    )
    assert gen.cost_new == 0.0
    comp = next(c for c in res.cost if c.kind == "comparison")
    assert comp.model == "gpt-4o" and comp.cost > gen.cost
    emb = {c.model: c for c in res.cost if c.kind == "embedding"}
    assert emb["other-embed"].new > 0 and emb["fake-embed"].new == 0
    assert emb["BLEU"].note == "text similarity: no model"


def test_the_audit_setting_is_always_the_reference(cache):
    with FakeOpenAI(models=MODELS) as srv:
        spec = parse_spec(spec_text(srv))
        res = run_sensitivity(
            spec, SensitivityConfig(measures=("ks",), embedders=parse_embedders("bleu")), cache=cache
        )
    assert res.settings("measure") == [DEFAULT_MEASURE, "ks"]
    assert res.settings("embedder") == ["fake-embed", "BLEU"]
    assert all(v["baseline_significant"] is not None for v in res.verdicts())


@pytest.mark.slow
def test_a_sentence_transformers_folder_matches_the_local_embedder(cache):
    from dbpa_core.embedders import minilm_path

    with FakeOpenAI(models=MODELS) as srv:
        spec = parse_spec(spec_text(srv))
        run_audit(spec, cache=cache)
        emb = parse_embedders(f"local,st:{minilm_path()}", spec)
        assert emb[1] == {"backend": "sentence-transformers", "path": minilm_path()}
        res = run_sensitivity(spec, SensitivityConfig(embedders=emb), cache=cache)
    rows = {(r.setting, r.perturbation): r for r in res.study("embedder")}
    folder = next(s for s in res.settings("embedder") if s not in ("fake-embed", "MiniLM (local)"))
    for name in ("name-change", "comedian"):  # the same weights give the same test
        assert rows[(folder, name)].p_value == rows[("MiniLM (local)", name)].p_value
        assert rows[(folder, name)].effect_size == pytest.approx(
            rows[("MiniLM (local)", name)].effect_size, abs=1e-6
        )


def test_text_similarity_spec_marks_energy_l1_not_applicable(cache):
    with FakeOpenAI(models=MODELS) as srv:
        spec = parse_spec(
            spec_text(srv).replace(
                f'embedder: {{backend: openai, name: fake-embed, base_url: "{srv.base_url}"}}',
                "embedder: {backend: rouge1}",
            )
        )
        run_audit(spec, cache=cache)
        res = run_sensitivity(spec, SensitivityConfig(measures=("jsd", "energy-l1")), cache=cache)
    rows = {(r.setting, r.perturbation): r for r in res.rows}
    assert rows[("jsd", "comedian")].applicable
    assert not rows[("energy-l1", "comedian")].applicable
    assert "needs embeddings" in rows[("energy-l1", "comedian")].note
    assert res.to_dict()["rows"][-1]["p_value"] is None  # NaN becomes null in JSON


# --------------------------------------------------------------------------- lengths
def test_prompt_length_study_samples_padded_prompts_once(cache):
    with FakeOpenAI(models=MODELS) as srv:
        spec = parse_spec(spec_text(srv, samples=4))
        cfg = SensitivityConfig(lengths=(60, 200))
        need = plan(spec, cfg, cache=cache)
        assert need["calls"] == 3 * 4 * 3  # original + 2 lengths, 3 arms, k = 4
        res = run_sensitivity(spec, cfg, cache=cache)
        assert res.usage["calls"] == 36
        prompts = {p for p, _seed, _i in srv.delivered}
        originals = [
            BASE,
            "Ahmed has these features: Age: 70, Smoker: yes. Provide recommendations.",
            "Act as a comedian. " + BASE,
        ]
        for p in prompts:
            assert any(p.endswith(o) for o in originals)  # every padded prompt keeps it
        assert {res.padded_prompts[60], res.padded_prompts[200]} <= prompts
        calls = srv.chat_ok
        again = run_sensitivity(spec, cfg, cache=cache)
        assert srv.chat_ok == calls and again.usage["calls"] == 0
    assert res.settings("length") == ["original", "60 tokens", "200 tokens"]
    lengths = {r.setting: r for r in res.study("length") if r.perturbation == "comedian"}
    assert lengths["original"].baseline and not lengths["200 tokens"].baseline
    assert abs(lengths["200 tokens"].prompt_tokens - 200) <= 12
    assert "counted" in lengths["200 tokens"].note  # the server's own token count


def test_report_escapes_names(cache, tmp_path):
    with FakeOpenAI(models=MODELS) as srv:
        spec = parse_spec(
            spec_text(
                srv,
                perts="""
  - {name: "<script>alert(1)</script>", prefix: "Act as a comedian."}
""",
            )
        )
        res = run_sensitivity(spec, SensitivityConfig(measures=("jsd", "ks")), cache=cache)
    html = res.to_html()
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;" in html
    paths = res.write(tmp_path / "out")
    assert sorted(p.rsplit("/", 1)[1] for p in paths) == [
        "cost.csv",
        "report.html",
        "results.csv",
        "results.json",
    ]


# --------------------------------------------------------------------------- CLI
def test_cli_sensitivity(tmp_path, capsys):
    with FakeOpenAI(models=MODELS) as srv:
        spec = tmp_path / "spec.yaml"
        spec.write_text(spec_text(srv))
        cache = str(tmp_path / "cache")
        assert main(["--cache-dir", cache, "audit", str(spec), "--out", str(tmp_path / "a"), "--quiet"]) == 0
        calls = srv.chat_ok
        capsys.readouterr()
        out = tmp_path / "s"
        assert (
            main(
                [
                    "--cache-dir",
                    cache,
                    "sensitivity",
                    str(spec),
                    "--measures",
                    "all",
                    "--embedders",
                    "spec,bleu",
                    "--out",
                    str(out),
                    "--quiet",
                    "--cost-models",
                    "gpt-4o",
                ]
            )
            == 0
        )
        assert srv.chat_ok == calls
        text = capsys.readouterr()
        assert "0 model calls to make" in text.err
        assert "comedian" in text.out and "0 new model calls" in text.out
        data = json.loads((out / "results.json").read_text())
        assert len(data["rows"]) == 2 * (len(MEASURES) + 2)
        assert {
            "study",
            "setting",
            "perturbation",
            "effect_above_chance",
            "p_value",
            "p_adjusted",
            "stars",
        } <= set(data["rows"][0])
        assert (out / "results.csv").read_text().count("\n") == 1 + 2 * (len(MEASURES) + 2)
        assert "Does the verdict hold?" in (out / "report.html").read_text()
        assert (
            main(
                [
                    "--cache-dir",
                    cache,
                    "sensitivity",
                    str(spec),
                    "--lengths",
                    "300",
                    "--measures",
                    "none",
                    "--embedders",
                    "none",
                    "--dry-run",
                ]
            )
            == 0
        )
        assert "18 model calls to make" in capsys.readouterr().err
        assert srv.chat_ok == calls


@pytest.mark.parametrize(
    "args, message",
    [
        (["--measures", "cosine"], "unknown measure 'cosine'"),
        (["--embedders", "glove"], "unknown embedder 'glove'"),
        (["--lengths", "abc"], "not a whole number"),
        (["--measures", "none", "--embedders", "none"], "nothing to vary"),
    ],
)
def test_cli_sensitivity_bad_arguments(tmp_path, capsys, args, message):
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        f'model: {{backend: local}}\nbase: {{prompt: "{BASE}"}}\n'
        'perturbations: [{name: p, prefix: "Hi."}]\n'
    )
    assert main(["--cache-dir", str(tmp_path / "c"), "sensitivity", str(spec), *args]) == 2
    assert message in capsys.readouterr().err
