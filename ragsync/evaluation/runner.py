"""Drives one evaluation: the stores and the worker through their ports only, one question at a time.

No adapter is modified for evaluation, and the result cache is off so the loop and the
single-search runs pay for the same work.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from indexer.ports import DocState, Hit
from query.retrieval import Ranking, Retrieval, Retriever
from query.worker import AskResult, QueryWorker, default_as_of
from ragsync.evaluation.context import EvalContext as EvalContext  # re-export (moved out, issue 21)
from ragsync.evaluation.metrics import (
    KS,
    STAGE_HELP,
    Gates,
    MissFacts,
    QuestionResult,
    RunOutcome,
    Stage,
    diagnose,
    is_gold,
    span_ranks,
)
from ragsync.evaluation.questions import EvalQuestion, GoldSpan
from ragsync.evaluation.report import build_report
from schemas._time import to_utc
from schemas.decisions import ReasonCode
from schemas.passages import Passage
from schemas.principal import AccessFilter, Principal, acl_allows

NO_BM25_FLOOR = float("-inf")
NO_DENSE_FLOOR = -1.0
"""Cosine similarity is never below -1, so this threshold admits every point the filter admits."""
STORE_CHECK_LIMIT = 200
"""How many lexical hits of a gold quote to inspect: the passage containing the whole quote ranks near the top."""
FAR_FUTURE = datetime(9999, 1, 1, tzinfo=UTC)
"""The store check looks at the document's current passages whatever their effective dates."""


class _RecordingRetriever(Retriever):
    """Keeps every passage the worker's searches returned, for the per-passage ACL re-check.

    It ranks through the evaluated retriever itself (`base.rank`), so a benchmark that evaluates
    another ranking design (a Retriever subclass) has the worker's searches ranked that way too.
    """

    def __init__(self, base: Retriever) -> None:
        super().__init__(base.lexical, base.vector, base.embedder, None, base.settings, base.reranker, deny=base.deny)
        self.base = base
        self.seen: list[Passage] = []

    def rank(self, query: str, access: AccessFilter) -> Ranking:
        return self.base.rank(query, access)

    def search(self, principal: Principal, query: str, as_of: datetime, k: int | None = None) -> Retrieval:
        result = super().search(principal, query, as_of, k)
        self.seen.extend(result.passages)
        return result


