"""What a model may decide, why the worker abstains, and what a trace may contain.

A trace holds passage IDs and scores only: never passage text, so logs cannot leak evidence.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

GENERIC_ABSTENTION = "I can't answer that from the documents available to you."


class ReasonCode(StrEnum):
    NO_VISIBLE_EVIDENCE = "no_visible_evidence"
    CITATION_CHECK_FAILED = "citation_check_failed"
    MODEL_ABSTAINED = "model_abstained"
    INVALID_DECISION = "invalid_decision"
    BUDGET_EXHAUSTED = "budget_exhausted"


class Claim(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    statement: str = Field(min_length=1)
    passage_id: str = Field(min_length=1)
    quote: str = Field(min_length=1)


class SearchDecision(BaseModel):
    """The search tool's input: one field. No tenant, group or user can be passed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    action: Literal["search"] = "search"
    query: str = Field(min_length=1, max_length=2000)


class AnswerDecision(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    action: Literal["answer"] = "answer"
    claims: tuple[Claim, ...] = Field(min_length=1)


class AbstainDecision(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    action: Literal["abstain"] = "abstain"
    reason: str = "model_abstained"


ModelDecision = Annotated[SearchDecision | AnswerDecision | AbstainDecision, Field(discriminator="action")]


class CheckFailure(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    claim_index: int
    check: Literal["retrieved", "quote_length", "quote_match", "numbers"]
    passage_id: str


class SearchTrace(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str
    lexical_ids: list[str] = []
    dense_ids: list[str] = []
    selected_ids: list[str] = []
    new_ids: list[str] = []
    cached: bool = False
    elapsed_ms: float = 0.0


class Trace(BaseModel):
    """Operator-facing record of one run; IDs only."""

    model_config = ConfigDict(extra="forbid")

    run_id: str
    tenant: str
    user: str
    groups: list[str]
    as_of: datetime
    searches: list[SearchTrace] = []
    decisions: list[str] = []
    reason: ReasonCode | None = None
    check_failures: list[CheckFailure] = []
    cited_ids: list[str] = []
    elapsed_ms: float = 0.0
