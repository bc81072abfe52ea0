"""A local HTTP server that speaks OpenAI's chat completions API with tools, for the adapter's tests.

The role tests/messages_stub.py plays for the Anthropic adapter: a real HTTP server on 127.0.0.1
answering `POST /v1/chat/completions` the way vLLM, Ollama and llama.cpp's server do, so the
adapter's encoding, HTTP handling, timeouts and parsing run exactly as against a real server. A test
scripts the replies (bodies, raw bytes, functions of the request, delays) and inspects the requests.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

Body = dict[str, Any] | bytes | Callable[[dict[str, Any]], dict[str, Any]]

_ids = itertools.count(1)


@dataclass
class Scripted:
    status: int
    body: Body
    delay_s: float = 0.0


def completion(message: dict[str, Any], finish_reason: str = "tool_calls") -> dict[str, Any]:
    """A chat completion body in the real shape (one choice)."""
    return {
        "id": f"chatcmpl-stub{next(_ids):04d}",
        "object": "chat.completion",
        "created": 1_780_000_000,
        "model": "local-stub",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}],
        "usage": {"prompt_tokens": 321, "completion_tokens": 42, "total_tokens": 363},
    }


def tool_call(name: str, arguments: dict[str, Any] | str | Any) -> dict[str, Any]:
    """One entry of message.tool_calls; arguments are JSON-encoded unless given as a string already."""
    encoded = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": f"call_stub{next(_ids):04d}", "type": "function", "function": {"name": name, "arguments": encoded}}


def calls(*entries: dict[str, Any], content: str | None = None) -> dict[str, Any]:
    """A completion whose assistant message carries these tool calls."""
    return completion({"role": "assistant", "content": content, "tool_calls": list(entries)})


def says(content: str, finish_reason: str = "stop") -> dict[str, Any]:
    """A completion with text only (what a small model does when it ignores tool_choice)."""
    return completion({"role": "assistant", "content": content}, finish_reason)


def api_error(kind: str, detail: str, code: int | None = None) -> dict[str, Any]:
    return {"error": {"message": detail, "type": kind, "param": None, "code": code}}


class ChatStub:
    """POST /v1/chat/completions answers from a script; every request is recorded."""

    def __init__(self) -> None:
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
                    step = stub.script.pop(0) if stub.script else Scripted(400, api_error("stub_error", "exhausted"))
                    reply = step.body(stub.requests[-1]) if callable(step.body) else step.body
                if step.delay_s:
                    time.sleep(step.delay_s)
                payload = reply if isinstance(reply, bytes) else json.dumps(reply).encode()
                try:
                    self.send_response(step.status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def reply(self, *bodies: Body) -> None:
        self.script.extend(Scripted(200, b) for b in bodies)

    def fail(self, status: int, body: Body, delay_s: float = 0.0) -> None:
        self.script.append(Scripted(status, body, delay_s))

    def slow(self, delay_s: float, body: Body) -> None:
        self.script.append(Scripted(200, body, delay_s))

    def user_text(self, index: int) -> str:
        return str(self.requests[index]["messages"][1]["content"])


@pytest.fixture
def chat() -> Iterator[ChatStub]:
    s = ChatStub()
    s.thread.start()
    yield s
    s.server.shutdown()
    s.server.server_close()
