"""The evaluation harness: how well retrieval and answering work on a question set, and where each miss went.

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

The harness is a tool beside the CLI (`ragsync eval`), not part of the query path: `query/` holds
only what answers a question, and this package drives it from the outside.

    questions  the question file (JSON lines) and its validation
    context    the ports and settings an evaluation runs against (EvalContext)
    metrics    pure metrics: gold matching, recall@k, MRR, percentiles, miss stages, aggregation, gates
    runner     drives the stores and the worker through their ports, one question at a time
    report     the JSON report and its tables
"""

from ragsync.evaluation.context import EvalContext
from ragsync.evaluation.metrics import (
    KS,
    RANKERS,
    STAGE_HELP,
    Gates,
    MissFacts,
    QuestionResult,
    RunOutcome,
    Stage,
    check_gates,
    diagnose,
    is_gold,
    matches_gold,
    mean,
    percentile,
    ranker_metrics,
    recall_at,
    reciprocal_rank,
    run_metrics,
    span_ranks,
    summarize,
)
from ragsync.evaluation.questions import EvalQuestion, GoldSpan, QuestionFileError, load_questions, parse_questions
from ragsync.evaluation.report import build_report, render
from ragsync.evaluation.runner import Evaluator, run_eval

__all__ = [
    "KS",
    "RANKERS",
    "STAGE_HELP",
    "EvalContext",
    "EvalQuestion",
    "Evaluator",
    "Gates",
    "GoldSpan",
    "MissFacts",
    "QuestionFileError",
    "QuestionResult",
    "RunOutcome",
    "Stage",
    "build_report",
    "check_gates",
    "diagnose",
    "is_gold",
    "load_questions",
    "matches_gold",
    "mean",
    "parse_questions",
    "percentile",
    "ranker_metrics",
    "recall_at",
    "reciprocal_rank",
    "render",
    "run_eval",
    "run_metrics",
    "span_ranks",
    "summarize",
]
