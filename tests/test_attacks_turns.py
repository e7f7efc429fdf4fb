"""Two-turn prompts (``turns: 2``): chat models get the instruction and the passage in a
first user turn, a fixed assistant reply, then the question and the options; the turns
reach the server as chat messages, are cached apart from one-turn prompts, and the
battery's results read the same way."""

import json
import threading

import pytest

from dbpa_core.attacks.battery import run_battery
from dbpa_core.attacks.items import (
    TWO_TURN_REPLY,
    Item,
    render_asked,
    render_prompt,
    render_turns,
    split_turns,
)
from dbpa_core.attacks.spec import parse_attack_spec
from dbpa_core.backends.base import GenerationParams, SampleRequest, chat_messages
from dbpa_core.cache import Cache
from dbpa_core.sampling import requests_for, sample_key
from dbpa_core.spec import SpecError

from .local_http import LocalJSONServer

ITEM = Item("q", "Where is Mary?", ("home", "the park"), 1, "Mary went to the park.", "Choose one.", "d")


class ChatRecorder(LocalJSONServer):
    """Answers "(B)" and keeps every request's messages."""

    def __init__(self):
        self.lock = threading.Lock()
        self.messages: list[list[dict]] = []

    def _handle(self, h) -> None:
        body = json.loads(h.rfile.read(int(h.headers.get("Content-Length") or 0)) or b"{}")
        with self.lock:
            self.messages.append(body["messages"])
        n = int(body.get("n") or 1)
        self._send(
            h,
            200,
            {
                "id": "x",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "usage": {"prompt_tokens": 5, "completion_tokens": 1},
                "choices": [
                    {"index": i, "finish_reason": "stop", "message": {"role": "assistant", "content": "(B)"}}
                    for i in range(n)
                ],
            },
        )


def test_the_template_splits_before_the_question():
    first, second = render_turns(ITEM)
    assert first == "Choose one.\n\nPassage: Mary went to the park."
    assert second == "Question: Where is Mary?\n(A) home\n(B) the park\nAnswer:"
    text = render_asked(ITEM, turns=2)
    history, last = split_turns(text)
    assert history == (("user", first), ("assistant", TWO_TURN_REPLY)) and last == second
    assert render_asked(ITEM) == render_prompt(ITEM) and split_turns(render_prompt(ITEM)) == (
        (),
        render_prompt(ITEM),
    )
    # nothing to say first (no instruction, no passage): one turn
    bare = ITEM.replace(instruction="", passage="")
    assert split_turns(render_asked(bare, turns=2)) == ((), render_prompt(bare))


def test_history_reaches_the_messages_and_the_cache_key():
    params = GenerationParams(temperature=0.0, top_p=1.0, max_tokens=8)
    hist = (("user", "Passage: x"), ("assistant", "ok"))
    two = requests_for("Q?", n=1, seed=0, params=params, system_prompt="S", history=hist)[0]
    one = requests_for("Q?", n=1, seed=0, params=params, system_prompt="S")[0]
    assert [m["role"] for m in chat_messages(two)] == ["system", "user", "assistant", "user"]
    assert chat_messages(one) == [{"role": "system", "content": "S"}, {"role": "user", "content": "Q?"}]
    ident = {"backend": "openai", "model": "m"}
    assert sample_key(ident, two) != sample_key(ident, one)
    assert two.seed != one.seed
    # one-turn requests keep the keys they had before (no "history" in them)
    assert sample_key(ident, one) == sample_key(ident, SampleRequest("Q?", 0, one.seed, params, "S"))


def _spec(url, data, turns):
    return f"""
model: {{backend: openai, name: chat, base_url: "{url}", max_retries: 0}}
data: {data}
turns: {turns}
attacks: [{{level: char, rho: [1.0]}}]
"""


def test_a_two_turn_battery_sends_chats(tmp_path):
    data = tmp_path / "items.jsonl"
    data.write_text(
        "".join(
            json.dumps(
                {
                    "id": f"i{n}",
                    "passage": f"Mary went to room {n}.",
                    "question": "Where is Mary?",
                    "options": ["home", "the park"],
                    "answer": "B",
                }
            )
            + "\n"
            for n in range(3)
        )
    )
    with ChatRecorder() as srv:
        spec = parse_attack_spec(_spec(srv.base_url, data, 2))
        res = run_battery(spec, cache=Cache(tmp_path / "c"))
        sent = list(srv.messages)
        srv.messages.clear()
        again = run_battery(spec, cache=Cache(tmp_path / "c"))  # a rerun: from the cache
        assert srv.messages == [] and again.usage["calls"] == 0
        one = run_battery(parse_attack_spec(_spec(srv.base_url, data, 1)), cache=Cache(tmp_path / "c"))
        assert one.usage["calls"] == 6  # one-turn prompts are other prompts
        assert all(len(m) == 1 for m in srv.messages)
    assert spec.turns == 2 and len(sent) == 6  # 3 clean + 3 attacked: every chat is its own
    for msgs in sent:
        assert [m["role"] for m in msgs] == ["user", "assistant", "user"]
        assert "Passage: " in msgs[0]["content"] and "Question" not in msgs[0]["content"]
        assert msgs[1]["content"] == TWO_TURN_REPLY
        assert msgs[2]["content"].startswith("Question: Where is Mary?")
    assert res.clean().er.value == 0.0 and res.attacks()[0].asr.value == 0.0
    assert res.to_dict()["spec"]["turns"] == 2


def test_turns_is_checked(tmp_path):
    data = tmp_path / "items.jsonl"
    data.write_text(json.dumps({"question": "q?", "options": ["a", "b"], "answer": "A"}) + "\n")
    with pytest.raises(SpecError, match="turns must be <= 2"):
        parse_attack_spec(_spec("http://127.0.0.1:9/v1", data, 3))
    replay = tmp_path / "r.jsonl"
    replay.write_text(json.dumps({"prompt": "p", "response": "r"}) + "\n")
    with pytest.raises(SpecError, match="needs a chat model"):
        parse_attack_spec(
            f"model: {{backend: replay, file: {replay}}}\ndata: {data}\nturns: 2\n"
            "attacks: [{level: char, rho: [1.0]}]\n"
        )


def test_the_local_backend_puts_the_turns_in_its_chat_template():
    from dbpa_core.backends.local import LocalBackend

    seen = []

    class Tok:
        def apply_chat_template(self, msgs, **kw):
            seen.append(msgs)
            return {"input_ids": [7, 8, 9]}

    params = GenerationParams(temperature=0.0, top_p=1.0, max_tokens=8)
    req = requests_for(
        "Q?", n=1, seed=0, params=params, history=(("user", "Passage: x"), ("assistant", TWO_TURN_REPLY))
    )[0]
    backend = LocalBackend.__new__(LocalBackend)  # no weights: only the prompt's token ids
    backend._ids = {}
    assert backend._prompt_ids(Tok(), req) == [7, 8, 9]
    assert [m["role"] for m in seen[0]] == ["user", "assistant", "user"]
    assert seen[0][-1]["content"] == "Q?"
