"""Pure metrics of an evaluation: gold matching, recall@k, MRR, percentiles, miss stages, aggregation, gates.

Nothing here does I/O, so each definition of "recall went down" can be pinned on a case small
enough to compute by hand (tests/test_eval_metrics.py).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal, Protocol

from ragsync.evaluation.questions import GoldSpan
from schemas.text import normalize

KS: tuple[int, ...] = (1, 5, 10, 20)
RANKERS: tuple[str, ...] = ("bm25", "dense", "fused")


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
