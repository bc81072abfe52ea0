"""The Anthropic adapter (claim-schema mode) against a local HTTP stub that speaks the Messages API.

The stub (tests/messages_stub.py) is a real HTTP server on 127.0.0.1 and the real SDK is pointed at
it via base_url: this exercises the SDK's request encoding, response parsing and error mapping exactly
as production does, without a network or a key. Native citations: tests/test_anthropic_citations.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import NOW
from messages_stub import MessagesStub, api_error, client_for, message, sent_key, stub, text, tool_use
from model_world import ASKER, QUESTION, REFUNDS, SHIPPING, TURN, asker_passage, refund_store

from query.anthropic_model import NO_TOOL_CALL, AnthropicModel, ModelUnavailable
from query.loop import InvalidDecision, interpret
from query.ports import (
    SEARCH_TOOL_SCHEMA,
    SUBMIT_TOOL_SCHEMA,
    TOOL_SEARCH,
    TOOL_SUBMIT,
    ModelTurn,
    ToolCall,
)
from query.retrieval import Retriever
from query.worker import QueryWorker
from ragsync.components import anthropic_model
from ragsync.settings import Settings
from schemas.decisions import GENERIC_ABSTENTION, ReasonCode, SearchDecision

__all__ = ["stub"]  # the fixture, imported from messages_stub


@pytest.fixture
def model(stub: MessagesStub) -> AnthropicModel:
    return AnthropicModel(client_for(stub.url), "claude-stub")


# ---- the request ------------------------------------------------------------------------------


def test_request_offers_only_the_port_tools_forces_a_call_and_renders_evidence(
    stub: MessagesStub, model: AnthropicModel
) -> None:
    stub.reply(message(tool_use(TOOL_SEARCH, {"query": "refund timeline"})))
    model.decide(TURN)

    assert stub.paths == ["/v1/messages"]
    assert sent_key(stub.headers[0]) == "test-key"
    body = stub.requests[0]
    assert body["tools"] == [SEARCH_TOOL_SCHEMA, SUBMIT_TOOL_SCHEMA]
    assert set(body["tools"][0]["input_schema"]["properties"]) == {"query"}
    assert body["tool_choice"]["type"] == "any"
    assert body["tool_choice"].get("disable_parallel_tool_use") is True
    assert body["model"] == "claude-stub" and body["max_tokens"] == 1024
    assert set(body) <= {"model", "max_tokens", "system", "tools", "tool_choice", "messages"}
    assert "verbatim" in body["system"] and "passage_id" in body["system"]
    assert len(body["messages"]) == 1 and body["messages"][0]["role"] == "user"
    prompt = stub.user_text(0)
    assert TURN.question in prompt
    for ev in TURN.evidence:
        assert f"passage_id: {ev.passage_id}" in prompt
        assert f"heading: {ev.heading}" in prompt
        assert ev.text in prompt
    assert "- How long do refunds take?" in prompt


def test_submit_only_turn_offers_only_submit_answer(stub: MessagesStub, model: AnthropicModel) -> None:
    stub.reply(message(tool_use(TOOL_SUBMIT, {"abstain": True, "reason": "not covered"})))
    model.decide(ModelTurn(TURN.question, TURN.evidence, (TOOL_SUBMIT,), TURN.queries))

    assert stub.requests[0]["tools"] == [SUBMIT_TOOL_SCHEMA]
    assert "search budget is spent" in stub.user_text(0)


# ---- the response -----------------------------------------------------------------------------


def test_search_tool_use_becomes_a_search_call(stub: MessagesStub, model: AnthropicModel) -> None:
    stub.reply(message(tool_use(TOOL_SEARCH, {"query": "refund timeline"})))
    call = model.decide(TURN)

    assert call == ToolCall(TOOL_SEARCH, {"query": "refund timeline"})
    assert interpret(call, TURN.tools) == SearchDecision(query="refund timeline")


def test_submit_answer_with_claims_is_returned_raw_after_leading_text(
    stub: MessagesStub, model: AnthropicModel
) -> None:
    claims = [
        {
            "statement": "Refunds are paid within 14 days.",
            "passage_id": "refunds.md@1#root-1",
            "quote": "paid within 14 days of the request",
        }
    ]
    stub.reply(message(text("Answering from the refunds passage."), tool_use(TOOL_SUBMIT, {"claims": claims})))
    call = model.decide(TURN)

    assert call == ToolCall(TOOL_SUBMIT, {"claims": claims})


def test_text_only_end_turn_is_a_call_interpret_rejects(stub: MessagesStub, model: AnthropicModel) -> None:
    stub.reply(message(text("Refunds take about two weeks."), stop_reason="end_turn"))
    call = model.decide(TURN)

    assert call == ToolCall(NO_TOOL_CALL, {})
    with pytest.raises(InvalidDecision):
        interpret(call, TURN.tools)


def test_max_tokens_cut_off_tool_call_is_not_salvaged(stub: MessagesStub, model: AnthropicModel) -> None:
    stub.reply(message(tool_use(TOOL_SUBMIT, {"claims": []}), stop_reason="max_tokens"))

    assert model.decide(TURN) == ToolCall(NO_TOOL_CALL, {})


# ---- failures ---------------------------------------------------------------------------------


def test_server_error_raises_model_unavailable_without_api_message(stub: MessagesStub, model: AnthropicModel) -> None:
    stub.fail(500, api_error("api_error", "upstream echo: Refunds are paid within 14 days"))
    with pytest.raises(ModelUnavailable) as caught:
        model.decide(TURN)

    assert caught.value.status_code == 500 and caught.value.retryable
    assert "api_error" in str(caught.value) and "req_stub1" in str(caught.value)
    assert "Refunds" not in str(caught.value)
    assert len(stub.requests) == 1


def test_client_error_raises_non_retryable_model_unavailable(stub: MessagesStub, model: AnthropicModel) -> None:
    stub.fail(404, api_error("not_found_error", "model: claude-stub"))
    with pytest.raises(ModelUnavailable) as caught:
        model.decide(TURN)

    assert caught.value.status_code == 404 and not caught.value.retryable


def test_connection_refused_raises_model_unavailable() -> None:
    closed = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    port = closed.server_address[1]
    closed.server_close()
    with pytest.raises(ModelUnavailable) as caught:
        AnthropicModel(client_for(f"http://127.0.0.1:{port}"), "claude-stub").decide(TURN)

    assert caught.value.status_code is None and caught.value.retryable


def test_from_settings_takes_key_from_env_and_base_url_from_settings(
    stub: MessagesStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(model="anthropic", anthropic_model="claude-from-settings", anthropic_base_url=stub.url)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(ModelUnavailable, match="ANTHROPIC_API_KEY"):
        anthropic_model(settings)

    monkeypatch.setenv("ANTHROPIC_API_KEY", "env-key")
    adapter = anthropic_model(settings)
    stub.reply(message(tool_use(TOOL_SEARCH, {"query": "refunds"})))
    adapter.decide(TURN)

    assert adapter.client.max_retries == 2
    assert sent_key(stub.headers[0]) == "env-key"
    assert stub.requests[0]["model"] == "claude-from-settings"


# ---- end to end through the worker and the real embedded store --------------------------------

WARRANTY = "The warranty covers manufacturing defects for two full years."


@pytest.fixture
def worker(tmp_path: Path, model: AnthropicModel) -> Iterator[QueryWorker]:
    with refund_store(tmp_path, asker_passage(WARRANTY, "warranty.md", "Warranty")) as lexical:
        yield QueryWorker(Retriever(lexical, None, None, None), model, "s3cret")


def test_worker_search_then_verbatim_quote_is_answered(stub: MessagesStub, worker: QueryWorker) -> None:
    stub.reply(
        message(tool_use(TOOL_SEARCH, {"query": "shipping warehouse"})),
        message(
            tool_use(
                TOOL_SUBMIT,
                {
                    "claims": [
                        {
                            "statement": "Refunds are paid within 14 days of the request.",
                            "passage_id": "refunds.md@1#root-1",
                            "quote": "Refunds are paid within 14 days",
                        }
                    ]
                },
            )
        ),
    )
    result = worker.ask(ASKER, QUESTION, NOW)

    assert result.answered and result.message is None
    assert result.answer == "Refunds are paid within 14 days of the request."
    assert [(c.passage_id, c.source_url) for c in result.claims] == [("refunds.md@1#root-1", "file:///refunds.md")]
    assert result.trace.reason is None and result.trace.decisions == ["search", "answer"]
    assert [s.query for s in result.trace.searches] == [QUESTION, "shipping warehouse"]

    assert len(stub.requests) == 2
    assert REFUNDS in stub.user_text(0) and SHIPPING not in stub.user_text(0)
    assert REFUNDS in stub.user_text(1) and SHIPPING in stub.user_text(1)
    assert "- shipping warehouse" in stub.user_text(1)
    for raw in stub.raw:
        for secret in ("zeta-tenant", "omega-user", "kappa-group"):
            assert secret.encode() not in raw
    for body in stub.requests:
        assert [t["name"] for t in body["tools"]] == [TOOL_SEARCH, TOOL_SUBMIT]
        assert body["tools"] == [SEARCH_TOOL_SCHEMA, SUBMIT_TOOL_SCHEMA]


def test_worker_abstains_generically_when_quote_is_not_in_passage(stub: MessagesStub, worker: QueryWorker) -> None:
    stub.reply(
        message(
            tool_use(
                TOOL_SUBMIT,
                {
                    "claims": [
                        {
                            "statement": "Refunds are paid within 14 days.",
                            "passage_id": "refunds.md@1#root-1",
                            "quote": "refunds are always paid the same day",
                        }
                    ]
                },
            )
        )
    )
    result = worker.ask(ASKER, QUESTION, NOW)

    assert not result.answered and result.claims == []
    assert result.message == GENERIC_ABSTENTION
    assert result.trace.reason == ReasonCode.CITATION_CHECK_FAILED
    assert [f.check for f in result.trace.check_failures] == ["quote_match"]
    assert result.public() == {"answered": False, "answer": None, "claims": [], "message": GENERIC_ABSTENTION}


def test_worker_fourth_search_is_an_invalid_decision(stub: MessagesStub, worker: QueryWorker) -> None:
    stub.reply(
        message(tool_use(TOOL_SEARCH, {"query": "shipping warehouse"})),
        message(tool_use(TOOL_SEARCH, {"query": "warranty defects"})),
        message(tool_use(TOOL_SEARCH, {"query": "store credit"})),
    )
    result = worker.ask(ASKER, QUESTION, NOW)

    assert not result.answered and result.message == GENERIC_ABSTENTION
    assert result.trace.reason == ReasonCode.INVALID_DECISION
    assert len(result.trace.searches) == 3
    assert result.trace.decisions[:2] == ["search", "search"]
    assert result.trace.decisions[2].startswith("invalid: tool 'search' was not offered")
    assert len(stub.requests) == 3
    assert stub.requests[2]["tools"] == [SUBMIT_TOOL_SCHEMA]
    assert WARRANTY in stub.user_text(2)


def test_worker_text_reply_is_an_invalid_decision(stub: MessagesStub, worker: QueryWorker) -> None:
    stub.reply(message(text("Refunds take two weeks."), stop_reason="end_turn"))
    result = worker.ask(ASKER, QUESTION, NOW)

    assert result.trace.reason == ReasonCode.INVALID_DECISION
    assert result.message == GENERIC_ABSTENTION


def test_worker_lets_model_unavailable_through_instead_of_abstaining(stub: MessagesStub, worker: QueryWorker) -> None:
    stub.fail(500, api_error("api_error", "Internal server error"))
    with pytest.raises(ModelUnavailable):
        worker.ask(ASKER, QUESTION, NOW)