class Evaluator:
    def __init__(self, ctx: EvalContext, ks: Sequence[int] = KS) -> None:
        self.ctx = ctx
        self.ks = tuple(sorted(set(ks)))
        # No result cache: the loop and single runs ask the same first query, and a cache hit would
        # make the second run look faster than it is.
        self.retriever = ctx.retriever or Retriever(
            ctx.lexical, ctx.vector, ctx.embedder, None, ctx.retrieval, ctx.reranker
        )
        self._states: dict[tuple[str, str], DocState | None] = {}
        self.tenants: list[str] = []

    # -- helpers

    def _state(self, tenant: str, doc_id: str) -> DocState | None:
        key = (tenant, doc_id)
        if key not in self._states:
            self._states[key] = self.ctx.docs.get(tenant, doc_id)
        return self._states[key]

    def _resolve(self, span: GoldSpan, principal: Principal) -> DocState | None:
        """The doc state of a gold span: its own tenant, else the asker's, else any tenant in the set."""
        order = [span.tenant] if span.tenant else [principal.tenant, *self.tenants]
        for tenant in dict.fromkeys(order):
            state = self._state(tenant, span.doc_id)
            if state is not None and not state.deleted:
                return state
        return None

    def _stored(self, span: GoldSpan, state: DocState | None) -> bool:
        """Some current passage of the doc contains the quote, looked up with the doc's own ACL."""
        if state is None or not state.acl:
            return False
        own = AccessFilter(tenant=state.tenant, entries=tuple(sorted(set(state.acl))), as_of=FAR_FUTURE)
        ids = set(state.passage_ids)
        hits = self.ctx.lexical.search(span.quote, own, STORE_CHECK_LIMIT, NO_BM25_FLOOR)
        return any(h.passage.passage_id in ids and is_gold(h.passage, [span]) for h in hits)

    def _visible(self, span: GoldSpan, access: AccessFilter) -> bool:
        hits = self.ctx.lexical.search(span.quote, access, STORE_CHECK_LIMIT, NO_BM25_FLOOR)
        return any(is_gold(h.passage, [span]) for h in hits)

    def _run(
        self, principal: Principal, question: EvalQuestion, as_of: datetime, max_searches: int
    ) -> tuple[RunOutcome, AskResult, list[Passage]]:
        retriever = _RecordingRetriever(self.retriever)
        worker = QueryWorker(retriever, self.ctx.model, "eval", replace(self.ctx.worker, max_searches=max_searches))
        started = time.perf_counter()
        result = worker.ask(principal, question.question, as_of)
        latency = (time.perf_counter() - started) * 1000
        by_id = {p.passage_id: p for p in retriever.seen}
        cited = result.trace.cited_ids
        grounded = result.answered and any(pid in by_id and is_gold(by_id[pid], question.gold) for pid in cited)
        outcome = RunOutcome(
            answered=result.answered,
            grounded=grounded,
            searches=len(result.trace.searches),
            latency_ms=round(latency, 3),
            reason=result.trace.reason.value if result.trace.reason else None,
            cited_ids=list(cited),
        )
        return outcome, result, retriever.seen

    # -- one question

    def evaluate_one(self, q: EvalQuestion) -> QuestionResult:
        principal = q.principal
        as_of = to_utc(q.as_of) if q.as_of is not None else default_as_of()
        access = AccessFilter.for_principal(principal, as_of)
        s = self.ctx.retrieval

        # The Retriever's own stages (floored lists, fusion over every candidate, reranking of the fused
        # top), so the metrics measure exactly what answers questions and ranks past k exist.
        ranking = self.retriever.rank(q.question, access)
        lexical, dense = ranking.lexical, ranking.dense
        fused = [ranking.passages[pid] for pid, _ in ranking.fused]
        lexical_all = self.ctx.lexical.search(q.question, access, s.candidates, NO_BM25_FLOOR)
        dense_all: list[Hit] = self.retriever.dense_hits(q.question, access, s.candidates, NO_DENSE_FLOOR)
        ranks: dict[str, list[int | None]] = {
            "bm25": span_ranks([h.passage for h in lexical], q.gold),
            "fused": span_ranks(fused, q.gold),
        }
        if self.ctx.vector is not None and self.ctx.embedder is not None:
            ranks["dense"] = span_ranks([h.passage for h in dense], q.gold)

        loop, loop_result, loop_seen = self._run(principal, q, as_of, self.ctx.worker.max_searches)
        single, _, single_seen = self._run(principal, q, as_of, 1)

        states = [self._resolve(span, principal) for span in q.gold]
        # A gold document missing from the store is a miss to diagnose, not a denial by design.
        allowed = [st is None or acl_allows(principal, st.tenant, st.acl) for st in states]
        gold_denied = bool(q.gold) and not any(allowed)
        result = QuestionResult(
            id=q.id,
            type=q.type,
            expect=q.expect,
            question=q.question,
            gold_denied=gold_denied,
            ranks=ranks,
            loop=loop,
            single=single,
        )
        if q.expect == "answer" and gold_denied:
            result.design_mismatch = "expects an answer but every gold document is denied to the asker"

        # Permission correctness, two ways.
        sources: dict[str, Sequence[Passage]] = {
            "bm25": [h.passage for h in lexical_all],
            "dense": [h.passage for h in dense_all],
            "loop": loop_seen,
            "single": single_seen,
        }
        for source, passages in sources.items():
            for p in passages:
                if p.tenant != principal.tenant or not p.readable(principal.acl_entries(), as_of):
                    result.leaks.append({"kind": "acl", "source": source, "passage_id": p.passage_id})
                elif gold_denied and is_gold(p, q.gold):
                    result.leaks.append({"kind": "denied_gold", "source": source, "passage_id": p.passage_id})
        # A denied-by-design question answered from passages the asker may read is not a leak (every cited
        # passage was re-checked above); it counts against the abstain rate and is listed as unexpected.
        result.leaks = [dict(t) for t in dict.fromkeys(tuple(sorted(x.items())) for x in result.leaks)]

        if result.answerable and not loop.grounded:
            self._diagnose(q, result, states, access, (lexical, dense, lexical_all, dense_all), loop_result, loop_seen)
        return result

    def _diagnose(
        self,
        q: EvalQuestion,
        result: QuestionResult,
        states: Sequence[DocState | None],
        access: AccessFilter,
        lists: tuple[Sequence[Hit], Sequence[Hit], Sequence[Hit], Sequence[Hit]],
        answer: AskResult,
        seen: Sequence[Passage],
    ) -> None:
        """The furthest any gold span got decides the stage: the one to fix to turn this into a hit."""
        lexical, dense, lexical_all, dense_all = lists
        trace = answer.trace
        failed_ids = {f.passage_id for f in trace.check_failures}
        cited_ids = set(trace.cited_ids) | failed_ids
        failed_checks = trace.reason == ReasonCode.CITATION_CHECK_FAILED

        def gold_ids(hits: Iterable[Hit], span: GoldSpan) -> set[str]:
            return {h.passage.passage_id for h in hits if is_gold(h.passage, [span])}

        best: tuple[int, Stage, str] | None = None
        order = list(Stage)
        for index, (span, state) in enumerate(zip(q.gold, states, strict=True)):
            floored = gold_ids((*lexical, *dense), span)
            unfloored = gold_ids((*lexical_all, *dense_all), span)
            stored = self._stored(span, state)
            visible = stored and self._visible(span, access)
            worker_gold = {p.passage_id for p in seen if is_gold(p, [span])}
            facts = MissFacts(
                in_store=stored,
                visible=visible,
                in_unfloored_candidates=bool(unfloored),
                in_floored_candidates=bool(floored),
                selected=bool(worker_gold),
                cited=bool(worker_gold & cited_ids),
                answer_failed_checks=failed_checks,
            )
            stage = diagnose(facts)
            if stage is None:
                continue
            fused_rank = result.ranks["fused"][index]
            detail = self._detail(stage, span, lists, answer, fused_rank)
            score = order.index(stage)
            if best is None or score > best[0]:
                best = (score, stage, detail)
        if best is None:
            # Every span was cited by a passing answer yet not grounded: cannot happen unless the
            # passage ids moved between the search and the check; keep the question visible anyway.
            result.stage, result.detail = Stage.NOT_CITED, "gold cited but not matched on re-check"
            return
        result.stage, result.detail = best[1], best[2]

    def _detail(
        self,
        stage: Stage,
        span: GoldSpan,
        lists: tuple[Sequence[Hit], Sequence[Hit], Sequence[Hit], Sequence[Hit]],
        answer: AskResult,
        fused_rank: int | None = None,
    ) -> str:
        lexical, dense, lexical_all, dense_all = lists

        def rank(hits: Sequence[Hit]) -> str:
            r = span_ranks([h.passage for h in hits], [span])[0]
            return "-" if r is None else str(r)

        def score(hits: Sequence[Hit]) -> str:
            for h in hits:
                if is_gold(h.passage, [span]):
                    return f"{h.score:.3f}"
            return "-"

        where = f"{span.doc_id}: "
        if stage in (Stage.NOT_IN_STORE, Stage.FILTERED_OUT):
            return where + STAGE_HELP[stage]
        if stage == Stage.BELOW_FLOOR:
            s = self.ctx.retrieval
            return where + (
                f"unfloored bm25 rank {rank(lexical_all)} (score {score(lexical_all)}, floor {s.bm25_floor}), "
                f"dense rank {rank(dense_all)} (score {score(dense_all)}, floor {s.dense_floor})"
            )
        if stage == Stage.BELOW_TOP_K:
            return where + (
                f"bm25 rank {rank(lexical)}, dense rank {rank(dense)} of {self.ctx.retrieval.candidates} candidates, "
                f"fused rank {'-' if fused_rank is None else fused_rank}; the worker keeps the fused top "
                f"{self.ctx.retrieval.k}"
            )
        reason = answer.trace.reason.value if answer.trace.reason else "answered from other passages"
        if stage == Stage.CHECK_FAILED:
            checks = ", ".join(sorted({f.check for f in answer.trace.check_failures}))
            return where + f"checks failed: {checks}"
        return where + f"in the evidence, not cited ({reason})"

    # -- the whole set

    def evaluate(self, questions: Sequence[EvalQuestion]) -> list[QuestionResult]:
        tenants = {q.principal.tenant for q in questions} | {s.tenant for q in questions for s in q.gold if s.tenant}
        self.tenants = sorted(tenants)
        return [self.evaluate_one(q) for q in questions]


def run_eval(
    ctx: EvalContext,
    questions: Sequence[EvalQuestion],
    gates: Gates,
    ks: Sequence[int] = KS,
    meta: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    ks = tuple(sorted({*ks, gates.k}))
    started = time.perf_counter()
    results = Evaluator(ctx, ks).evaluate(questions)
    return build_report(results, ctx, gates, time.perf_counter() - started, ks, meta)
