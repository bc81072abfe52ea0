"""The query worker's loop over real embedded stores, with scripted implementations of the model port."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import NOW, make_passage

from indexer.cache import InProcessCache
from indexer.sqlite_fts import SqliteLexicalIndex
from query.extractive import ExtractiveModel
from query.ports import TOOL_SEARCH, TOOL_SUBMIT, ModelTurn, ToolCall
from query.retrieval import RetrievalSettings, Retriever
from query.worker import QueryWorker, WorkerSettings
from schemas.decisions import GENERIC_ABSTENTION, ReasonCode
from schemas.principal import Principal

ANN = Principal(tenant="acme", user="ann", groups=("staff",))
REFUND = "Customers may request a refund within 30 days of purchase."
SECRET_TEXT = "The board approved the acquisition of Initech for 12 million."


class Scripted:
    """A model that plays back tool calls and records every turn it was shown."""

    name = "scripted"

    def __init__(self, *calls: ToolCall) -> None:
        self.calls: Iterator[ToolCall] = iter(calls)
        self.turns: list[ModelTurn] = []

    def decide(self, turn: ModelTurn) -> ToolCall:
        self.turns.append(turn)
        return next(self.calls)


@pytest.fixture
def lexical(tmp_path: Path) -> SqliteLexicalIndex:
    index = SqliteLexicalIndex(tmp_path / "lex.db")
    index.upsert(
        [
            make_passage(REFUND, doc_id="refunds.md", anchor="r-1", heading_path=("Refund policy",)),
            make_passage("Refunds are paid to the original payment method.", doc_id="refunds.md", anchor="r-2"),
            make_passage("Gift cards are not refundable under any refund policy.", doc_id="gifts.md", anchor="g-1"),
            make_passage("Shipping takes five working days.", doc_id="shipping.md", anchor="s-1"),
            make_passage(
                SECRET_TEXT + " Refund of the deposit was agreed.",
                doc_id="board.md",
                anchor="b-1",
                acl=("group:board",),
            ),
        ]
    )
    return index


def worker(lexical: SqliteLexicalIndex, model: Any, k: int = 2, **settings: Any) -> QueryWorker:
    retriever = Retriever(lexical, None, None, InProcessCache(), RetrievalSettings(k=k))
    return QueryWorker(retriever, model, "secret", WorkerSettings(**settings))


def refund_claim(quote: str = "may request a refund within 30 days", statement: str = "Within 30 days.") -> ToolCall:
    return ToolCall(
        TOOL_SUBMIT, {"claims": [{"statement": statement, "passage_id": "refunds.md@1#r-1", "quote": quote}]}
    )


def test_answer_with_checked_claims(lexical: SqliteLexicalIndex) -> None:
    result = worker(lexical, Scripted(refund_claim())).ask(ANN, "refund window", NOW)
    assert result.answered and result.answer == "Within 30 days." and result.message is None
    assert result.claims[0].source_url == "file:///refunds.md"
    assert result.trace.reason is None and result.trace.cited_ids == ["refunds.md@1#r-1"]


def test_denied_text_never_reaches_the_model_or_the_trace(lexical: SqliteLexicalIndex) -> None:
    model = Scripted(ToolCall(TOOL_SEARCH, {"query": "acquisition Initech board deposit"}), refund_claim())
    result = worker(lexical, model).ask(ANN, "refund deposit acquisition", NOW)
    shown = json.dumps([[(e.passage_id, e.text) for e in t.evidence] for t in model.turns])
    assert "Initech" not in shown and "board.md" not in shown
    trace = result.trace.model_dump_json()
    assert SECRET_TEXT not in trace and "board.md" not in trace
    assert REFUND not in trace, "traces carry passage IDs, never text"


def test_first_search_empty_abstains_without_a_model_turn(lexical: SqliteLexicalIndex) -> None:
    model = Scripted()
    result = worker(lexical, model).ask(ANN, "acquisition Initech", NOW)
    assert not result.answered and result.message == GENERIC_ABSTENTION
    assert result.trace.reason is ReasonCode.NO_VISIBLE_EVIDENCE and model.turns == []
    model = Scripted(ToolCall(TOOL_SUBMIT, {"abstain": True}))
    result = worker(lexical, model, abstain_when_first_search_empty=False).ask(ANN, "acquisition Initech", NOW)
    assert result.trace.reason is ReasonCode.MODEL_ABSTAINED and len(model.turns) == 1


def test_at_most_three_searches(lexical: SqliteLexicalIndex) -> None:
    model = Scripted(
        ToolCall(TOOL_SEARCH, {"query": "shipping days"}),
        ToolCall(TOOL_SEARCH, {"query": "gift cards"}),
        ToolCall(TOOL_SEARCH, {"query": "payment method"}),
    )
    result = worker(lexical, model, k=1).ask(ANN, "refund window", NOW)
    assert all(s.new_ids for s in result.trace.searches)
    assert [t.tools for t in model.turns] == [(TOOL_SEARCH, TOOL_SUBMIT), (TOOL_SEARCH, TOOL_SUBMIT), (TOOL_SUBMIT,)]
    assert len(result.trace.searches) == 3
    assert result.trace.reason is ReasonCode.INVALID_DECISION and result.message == GENERIC_ABSTENTION


def test_search_without_new_passages_ends_the_budget(lexical: SqliteLexicalIndex) -> None:
    model = Scripted(ToolCall(TOOL_SEARCH, {"query": "refund window"}), refund_claim())
    result = worker(lexical, model).ask(ANN, "refund window", NOW)
    assert result.trace.searches[1].new_ids == []
    assert model.turns[1].tools == (TOOL_SUBMIT,)
    assert result.answered


def test_citation_failure_and_model_abstention_and_invalid_call(lexical: SqliteLexicalIndex) -> None:
    bad = worker(lexical, Scripted(refund_claim(quote="may request a refund within 60 days"))).ask(ANN, "refund", NOW)
    assert bad.trace.reason is ReasonCode.CITATION_CHECK_FAILED and bad.message == GENERIC_ABSTENTION
    assert [f.check for f in bad.trace.check_failures] == ["quote_match"]
    unseen = ToolCall(
        TOOL_SUBMIT,
        {
            "claims": [
                {
                    "statement": "12 million",
                    "passage_id": "board.md@1#b-1",
                    "quote": "The board approved the acquisition",
                }
            ]
        },
    )
    leak = worker(lexical, Scripted(unseen)).ask(ANN, "refund", NOW)
    assert leak.trace.reason is ReasonCode.CITATION_CHECK_FAILED and not leak.answered
    abstain = worker(lexical, Scripted(ToolCall(TOOL_SUBMIT, {"abstain": True}))).ask(ANN, "refund", NOW)
    assert abstain.trace.reason is ReasonCode.MODEL_ABSTAINED
    scoped = worker(lexical, Scripted(ToolCall(TOOL_SEARCH, {"query": "x", "tenant": "globex"}))).ask(
        ANN, "refund", NOW
    )
    assert scoped.trace.reason is ReasonCode.INVALID_DECISION
    for result in (bad, leak, abstain, scoped):
        assert result.public() == {"answered": False, "answer": None, "claims": [], "message": GENERIC_ABSTENTION}


def test_deadline_exhausts_the_budget(lexical: SqliteLexicalIndex) -> None:
    import itertools

    ticks = itertools.chain([0.0], itertools.repeat(100.0))
    retriever = Retriever(lexical, None, None, None)
    slow = QueryWorker(retriever, Scripted(), "s", WorkerSettings(deadline_s=10), clock=lambda: next(ticks))
    assert slow.ask(ANN, "refund", NOW).trace.reason is ReasonCode.BUDGET_EXHAUSTED


def test_results_are_cached_per_principal_until_a_bump(lexical: SqliteLexicalIndex) -> None:
    cache = InProcessCache()
    retriever = Retriever(lexical, None, None, cache)
    first = retriever.search(ANN, "refund", NOW)
    assert not first.cached and retriever.search(ANN, "refund", NOW).cached
    other = Principal(tenant="acme", user="bob", groups=("staff",))
    assert not retriever.search(other, "refund", NOW).cached
    board = Principal(tenant="acme", user="ann", groups=("staff", "board"))
    assert "board.md@1#b-1" in [p.passage_id for p in retriever.search(board, "refund deposit", NOW).passages]
    cache.bump("acme")
    assert not retriever.search(ANN, "refund", NOW).cached


def test_extractive_model_quotes_sentences_verbatim(lexical: SqliteLexicalIndex) -> None:
    result = worker(lexical, ExtractiveModel()).ask(ANN, "How many days do customers have to request a refund?", NOW)
    assert result.answered and result.claims[0].quote == REFUND and result.claims[0].statement == REFUND


def test_extractive_model_abstains_or_rewrites_when_evidence_is_thin() -> None:
    from query.ports import Evidence

    model = ExtractiveModel()
    evidence = (Evidence("a@1#x", "Shipping", "Shipping takes five working days to most countries."),)
    call = model.decide(
        ModelTurn(
            "What is the parental leave policy?",
            evidence,
            (TOOL_SEARCH, TOOL_SUBMIT),
            ("What is the parental leave policy?",),
        )
    )
    assert call.name == TOOL_SEARCH and "parental" in call.input["query"]
    final = model.decide(ModelTurn("What is the parental leave policy?", evidence, (TOOL_SUBMIT,), ("q",)))
    assert final == ToolCall(TOOL_SUBMIT, {"abstain": True, "reason": "no passage answers the question"})
