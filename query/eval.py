"""Evaluation harness: how well retrieval and answering work on a question set, and where each miss went.

Three questions are answered for every run, because each has a different owner when it regresses:

* Retrieval quality: recall@k and MRR of BM25 alone, dense alone and their RRF fusion, measured on
  the same candidate lists the Retriever fuses, so a ranker's regression is visible even when fusion
  hides it.
* Answer quality: the share of answerable questions answered (every citation check passed) and of
  unanswerable ones abstained, for the bounded loop and for a single search on the same questions,
  so the loop's cost (searches, latency) is weighed against what it buys.
* Permission correctness: every passage any ranker or the worker returned is re-checked against
  `acl_allows` (the reference semantics the stores must reproduce), and questions designed so the
  gold is denied to the asker must retrieve no gold at all. Any leak fails the run.

For each answerable question that misses, `diagnose` names the first stage where the gold passage
disappeared (store, permission filter, ranker floor, top k, citation, checks), so a failure report
points at the component to fix instead of at "recall went down".

The metric functions are pure; `evaluate` drives the stores through their ports only (no adapter
is modified for evaluation), with the result cache off so the loop and the single-search runs pay
for the same work.
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from indexer.ports import DocState, DocStateStore, Embedder, Hit, LexicalIndex, VectorIndex
from indexer.text import normalize
from query.ports import Model
from query.retrieval import Retrieval, RetrievalSettings, Retriever
from query.rrf import fuse
from query.worker import AskResult, QueryWorker, WorkerSettings, default_as_of
from schemas._time import to_utc
from schemas.decisions import ReasonCode
from schemas.passages import Passage
from schemas.principal import AccessFilter, Principal, acl_allows

if TYPE_CHECKING:
    from rich.console import Console

    from ragsync.wiring import Components

KS: tuple[int, ...] = (1, 5, 10, 20)
RANKERS: tuple[str, ...] = ("bm25", "dense", "fused")
NO_BM25_FLOOR = float("-inf")
NO_DENSE_FLOOR = -1.0
"""Cosine similarity is never below -1, so this threshold admits every point the filter admits."""
STORE_CHECK_LIMIT = 200
"""How many lexical hits of a gold quote to inspect: the passage containing the whole quote ranks near the top."""
FAR_FUTURE = datetime(9999, 1, 1, tzinfo=UTC)
"""The store check looks at the document's current passages whatever their effective dates."""


# --------------------------------------------------------------------------- question file


class GoldSpan(BaseModel):
    """A passage is gold when it belongs to doc_id and contains quote (whitespace and case folded)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    doc_id: str = Field(min_length=1)
    quote: str = Field(min_length=1)
    tenant: str | None = None
    """Only needed when the gold lives in another tenant than the asker's (cross-tenant leak checks)."""


class EvalQuestion(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1)
    question: str = Field(min_length=1)
    principal: Principal
    expect: Literal["answer", "abstain"]
    type: str = "untyped"
    gold: tuple[GoldSpan, ...] = ()
    as_of: datetime | None = None
    note: str = ""


class QuestionFileError(ValueError):
    pass


