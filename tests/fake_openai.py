"""A local OpenAI-compatible HTTP server for tests and benchmarks (127.0.0.1 only).

It answers /v1/chat/completions and /v1/embeddings, and misbehaves on
schedule: ``faults`` maps a request number (1-based, counting every request)
to a fault, and ``fault`` (if given) applies to every request without an entry.
It records every sample it delivered, so tests can check that each arrives
exactly once.

Faults (see :data:`FAULTS`): transport ``"429"``, ``"500"``, ``"slow"``,
``"malformed"`` (truncated JSON), ``"trickle"`` (a byte every
``trickle_seconds``: every read is quick, the whole never ends), ``"huge"``
(``huge_bytes`` of body, chunked: no Content-Length to refuse it by),
``"junk"`` (not JSON), ``"ansi"`` (a 500 whose message holds terminal escapes),
``"retry_after_long"`` (429 with ``Retry-After: 3600``), ``"retry_after_junk"``
(429 with ``Retry-After: soon``); chat answers ``"few_choices"`` (one choice
whatever ``n``), ``"refuse_n"`` (400 for ``n > 1``), ``"no_message"``,
``"nonstring_content"``, ``"empty_content"``, ``"choices_str"``
(``"choices": "abc"``), ``"no_choices"``, ``"error_200"``; embedding answers
``"nan_embedding"``, ``"zero_embedding"``, ``"uneven_embedding"``,
``"few_embeddings"``.

Provenance: ``system_fingerprint`` and ``served_model`` (a string, or a function of the
request number, 1-based) set what each chat answer says answered it; a test may change
them between runs. Unset: no fingerprint, and the requested model name.
"""

from __future__ import annotations

import hashlib
import json
import random
import threading
import time

import numpy as np

from .local_http import LocalJSONServer

CALM = (
    "take statins daily exercise regularly eat vegetables reduce salt monitor blood "
    "pressure see your doctor stop smoking lower cholesterol follow NICE guidance"
).split()
FAULTS = (
    "429",
    "500",
    "slow",
    "malformed",
    "trickle",
    "huge",
    "junk",
    "ansi",
    "retry_after_long",
    "retry_after_junk",
    "few_choices",
    "refuse_n",
    "no_message",
    "nonstring_content",
    "empty_content",
    "choices_str",
    "no_choices",
    "error_200",
    "nan_embedding",
    "zero_embedding",
    "uneven_embedding",
    "few_embeddings",
)
GARBAGE = ("no_message", "nonstring_content", "empty_content", "choices_str", "no_choices")
FUNNY = (
    "banana joke clown pie laugh silly honk rubber chicken pun circus giggle tickle whoopee cushion knock"
).split()


def fake_text(prompt: str, seed: int, index: int = 0) -> str:
    rnd = random.Random(f"{prompt}|{seed}|{index}")
    vocab = FUNNY if "comedian" in prompt.lower() else CALM
    return " ".join(rnd.choice(vocab) for _ in range(rnd.randint(8, 16)))


def fake_embedding(text: str, dim: int = 32) -> list[float]:
    v = np.zeros(dim)
    for w in text.split():
        h = int.from_bytes(hashlib.md5(w.encode()).digest()[:4], "little")
        v[h % dim] += 1.0
    v += 1e-3
    return (v / np.linalg.norm(v)).tolist()


