"""What the tests' OpenAI-compatible servers share: an HTTP/1.1 server on 127.0.0.1 (a free
port) in a daemon thread, POSTs handed to ``self._handle(handler)``, JSON answers.

    class MyServer(LocalJSONServer):
        def _handle(self, h):
            self._send(h, 200, {"ok": True})

    with MyServer() as srv:
        srv.base_url          # http://127.0.0.1:PORT/v1
"""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class LocalJSONServer:
    """Base of the tests' servers: start on enter, stop on exit, ``_send`` a JSON body."""

    def __enter__(self):
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self):
                super().setup()
                # headers and body go out in two writes: without NODELAY, Nagle's algorithm
                # and delayed ACKs add ~40 ms to every response
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                owner._handle(self)

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

    def _handle(self, h) -> None:  # pragma: no cover - each server answers its own way
        raise NotImplementedError

    def _send(self, h, status: int, body, headers=None) -> None:
        """``body`` (JSON-ready, or bytes as they are) with ``status`` and extra ``headers``."""
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


def stop_process(proc, timeout: float = 10) -> None:
    """Terminate a server started by a test, and kill it if it does not stop in time."""
    import subprocess

    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
