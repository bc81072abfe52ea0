"""Model port contract: the extractive model, the Anthropic adapter and the OpenAI-compatible adapter.

Same inputs, same promises. The two network adapters run against their local stub servers (real
HTTP, tests/messages_stub.py and tests/chat_stub.py); behind each stub sits one reference "brain",
the word-coverage extractive model, which decides from the turn the stub *reads back out of the
request* (question, passages, tools on offer). So a network adapter passes only if its prompt carries
every passage ID and text verbatim and the tools offered, and if the brain's call comes back through
the wire unchanged. The extractive model runs as the embedded profile builds it (with MiniLM).

Promises:
* a decision is a ToolCall the loop accepts for the tools on offer, and only an offered tool;
* claims cite only passages of the turn, with quotes verbatim from them, so the four checks pass;
* no evidence, or evidence that does not answer, is an abstention;
* through the worker and a real store, a question only a passage the asker may not read answers
  abstains, and that passage never reaches the model.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from chat_stub import ChatStub, calls, tool_call
from conftest import NOW, make_passage
from messages_stub import MessagesStub, client_for, message, tool_use

from indexer.sqlite_fts import SqliteLexicalIndex
from query.anthropic_model import AnthropicModel
from query.citations import check_claims
from query.extractive import ExtractiveModel
from query.loop import interpret
from query.openai_model import OpenAICompatibleModel
from query.ports import TOOL_SEARCH, TOOL_SUBMIT, Evidence, Model, ModelTurn, ToolCall
from query.retrieval import Retriever
from query.worker import QueryWorker
from schemas.decisions import GENERIC_ABSTENTION, AbstainDecision, AnswerDecision, ReasonCode
from schemas.passages import Passage
from schemas.principal import Principal

BRAIN = ExtractiveModel()
"""What stands behind each stub: deterministic, word coverage only, no network."""

_PASSAGE = re.compile(
    r"<passage>\npassage_id: (?P<id>[^\n]*)\ndocument: (?P<title>[^\n]*)\nheading: (?P<heading>[^\n]*)\ntext:\n"
    r"(?P<text>.*?)\n</passage>",
    re.DOTALL,
)


def turn_from_prompt(prompt: str, tools: list[str]) -> ModelTurn:
    """The turn a model can reconstruct from the rendered prompt alone (query.anthropic_model.render_turn)."""
    question = prompt.split("<question>\n", 1)[1].split("\n</question>", 1)[0]
    evidence = tuple(
        Evidence(m["id"], m["heading"], m["text"].replace("<\\/passage>", "</passage>"), m["title"])
        for m in _PASSAGE.finditer(prompt)
    )
    searches = prompt.split("<previous_searches>\n", 1)
    queries = (
        tuple(q[2:] for q in searches[1].split("\n</previous_searches>")[0].splitlines()) if len(searches) > 1 else ()
    )
    return ModelTurn(question, evidence, tuple(tools), queries)


def anthropic_brain(request: dict[str, Any]) -> dict[str, Any]:
    turn = turn_from_prompt(request["messages"][0]["content"], [t["name"] for t in request["tools"]])
    call = BRAIN.decide(turn)
    return message(tool_use(call.name, call.input))


def openai_brain(request: dict[str, Any]) -> dict[str, Any]:
    turn = turn_from_prompt(request["messages"][1]["content"], [t["function"]["name"] for t in request["tools"]])
    call = BRAIN.decide(turn)
    return calls(tool_call(call.name, call.input))


class Brained:
    """A stub that answers every request with the brain's decision."""

    def __init__(self, stub: MessagesStub | ChatStub, brain: Any) -> None:
        self.stub = stub
        self.brain = brain

    def arm(self, n: int = 8) -> None:
        self.stub.script.clear()
        for _ in range(n):
            self.stub.reply(self.brain)


@pytest.fixture(params=["extractive", "anthropic", "openai"])
def answering_model(request: pytest.FixtureRequest) -> Iterator[tuple[Model, Brained | None]]:
    if request.param == "extractive":
        yield ExtractiveModel(request.getfixturevalue("embedder")), None
        return
    stub: MessagesStub | ChatStub = MessagesStub() if request.param == "anthropic" else ChatStub()
    stub.thread.start()
    try:
        if isinstance(stub, MessagesStub):
            brained = Brained(stub, anthropic_brain)
            model: Model = AnthropicModel(client_for(stub.url), "claude-stub")
        else:
            brained = Brained(stub, openai_brain)
            model = OpenAICompatibleModel(stub.url, "local-stub")
        brained.arm()
        yield model, brained
    finally:
        stub.server.shutdown()
        stub.server.server_close()


REFUNDS = Evidence(
    "refunds.md@1#root-1", "Refunds", "Refunds are paid within 14 days of the request. Store credit never expires."
)
SHIPPING = Evidence("shipping.md@1#root-1", "Shipping", "Orders ship from the Lisbon warehouse every weekday morning.")
ANSWERABLE = "Within how many days are refunds paid after the request?"
UNANSWERABLE = "Which courier delivers parcels to Reykjavik?"


