"""The OpenAI-compatible chat adapter (vLLM, Ollama, llama.cpp's server) against a local stub server.

The stub (tests/chat_stub.py) is a real HTTP server on 127.0.0.1 speaking `POST /v1/chat/completions`
with tools. What a model may get wrong (no tool call, a malformed call, arguments that are not JSON,
invented passage IDs, quotes or numbers not in the passage) ends in the generic abstention with its
reason code in the trace; what is not a decision at all (HTTP errors, timeouts, a body that is not a
chat completion) raises ModelUnavailable, which the worker logs and re-raises, as for the Anthropic
adapter. No path answers with a claim the four checks did not pass.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from chat_stub import ChatStub, api_error, calls, chat, completion, says, tool_call
from conftest import NOW, make_passage
from model_world import ASKER, QUESTION, REFUNDS, SHIPPING, TURN, refund_store

from indexer.sqlite_fts import SqliteLexicalIndex
from query.loop import interpret
from query.openai_model import NO_TOOL_CALL, OpenAICompatibleModel
from query.ports import (
    SEARCH_TOOL_SCHEMA,
    SUBMIT_TOOL_SCHEMA,
    TOOL_SEARCH,
    TOOL_SUBMIT,
    ModelTurn,
    ModelUnavailable,
    ToolCall,
)
from query.retrieval import Retriever
from query.worker import QueryWorker
from ragsync.openai_model import API_KEY_ENV, openai_model_from_settings
from ragsync.settings import Settings
from schemas.decisions import GENERIC_ABSTENTION, ReasonCode, SearchDecision

__all__ = ["chat"]  # the fixture, imported from chat_stub


@pytest.fixture
def model(chat: ChatStub) -> Iterator[OpenAICompatibleModel]:
    adapter = OpenAICompatibleModel(chat.url, "local-stub", timeout_s=5.0)
    yield adapter
    adapter.close()


def function(schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": schema["name"],
            "description": schema["description"],
            "parameters": schema["input_schema"],
        },
    }


# ---- the request ------------------------------------------------------------------------------


def test_request_offers_the_port_tools_as_functions_and_forces_one_call(
    chat: ChatStub, model: OpenAICompatibleModel
) -> None:
    chat.reply(calls(tool_call(TOOL_SEARCH, {"query": "refund timeline"})))
    model.decide(TURN)

    assert chat.paths == ["/v1/chat/completions"]
    assert "authorization" not in chat.headers[0]  # no key configured: none sent
    body = chat.requests[0]
    assert body["tools"] == [function(SEARCH_TOOL_SCHEMA), function(SUBMIT_TOOL_SCHEMA)]
    assert body["tool_choice"] == "required" and body["parallel_tool_calls"] is False
    assert body["model"] == "local-stub" and body["temperature"] == 0
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert "verbatim" in body["messages"][0]["content"]
    prompt = chat.user_text(0)
    assert TURN.question in prompt
    for ev in TURN.evidence:
        assert f"passage_id: {ev.passage_id}" in prompt and ev.text in prompt


def test_submit_only_turn_offers_only_submit_answer(chat: ChatStub, model: OpenAICompatibleModel) -> None:
    chat.reply(calls(tool_call(TOOL_SUBMIT, {"abstain": True})))
    model.decide(ModelTurn(TURN.question, TURN.evidence, (TOOL_SUBMIT,), TURN.queries))

    assert chat.requests[0]["tools"] == [function(SUBMIT_TOOL_SCHEMA)]
    assert "search budget is spent" in chat.user_text(0)


# ---- the response -----------------------------------------------------------------------------


def test_search_call_becomes_a_search_decision(chat: ChatStub, model: OpenAICompatibleModel) -> None:
    chat.reply(calls(tool_call(TOOL_SEARCH, {"query": "refund timeline"})))
    call = model.decide(TURN)

    assert call == ToolCall(TOOL_SEARCH, {"query": "refund timeline"})
    assert interpret(call, TURN.tools) == SearchDecision(query="refund timeline")


def test_arguments_as_an_object_are_accepted_and_only_the_first_call_counts(
    chat: ChatStub, model: OpenAICompatibleModel
) -> None:
    first = {"function": {"name": TOOL_SEARCH, "arguments": {"query": "refund timeline"}}, "type": "function"}
    chat.reply(calls(first, tool_call(TOOL_SUBMIT, {"abstain": True})))

    assert model.decide(TURN) == ToolCall(TOOL_SEARCH, {"query": "refund timeline"})


@pytest.mark.parametrize(
    ("reply", "name"),
    [
        (says("Refunds take about two weeks."), NO_TOOL_CALL),
        (says('{"name": "submit_answer", "arguments": {"abstain": true}}'), NO_TOOL_CALL),  # a call as text
        (
            completion({"role": "assistant", "tool_calls": [tool_call(TOOL_SUBMIT, {"claims": []})]}, "length"),
            NO_TOOL_CALL,
        ),
        (
            calls(tool_call(TOOL_SUBMIT, '{"claims": [{"statement": "Refunds')),
            "<unparsable arguments for 'submit_answer'>",
        ),
        (calls(tool_call(TOOL_SUBMIT, "[1, 2]")), "<unparsable arguments for 'submit_answer'>"),
        (calls({"type": "function", "function": "submit_answer"}), NO_TOOL_CALL),
    ],
    ids=["text", "call-as-text", "length", "not-json", "json-array", "function-not-object"],
)
def test_what_is_not_a_well_formed_call_becomes_a_name_never_offered(
    chat: ChatStub, model: OpenAICompatibleModel, reply: dict[str, Any], name: str
) -> None:
    chat.reply(reply)
    call = model.decide(TURN)

    assert call.name == name and call.input == {}
    assert call.name not in TURN.tools


# ---- through the worker and the real embedded store -------------------------------------------

PAYROLL = "Refunds of payroll advances are deducted within 3 months."
REFUND_ID = "refunds.md@1#root-1"
PAYROLL_ID = "payroll.md@1#root-1"


@pytest.fixture
def worker(tmp_path: Path, model: OpenAICompatibleModel) -> Iterator[QueryWorker]:
    # Same tenant, another group: stored and matching the question, never retrieved for the asker.
    payroll = make_passage(PAYROLL, tenant="zeta-tenant", doc_id="payroll.md", acl=("group:hr",))
    with refund_store(tmp_path, payroll) as lexical:
        yield QueryWorker(Retriever(lexical, None, None, None), model, "s3cret")


def claim(statement: str, quote: str, passage_id: str = REFUND_ID) -> dict[str, str]:
    return {"statement": statement, "passage_id": passage_id, "quote": quote}


def test_worker_search_then_verbatim_quote_is_answered(chat: ChatStub, worker: QueryWorker) -> None:
    chat.reply(
        calls(tool_call(TOOL_SEARCH, {"query": "shipping warehouse"})),
        calls(
            tool_call(TOOL_SUBMIT, {"claims": [claim("Refunds are paid within 14 days.", "paid within 14 days of")]})
        ),
    )
    result = worker.ask(ASKER, QUESTION, NOW)

    assert result.answered and result.answer == "Refunds are paid within 14 days."
    assert [(c.passage_id, c.source_url) for c in result.claims] == [(REFUND_ID, "file:///refunds.md")]
    assert result.trace.decisions == ["search", "answer"]
    assert REFUNDS in chat.user_text(0) and SHIPPING not in chat.user_text(0) and SHIPPING in chat.user_text(1)
    assert all(PAYROLL.encode() not in raw for raw in chat.raw)
    for raw in chat.raw:
        for secret in (b"zeta-tenant", b"omega-user", b"kappa-group"):
            assert secret not in raw


BAD_DECISIONS: list[tuple[str, dict[str, Any], ReasonCode, str]] = [
    ("no-tool-call", says("Refunds take two weeks."), ReasonCode.INVALID_DECISION, "invalid: tool '<no tool call>'"),
    ("truncated", says("", finish_reason="length"), ReasonCode.INVALID_DECISION, "invalid: tool '<no tool call>'"),
    (
        "not-json",
        calls(tool_call(TOOL_SUBMIT, "{'claims': [{'statement': 'Refunds are paid within 14 days.'}]}")),
        ReasonCode.INVALID_DECISION,
        "invalid: tool \"<unparsable arguments for 'submit_answer'>\"",
    ),
    (
        "unknown-tool",
        calls(tool_call("grant_access", {"group": "hr"})),
        ReasonCode.INVALID_DECISION,
        "invalid: tool 'grant_access' was not offered",
    ),
    (
        "claim-missing-quote",
        calls(tool_call(TOOL_SUBMIT, {"claims": [{"statement": "Refunds are paid.", "passage_id": REFUND_ID}]})),
        ReasonCode.INVALID_DECISION,
        "invalid:",
    ),
    (
        "extra-field",
        calls(tool_call(TOOL_SUBMIT, {"claims": [claim("Refunds.", "paid within 14 days of")], "tenant": "x"})),
        ReasonCode.INVALID_DECISION,
        "invalid: unexpected fields ['tenant']",
    ),
    (
        "empty-claims",
        calls(tool_call(TOOL_SUBMIT, {"claims": []})),
        ReasonCode.INVALID_DECISION,
        "invalid:",
    ),
    (
        "abstains",
        calls(tool_call(TOOL_SUBMIT, {"abstain": True, "reason": "not covered"})),
        ReasonCode.MODEL_ABSTAINED,
        "abstain",
    ),
]


@pytest.mark.parametrize(
    ("reply", "reason", "decision"), [b[1:] for b in BAD_DECISIONS], ids=[b[0] for b in BAD_DECISIONS]
)
def test_worker_abstains_generically_on_a_bad_decision(
    chat: ChatStub, worker: QueryWorker, reply: dict[str, Any], reason: ReasonCode, decision: str
) -> None:
    chat.reply(reply)
    result = worker.ask(ASKER, QUESTION, NOW)

    assert not result.answered and result.claims == [] and result.answer is None
    assert result.message == GENERIC_ABSTENTION
    assert result.trace.reason == reason
    assert result.trace.decisions[-1].startswith(decision)
    assert result.public() == {"answered": False, "answer": None, "claims": [], "message": GENERIC_ABSTENTION}


BAD_CLAIMS: list[tuple[str, dict[str, str], list[str]]] = [
    (
        "invented-id",
        claim("Refunds are paid within 14 days.", "paid within 14 days of", "refunds.md@9#x-1"),
        ["retrieved"],
    ),
    ("not-retrieved", claim("Payroll advances take 3 months.", "deducted within 3 months", PAYROLL_ID), ["retrieved"]),
    ("quote-not-in-passage", claim("Refunds are instant.", "refunds are always paid the same day"), ["quote_match"]),
    ("short-quote", claim("Refunds are paid.", "within 14 days"), ["quote_length"]),
    ("number-not-in-passage", claim("Refunds are paid within 30 days.", "paid within 14 days of"), ["numbers"]),
]


@pytest.mark.parametrize(("bad", "checks"), [b[1:] for b in BAD_CLAIMS], ids=[b[0] for b in BAD_CLAIMS])
def test_worker_abstains_generically_when_a_claim_fails_a_check(
    chat: ChatStub, worker: QueryWorker, bad: dict[str, str], checks: list[str]
) -> None:
    good = claim("Refunds are paid within 14 days.", "Refunds are paid within 14 days")
    chat.reply(calls(tool_call(TOOL_SUBMIT, {"claims": [good, bad]})))
    result = worker.ask(ASKER, QUESTION, NOW)

    assert not result.answered and result.claims == [] and result.message == GENERIC_ABSTENTION
    assert result.trace.reason == ReasonCode.CITATION_CHECK_FAILED
    assert [f.check for f in result.trace.check_failures] == checks
    assert {f.claim_index for f in result.trace.check_failures} == {1}


# ---- no decision at all: ModelUnavailable, logged with the trace, never an answer -------------


def unavailable(worker: QueryWorker, caplog: pytest.LogCaptureFixture) -> ModelUnavailable:
    with caplog.at_level(logging.WARNING, logger="ragsync.trace"), pytest.raises(ModelUnavailable) as caught:
        worker.ask(ASKER, QUESTION, NOW)
    traces = [json.loads(r.getMessage()) for r in caplog.records if r.name == "ragsync.trace"]
    assert traces and traces[-1]["decisions"][-1] == "model_unavailable" and traces[-1]["cited_ids"] == []
    return caught.value


def test_server_error_is_unavailable_without_the_servers_message(
    chat: ChatStub, worker: QueryWorker, caplog: pytest.LogCaptureFixture
) -> None:
    chat.fail(500, api_error("server_error", "upstream echo: Refunds are paid within 14 days", 500))
    error = unavailable(worker, caplog)

    assert error.status_code == 500 and error.retryable
    assert "server_error" in str(error) and "Refunds" not in str(error)
    assert len(chat.requests) == 1  # 500 is not retried: it is not overload


def test_overload_is_retried_once_then_answers(chat: ChatStub, worker: QueryWorker) -> None:
    chat.fail(503, api_error("overloaded", "busy"))
    chat.reply(calls(tool_call(TOOL_SUBMIT, {"claims": [claim("Refunds take 14 days.", "paid within 14 days of")]})))
    result = worker.ask(ASKER, QUESTION, NOW)

    assert result.answered and len(chat.requests) == 2


def test_client_error_is_not_retryable(chat: ChatStub, worker: QueryWorker, caplog: pytest.LogCaptureFixture) -> None:
    chat.fail(404, {"error": "model 'local-stub' not found"})  # Ollama's shape: a bare string
    error = unavailable(worker, caplog)

    assert error.status_code == 404 and not error.retryable and "not found" not in str(error)


def test_timeout_is_unavailable_and_not_retried(
    chat: ChatStub, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    slow = OpenAICompatibleModel(chat.url, "local-stub", timeout_s=0.3)
    chat.slow(2.0, calls(tool_call(TOOL_SUBMIT, {"abstain": True})))
    lexical = SqliteLexicalIndex(tmp_path / "lexical.db")
    lexical.upsert([make_passage(REFUNDS, tenant="zeta-tenant", doc_id="refunds.md", acl=("group:kappa-group",))])
    error = unavailable(QueryWorker(Retriever(lexical, None, None, None), slow, "s3cret"), caplog)

    assert error.retryable and "timed out" in str(error) and len(chat.requests) == 1
    lexical.close()
    slow.close()


@pytest.mark.parametrize(
    "body",
    [b"<html>502 Bad Gateway</html>", b"[]", json.dumps({"object": "list", "data": []}).encode()],
    ids=["not-json", "not-an-object", "not-a-completion"],
)
def test_a_body_that_is_not_a_chat_completion_is_unavailable(
    chat: ChatStub, worker: QueryWorker, caplog: pytest.LogCaptureFixture, body: bytes
) -> None:
    chat.reply(body)
    error = unavailable(worker, caplog)

    assert not error.retryable


def test_an_oversized_body_is_not_read_past_the_cap(chat: ChatStub, caplog: pytest.LogCaptureFixture) -> None:
    small = OpenAICompatibleModel(chat.url, "local-stub", max_response_bytes=10_000)
    chat.reply(calls(tool_call(TOOL_SEARCH, {"query": "x" * 20_000})))
    with pytest.raises(ModelUnavailable, match="10000 bytes"):
        small.decide(TURN)
    small.close()


def test_connection_refused_is_unavailable() -> None:
    closed = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    port = closed.server_address[1]
    closed.server_close()
    adapter = OpenAICompatibleModel(f"http://127.0.0.1:{port}/v1", "local-stub", max_retries=0)
    with pytest.raises(ModelUnavailable, match="unreachable") as caught:
        adapter.decide(TURN)

    assert caught.value.retryable


# ---- built from settings (ragsync/) -----------------------------------------------------------


def test_from_settings_sends_the_key_from_the_environment_only(chat: ChatStub, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings(model="openai", openai_base_url=chat.url, openai_model="llama-local", openai_timeout_s=7)
    monkeypatch.setenv("OPENAI_API_KEY", "meant-for-openai")
    monkeypatch.setenv(API_KEY_ENV, "local-key")
    adapter = openai_model_from_settings(settings)
    chat.reply(calls(tool_call(TOOL_SEARCH, {"query": "refunds"})))
    adapter.decide(TURN)

    assert chat.headers[0]["authorization"] == "Bearer local-key"
    assert chat.requests[0]["model"] == "llama-local"
    assert adapter.timeout_s == 7

    monkeypatch.delenv(API_KEY_ENV)
    chat.reply(calls(tool_call(TOOL_SEARCH, {"query": "refunds"})))
    openai_model_from_settings(settings).decide(TURN)
    assert "authorization" not in chat.headers[1]  # OPENAI_API_KEY is never sent to a server we were not told about


def test_from_settings_refuses_at_startup_without_url_or_model() -> None:
    with pytest.raises(ModelUnavailable, match="openai_base_url"):
        openai_model_from_settings(Settings(model="openai", openai_model="m"))
    with pytest.raises(ModelUnavailable, match="openai_model"):
        openai_model_from_settings(Settings(model="openai", openai_base_url="http://127.0.0.1:1/v1"))
    with pytest.raises(ModelUnavailable, match="http"):
        openai_model_from_settings(Settings(model="openai", openai_base_url="127.0.0.1:8000", openai_model="m"))