def parse_questions(lines: Iterable[str], source: str = "<questions>") -> list[EvalQuestion]:
    """One JSON object per line; blank lines and lines starting with '#' are skipped.

    Errors name the line, and duplicate ids are refused, because a report keyed by id is useless
    when two questions share one.
    """
    out: list[EvalQuestion] = []
    seen: set[str] = set()
    errors: list[str] = []
    for number, line in enumerate(lines, 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        try:
            question = EvalQuestion.model_validate(json.loads(text))
        except (json.JSONDecodeError, ValidationError) as exc:
            errors.append(f"{source}:{number}: {str(exc).splitlines()[0]}")
            continue
        if question.id in seen:
            errors.append(f"{source}:{number}: duplicate id {question.id!r}")
        if question.expect == "answer" and not question.gold:
            errors.append(f"{source}:{number}: expect=answer needs at least one gold span")
        seen.add(question.id)
        out.append(question)
    if errors:
        raise QuestionFileError("\n".join(errors))
    return out


def load_questions(path: Path) -> list[EvalQuestion]:
    with path.open(encoding="utf-8") as handle:
        return parse_questions(handle, str(path))


# --------------------------------------------------------------------------- pure metrics


class HasText(Protocol):
    @property
    def doc_id(self) -> str: ...

    @property
    def text(self) -> str: ...


def matches_gold(doc_id: str, text: str, span: GoldSpan) -> bool:
    """Same normalisation as the citation quote check, so "gold" means "a claim could quote it"."""
    quote = normalize(span.quote)
    return doc_id == span.doc_id and bool(quote) and quote in normalize(text)


def is_gold(passage: HasText, gold: Sequence[GoldSpan]) -> bool:
    return any(matches_gold(passage.doc_id, passage.text, span) for span in gold)


def span_ranks(ranking: Sequence[HasText], gold: Sequence[GoldSpan]) -> list[int | None]:
    """For each gold span, the 1-based rank of the first passage that matches it (None: absent)."""
    ranks: list[int | None] = []
    for span in gold:
        found = None
        for rank, passage in enumerate(ranking, 1):
            if matches_gold(passage.doc_id, passage.text, span):
                found = rank
                break
        ranks.append(found)
    return ranks


def recall_at(ranks: Sequence[int | None], k: int) -> float:
    """Share of gold spans found in the top k. A rule-and-exception question with two spans that
    finds only the rule scores 0.5: half the answer is not evidence for the whole answer."""
    if not ranks:
        return 0.0
    return sum(1 for r in ranks if r is not None and r <= k) / len(ranks)


def reciprocal_rank(ranks: Sequence[int | None]) -> float:
    """1 / rank of the first gold passage of any span; 0 when none was retrieved."""
    found = [r for r in ranks if r is not None]
    return 1.0 / min(found) if found else 0.0


def mean(values: Iterable[float]) -> float | None:
    items = list(values)
    return sum(items) / len(items) if items else None


def percentile(values: Sequence[float], p: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default), None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * p / 100.0
    low = math.floor(position)
    high = math.ceil(position)
    if low == high:
        return ordered[low]
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


class Stage(StrEnum):
    """Where a gold passage was lost, in pipeline order: the first failing stage is the one to fix."""

    NOT_IN_STORE = "not_in_store"
    FILTERED_OUT = "filtered_out"
    BELOW_FLOOR = "below_floor"
    BELOW_TOP_K = "below_top_k"
    NOT_CITED = "not_cited"
    CHECK_FAILED = "check_failed"


STAGE_HELP: dict[Stage, str] = {
    Stage.NOT_IN_STORE: "no stored passage of the document contains the quote (ingestion or chunking)",
    Stage.FILTERED_OUT: "stored, but the asker's tenant/ACL/as-of filter excludes it",
    Stage.BELOW_FLOOR: "a ranker found it without floors, but the configured floor dropped it",
    Stage.BELOW_TOP_K: "visible and above the floors, but never among the passages a search selected",
    Stage.NOT_CITED: "retrieved into the evidence, but the answer did not cite it",
    Stage.CHECK_FAILED: "the answer was refused because a citation check failed",
}


@dataclass(frozen=True)
class MissFacts:
    """What was observed about a question's gold; `diagnose` turns it into the first lost stage."""

    in_store: bool
    visible: bool
    in_unfloored_candidates: bool
    in_floored_candidates: bool
    selected: bool
    cited: bool
    answer_failed_checks: bool


def diagnose(facts: MissFacts) -> Stage | None:
    """The first stage at which the gold disappeared, or None when a passing answer cited it.

    A later search of the loop may select gold that the question's own floored lists lacked, so the
    floor and top-k stages only count when no search selected it.
    """
    if not facts.in_store:
        return Stage.NOT_IN_STORE
    if not facts.visible:
        return Stage.FILTERED_OUT
    if not facts.selected:
        if facts.in_unfloored_candidates and not facts.in_floored_candidates:
            return Stage.BELOW_FLOOR
        return Stage.BELOW_TOP_K
    if facts.answer_failed_checks:
        return Stage.CHECK_FAILED
    if not facts.cited:
        return Stage.NOT_CITED
    return None


# --------------------------------------------------------------------------- per-question outcome


@dataclass
class RunOutcome:
    """One worker run on one question."""

    answered: bool
    grounded: bool
    searches: int
    latency_ms: float
    reason: str | None
    cited_ids: list[str]


@dataclass
class QuestionResult:
    id: str
    type: str
    expect: str
    question: str
    gold_denied: bool
    ranks: dict[str, list[int | None]]
    loop: RunOutcome
    single: RunOutcome
    stage: Stage | None = None
    detail: str = ""
    leaks: list[dict[str, str]] = field(default_factory=list)
    design_mismatch: str | None = None

    @property
    def answerable(self) -> bool:
        """Counted in recall and answer rate: expects an answer from gold the asker may read."""
        return self.expect == "answer" and not self.gold_denied


# --------------------------------------------------------------------------- aggregation (pure)


def ranker_metrics(results: Sequence[QuestionResult], ranker: str, ks: Sequence[int] = KS) -> dict[str, Any]:
    rows = [r.ranks[ranker] for r in results if r.answerable and ranker in r.ranks]
    out: dict[str, Any] = {"n": len(rows)}
    for k in ks:
        out[f"recall@{k}"] = _round(mean(recall_at(ranks, k) for ranks in rows))
    out["mrr"] = _round(mean(reciprocal_rank(ranks) for ranks in rows))
    return out


def run_metrics(results: Sequence[QuestionResult], which: Literal["loop", "single"]) -> dict[str, Any]:
    runs = [(r, r.loop if which == "loop" else r.single) for r in results]
    answer = [o for r, o in runs if r.answerable]
    abstain = [o for r, o in runs if r.expect == "abstain"]
    latencies = [o.latency_ms for _, o in runs]
    return {
        "answer_rate": _round(mean(1.0 if o.answered else 0.0 for o in answer)),
        "grounded_answer_rate": _round(mean(1.0 if o.grounded else 0.0 for o in answer)),
        "abstain_rate": _round(mean(0.0 if o.answered else 1.0 for o in abstain)),
        "searches_per_question": _round(mean(float(o.searches) for _, o in runs)),
        "latency_ms_p50": _round(percentile(latencies, 50), 1),
        "latency_ms_p95": _round(percentile(latencies, 95), 1),
        "n_answer": len(answer),
        "n_abstain": len(abstain),
    }


def summarize(results: Sequence[QuestionResult], ks: Sequence[int] = KS, dense: bool = True) -> dict[str, Any]:
    """Overall and per-type figures; a type with no answerable question still reports its rates."""
    rankers = [r for r in RANKERS if dense or r != "dense"]
    by_type: dict[str, list[QuestionResult]] = defaultdict(list)
    for r in results:
        by_type[r.type].append(r)

    def block(rows: Sequence[QuestionResult]) -> dict[str, Any]:
        return {
            "questions": len(rows),
            "retrieval": {name: ranker_metrics(rows, name, ks) for name in rankers},
            "loop": run_metrics(rows, "loop"),
            "single": run_metrics(rows, "single"),
        }

    return {"overall": block(results), "by_type": {t: block(rows) for t, rows in sorted(by_type.items())}}


@dataclass(frozen=True)
class Gates:
    k: int = 10
    min_recall: float | None = None
    max_leaks: int = 0
    min_answer_rate: float | None = None
    min_abstain_rate: float | None = None


def check_gates(summary: Mapping[str, Any], leaks: int, gates: Gates) -> list[dict[str, Any]]:
    """Each gate with its measured value; leaks are always gated (default 0) because one is a breach."""
    overall = summary["overall"]
    out: list[dict[str, Any]] = [
        {"gate": "leaks", "value": leaks, "limit": f"<= {gates.max_leaks}", "passed": leaks <= gates.max_leaks}
    ]

    def at_least(name: str, value: float | None, threshold: float | None) -> None:
        if threshold is None:
            return
        passed = value is not None and value >= threshold
        out.append({"gate": name, "value": value, "limit": f">= {threshold}", "passed": passed})

    at_least(f"fused recall@{gates.k}", overall["retrieval"]["fused"].get(f"recall@{gates.k}"), gates.min_recall)
    at_least("answer rate (loop)", overall["loop"]["answer_rate"], gates.min_answer_rate)
    at_least("abstain rate (loop)", overall["loop"]["abstain_rate"], gates.min_abstain_rate)
    return out


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


# --------------------------------------------------------------------------- driving the stores


class _RecordingRetriever(Retriever):
    """Keeps every passage the worker's searches returned, for the per-passage ACL re-check."""

    def __init__(self, base: Retriever) -> None:
        super().__init__(base.lexical, base.vector, base.embedder, None, base.settings)
        self.seen: list[Passage] = []

    def search(self, principal: Principal, query: str, as_of: datetime, k: int | None = None) -> Retrieval:
        result = super().search(principal, query, as_of, k)
        self.seen.extend(result.passages)
        return result


@dataclass
class EvalContext:
    """The ports and settings one evaluation runs against (any profile)."""

    lexical: LexicalIndex
    vector: VectorIndex | None
    embedder: Embedder | None
    docs: DocStateStore
    model: Model
    retrieval: RetrievalSettings
    worker: WorkerSettings

    @classmethod
    def from_components(cls, components: Components) -> EvalContext:
        base = components.query_worker()
        return cls(
            lexical=components.lexical,
            vector=components.vector,
            embedder=components.embedder,
            docs=components.docs,
            model=base.model,
            retrieval=base.retriever.settings,
            worker=base.settings,
        )

    @property
    def dense_enabled(self) -> bool:
        return self.vector is not None and self.embedder is not None


class Evaluator:
    def __init__(self, ctx: EvalContext, ks: Sequence[int] = KS) -> None:
        self.ctx = ctx
        self.ks = tuple(sorted(set(ks)))
        # No result cache: the loop and single runs ask the same first query, and a cache hit would
        # make the second run look faster than it is.
        self.retriever = Retriever(ctx.lexical, ctx.vector, ctx.embedder, None, ctx.retrieval)
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

        lexical = self.ctx.lexical.search(q.question, access, s.candidates, s.bm25_floor)
        lexical_all = self.ctx.lexical.search(q.question, access, s.candidates, NO_BM25_FLOOR)
        dense: list[Hit] = []
        dense_all: list[Hit] = []
        if self.ctx.vector is not None and self.ctx.embedder is not None:
            vector = self.ctx.embedder.embed_query(q.question)
            dense = self.ctx.vector.search(vector, access, s.candidates, s.dense_floor)
            dense_all = self.ctx.vector.search(vector, access, s.candidates, NO_DENSE_FLOOR)
        # Same lists and same fusion as Retriever.search; fused over every candidate so ranks past k exist.
        by_id: dict[str, Passage] = {}
        for h in (*lexical, *dense):
            by_id.setdefault(h.passage.passage_id, h.passage)
        fused = [
            by_id[pid]
            for pid, _ in fuse(
                [[h.passage.passage_id for h in lexical], [h.passage.passage_id for h in dense]], k=s.rrf_k
            )
        ]
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
                if not acl_allows(principal, p.tenant, p.acl) or not p.visible_at(as_of):
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


def build_report(
    results: Sequence[QuestionResult],
    ctx: EvalContext,
    gates: Gates,
    elapsed_s: float,
    ks: Sequence[int] = KS,
    meta: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON report: settings, overall and per-type figures, leaks, misses by stage, gates."""
    summary = summarize(results, ks, ctx.dense_enabled)
    leaks = [{"question": r.id, **leak} for r in results for leak in r.leaks]
    misses = [
        {"id": r.id, "type": r.type, "stage": r.stage.value if r.stage else None, "detail": r.detail}
        for r in results
        if r.stage is not None
    ]
    unexpected = [
        {"id": r.id, "type": r.type, "cited": r.loop.cited_ids}
        for r in results
        if r.expect == "abstain" and r.loop.answered
    ]
    gate_rows = check_gates(summary, len(leaks), gates)
    s = ctx.retrieval
    return {
        "meta": {
            **(meta or {}),
            "questions": len(results),
            "answerable": sum(1 for r in results if r.answerable),
            "expect_abstain": sum(1 for r in results if r.expect == "abstain"),
            "denied_by_design": sum(1 for r in results if r.gold_denied),
            "k": gates.k,
            "dense_enabled": ctx.dense_enabled,
            "model": ctx.model.name,
            "settings": {
                "top_k": s.k,
                "candidates": s.candidates,
                "bm25_floor": s.bm25_floor,
                "dense_floor": s.dense_floor,
                "rrf_k": s.rrf_k,
                "max_searches": ctx.worker.max_searches,
            },
            "elapsed_s": round(elapsed_s, 2),
            "notes": [
                "recall@k = share of a question's gold spans in the ranker's top k (averaged over answerable "
                "questions); bm25/dense are the floored candidate lists Retriever.search fuses; fused = RRF over them",
                "loop = the worker with the configured max_searches; single = the same worker with max_searches=1; "
                "result cache off for both",
            ],
        },
        **summary,
        "permissions": {
            "leaks": leaks,
            "leak_count": len(leaks),
            "denied_questions": sum(1 for r in results if r.gold_denied),
            "denied_questions_abstained": sum(1 for r in results if r.gold_denied and not r.loop.answered),
        },
        "design_mismatches": [{"id": r.id, "problem": r.design_mismatch} for r in results if r.design_mismatch],
        "miss_stages": dict(Counter(m["stage"] for m in misses)),
        "misses": misses,
        "unexpected_answers": unexpected,
        "gates": gate_rows,
        "passed": all(g["passed"] for g in gate_rows),
        "results": [
            {
                "id": r.id,
                "type": r.type,
                "expect": r.expect,
                "gold_denied": r.gold_denied,
                "ranks": r.ranks,
                "loop": vars(r.loop),
                "single": vars(r.single),
                "stage": r.stage.value if r.stage else None,
                "leaks": r.leaks,
            }
            for r in results
        ],
    }


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


# --------------------------------------------------------------------------- rendering


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)


def render(report: Mapping[str, Any], console: Console) -> None:
    """Readable tables: rankers overall and per type, loop vs single, misses by stage, gates."""
    from rich.table import Table

    meta = report["meta"]
    console.print(
        f"[bold]{meta['questions']} questions[/] ({meta['answerable']} answerable, {meta['expect_abstain']} expect "
        f"abstain, {meta['denied_by_design']} denied by design); dense={'on' if meta['dense_enabled'] else 'off'}, "
        f"model={meta['model']}, {meta['elapsed_s']}s"
    )
    blocks = [("overall", report["overall"]), *report["by_type"].items()]
    ks = sorted(int(key.split("@")[1]) for key in report["overall"]["retrieval"]["fused"] if key.startswith("recall@"))
    table = Table(title="Retrieval (answerable questions)")
    for col in ("set", "n", "ranker", *(f"R@{k}" for k in ks), "MRR"):
        table.add_column(col, justify="left" if col in ("set", "ranker") else "right")
    for name, block in blocks:
        for i, (ranker, m) in enumerate(block["retrieval"].items()):
            if not m["n"]:
                continue
            table.add_row(
                name if i == 0 else "",
                str(m["n"]) if i == 0 else "",
                ranker,
                *(_fmt(m[f"recall@{k}"]) for k in ks),
                _fmt(m["mrr"]),
            )
        table.add_section()
    console.print(table)

    runs = Table(title="Answers: bounded loop vs single search")
    for col in ("set", "run", "answered", "grounded", "abstained", "searches/q", "p50 ms", "p95 ms"):
        runs.add_column(col, justify="left" if col in ("set", "run") else "right")
    for name, block in blocks:
        for i, which in enumerate(("loop", "single")):
            m = block[which]
            runs.add_row(
                name if i == 0 else "",
                which,
                f"{_fmt(m['answer_rate'])} ({m['n_answer']})",
                _fmt(m["grounded_answer_rate"]),
                f"{_fmt(m['abstain_rate'])} ({m['n_abstain']})",
                _fmt(m["searches_per_question"]),
                _fmt(m["latency_ms_p50"]),
                _fmt(m["latency_ms_p95"]),
            )
        runs.add_section()
    console.print(runs)

    if report["misses"]:
        misses = Table(title="Misses: first stage where the gold disappeared")
        for col in ("id", "type", "stage", "detail"):
            misses.add_column(col)
        for m in report["misses"]:
            misses.add_row(m["id"], m["type"], m["stage"], m["detail"])
        console.print(misses)
        console.print("by stage: " + ", ".join(f"{k}={v}" for k, v in sorted(report["miss_stages"].items())))
    perms = report["permissions"]
    console.print(
        f"permissions: {perms['leak_count']} leaks; {perms['denied_questions_abstained']}/{perms['denied_questions']} "
        "denied-by-design questions abstained"
    )
    for leak in perms["leaks"][:20]:
        console.print(f"  [red]LEAK[/] {leak}")
    for mismatch in report["design_mismatches"]:
        console.print(f"  [yellow]question design:[/] {mismatch['id']}: {mismatch['problem']}")
    gates = Table(title="Gates")
    for col in ("gate", "value", "limit", "result"):
        gates.add_column(col)
    for g in report["gates"]:
        gates.add_row(g["gate"], _fmt(g["value"]), g["limit"], "[green]pass[/]" if g["passed"] else "[red]FAIL[/]")
    console.print(gates)
