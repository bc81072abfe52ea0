"""Models on the user's own servers: OpenAI-compatible chat completions behind the Model port.

vLLM, Ollama, llama.cpp's server, LocalAI, LM Studio and TGI all answer `POST {base_url}/chat/completions`
with function tools. Many teams cannot send documents to an outside API; this adapter lets them keep
the whole question on a machine they run, with the same loop, the same four checks and the same
abstention as the Anthropic adapter (query.anthropic_model), whose prompt it shares.

The adapter only translates, as the Anthropic one does. It offers exactly the tools the loop put on
the turn (the port's fixed schemas as `function` tools), forces a call (`tool_choice: "required"`,
one call per turn) and hands the first tool call back raw: query.loop.interpret judges it. What a
small local model gets wrong becomes a call interpret rejects, never a guess made here:

* no tool call (plain text, a refusal, `finish_reason: "length"`): NO_TOOL_CALL, a name never offered;
* arguments that are not JSON, or JSON that is not an object: `<unparsable arguments for 'name'>`,
  also never offered, so the trace says what was wrong and the asker gets the generic abstention;
* invented passage IDs and quotes that are not in the passage pass through untouched: the worker's
  four citation checks refuse them.

Failures to get a decision at all (connection refused, timeout, any non-2xx status, a body that is
not a chat completion) raise ModelUnavailable, as the Anthropic adapter does and for the same reason
(query.anthropic_model): an outage is not "your documents do not answer this". The worker records
"model_unavailable" in the trace and the HTTP API answers 503. The error message carries the status
and the server's error type or code, never its free-text message, which could echo evidence.

The transport is httpx (a core dependency), so the embedded profile can use a local server without
the cluster extras. Time is bounded per request (connect and read timeouts) and memory by a cap on
the response body.
"""

from __future__ import annotations

import copy
import json
import logging
import time
from typing import Any, Literal

import httpx

from query.anthropic_model import SYSTEM_PROMPT, render_turn
from query.ports import TOOL_SCHEMAS, ModelTurn, ModelUnavailable, ToolCall

log = logging.getLogger(__name__)

NO_TOOL_CALL = "<no tool call>"
"""The ToolCall name for a response without a tool call; never offered, so always invalid."""

DEFAULT_TIMEOUT_S = 30.0
"""Per request (read); a local server on CPU can be slow, the worker's 60 s deadline still bounds the loop."""
DEFAULT_CONNECT_TIMEOUT_S = 5.0
DEFAULT_MAX_RETRIES = 1
"""Retries for refused connections and 429/502/503/504 only; a timeout is not retried (it already cost the budget)."""
MAX_RESPONSE_BYTES = 4 * 1024 * 1024
"""A chat completion with a few claims is a few kilobytes; anything past this is not one."""

ToolChoice = Literal["required", "auto"]
RETRY_STATUSES = frozenset({429, 502, 503, 504})


def function_tools(names: tuple[str, ...]) -> list[dict[str, Any]]:
    """The port's fixed tool schemas in the chat-completions shape (`function.parameters`)."""
    tools = []
    for name in names:
        schema = copy.deepcopy(TOOL_SCHEMAS[name])
        tools.append(
            {
                "type": "function",
                "function": {
                    "name": schema["name"],
                    "description": schema["description"],
                    "parameters": schema["input_schema"],
                },
            }
        )
    return tools


