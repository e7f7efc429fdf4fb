"""A rule-based judge behind an OpenAI-compatible HTTP server (127.0.0.1 only).

It reads the answer between the judge prompt's triple quotes and replies by rules simple
enough to count by hand:

* an answer with ``banana`` -> "Hmm, hard to say." (neither yes nor no: unparsed);
* an answer with ``statin`` -> "Yes, it does.";
* otherwise -> "**No**".

``requests`` counts the chat requests served (a cached judge asks nothing).
"""

from __future__ import annotations

import json
import threading

from .local_http import LocalJSONServer

GARBAGE_REPLY = "Hmm, hard to say."
KEY_ENV, KEY = "DBPA_TEST_KEY", "sk-test-0123456789"


def judge_check_yaml(srv: JudgeServer, indent: str = "") -> str:
    """A spec's ``checks:`` entry "recommends a statin" judged by ``srv`` (a list item
    indented by ``indent``); the key is read from ``KEY_ENV``."""
    lines = [
        "- name: recommends a statin",
        "  judge:",
        f'    model: {{backend: openai, name: judge, base_url: "{srv.base_url}",',
        f"             api_key_env: {KEY_ENV}, max_retries: 0}}",
        '    question: "Does the answer recommend a statin? Answer yes or no."',
    ]
    return "".join(indent + line + "\n" for line in lines)


def judge_reply(prompt: str) -> str:
    answer = prompt.split('"""')[1] if prompt.count('"""') >= 2 else prompt
    if "banana" in answer:
        return GARBAGE_REPLY
    return "Yes, it does." if "statin" in answer else "**No**"


class JudgeServer(LocalJSONServer):
    def __init__(self, model: str = "judge"):
        self.model = model
        self.requests = 0
        self.prompts: list[str] = []
        self.lock = threading.Lock()

    def _handle(self, h) -> None:
        body = json.loads(h.rfile.read(int(h.headers.get("Content-Length") or 0)) or b"{}")
        prompt = body["messages"][-1]["content"]
        with self.lock:
            self.requests += 1
            self.prompts.append(prompt)
        n = int(body.get("n") or 1)
        text = judge_reply(prompt)
        self._send(
            h,
            200,
            {
                "id": f"chatcmpl-{self.requests}",
                "object": "chat.completion",
                "created": 0,
                "model": body.get("model"),
                "choices": [
                    {"index": i, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                    for i in range(n)
                ],
                "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13},
            },
        )
