"""A local HTTP server that speaks the Anthropic Messages API, for the adapter's tests.

A real HTTP server on 127.0.0.1, driven through the real SDK pointed at it via base_url: the SDK's
request encoding, response parsing and error mapping run exactly as in production, without a network
or a key. A test scripts the replies (fixed bodies, or functions of the request, so a citation can be
built from the search results the request really carried) and inspects the requests received.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest
from json_stub import JsonStub

_ids = itertools.count(1)


def message(*content: dict[str, Any], stop_reason: str = "tool_use") -> dict[str, Any]:
    """A Messages API response body, in the real shape."""
    return {
        "id": f"msg_stub{next(_ids):04d}",
        "type": "message",
        "role": "assistant",
        "model": "claude-stub",
        "content": list(content),
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 321, "output_tokens": 42},
    }


def tool_use(name: str, tool_input: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": f"toolu_stub{next(_ids):04d}", "name": name, "input": tool_input}


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def api_error(kind: str, detail: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": detail}}


class MessagesStub(JsonStub):
    """POST /v1/messages answers from a script; every request is recorded."""

    def __init__(self) -> None:
        super().__init__("", api_error("stub_error", "script exhausted"), lambda n: {"request-id": f"req_stub{n}"})

    def user_text(self, index: int) -> str:
        content = self.requests[index]["messages"][0]["content"]
        return content if isinstance(content, str) else "".join(block["text"] for block in content)


@pytest.fixture
def stub() -> Iterator[MessagesStub]:
    s = MessagesStub()
    s.start()
    yield s
    s.stop()


def sent_key(headers: dict[str, str]) -> str | None:
    """SDK versions differ on the header that carries the key: x-api-key or a bearer token."""
    if "x-api-key" in headers:
        return headers["x-api-key"]
    scheme, _, value = headers.get("authorization", "").partition(" ")
    return value if scheme.lower() == "bearer" else None


def client_for(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key="test-key", base_url=url, max_retries=0, timeout=10.0)


def search_results(request: dict[str, Any]) -> list[dict[str, Any]]:
    """Every search_result block of a request, in the order the API counts them (across messages)."""
    found: list[dict[str, Any]] = []
    for msg in request["messages"]:
        content = msg["content"]
        if isinstance(content, list):
            found.extend(b for b in content if isinstance(b, dict) and b.get("type") == "search_result")
    return found


def cite(request: dict[str, Any], index: int, start: int = 0, end: int | None = None) -> dict[str, Any]:
    """A search_result_location citation as the API builds it: source, title and cited_text from the request."""
    result = search_results(request)[index]
    stop = len(result["content"]) if end is None else end
    return {
        "type": "search_result_location",
        "source": result["source"],
        "title": result["title"],
        "cited_text": "".join(b["text"] for b in result["content"][start:stop]),
        "search_result_index": index,
        "start_block_index": start,
        "end_block_index": stop,
    }


def cited(value: str, *citations: dict[str, Any]) -> dict[str, Any]:
    return {"type": "text", "text": value, "citations": list(citations)}
