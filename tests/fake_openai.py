"""A local OpenAI-compatible HTTP server for tests and benchmarks (127.0.0.1 only).

It answers /v1/chat/completions and /v1/embeddings, and misbehaves on
schedule: ``faults`` maps a request number (1-based, counting every request)
to ``"429"``, ``"500"``, ``"slow"`` or ``"malformed"``. It records every
sample it delivered, so tests can check that each arrives exactly once.
"""
from __future__ import annotations

import hashlib
import json
import random
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np

CALM = ("take statins daily exercise regularly eat vegetables reduce salt monitor blood "
        "pressure see your doctor stop smoking lower cholesterol follow NICE guidance").split()
FUNNY = ("banana joke clown pie laugh silly honk rubber chicken pun circus giggle tickle "
         "whoopee cushion knock").split()


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


class FakeOpenAI:
    def __init__(self, *, api_key: str | None = None, models=("fake-model",), faults=None,
                 latency: float = 0.0, slow_seconds: float = 3.0, retry_after: str = "0.05",
                 max_prompt_chars: int = 10_000, support_n: bool = True):
        self.api_key = api_key
        self.models = set(models)
        self.faults = dict(faults or {})
        self.latency = latency
        self.slow_seconds = slow_seconds
        self.retry_after = retry_after
        self.max_prompt_chars = max_prompt_chars
        self.support_n = support_n
        self.lock = threading.Lock()
        self.requests = 0
        self.chat_ok = 0
        self.embedding_ok = 0
        self.delivered: list[tuple[str, int, int]] = []  # (prompt, seed, choice index)
        self.request_times: list[float] = []
        self.auth_headers: list[str] = []
        self.server = None

    # ---------------------------------------------------------------- lifecycle
    def __enter__(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self):
                super().setup()
                # headers and body go out in two writes: without NODELAY, Nagle's algorithm
                # and delayed ACKs add ~40 ms to every response
                import socket

                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                fake._handle(self)

        class Server(ThreadingHTTPServer):
            request_queue_size = 256  # the default backlog of 5 serializes concurrent clients
            daemon_threads = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    # ---------------------------------------------------------------- handling
    def _send(self, h, status: int, body, headers=None):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        try:
            h.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _error(self, h, status, message, typ="invalid_request_error", headers=None):
        self._send(h, status, {"error": {"message": message, "type": typ, "code": None}}, headers)

    def _handle(self, h):
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length)
        with self.lock:
            self.requests += 1
            n_req = self.requests
            self.request_times.append(time.monotonic())
            self.auth_headers.append(h.headers.get("Authorization", ""))
        fault = self.faults.get(n_req)
        if self.latency:
            time.sleep(self.latency)
        if fault == "429":
            return self._error(h, 429, "Rate limit reached", "rate_limit_error",
                               {"Retry-After": self.retry_after})
        if fault == "500":
            return self._error(h, 500, "The server had an error", "server_error")
        if fault == "slow":
            time.sleep(self.slow_seconds)
        if fault == "malformed":
            return self._send(h, 200, b'{"id": "x", "choices": [ {"index": 0, "mess')
        if self.api_key is not None and h.headers.get("Authorization") != f"Bearer {self.api_key}":
            return self._error(h, 401, "Incorrect API key provided", "invalid_api_key")
        body = json.loads(raw or b"{}")
        if body.get("model") not in self.models:
            return self._error(h, 404, f"The model `{body.get('model')}` does not exist",
                               "model_not_found")
        if h.path.endswith("/embeddings"):
            inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
            with self.lock:
                self.embedding_ok += 1
            return self._send(h, 200, {"object": "list", "model": body["model"],
                                       "data": [{"object": "embedding", "index": i,
                                                 "embedding": fake_embedding(t)}
                                                for i, t in enumerate(inputs)],
                                       "usage": {"prompt_tokens": 1, "total_tokens": 1}})
        prompt = body["messages"][-1]["content"]
        if len(prompt) > self.max_prompt_chars:
            return self._error(h, 400, "This model's maximum context length is 100 tokens.")
        n = int(body.get("n") or 1)
        if n > 1 and not self.support_n:
            return self._error(h, 400, "'n' must be 1 for this model")
        seed = int(body.get("seed") or 0)
        choices = []
        for i in range(n):
            text = fake_text(prompt, seed, i)
            choices.append({"index": i, "message": {"role": "assistant", "content": text},
                            "finish_reason": "stop"})
        with self.lock:
            self.chat_ok += 1
            self.delivered.extend((prompt, seed, i) for i in range(n))
        self._send(h, 200, {"id": f"chatcmpl-{n_req}", "object": "chat.completion",
                            "created": int(time.time()), "model": body["model"],
                            "choices": choices,
                            "usage": {"prompt_tokens": len(prompt) // 4 + 1,
                                      "completion_tokens": 12 * n,
                                      "total_tokens": len(prompt) // 4 + 1 + 12 * n}})


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
        self.proc = ctx.Process(target=serve_forever_in_subprocess, args=(child, self.kwargs),
                                daemon=True)
        self.proc.start()
        self.base_url = self.conn.recv()
        return self

    def __exit__(self, *exc):
        self.conn.send("stop")
        self.proc.join(timeout=5)
        if self.proc.is_alive():
            self.proc.kill()
