"""A rule-based survey respondent behind an OpenAI-compatible server (127.0.0.1 only),
built on the tests' :class:`~tests.rule_model.RuleModel` server.

It reads the simulation runner's prompt (``(A) option`` lines, ``- Field: value`` persona
lines) and answers from the request's ``seed`` s, by rules simple enough to count by hand
(:func:`expected_choice`):

* s % 10 == 0 -> "I would rather not say." (names no option: unparsed);
* s % 10 == 1 -> the text of option (s // 10) % d, without its letter;
* otherwise   -> "(X)" with X = A when the persona says "Sex: Female", else option
  (s // 10) % d;
* a question containing "UNREADABLE" is always answered "Hmm." (unparsed).
"""

from __future__ import annotations

import json
import re

from .rule_model import RuleModel

OPTION = re.compile(r"^\(([A-Z])\) (.*)$", re.MULTILINE)


def expected_choice(prompt: str, seed: int) -> int | None:
    """The option index the rules choose (None: an unparsed answer)."""
    options = OPTION.findall(prompt)
    if "UNREADABLE" in prompt or seed % 10 == 0:
        return None
    if seed % 10 != 1 and "- Sex: Female" in prompt:
        return 0
    return (seed // 10) % len(options)


def survey_answer(prompt: str, seed: int) -> str:
    options = OPTION.findall(prompt)
    choice = expected_choice(prompt, seed)
    if choice is None:
        return "Hmm." if "UNREADABLE" in prompt else "I would rather not say."
    if seed % 10 == 1:
        return options[choice][1]
    return f"({options[choice][0]})"


class SurveyModel(RuleModel):
    """``with SurveyModel() as srv: srv.base_url``; ``srv.requests`` counts chat requests."""

    def __init__(self, *, latency: float = 0.0, model: str = "survey-model"):
        super().__init__((), latency=latency, model=model)

    def _handle(self, h) -> None:
        body = json.loads(h.rfile.read(int(h.headers.get("Content-Length") or 0)) or b"{}")
        if body.get("model") != self.model:
            return self._send(
                h,
                404,
                {
                    "error": {
                        "message": f"The model `{body.get('model')}` does not exist",
                        "type": "model_not_found",
                    }
                },
            )
        prompt = body["messages"][-1]["content"]
        seed = int(body.get("seed") or 0)
        n = int(body.get("n") or 1)
        with self.lock:
            self.requests += 1
            self.prompts.append(prompt)
        choices = [
            {
                "index": i,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": survey_answer(prompt, seed + i)},
            }
            for i in range(n)
        ]
        self._send(
            h,
            200,
            {
                "id": "survey",
                "object": "chat.completion",
                "created": 0,
                "model": self.model,
                "choices": choices,
                "usage": {
                    "prompt_tokens": len(prompt) // 4,
                    "completion_tokens": 3 * n,
                    "total_tokens": len(prompt) // 4 + 3 * n,
                },
            },
        )
