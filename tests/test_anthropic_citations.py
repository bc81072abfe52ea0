"""Native citations (RAGSYNC_CITATIONS=native) against the local Messages API stub, through the real SDK.

The stub answers the way the API does: a citation names the search result by its index among the
search_result blocks of the request, with `source`, `title` and `cited_text` copied from the blocks
cited (tests/messages_stub.py `cite`). The tests check the request (search_result blocks, citations
on, never with structured outputs), the claims built from the citations, and that every claim still
goes through the worker's checks: a citation of a block that was never sent, a mismatched source, a
range past the passage or a number not in the passage all end in the generic abstention.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import NOW, make_passage
from messages_stub import MessagesStub, cite, cited, client_for, message, search_results, stub, text, tool_use

from indexer.sqlite_fts import SqliteLexicalIndex
from query.anthropic_citations import (
    NATIVE_SYSTEM_PROMPT,
    NOT_SENT,
    IncompatibleRequest,
    assert_citations_compatible,
    passage_blocks,
)
from query.anthropic_model import AnthropicModel
from query.loop import interpret
from query.ports import SEARCH_TOOL_SCHEMA, TOOL_SEARCH, TOOL_SUBMIT, Evidence, ModelTurn, ToolCall
from query.retrieval import Retriever
from query.worker import QueryWorker
from ragsync.components import anthropic_model
from ragsync.settings import Settings
from schemas.decisions import GENERIC_ABSTENTION, AnswerDecision, ReasonCode
from schemas.principal import Principal

__all__ = ["stub"]  # the fixture, imported from messages_stub

REFUNDS = "Refunds are paid within 14 days of the request. Store credit never expires."
SHIPPING = "Orders ship from the Lisbon warehouse every weekday morning."
WARRANTY = "The warranty covers manufacturing defects for two full years."
SECRET = "The 2025 reorganisation closes the Porto office on 30 June."

TURN = ModelTurn(
    question="How long do refunds take?",
    evidence=(
        Evidence("refunds.md@1#root-1", "Refunds", REFUNDS, "Policies"),
        Evidence("shipping.md@1#root-1", "Shipping", SHIPPING, "Policies"),
    ),
    tools=(TOOL_SEARCH, TOOL_SUBMIT),
    queries=("How long do refunds take?",),
)


@pytest.fixture
def native(stub: MessagesStub) -> AnthropicModel:
    return AnthropicModel(client_for(stub.url), "claude-stub", citations="native")


def answer(*content: dict[str, Any]) -> dict[str, Any]:
    return message(*content, stop_reason="end_turn")


# ---- the request ------------------------------------------------------------------------------


def test_request_sends_each_passage_as_a_search_result_with_citations_and_no_structured_output(
    stub: MessagesStub, native: AnthropicModel
) -> None:
    stub.reply(answer(text("I cannot answer that from these results.")))
    native.decide(TURN)

    body = stub.requests[0]
    assert body["system"] == NATIVE_SYSTEM_PROMPT
    content = body["messages"][0]["content"]
    results = search_results(body)
    assert [r["source"] for r in results] == ["refunds.md@1#root-1", "shipping.md@1#root-1"]
    assert [r["title"] for r in results] == ["Refunds", "Shipping"]
    assert all(r["citations"] == {"enabled": True} for r in results), "citations are all-or-nothing"
    # Sentence blocks that concatenate back to the stored passage, so any cited range is verbatim.
    assert [b["text"] for b in results[0]["content"]] == [
        "Refunds are paid within 14 days of the request. ",
        "Store credit never expires.",
    ]
    assert "".join(b["text"] for b in results[1]["content"]) == SHIPPING
    assert content[-1]["type"] == "text" and TURN.question in content[-1]["text"]
    assert "- How long do refunds take?" in content[-1]["text"]
    # Search is on offer, the answer is text: no submit_answer tool, and the model may choose.
    assert body["tools"] == [SEARCH_TOOL_SCHEMA]
    assert body["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
    for key in ("output_config", "output_format"):
        assert key not in body
    assert not any(tool.get("strict") for tool in body["tools"])


def test_submit_only_turn_offers_no_tool(stub: MessagesStub, native: AnthropicModel) -> None:
    stub.reply(answer(text("No.")))
    native.decide(ModelTurn(TURN.question, TURN.evidence, (TOOL_SUBMIT,), TURN.queries))

    body = stub.requests[0]
    assert "tools" not in body and "tool_choice" not in body
    assert "search budget is spent" in body["messages"][0]["content"][-1]["text"]


def test_citations_and_structured_outputs_together_are_refused_before_any_call() -> None:
    base = AnthropicModel(client_for("http://127.0.0.1:9"), "claude-stub", citations="native").request(TURN)
    assert_citations_compatible(base)  # the adapter's own request is fine
    with pytest.raises(IncompatibleRequest):
        assert_citations_compatible({**base, "output_config": {"format": {"type": "json_schema", "schema": {}}}})
    with pytest.raises(IncompatibleRequest):
        assert_citations_compatible({**base, "tools": [{**SEARCH_TOOL_SCHEMA, "strict": True}]})
    claims_mode = AnthropicModel(client_for("http://127.0.0.1:9"), "claude-stub").request(TURN)
    assert_citations_compatible({**claims_mode, "tools": [{**SEARCH_TOOL_SCHEMA, "strict": True}]})


def test_passage_blocks_partition_the_text_at_sentence_starts() -> None:
    for value in (
        REFUNDS,
        "Use e.g. the 3.11 release. It works.\nA table row | 2 | 3\n\nLast one!",
        "  leading space. trailing space.  ",
        "one sentence without a stop",
    ):
        blocks = passage_blocks(value)
        assert "".join(blocks) == value and all(blocks)
    assert len(passage_blocks("Use e.g. the 3.11 release. It works.")) == 2


# ---- the response -----------------------------------------------------------------------------


def test_cited_text_blocks_become_claims_and_uncited_prose_is_dropped(
    stub: MessagesStub, native: AnthropicModel
) -> None:
    stub.reply(
        lambda request: answer(
            text("According to the policy, "),
            cited("refunds are paid within 14 days of the request.", cite(request, 0, 0, 1)),
            text(" Let me know if you need more."),
        )
    )
    call = native.decide(TURN)

    assert call == ToolCall(
        TOOL_SUBMIT,
        {
            "claims": [
                {
                    "statement": "refunds are paid within 14 days of the request.",
                    "passage_id": "refunds.md@1#root-1",
                    "quote": "Refunds are paid within 14 days of the request. ",
                }
            ]
        },
    )
    assert isinstance(interpret(call, TURN.tools), AnswerDecision)


def test_reply_without_any_citation_is_an_abstention(stub: MessagesStub, native: AnthropicModel) -> None:
    stub.reply(answer(text("The results do not say how long refunds take.")))

    assert native.decide(TURN) == ToolCall(TOOL_SUBMIT, {"abstain": True, "reason": "no_citations"})


def test_search_tool_use_is_a_search_call_even_with_text(stub: MessagesStub, native: AnthropicModel) -> None:
    stub.reply(message(text("Let me look further."), tool_use(TOOL_SEARCH, {"query": "refund timeline"})))

    assert native.decide(TURN) == ToolCall(TOOL_SEARCH, {"query": "refund timeline"})


def test_citations_that_do_not_point_at_a_sent_block_never_name_a_passage(
    stub: MessagesStub, native: AnthropicModel
) -> None:
    def forged(request: dict[str, Any]) -> dict[str, Any]:
        real = cite(request, 0, 0, 1)
        return answer(
            cited("Out of range.", {**real, "search_result_index": 5}),
            cited("Other source.", {**real, "source": "shipping.md@1#root-1"}),
            cited("Past the blocks.", {**real, "start_block_index": 1, "end_block_index": 4}),
            cited("Empty range.", {**real, "start_block_index": 1, "end_block_index": 1}),
            cited("A document citation.", {"type": "char_location", "cited_text": REFUNDS, "document_index": 0}),
            cited("Honest.", real),
        )

    stub.reply(forged)
    call = native.decide(TURN)

    ids = [c["passage_id"] for c in call.input["claims"]]
    assert ids == [NOT_SENT] * 5 + ["refunds.md@1#root-1"]


# ---- end to end through the worker and the real embedded store --------------------------------

ASKER = Principal(tenant="zeta-tenant", user="omega-user", groups=("kappa-group",))
QUESTION = "How long do refunds take?"


@pytest.fixture
def worker(tmp_path: Path, native: AnthropicModel) -> Iterator[QueryWorker]:
    lexical = SqliteLexicalIndex(tmp_path / "lexical.db")
    acl = ("group:kappa-group",)
    lexical.upsert(
        [
            make_passage(REFUNDS, tenant="zeta-tenant", doc_id="refunds.md", acl=acl, heading_path=("Refunds",)),
            make_passage(SHIPPING, tenant="zeta-tenant", doc_id="shipping.md", acl=acl, heading_path=("Shipping",)),
            make_passage(WARRANTY, tenant="zeta-tenant", doc_id="warranty.md", acl=acl, heading_path=("Warranty",)),
            # Readable only by another group: never retrieved for the asker, so never sent.
            make_passage(
                SECRET + " Refunds unaffected.",
                tenant="zeta-tenant",
                doc_id="reorg.md",
                acl=("group:board",),
                heading_path=("Reorganisation",),
            ),
        ]
    )
    yield QueryWorker(Retriever(lexical, None, None, None), native, "s3cret")
    lexical.close()


def test_worker_answers_from_a_native_citation(stub: MessagesStub, worker: QueryWorker) -> None:
    stub.reply(
        lambda request: answer(
            cited("Refunds are paid within 14 days of the request.", cite(request, 0, 0, 1)),
        )
    )
    result = worker.ask(ASKER, QUESTION, NOW)

    assert result.answered and result.message is None
    assert result.answer == "Refunds are paid within 14 days of the request."
    assert [(c.passage_id, c.quote) for c in result.claims] == [
        ("refunds.md@1#root-1", "Refunds are paid within 14 days of the request. ")
    ]
    assert result.trace.reason is None and result.trace.decisions == ["answer"]
    raw = stub.raw[0]
    for secret in ("zeta-tenant", "omega-user", "kappa-group", "reorg.md", "Porto"):
        assert secret.encode() not in raw
    assert [r["source"] for r in search_results(stub.requests[0])] == ["refunds.md@1#root-1"]


def test_worker_one_statement_citing_two_passages_is_said_once(stub: MessagesStub, worker: QueryWorker) -> None:
    stub.reply(
        message(tool_use(TOOL_SEARCH, {"query": "shipping warehouse"})),
        lambda request: answer(
            cited("Refunds are paid and orders ship.", cite(request, 0, 0, 1), cite(request, 1)),
        ),
    )
    result = worker.ask(ASKER, QUESTION, NOW)

    assert result.answered
    assert result.answer == "Refunds are paid and orders ship."
    assert [c.passage_id for c in result.claims] == ["refunds.md@1#root-1", "shipping.md@1#root-1"]
    assert result.trace.decisions == ["search", "answer"]
    assert len(search_results(stub.requests[1])) == 2


def test_worker_abstains_on_a_citation_of_a_block_that_was_not_sent(stub: MessagesStub, worker: QueryWorker) -> None:
    """A reply citing a search result past the ones sent, naming a passage the asker may not read."""

    def forged(request: dict[str, Any]) -> dict[str, Any]:
        assert len(search_results(request)) == 1
        return answer(
            cited(
                "The Porto office closes on 30 June.",
                {
                    "type": "search_result_location",
                    "source": "reorg.md@1#root-1",
                    "title": "Reorganisation",
                    "cited_text": SECRET,
                    "search_result_index": 1,
                    "start_block_index": 0,
                    "end_block_index": 1,
                },
            ),
            cited("Refunds are paid within 14 days of the request.", cite(request, 0, 0, 1)),
        )

    stub.reply(forged)
    result = worker.ask(ASKER, "When are refunds paid and does the Porto office close?", NOW)

    assert not result.answered and result.claims == []
    assert result.message == GENERIC_ABSTENTION
    assert result.trace.reason == ReasonCode.CITATION_CHECK_FAILED
    assert [(f.claim_index, f.check, f.passage_id) for f in result.trace.check_failures] == [(0, "retrieved", NOT_SENT)]
    assert result.public() == {"answered": False, "answer": None, "claims": [], "message": GENERIC_ABSTENTION}
    # The forged source and text are not echoed into the trace (IDs only, and only IDs that were sent).
    trace = json.dumps(result.trace.model_dump(mode="json"))
    assert "reorg.md" not in trace and "30 June" not in trace


def test_worker_abstains_when_a_cited_statement_adds_a_number(stub: MessagesStub, worker: QueryWorker) -> None:
    stub.reply(lambda request: answer(cited("Refunds are paid within 30 days.", cite(request, 0, 0, 1))))
    result = worker.ask(ASKER, QUESTION, NOW)

    assert not result.answered and result.message == GENERIC_ABSTENTION
    assert [f.check for f in result.trace.check_failures] == ["numbers"]


def test_worker_abstains_when_the_reply_cites_nothing(stub: MessagesStub, worker: QueryWorker) -> None:
    stub.reply(answer(text("Refunds take about two weeks.")))
    result = worker.ask(ASKER, QUESTION, NOW)

    assert not result.answered and result.message == GENERIC_ABSTENTION
    assert result.trace.reason == ReasonCode.MODEL_ABSTAINED


def test_citations_setting_selects_native_mode(stub: MessagesStub, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "env-key")
    monkeypatch.setenv("RAGSYNC_CITATIONS", "native")
    adapter = anthropic_model(Settings(model="anthropic", anthropic_base_url=stub.url))
    assert adapter.citations == "native"
    assert anthropic_model(Settings(model="anthropic", citations="claims")).citations == "claims"
    monkeypatch.setenv("RAGSYNC_CITATIONS", "footnotes")
    with pytest.raises(ValueError, match="citations"):
        Settings(model="anthropic")
