"""A local HTTP server that speaks OpenAI's chat completions API with tools, for the adapter's tests.

The role tests/messages_stub.py plays for the Anthropic adapter: a real HTTP server on 127.0.0.1
answering `POST /v1/chat/completions` the way vLLM, Ollama and llama.cpp's server do, so the
adapter's encoding, HTTP handling, timeouts and parsing run exactly as against a real server. A test
scripts the replies (bodies, raw bytes, functions of the request, delays) and inspects the requests.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import pytest
from json_stub import Body, JsonStub, Scripted

__all__ = ["Body", "ChatStub", "Scripted", "api_error", "calls", "chat", "completion", "says", "tool_call"]

_ids = itertools.count(1)


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


class ChatStub(JsonStub):
    """POST /v1/chat/completions answers from a script; every request is recorded."""

    def __init__(self) -> None:
        super().__init__("/v1", api_error("stub_error", "exhausted"))

    def user_text(self, index: int) -> str:
        return str(self.requests[index]["messages"][1]["content"])


@pytest.fixture
def chat() -> Iterator[ChatStub]:
    s = ChatStub()
    s.start()
    yield s
    s.stop()
