"""The model port. A model sees only passages already filtered for the principal.

The tool schemas are fixed here: `search` takes one field, `query`; `submit_answer` takes claims
or an abstention. No schema has a tenant, group or user field, so a model cannot widen scope.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from schemas.errors import ModelUnavailable as ModelUnavailable  # re-export (schemas.errors)

TOOL_SEARCH = "search"
TOOL_SUBMIT = "submit_answer"

SEARCH_TOOL_SCHEMA: dict[str, Any] = {
    "name": TOOL_SEARCH,
    "description": "Search the documents the asker may read. Use a different query than before.",
    "input_schema": {
        "type": "object",
        "properties": {"query": {"type": "string", "description": "Search terms."}},
        "required": ["query"],
        "additionalProperties": False,
    },
}

SUBMIT_TOOL_SCHEMA: dict[str, Any] = {
    "name": TOOL_SUBMIT,
    "description": (
        "Finish. Either give claims, each citing one passage_id with a verbatim quote of at least "
        "4 words from that passage, or abstain when the evidence does not answer the question."
    ),
    "input_schema": {
        "type": "object",
        "properties": {
            "claims": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "statement": {"type": "string"},
                        "passage_id": {"type": "string"},
                        "quote": {"type": "string"},
                    },
                    "required": ["statement", "passage_id", "quote"],
                    "additionalProperties": False,
                },
            },
            "abstain": {"type": "boolean"},
            "reason": {"type": "string"},
        },
        "additionalProperties": False,
    },
}

TOOL_SCHEMAS = {TOOL_SEARCH: SEARCH_TOOL_SCHEMA, TOOL_SUBMIT: SUBMIT_TOOL_SCHEMA}


@dataclass(frozen=True, slots=True)
class Evidence:
    """A permitted passage as a model sees it. `heading` is the section path (the title only
    when the document has no headings): a site-wide title suffix such as "— Python 3.11
    documentation" would otherwise lend every passage the same words."""

    passage_id: str
    heading: str
    text: str
    title: str = ""


@dataclass(frozen=True)
class ModelTurn:
    question: str
    evidence: tuple[Evidence, ...]
    tools: tuple[str, ...]
    queries: tuple[str, ...] = ()


@dataclass(frozen=True)
class ToolCall:
    """A model's raw choice; the loop validates it, so adapters never judge their own output."""

    name: str
    input: dict[str, Any] = field(default_factory=dict)


class Model(Protocol):
    name: str

    def decide(self, turn: ModelTurn) -> ToolCall: ...


class Reranker(Protocol):
    """Scores (question, passage) pairs jointly, as a cross-encoder does; higher is more relevant.

    It sees only passages the rankers already returned for the principal, so it can reorder but
    never widen what a principal is shown.
    """

    name: str

    def score(self, query: str, passages: Sequence[RerankInput]) -> list[float]: ...


@dataclass(frozen=True, slots=True)
class RerankInput:
    heading: str
    text: str
    dense_text: str = ""
    """What the dense ranker embedded for this passage (title, headings and text): its vector is a
    cache hit, so a reranker can weigh the passage's whole meaning without embedding anything new."""