class FakeOpenAI(LocalJSONServer):
    def __init__(
        self,
        *,
        api_key: str | None = None,
        models=("fake-model",),
        faults=None,
        latency: float = 0.0,
        slow_seconds: float = 3.0,
        retry_after: str = "0.05",
        max_prompt_chars: int = 10_000,
        support_n: bool = True,
        fault: str | None = None,
        trickle_seconds: float = 0.2,
        huge_bytes: int = 20 * 1024**2,
        system_fingerprint=None,
        served_model=None,
        slow_until_retry: bool = False,
    ):
        self.api_key = api_key
        self.models = set(models)
        self.faults = dict(faults or {})
        self.latency = latency
        self.slow_seconds = slow_seconds
        self.retry_after = retry_after
        self.max_prompt_chars = max_prompt_chars
        self.support_n = support_n
        self.fault = fault
        self.trickle_seconds = trickle_seconds
        self.huge_bytes = huge_bytes
        self.system_fingerprint = system_fingerprint
        self.served_model = served_model
        # a 'slow' answer waits (at most slow_seconds) until the same request comes again
        self.slow_until_retry = slow_until_retry
        self._asked: dict[bytes, threading.Event] = {}
        for f in [*self.faults.values(), fault]:
            assert f is None or f in FAULTS, f
        self.lock = threading.Lock()
        self.requests = 0
        self.chat_ok = 0
        self.embedding_ok = 0
        self.huge_sent_whole = 0  # 'huge' answers written to the end (the client read them)
        self.delivered: list[tuple[str, int, int]] = []  # (prompt, seed, choice index)
        self.request_times: list[float] = []
        self.auth_headers: list[str] = []
        self.server = None
        self._in_flight = 0
        self._idle = threading.Condition(self.lock)

    # ---------------------------------------------------------------- handling
    def _trickle(self, h, data: bytes):
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        try:
            for i in range(len(data)):
                h.wfile.write(data[i : i + 1])
                h.wfile.flush()
                time.sleep(self.trickle_seconds)
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass

    def _huge(self, h):
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        chunk = b'{"pad": "' + b"x" * (1024**2 - 20)
        try:
            sent = 0
            while sent < self.huge_bytes:
                h.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                sent += len(chunk)
                chunk = b"x" * (1024**2)
            h.wfile.write(b'5\r\n"}]}}\r\n0\r\n\r\n')
            h.wfile.flush()
            with self.lock:
                self.huge_sent_whole += 1
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass
        h.close_connection = True

    def _error(self, h, status, message, typ="invalid_request_error", headers=None):
        self._send(h, status, {"error": {"message": message, "type": typ, "code": None}}, headers)

    def wait_idle(self, timeout: float = 60.0) -> None:
        """Wait until no request is being answered (a client that gave up leaves the server
        still answering what it had asked: those answers arrive late, or never)."""
        with self._idle:
            assert self._idle.wait_for(lambda: self._in_flight == 0, timeout), "the server stayed busy"

    def _handle(self, h):
        with self.lock:
            self._in_flight += 1
        try:
            self._respond(h)
        finally:
            with self._idle:
                self._in_flight -= 1
                self._idle.notify_all()

    def _respond(self, h):
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length)
        with self.lock:
            self.requests += 1
            n_req = self.requests
            self.request_times.append(time.monotonic())
            self.auth_headers.append(h.headers.get("Authorization", ""))
            asked_again = self._asked.get(raw)
            if asked_again is None:
                asked_again = self._asked[raw] = threading.Event()
            else:
                asked_again.set()
        fault = self.faults.get(n_req, self.fault)
        if self.latency:
            time.sleep(self.latency)
        if fault == "429":
            return self._error(
                h, 429, "Rate limit reached", "rate_limit_error", {"Retry-After": self.retry_after}
            )
        if fault == "500":
            return self._error(h, 500, "The server had an error", "server_error")
        if fault == "slow":
            if self.slow_until_retry:
                asked_again.wait(self.slow_seconds)
            else:
                time.sleep(self.slow_seconds)
        if fault == "malformed":
            return self._send(h, 200, b'{"id": "x", "choices": [ {"index": 0, "mess')
        if fault == "retry_after_long":
            return self._error(h, 429, "Rate limit reached", "rate_limit_error", {"Retry-After": "3600"})
        if fault == "retry_after_junk":
            return self._error(h, 429, "Rate limit reached", "rate_limit_error", {"Retry-After": "soon"})
        if fault == "junk":
            return self._send(h, 200, b"<html><body>502 Bad Gateway</body></html>")
        if fault == "ansi":
            return self._error(
                h, 500, "\x1b[2J\x1b[31mboom\x1b[0m\x1b]0;pwned\x07 \x07bell\x00", "server_error"
            )
        if fault == "error_200":
            return self._send(h, 200, {"error": {"message": "overloaded", "type": "server_error"}})
        if fault == "huge":
            return self._huge(h)
        if self.api_key is not None and h.headers.get("Authorization") != f"Bearer {self.api_key}":
            return self._error(h, 401, "Incorrect API key provided", "invalid_api_key")
        body = json.loads(raw or b"{}")
        if body.get("model") not in self.models:
            return self._error(h, 404, f"The model `{body.get('model')}` does not exist", "model_not_found")
        if h.path.endswith("/embeddings"):
            inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
            vectors = [fake_embedding(t) for t in inputs]
            if fault == "nan_embedding":
                vectors[0] = [float("nan")] * len(vectors[0])
            elif fault == "zero_embedding":
                vectors[-1] = [0.0] * len(vectors[-1])
            elif fault == "uneven_embedding":
                vectors[-1] = vectors[-1][:-3]
            elif fault == "few_embeddings":
                vectors = vectors[:-1]
            body = {
                "object": "list",
                "model": body["model"],
                "data": [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)],
                "usage": {"prompt_tokens": 1, "total_tokens": 1},
            }
            if fault == "trickle":
                return self._trickle(h, json.dumps(body).encode())
            if not (fault or "").endswith(("_embedding", "_embeddings")):
                with self.lock:
                    self.embedding_ok += 1
            return self._send(h, 200, json.dumps(body).encode())  # NaN goes out as NaN
        prompt = body["messages"][-1]["content"]
        if len(prompt) > self.max_prompt_chars:
            return self._error(h, 400, "This model's maximum context length is 100 tokens.")
        n = int(body.get("n") or 1)
        if n > 1 and (not self.support_n or fault == "refuse_n"):
            return self._error(h, 400, "'n' must be 1 for this model")
        if fault == "few_choices":
            n = 1
        seed = int(body.get("seed") or 0)
        choices = []
        for i in range(n):
            text = fake_text(prompt, seed, i)
            choices.append(
                {"index": i, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
            )
        if fault == "no_message":
            del choices[0]["message"]
        elif fault == "nonstring_content":
            choices[0]["message"]["content"] = [{"type": "text", "text": "x"}]
        elif fault == "empty_content":
            choices[0]["message"]["content"] = ""
        answer = {
            "id": f"chatcmpl-{n_req}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body["model"],
            "choices": choices,
            "usage": {
                "prompt_tokens": len(prompt) // 4 + 1,
                "completion_tokens": 12 * n,
                "total_tokens": len(prompt) // 4 + 1 + 12 * n,
            },
        }
        for field, how in (("system_fingerprint", self.system_fingerprint), ("model", self.served_model)):
            value = how(n_req) if callable(how) else how
            if value is not None:
                answer[field] = value
        if fault == "choices_str":
            answer["choices"] = "abc"
        elif fault == "no_choices":
            answer["choices"] = []
        if fault == "trickle":
            return self._trickle(h, json.dumps(answer).encode())
        with self.lock:
            self.chat_ok += 1
            if fault not in GARBAGE:  # only good samples count as delivered
                self.delivered.extend((prompt, seed, i) for i in range(n))
        self._send(h, 200, answer)


def serve_forever_in_subprocess(conn, kwargs):  # pragma: no cover - runs in a child process
    """Target for multiprocessing: run a FakeOpenAI, send its base_url, serve until killed."""
    with FakeOpenAI(**kwargs) as srv:
        conn.send(srv.base_url)
        conn.recv()  # blocks until the parent says stop


class FakeOpenAIProcess:
    """The fake server in its own process, so its Python work does not share our GIL
    (as a real server would not). Used by the concurrency benchmark."""

    def __init__(self, **kwargs):
        self.kwargs = kwargs

    def __enter__(self):
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=serve_forever_in_subprocess, args=(child, self.kwargs), daemon=True)
        self.proc.start()
        self.base_url = self.conn.recv()
        return self

    def __exit__(self, *exc):
        self.conn.send("stop")
        self.proc.join(timeout=5)
        if self.proc.is_alive():
            self.proc.kill()


def write_spec(path, base_url: str, *, samples: int, concurrency: int, name: str | None = None):
    """An audit spec of :class:`FakeOpenAI`'s chat and embedding models at ``base_url``
    (``fake-model``, ``fake-embed``): one comedian perturbation of a short prompt, k =
    ``samples``, 99 permutations. Written to ``path``, which is returned."""
    path.write_text(
        (f"name: {name}\n" if name else "")
        + f"""model: {{backend: openai, name: fake-model, base_url: "{base_url}", concurrency: {concurrency}}}
embedder: {{backend: openai, name: fake-embed, base_url: "{base_url}"}}
samples: {samples}
permutations: 99
base: {{prompt: "John is 70"}}
perturbations: [{{name: p, prompt: "Act as a comedian. John is 70"}}]
"""
    )
    return path
