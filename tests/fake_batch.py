"""A fake OpenAI Batch API on 127.0.0.1 (files and batches), on top of the fake chat server.

    with FakeBatch(models=("fake-model",), polls_until_done=2) as srv:
        srv.base_url              # also answers chat completions and embeddings live

``POST /v1/files`` (multipart, purpose "batch") keeps the upload; ``POST /v1/batches``
creates a job that is ``validating``, then ``in_progress`` and, at the ``polls_until_done``-th
``GET /v1/batches/{id}``, ends as ``outcome`` ("completed", "expired", "failed" or
"cancelled"; never while ``hold`` is True). Its output file answers each line as the live
chat server would (the same text for the same prompt and seed); lines in ``fail_lines``
(0-based) go to the error file with a 500, lines in ``malformed_lines`` get a 200 without
choices, and an expired or cancelled job answers only its first ``answered`` lines.
``answer(prompt, seed)`` gives an answer's text (the fake chat server's by default).
"""

from __future__ import annotations

import email.parser
import email.policy
import json
import time

from .fake_openai import FakeOpenAI, fake_text


class FakeBatch(FakeOpenAI):
    def __init__(
        self,
        *,
        polls_until_done: int = 2,
        outcome: str = "completed",
        fail_lines=(),
        malformed_lines=(),
        answered: int = 0,
        hold: bool = False,
        answer=fake_text,
        **kw,
    ):
        super().__init__(**kw)
        self.answer_text = answer  # (prompt, seed) -> the answer's text
        self.polls_until_done = polls_until_done
        self.outcome = outcome
        self.fail_lines = set(fail_lines)
        self.malformed_lines = set(malformed_lines)
        self.answered = answered
        self.hold = hold
        self.files: dict[str, bytes] = {}
        self.batches: dict[str, dict] = {}
        self.created: list[dict] = []  # the create requests, in order
        self.uploads = 0
        self.polls = 0

    def __enter__(self):
        super().__enter__()
        handler = self.server.RequestHandlerClass
        handler.do_GET = handler.do_POST  # GETs also go to _handle
        return self

    # ---------------------------------------------------------------- handling
    def _handle(self, h):
        path = h.path.split("?")[0]
        if "/files" not in path and "/batches" not in path:
            return super()._handle(h)
        raw = h.rfile.read(int(h.headers.get("Content-Length") or 0))
        if self.api_key is not None and h.headers.get("Authorization") != f"Bearer {self.api_key}":
            return self._error(h, 401, "Incorrect API key provided", "invalid_api_key")
        parts = path.rstrip("/").split("/")
        with self.lock:
            if h.command == "POST" and parts[-1] == "files":
                return self._upload(h, raw)
            if h.command == "GET" and parts[-1] == "content" and parts[-2] in self.files:
                return self._send(h, 200, self.files[parts[-2]])
            if h.command == "POST" and parts[-1] == "batches":
                return self._create(h, json.loads(raw))
            if h.command == "GET" and parts[-2] == "batches" and parts[-1] in self.batches:
                self.polls += 1
                return self._send(h, 200, self._advance(self.batches[parts[-1]]))
        return self._error(h, 404, f"No such object: {path}")

    def _upload(self, h, raw: bytes):
        msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            f"Content-Type: {h.headers['Content-Type']}\r\n\r\n".encode() + raw
        )
        fields = {
            p.get_param("name", header="content-disposition"): p.get_payload(decode=True)
            for p in msg.iter_parts()
        }
        if fields.get("purpose") != b"batch" or "file" not in fields:
            return self._error(h, 400, "purpose must be 'batch' and a file must be given")
        self.uploads += 1
        fid = f"file-{len(self.files) + 1}"
        self.files[fid] = fields["file"]
        self._send(
            h,
            200,
            {
                "id": fid,
                "object": "file",
                "bytes": len(fields["file"]),
                "created_at": int(time.time()),
                "filename": "batch.jsonl",
                "purpose": "batch",
                "status": "processed",
            },
        )

    def _create(self, h, body: dict):
        self.created.append(body)
        if body.get("input_file_id") not in self.files:
            return self._error(h, 400, "no such input file")
        bid = f"batch_{len(self.created)}"  # one per create request, never reused
        n = len(self.lines(body["input_file_id"]))
        self.batches[bid] = {
            "id": bid,
            "object": "batch",
            "endpoint": body.get("endpoint"),
            "input_file_id": body["input_file_id"],
            "completion_window": body.get("completion_window"),
            "created_at": int(time.time()),
            "status": "validating",
            "output_file_id": None,
            "error_file_id": None,
            "errors": None,
            "polls": 0,
            "request_counts": {"total": n, "completed": 0, "failed": 0},
        }
        self._send(h, 200, self._public(self.batches[bid]))

    def lines(self, file_id: str) -> list[dict]:
        return [json.loads(x) for x in self.files[file_id].decode().splitlines() if x.strip()]

    @staticmethod
    def _public(b: dict) -> dict:
        return {k: v for k, v in b.items() if k != "polls"}

    def _advance(self, b: dict) -> dict:
        if b["status"] in ("completed", "failed", "expired", "cancelled"):
            return self._public(b)
        b["polls"] += 1
        if self.hold or b["polls"] < self.polls_until_done:
            b["status"] = "in_progress"
            return self._public(b)
        if self.outcome == "failed":
            b["status"] = "failed"
            b["errors"] = {
                "object": "list",
                "data": [{"code": "invalid_request", "message": "The input file is invalid."}],
            }
            return self._public(b)
        out, err = [], []
        for i, line in enumerate(self.lines(b["input_file_id"])):
            cid = line["custom_id"]
            if self.outcome != "completed" and i >= self.answered:
                err.append(
                    {
                        "id": f"req_{i}",
                        "custom_id": cid,
                        "response": None,
                        "error": {
                            "code": f"batch_{self.outcome}",
                            "message": f"The batch was {self.outcome}.",
                        },
                    }
                )
            elif i in self.fail_lines:
                err.append(
                    {
                        "id": f"req_{i}",
                        "custom_id": cid,
                        "error": None,
                        "response": {
                            "status_code": 500,
                            "body": {"error": {"message": "The server had an error", "type": "server_error"}},
                        },
                    }
                )
            else:
                body = {"choices": []} if i in self.malformed_lines else self._answer(line["body"])
                out.append(
                    {
                        "id": f"req_{i}",
                        "custom_id": cid,
                        "error": None,
                        "response": {"status_code": 200, "body": body},
                    }
                )
        b["status"] = self.outcome
        b["request_counts"] = {"total": len(out) + len(err), "completed": len(out), "failed": len(err)}
        for kind, rows in (("output_file_id", out), ("error_file_id", err)):
            if rows:
                fid = f"file-{len(self.files) + 1}"
                self.files[fid] = "".join(json.dumps(r) + "\n" for r in rows).encode()
                b[kind] = fid
        return self._public(b)

    def _answer(self, body: dict) -> dict:
        """The chat completion the live fake server gives for ``body``."""
        prompt = body["messages"][-1]["content"]
        text = self.answer_text(prompt, int(body.get("seed") or 0))
        return {
            "id": "chatcmpl-batch",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "system_fingerprint": "fp_batch",
            "choices": [
                {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}
            ],
            "usage": {
                "prompt_tokens": len(prompt) // 4 + 1,
                "completion_tokens": 12,
                "total_tokens": len(prompt) // 4 + 13,
            },
        }
