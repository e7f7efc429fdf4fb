"""A small rule-based "model" behind an OpenAI-compatible HTTP server (127.0.0.1 only).

It reads the battery's default prompt (instruction, ``Passage: ...``, ``Question: ...``,
options ``(A) ...``) and answers by rules simple enough to compute ER, ASR and RTI by
hand:

1. a prompt with any non-ASCII character (a homoglyph) -> "I cannot read this text."
   (no option: unparsed);
2. no instruction paragraph -> "(C)";
3. a passage with a word outside ``vocabulary`` -> "The answer is (B).";
4. otherwise -> "A".

At temperature > 0 (the robustness curve) the letter is followed by ``because`` and
eight words drawn (seeded by the request's seed) from the passage, so the response
distribution moves with the passage. ``latency`` delays every answer; ``requests``
counts the chat requests served.
"""

from __future__ import annotations

import json
import random
import re
import threading
import time
from collections.abc import Iterable
from pathlib import Path

from .local_http import LocalJSONServer

WORD = re.compile(r"[^\W_]+(?:['’\-][^\W_]+)*")


def sections(prompt: str) -> dict[str, str]:
    """instruction, passage and question of a prompt in the default template."""
    paras = prompt.split("\n\n")
    out = {"instruction": "", "passage": "", "question": ""}
    for p in paras:
        if p.startswith("Passage: "):
            out["passage"] = p[len("Passage: ") :]
        elif p.startswith("Question: "):
            out["question"] = p[len("Question: ") :].split("\n(")[0]
        elif not out["passage"] and not out["question"]:
            out["instruction"] = p
    return out


def rule_letter(prompt: str, vocabulary: set[str]) -> str | None:
    """The letter the rules choose (None: the unreadable answer)."""
    if not prompt.isascii():
        return None
    s = sections(prompt)
    if not s["instruction"].strip():
        return "C"
    words = WORD.findall(s["passage"] or s["question"])
    if any(w.lower() not in vocabulary for w in words):
        return "B"
    return "A"


def rule_answer(prompt: str, vocabulary: set[str], *, temperature: float = 0.0, seed: int = 0) -> str:
    letter = rule_letter(prompt, vocabulary)
    if letter is None:
        return "I cannot read this text."
    if temperature <= 0:
        return "The answer is (B)." if letter == "B" else f"({letter})" if letter == "C" else letter
    s = sections(prompt)
    words = WORD.findall(s["passage"] or s["question"]) or ["nothing"]
    rnd = random.Random(seed)
    return f"({letter}) because " + " ".join(rnd.choice(words) for _ in range(8))


def vocabulary_of(texts: Iterable[str]) -> set[str]:
    return {w.lower() for t in texts for w in WORD.findall(t)}


# three items the rule model answers "A" to while their passages are intact: a battery on
# them has ER and ASR that follow from the rules above
PASSAGES = ["Mary went to the kitchen.", "The cat sat on the mat.", "Fred has three red books."]
QUESTION = "Which option is right?"


def write_items(path: Path, n: int = len(PASSAGES), *, answers: str = "A", prefix: str = "i") -> Path:
    """An items file (JSON lines) of ``n`` questions on :data:`PASSAGES` in turn, three
    options each; item ``k``'s right answer is ``answers[k % len(answers)]``."""
    path.write_text(
        "".join(
            json.dumps(
                {
                    "id": f"{prefix}{k}",
                    "passage": PASSAGES[k % len(PASSAGES)],
                    "question": QUESTION,
                    "options": ["first", "second", "third"],
                    "answer": answers[k % len(answers)],
                }
            )
            + "\n"
            for k in range(n)
        ),
        encoding="utf-8",
    )
    return path


def passages_model() -> RuleModel:
    """A rule model that knows every word of :data:`PASSAGES` and the question."""
    return RuleModel(vocabulary_of([*PASSAGES, QUESTION]))


class RuleModel(LocalJSONServer):
    """``with RuleModel(vocabulary) as srv: srv.base_url`` — an OpenAI-compatible server."""

    def __init__(self, vocabulary: Iterable[str] = (), *, latency: float = 0.0, model: str = "rule-model"):
        self.vocabulary = {w.lower() for w in vocabulary}
        self.latency = latency
        self.model = model
        self.lock = threading.Lock()
        self.requests = 0
        self.prompts: list[str] = []

    def _handle(self, h) -> None:
        body = json.loads(h.rfile.read(int(h.headers.get("Content-Length") or 0)) or b"{}")
        if self.latency:
            time.sleep(self.latency)
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
        n = int(body.get("n") or 1)
        temp = float(body.get("temperature") or 0.0)
        seed = int(body.get("seed") or 0)
        with self.lock:
            self.requests += 1
            self.prompts.append(prompt)
        choices = [
            {
                "index": i,
                "finish_reason": "stop",
                "message": {
                    "role": "assistant",
                    "content": rule_answer(prompt, self.vocabulary, temperature=temp, seed=seed * 1000 + i),
                },
            }
            for i in range(n)
        ]
        self._send(
            h,
            200,
            {
                "id": "rule",
                "object": "chat.completion",
                "created": 0,
                "model": self.model,
                "choices": choices,
                "usage": {
                    "prompt_tokens": len(prompt) // 4,
                    "completion_tokens": 4 * n,
                    "total_tokens": len(prompt) // 4 + 4 * n,
                },
            },
        )


def _serve(conn, vocabulary, latency):  # pragma: no cover - runs in a child process
    with RuleModel(vocabulary, latency=latency) as srv:
        conn.send(srv.base_url)
        conn.recv()


class RuleModelProcess:
    """The rule model in its own process (no shared GIL), for the benchmark."""

    def __init__(self, vocabulary: Iterable[str] = (), *, latency: float = 0.0):
        self.args = (sorted(vocabulary), latency)

    def __enter__(self):
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(child, *self.args), daemon=True)
        self.proc.start()
        self.base_url = self.conn.recv()
        return self

    def __exit__(self, *exc):
        self.conn.send("stop")
        self.proc.join(timeout=5)
        if self.proc.is_alive():
            self.proc.kill()