def passages_of(evidence: tuple[Evidence, ...]) -> dict[str, Passage]:
    out = {}
    for ev in evidence:
        doc, _, anchor = ev.passage_id.partition("@1#")
        out[ev.passage_id] = make_passage(ev.text, doc_id=doc, anchor=anchor, heading_path=(ev.heading,))
    return out


def test_answers_with_claims_citing_only_given_passages_verbatim(answering_model: tuple[Model, Any]) -> None:
    model, _ = answering_model
    turn = ModelTurn(ANSWERABLE, (SHIPPING, REFUNDS), (TOOL_SEARCH, TOOL_SUBMIT), (ANSWERABLE,))
    call = model.decide(turn)
    decision = interpret(call, turn.tools)

    assert isinstance(decision, AnswerDecision), call
    assert {c.passage_id for c in decision.claims} == {REFUNDS.passage_id}
    assert check_claims(decision.claims, passages_of(turn.evidence)) == []
    assert any("14 days" in c.quote for c in decision.claims)


def test_submit_only_turn_gets_submit_answer(answering_model: tuple[Model, Any]) -> None:
    model, _ = answering_model
    for question in (ANSWERABLE, UNANSWERABLE):
        call = model.decide(ModelTurn(question, (REFUNDS, SHIPPING), (TOOL_SUBMIT,), (question,)))
        assert call.name == TOOL_SUBMIT
        interpret(call, (TOOL_SUBMIT,))


@pytest.mark.parametrize("tools", [(TOOL_SEARCH, TOOL_SUBMIT), (TOOL_SUBMIT,)], ids=["search-open", "submit-only"])
def test_abstains_on_no_evidence(answering_model: tuple[Model, Any], tools: tuple[str, ...]) -> None:
    model, _ = answering_model
    call = model.decide(ModelTurn(ANSWERABLE, (), tools, (ANSWERABLE,)))

    assert isinstance(interpret(call, tools), AbstainDecision), call


def test_abstains_when_the_evidence_does_not_answer(answering_model: tuple[Model, Any]) -> None:
    model, _ = answering_model
    turn = ModelTurn(UNANSWERABLE, (REFUNDS, SHIPPING), (TOOL_SUBMIT,), (UNANSWERABLE, "courier Reykjavik"))

    assert isinstance(interpret(model.decide(turn), turn.tools), AbstainDecision)


def test_the_same_turn_gets_the_same_decision(answering_model: tuple[Model, Any]) -> None:
    model, _ = answering_model
    turn = ModelTurn(ANSWERABLE, (REFUNDS, SHIPPING), (TOOL_SEARCH, TOOL_SUBMIT), (ANSWERABLE,))
    first = model.decide(turn)

    assert isinstance(first, ToolCall) and isinstance(first.input, dict)
    assert model.decide(turn) == first


ASKER = Principal(tenant="acme", user="ann", groups=("staff",))
SECRET = "Executive bonuses are paid within 45 days of the board vote."


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteLexicalIndex]:
    lexical = SqliteLexicalIndex(tmp_path / "lexical.db")
    lexical.upsert(
        [
            make_passage(REFUNDS.text, doc_id="refunds.md", heading_path=("Refunds",)),
            make_passage(SHIPPING.text, doc_id="shipping.md", heading_path=("Shipping",)),
            make_passage(SECRET, doc_id="bonus.md", acl=("group:board",), heading_path=("Executive bonuses",)),
        ]
    )
    yield lexical
    lexical.close()


def test_through_the_worker_answers_what_the_asker_may_read(
    answering_model: tuple[Model, Brained | None], store: SqliteLexicalIndex
) -> None:
    model, _ = answering_model
    result = QueryWorker(Retriever(store, None, None, None), model, "s3cret").ask(ASKER, ANSWERABLE, NOW)

    assert result.answered, result.trace
    assert {c.passage_id for c in result.claims} == {REFUNDS.passage_id}
    assert result.trace.reason is None


def test_through_the_worker_a_question_only_a_denied_passage_answers_abstains(
    answering_model: tuple[Model, Brained | None], store: SqliteLexicalIndex
) -> None:
    model, brained = answering_model
    question = "Within how many days are executive bonuses paid after the board vote?"
    result = QueryWorker(Retriever(store, None, None, None), model, "s3cret").ask(ASKER, question, NOW)

    assert not result.answered and result.message == GENERIC_ABSTENTION and result.claims == []
    assert result.trace.reason in (ReasonCode.MODEL_ABSTAINED, ReasonCode.NO_VISIBLE_EVIDENCE)
    assert "bonus.md@1#root-1" not in result.evidence_ids
    if brained is not None:
        assert all(SECRET.encode() not in raw for raw in brained.stub.raw)
