"""The query worker: token -> principal -> bounded loop -> checked claims or one generic abstention.

The reason for an abstention goes to the trace only; the asker always sees GENERIC_ABSTENTION,
so a refusal never reveals whether a document exists. Traces carry passage IDs, never text.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from indexer.embedding_cache import request_scope
from query.citations import check_claims
from query.loop import InvalidDecision, LoopState, interpret
from query.ports import Evidence, Model, ModelTurn, ModelUnavailable
from query.retrieval import Retrieval, Retriever
from query.tokens import TokenVerifier
from schemas._time import to_utc, utcnow
from schemas.decisions import (
    GENERIC_ABSTENTION,
    AbstainDecision,
    AnswerDecision,
    ReasonCode,
    SearchDecision,
    SearchTrace,
    Trace,
)
from schemas.passages import Passage, location_of
from schemas.principal import Principal

log = logging.getLogger("ragsync.trace")


@dataclass(frozen=True)
class CitedClaim:
    statement: str
    quote: str
    passage_id: str
    source_url: str


@dataclass
class AskResult:
    answered: bool
    answer: str | None
    claims: list[CitedClaim]
    message: str | None
    trace: Trace
    evidence_ids: list[str] = field(default_factory=list)

    def public(self) -> dict[str, object]:
        return {
            "answered": self.answered,
            "answer": self.answer,
            "claims": [
                {
                    "statement": c.statement,
                    "quote": c.quote,
                    "passage_id": c.passage_id,
                    "source_url": c.source_url,
                    "location": location_of(c.source_url),
                }
                for c in self.claims
            ],
            "message": self.message,
        }


@dataclass(frozen=True)
class WorkerSettings:
    abstain_when_first_search_empty: bool = True
    max_searches: int = 3
    deadline_s: float = 60.0


def default_as_of() -> datetime:
    """Now, floored to the second: stable cache keys within a second, never in the future."""
    return utcnow().replace(microsecond=0)


class QueryWorker:
    def __init__(
        self,
        retriever: Retriever,
        model: Model,
        tokens: TokenVerifier | str,
        settings: WorkerSettings | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.retriever = retriever
        self.model = model
        # A plain string is a shared HS256 secret (tests, tools); the composition root passes a verifier.
        self.tokens = tokens if isinstance(tokens, TokenVerifier) else TokenVerifier.shared_secret(tokens)
        self.settings = settings or WorkerSettings()
        self.clock = clock

    def ask_with_token(self, token: str, question: str, as_of: datetime | None = None) -> AskResult:
        """Raises InvalidToken: an unauthenticated request is an error, not an abstention."""
        principal = self.tokens.verify(token)
        return self.ask(principal, question, as_of)

    def ask(self, principal: Principal, question: str, as_of: datetime | None = None) -> AskResult:
        # One request's question vector is worked out once, and forgotten at its end.
        with request_scope():
            return self._ask(principal, question, as_of)

    def _ask(self, principal: Principal, question: str, as_of: datetime | None) -> AskResult:
        started = self.clock()
        instant = to_utc(as_of) if as_of is not None else default_as_of()
        trace = Trace(
            run_id=uuid.uuid4().hex,
            tenant=principal.tenant,
            user=principal.user,
            groups=sorted(principal.groups),
            as_of=instant,
        )
        state = LoopState(max_searches=self.settings.max_searches)
        evidence: dict[str, Passage] = {}

        def search(query: str) -> Retrieval:
            result = self.retriever.search(principal, query, instant)
            new = state.record_search(query, [p.passage_id for p in result.passages])
            for passage in result.passages:
                evidence.setdefault(passage.passage_id, passage)
            trace.searches.append(
                SearchTrace(
                    query=query,
                    lexical_ids=result.lexical_ids,
                    dense_ids=result.dense_ids,
                    selected_ids=[p.passage_id for p in result.passages],
                    new_ids=new,
                    cached=result.cached,
                    elapsed_ms=round(result.elapsed_ms, 3),
                )
            )
            return result

        def finish(reason: ReasonCode | None, decision: AnswerDecision | None = None) -> AskResult:
            trace.reason = reason
            trace.elapsed_ms = round((self.clock() - started) * 1000, 3)
            if reason is not None or decision is None:
                result = AskResult(False, None, [], GENERIC_ABSTENTION, trace, list(evidence))
            else:
                claims = [
                    CitedClaim(c.statement, c.quote, c.passage_id, evidence[c.passage_id].source_url)
                    for c in decision.claims
                ]
                trace.cited_ids = [c.passage_id for c in claims]
                # A statement citing two passages is two claims (native citations): say it once.
                answer = " ".join(dict.fromkeys(c.statement for c in claims))
                result = AskResult(True, answer, claims, None, trace, list(evidence))
            if log.isEnabledFor(logging.INFO):  # serve logs traces only with -vv: no JSON for nobody
                log.info("%s", trace.model_dump_json())
            return result

        first = search(question)
        if not first.passages and self.settings.abstain_when_first_search_empty:
            return finish(ReasonCode.NO_VISIBLE_EVIDENCE)

        max_turns = self.settings.max_searches + 1
        for _ in range(max_turns):
            if self.clock() - started > self.settings.deadline_s:
                return finish(ReasonCode.BUDGET_EXHAUSTED)
            offered = state.offered()
            turn = ModelTurn(
                question=question,
                evidence=tuple(
                    Evidence(p.passage_id, " > ".join(p.heading_path) or p.title, p.text, p.title)
                    for p in evidence.values()
                ),
                tools=offered,
                queries=tuple(state.queries),
            )
            try:
                call = self.model.decide(turn)
            except ModelUnavailable:
                # An outage is not an abstention; log the run's trace (IDs only) and let the caller answer 503.
                trace.decisions.append("model_unavailable")
                trace.elapsed_ms = round((self.clock() - started) * 1000, 3)
                log.warning("%s", trace.model_dump_json())
                raise
            try:
                decision = interpret(call, offered)
            except InvalidDecision as exc:
                trace.decisions.append(f"invalid: {exc}"[:300])
                return finish(ReasonCode.INVALID_DECISION)
            trace.decisions.append(decision.action)
            if isinstance(decision, SearchDecision):
                search(decision.query)
                continue
            if isinstance(decision, AbstainDecision):
                return finish(ReasonCode.MODEL_ABSTAINED)
            failures = check_claims(decision.claims, evidence)
            if failures:
                trace.check_failures = failures
                return finish(ReasonCode.CITATION_CHECK_FAILED)
            return finish(None, decision)
        return finish(ReasonCode.BUDGET_EXHAUSTED)
