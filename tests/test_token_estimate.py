"""``--estimate`` counts a prompt's tokens as the model reads them: the local model's own
chat template (and system prompt) included; servers at ~4 characters a token plus the chat
format's tokens."""

import pytest

from dbpa_core.attacks.battery import answer_request, plan
from dbpa_core.attacks.spec import parse_attack_spec
from dbpa_core.backends import local
from dbpa_core.cache import Cache
from dbpa_core.pricing import CHAT_TOKENS_PER_MESSAGE, CHAT_TOKENS_TO_ANSWER, prompt_token_counter
from dbpa_core.runs import estimate


def test_a_server_prompt_counts_its_messages_and_the_answers_start():
    count = prompt_token_counter({"backend": "openai", "name": "gpt-4o-mini"})
    assert count("abcdefgh") == 2 + CHAT_TOKENS_PER_MESSAGE + CHAT_TOKENS_TO_ANSWER
    with_system = prompt_token_counter({"backend": "openai", "name": "m"}, system_prompt="abcd")
    assert with_system("abcdefgh") == count("abcdefgh") + 1 + CHAT_TOKENS_PER_MESSAGE


def test_the_battery_estimate_counts_the_local_models_chat_template(tmp_path):
    if not (local.installed_smollm2_dir() / "tokenizer.json").is_file():
        pytest.skip("the embedded model is not converted in this environment (make venv)")
    tok, _ = local.load_tokenizer(local.installed_smollm2_dir())
    for system in (None, "Answer with one letter."):
        spec = parse_attack_spec(
            {
                "model": {"backend": "local"},
                "data": {"sample": 1},
                "attacks": [{"level": "char", "rho": [0.5]}],
                **({"system_prompt": system} if system else {}),
            }
        )
        prompts = list(dict.fromkeys(q.prompt for k in ("clean", "attack") for q in plan(spec)[k]))
        want = sum(len(local.chat_prompt_ids(tok, p, system)) for p in prompts)
        got = estimate(spec, cache=Cache(tmp_path / "c"))
        assert got["answers"] == len(prompts) and got["input_tokens"] == want
        # what the backend reads: the same ids
        b = local.LocalBackend(tmp_path / "c")
        assert want == sum(len(b._prompt_ids(tok, answer_request(spec, p))) for p in prompts)
        # the old count (~4 characters a token, + 8) was far below it
        assert want > sum((len(p) + 3) // 4 + 8 for p in prompts) * 1.2