class OpenAICompatibleModel:
    """Model port adapter for an OpenAI-compatible chat server; see the module docstring for the contract."""

    name = "openai"

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        max_tokens: int = 1024,
        max_retries: int = DEFAULT_MAX_RETRIES,
        tool_choice: ToolChoice = "required",
        max_response_bytes: int = MAX_RESPONSE_BYTES,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must be an http(s) URL, not {base_url!r}")
        if tool_choice not in ("required", "auto"):
            raise ValueError(f"tool_choice must be 'required' or 'auto', not {tool_choice!r}")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.max_tokens = max_tokens
        self.max_retries = max(0, max_retries)
        self.tool_choice: ToolChoice = tool_choice
        self.max_response_bytes = max_response_bytes
        self.timeout_s = timeout_s
        headers = {"content-type": "application/json"}
        if api_key:
            headers["authorization"] = f"Bearer {api_key}"
        timeout = httpx.Timeout(timeout_s, connect=connect_timeout_s)
        self.client = httpx.Client(headers=headers, timeout=timeout, follow_redirects=False)

    def close(self) -> None:
        self.client.close()

    def request(self, turn: ModelTurn) -> dict[str, Any]:
        """The request body for one turn; separate from decide so it can be inspected."""
        return {
            "model": self.model,
            "messages": [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": render_turn(turn)},
            ],
            "tools": function_tools(turn.tools),
            # "required" forces a tool call; one call per turn because the loop takes one decision per turn.
            "tool_choice": self.tool_choice,
            "parallel_tool_calls": False,
            "max_tokens": self.max_tokens,
            "temperature": 0,
        }

    def decide(self, turn: ModelTurn) -> ToolCall:
        body = self._post(self.request(turn))
        return tool_call_of(body)

    def _post(self, payload: dict[str, Any]) -> dict[str, Any]:
        """One decision's HTTP exchange, with a short retry for refusals and overload; the body as JSON."""
        for attempt in range(self.max_retries + 1):
            last = attempt == self.max_retries
            try:
                with self.client.stream("POST", self.url, json=payload) as response:
                    status = response.status_code
                    raw = _read_bounded(response, self.max_response_bytes, self.timeout_s)
            except httpx.TimeoutException as exc:
                raise ModelUnavailable(f"chat server timed out ({type(exc).__name__})") from exc
            except httpx.TransportError as exc:
                if last:
                    raise ModelUnavailable(f"chat server unreachable ({type(exc).__name__})") from exc
                time.sleep(0.5 * (attempt + 1))
                continue
            if status in RETRY_STATUSES and not last:
                time.sleep(0.5 * (attempt + 1))
                continue
            if not 200 <= status < 300:
                raise ModelUnavailable(
                    f"chat server returned HTTP {status} ({_error_type(raw)})",
                    status_code=status,
                    retryable=status in (408, 409) or status in RETRY_STATUSES or status >= 500,
                )
            try:
                parsed = json.loads(raw)
            except ValueError as exc:
                raise ModelUnavailable("chat server returned a body that is not JSON", retryable=False) from exc
            if not isinstance(parsed, dict):
                raise ModelUnavailable("chat server returned JSON that is not an object", retryable=False)
            return parsed
        raise AssertionError("unreachable: the last attempt returns or raises")


class ResponseTooLarge(ModelUnavailable):
    """The body passed max_response_bytes; the rest is not read."""


def _read_bounded(response: httpx.Response, limit: int, timeout_s: float) -> bytes:
    """The body, at most `limit` bytes and `timeout_s` in all: httpx's read timeout is per chunk, so a
    server that trickles a byte at a time would otherwise hold the question for ever."""
    deadline = time.monotonic() + timeout_s
    chunks: list[bytes] = []
    size = 0
    for chunk in response.iter_bytes():
        if time.monotonic() > deadline:
            raise ModelUnavailable(f"chat server response took longer than {timeout_s:g} s")
        size += len(chunk)
        if size > limit:
            raise ResponseTooLarge(f"chat server response passed {limit} bytes", retryable=False)
        chunks.append(chunk)
    return b"".join(chunks)


def tool_call_of(body: dict[str, Any]) -> ToolCall:
    """The first tool call of a chat completion, raw; anything else becomes a name interpret refuses.

    A body without `choices[0].message` is not a chat completion: ModelUnavailable, not a decision.
    """
    choices = body.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices else None
    message = choice.get("message") if isinstance(choice, dict) else None
    if not isinstance(choice, dict) or not isinstance(message, dict):
        raise ModelUnavailable("chat server returned a body without choices[0].message", retryable=False)
    if choice.get("finish_reason") == "length":
        # A tool call cut off mid-arguments is not a decision the model made; do not salvage it.
        log.warning("chat completion hit max_tokens; treating it as no tool call")
        return ToolCall(NO_TOOL_CALL, {})
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else ():
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            continue
        name = str(function.get("name") or "")[:100]
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            # OpenAI's shape: a JSON string. Some servers send the object itself; both are accepted.
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except ValueError:
                return ToolCall(f"<unparsable arguments for {name!r}>", {})
        if not isinstance(arguments, dict):
            return ToolCall(f"<unparsable arguments for {name!r}>", {})
        return ToolCall(name, arguments)
    log.info("chat completion had no tool call (finish_reason=%s)", choice.get("finish_reason"))
    return ToolCall(NO_TOOL_CALL, {})


def _error_type(raw: bytes) -> str:
    """The server's error type or code (OpenAI, vLLM, Ollama and llama.cpp shapes) without its message."""
    try:
        body = json.loads(raw)
    except ValueError:
        return "unknown error"
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        for key in ("type", "code"):
            value = error.get(key)
            if isinstance(value, str | int) and not isinstance(value, bool):
                return str(value)[:80]
    return "unknown error"
