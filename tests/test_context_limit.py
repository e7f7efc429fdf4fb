"""Prompts longer than a local model's context are refused before its weights are loaded,
in one line, with the exit code of an input mistake: for the audit, the battery and the
fidelity simulation alike (the check sits in the sampling layer)."""

import json
import shutil

import pytest

from dbpa_core.backends import ContextLengthError, GenerationParams, SampleRequest, local
from dbpa_core.cache import Cache
from dbpa_core.cli import main
from dbpa_core.sampling import Job, Sampler, requests_for

pytest.importorskip("transformers")

CONTEXT = 256
LONG = " ".join(f"word{i % 50}" for i in range(400))  # ~800 tokens


def _tokenizer_folder():
    folder = local.installed_smollm2_dir()
    if not (folder / "tokenizer.json").is_file():
        pytest.skip("the embedded model is not converted in this environment (make venv)")
    return folder


@pytest.fixture
def small_model(tmp_path):
    """An hf folder with SmolLM2's tokenizer and chat template, a context of 256 positions
    and no weights at all: loading it would fail, so a refusal proves nothing was loaded."""
    src = _tokenizer_folder()
    folder = tmp_path / "small-llama"
    folder.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json"):
        if (src / name).is_file():
            shutil.copy(src / name, folder / name)
    cfg = json.loads((src / "config.json").read_text())
    cfg["max_position_embeddings"] = CONTEXT
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


@pytest.fixture(autouse=True)
def env(monkeypatch, tmp_path):
    monkeypatch.setenv("DBPA_CACHE_DIR", str(tmp_path / "cache"))


def _err_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.strip() and ln.startswith("error:")]
    assert len(lines) == 1, err
    return lines[0]


def test_the_backend_counts_with_the_chat_template_and_refuses_past_the_context(small_model):
    b = local.TransformersBackend(small_model)
    tok, context = local.load_tokenizer(small_model)
    assert context == CONTEXT
    short = SampleRequest("Say hi.", 0, 1, GenerationParams(max_tokens=16))
    b.check_requests([short])  # fits: no error
    n = len(local.chat_prompt_ids(tok, "Say hi."))
    assert n > len(tok("Say hi.")["input_ids"]) + 5  # the template's tokens count
    # exactly at the context fits; one position more does not (max_tokens counts)
    fits = SampleRequest("Say hi.", 0, 1, GenerationParams(max_tokens=CONTEXT - n))
    b.check_requests([fits])
    over = SampleRequest("Say hi.", 0, 1, GenerationParams(max_tokens=CONTEXT - n + 1))
    with pytest.raises(
        ContextLengthError,
        match=rf"with max_tokens {CONTEXT - n + 1} it needs "
        rf"{CONTEXT + 1} positions, but small-llama "
        rf"reads at most {CONTEXT}",
    ):
        b.check_requests([over])
    with pytest.raises(ContextLengthError, match="tokens long with the chat template and the system prompt"):
        b.check_requests([SampleRequest("hi", 0, 1, GenerationParams(max_tokens=4), LONG)])
    assert isinstance(ContextLengthError("x"), ValueError)  # an input mistake


def test_the_sampler_refuses_before_loading_the_weights(small_model, tmp_path):
    loaded = dict(local._LOADED)
    model = {"backend": "hf", "path": str(small_model)}
    reqs = requests_for(LONG, n=2, seed=0, params=GenerationParams(max_tokens=8))
    with pytest.raises(ContextLengthError, match="shorten the prompt or lower max_tokens"):
        Sampler(Cache(tmp_path / "c")).sample([Job(model, r) for r in reqs])
    assert local._LOADED == loaded


def test_audit_battery_and_fidelity_exit_2_in_one_line(small_model, tmp_path, capsys):
    model = f'{{backend: hf, path: "{small_model}"}}'
    audit = tmp_path / "audit.yaml"
    audit.write_text(f"""
model: {model}
embedder: {{backend: rouge1}}
samples: 2
max_tokens: 8
permutations: 99
base: {{prompt: "Say hi."}}
perturbations: [{{name: long, prompt: "{LONG}"}}]
""")
    assert main(["audit", str(audit), "--out", str(tmp_path / "a"), "--quiet"]) == 2
    assert "reads at most 256: shorten the prompt" in _err_line(capsys)
    items = tmp_path / "items.jsonl"
    items.write_text(
        json.dumps(
            {
                "id": "x",
                "passage": LONG,
                "question": "Which is it?",
                "options": ["one", "two", "three"],
                "answer": "A",
            }
        )
        + "\n"
    )
    battery = tmp_path / "battery.yaml"
    battery.write_text(f"model: {model}\ndata: {items}\nattacks: [{{level: char, rho: [0.5]}}]\n")
    assert main(["attack", str(battery), "--out", str(tmp_path / "b"), "--quiet"]) == 2
    assert "shorten the prompt or lower max_tokens" in _err_line(capsys)
    survey = tmp_path / "fidelity.yaml"
    survey.write_text(
        f'data: sample\nlimit: 2\nmodels: [{model}]\nsamples: 2\nmax_tokens: 8\nsystem_prompt: "{LONG}"\n'
    )
    assert main(["fidelity", "--simulate", str(survey), "--out", str(tmp_path / "f"), "--quiet"]) == 2
    assert "with the chat template and the system prompt" in _err_line(capsys)


def test_a_30000_word_prompt_on_the_embedded_model_is_refused_without_loading_it(tmp_path):
    _tokenizer_folder()
    loaded = dict(local._LOADED)
    prompt = " ".join(["patient"] * 30_000)
    reqs = requests_for(prompt, n=1, seed=0, params=GenerationParams(max_tokens=16))
    with pytest.raises(
        ContextLengthError,
        match=r"is 30,0\d\d tokens long with the chat "
        r"template; .* SmolLM2-135M-Instruct reads at "
        r"most 8,192",
    ):
        Sampler(Cache(tmp_path / "c")).sample([Job({"backend": "local"}, r) for r in reqs])
    assert local._LOADED == loaded
