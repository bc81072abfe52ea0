"""The bounded search loop's rules as pure functions: what is offered, what a call means.

Rules: at most MAX_SEARCHES searches per question (the worker's first search counts); a search
that adds no new passage IDs ends the budget; once the budget is over only submit_answer is
offered; the only exit is submit_answer; any call that is malformed or names a tool not on
offer is an invalid decision.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from pydantic import ValidationError

from query.ports import TOOL_SEARCH, TOOL_SUBMIT, ToolCall
from schemas.decisions import AbstainDecision, AnswerDecision, Claim, ModelDecision, SearchDecision

MAX_SEARCHES = 3


@dataclass
class LoopState:
    max_searches: int = MAX_SEARCHES
    searches: int = 0
    budget_open: bool = True
    seen: set[str] = field(default_factory=set)
    queries: list[str] = field(default_factory=list)

    def offered(self) -> tuple[str, ...]:
        if self.budget_open and self.searches < self.max_searches:
            return (TOOL_SEARCH, TOOL_SUBMIT)
        return (TOOL_SUBMIT,)

    def record_search(self, query: str, passage_ids: Iterable[str]) -> list[str]:
        """Count the search; close the budget when it found nothing new. Returns the new IDs."""
        self.searches += 1
        self.queries.append(query)
        new = [pid for pid in dict.fromkeys(passage_ids) if pid not in self.seen]
        self.seen.update(new)
        if not new or self.searches >= self.max_searches:
            self.budget_open = False
        return new


class InvalidDecision(ValueError):
    pass


def interpret(call: ToolCall, offered: tuple[str, ...]) -> ModelDecision:
    """Validate a raw tool call against what was offered and the fixed tool schemas."""
    if call.name not in offered:
        raise InvalidDecision(f"tool {call.name!r} was not offered (offered: {', '.join(offered)})")
    try:
        if call.name == TOOL_SEARCH:
            return SearchDecision.model_validate({"query": call.input.get("query", ""), **_only(call, {"query"})})
        if call.input.get("abstain"):
            if call.input.get("claims"):
                raise InvalidDecision("submit_answer cannot both abstain and give claims")
            return AbstainDecision(reason=str(call.input.get("reason") or "model_abstained"))
        extra = set(call.input) - {"claims", "abstain", "reason"}
        if extra:
            raise InvalidDecision(f"unexpected fields {sorted(extra)}")
        claims = tuple(Claim.model_validate(c) for c in call.input.get("claims") or [])
        return AnswerDecision(claims=claims)
    except ValidationError as exc:
        raise InvalidDecision(str(exc).splitlines()[0]) from exc


def _only(call: ToolCall, allowed: set[str]) -> dict[str, object]:
    """Fields beyond the schema are passed through so pydantic's extra=forbid rejects them."""
    return {k: v for k, v in call.input.items() if k not in allowed}
