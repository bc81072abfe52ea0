"""A scripted JSON-over-HTTP server on 127.0.0.1: what the model API stubs share.

tests/messages_stub.py (Anthropic's Messages API) and tests/chat_stub.py (OpenAI-compatible chat
completions) each add the bodies of their API on top; this holds the server itself. Every POST is
recorded (path, raw body, headers, decoded JSON) and answered by the next scripted step: a body, raw
bytes, or a function of the request, with a status and an optional delay. An exhausted script answers
400 with the API's own error shape, so a test that sends one request too many fails loudly.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Body = dict[str, Any] | bytes | Callable[[dict[str, Any]], dict[str, Any]]


@dataclass
class Scripted:
    status: int
    body: Body
    delay_s: float = 0.0


class JsonStub:
    """Start with `start()`, stop with `stop()` (the API stubs' fixtures do both)."""

    def __init__(
        self, url_suffix: str, exhausted: dict[str, Any], reply_headers: Callable[[int], dict[str, str]] | None = None
    ) -> None:
        self.script: list[Scripted] = []
        self.requests: list[dict[str, Any]] = []
        self.raw: list[bytes] = []
        self.headers: list[dict[str, str]] = []
        self.paths: list[str] = []
        self._lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                with stub._lock:
                    stub.paths.append(self.path)
                    stub.raw.append(body)
                    stub.headers.append({k.lower(): v for k, v in self.headers.items()})
                    stub.requests.append(json.loads(body))
                    step = stub.script.pop(0) if stub.script else Scripted(400, exhausted)
                    reply = step.body(stub.requests[-1]) if callable(step.body) else step.body
                    extra = reply_headers(len(stub.requests)) if reply_headers else {}
                if step.delay_s:
                    time.sleep(step.delay_s)
                payload = reply if isinstance(reply, bytes) else json.dumps(reply).encode()
                try:
                    self.send_response(step.status)
                    self.send_header("content-type", "application/json")
                    for name, value in extra.items():
                        self.send_header(name, value)
                    self.send_header("content-length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}{url_suffix}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def reply(self, *bodies: Body) -> None:
        self.script.extend(Scripted(200, b) for b in bodies)

    def fail(self, status: int, body: Body, delay_s: float = 0.0) -> None:
        self.script.append(Scripted(status, body, delay_s))

    def slow(self, delay_s: float, body: Body) -> None:
        self.script.append(Scripted(200, body, delay_s))
