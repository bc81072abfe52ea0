"""The evaluation harness's metrics and miss diagnosis, on hand-made rankings and a tiny real store.

The metric functions decide what "recall went down" means, so each is pinned on a case small enough
to compute by hand; the stage diagnosis is exercised end to end on SQLite FTS5 with scripted models,
one scenario per stage, because a wrong stage sends whoever reads the report to the wrong component.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import NOW, make_passage

from indexer.ports import DocState
from indexer.sqlite_fts import SqliteLexicalIndex
from indexer.state import SqliteDocStates
from query.extractive import ExtractiveModel
from query.ports import TOOL_SUBMIT, ModelTurn, ToolCall
from query.retrieval import RetrievalSettings
from query.worker import WorkerSettings
from ragsync.evaluation import (
    EvalContext,
    EvalQuestion,
    Evaluator,
    Gates,
    GoldSpan,
    MissFacts,
    QuestionFileError,
    QuestionResult,
    RunOutcome,
    Stage,
    build_report,
    check_gates,
    diagnose,
    is_gold,
    load_questions,
    matches_gold,
    parse_questions,
    percentile,
    recall_at,
    reciprocal_rank,
    span_ranks,
    summarize,
)
from schemas.passages import Passage

# ---------------------------------------------------------------------------- gold matching


def test_gold_matches_after_whitespace_and_case_folding() -> None:
    span = GoldSpan(doc_id="a.md", quote="Refunds are  issued\nwithin 30 days")
    assert matches_gold("a.md", "Policy. REFUNDS are issued within   30 days of purchase.", span)
    assert not matches_gold("b.md", "Refunds are issued within 30 days", span), "another document never counts"
    assert not matches_gold("a.md", "Refunds are issued within 45 days", span)
    assert not matches_gold("a.md", "anything", GoldSpan(doc_id="a.md", quote="   ")), "an empty quote matches nothing"


def test_gold_does_not_fold_punctuation() -> None:
    """Same liberty as the citation quote check: curly quotes are not straight quotes."""
    span = GoldSpan(doc_id="a.md", quote="the module’s default")
    assert matches_gold("a.md", "The module’s default separators", span)
    assert not matches_gold("a.md", "The module's default separators", span)


# ---------------------------------------------------------------------------- ranks, recall, MRR


def _p(doc: str, text: str, anchor: str = "a-1") -> Passage:
    return make_passage(text, doc_id=doc, anchor=anchor)


RANKING = [
    _p("x.md", "unrelated"),
    _p("a.md", "the rule: refunds within 30 days", "r-1"),
    _p("b.md", "noise"),
    _p("a.md", "except gift cards, which are final", "e-1"),
]
RULE = GoldSpan(doc_id="a.md", quote="refunds within 30 days")
EXCEPTION = GoldSpan(doc_id="a.md", quote="except gift cards")
MISSING = GoldSpan(doc_id="a.md", quote="never retrieved")


def test_span_ranks_are_one_based_first_match_per_span() -> None:
    assert span_ranks(RANKING, [RULE, EXCEPTION, MISSING]) == [2, 4, None]
    assert is_gold(RANKING[1], [RULE]) and not is_gold(RANKING[0], [RULE])


@pytest.mark.parametrize(
    ("ranks", "k", "expected"),
    [
        ([2], 1, 0.0),
        ([2], 5, 1.0),
        ([2, 4], 3, 0.5),  # rule found, exception not: half the evidence
        ([2, 4], 4, 1.0),
        ([None], 20, 0.0),
        ([], 5, 0.0),
    ],
)
def test_recall_at_k_is_the_share_of_gold_spans_in_the_top_k(ranks: list[int | None], k: int, expected: float) -> None:
    assert recall_at(ranks, k) == expected


def test_reciprocal_rank_uses_the_best_span() -> None:
    assert reciprocal_rank([4, 2]) == 0.5
    assert reciprocal_rank([None, 3]) == pytest.approx(1 / 3)
    assert reciprocal_rank([None]) == 0.0
    assert reciprocal_rank([]) == 0.0


def test_percentile_interpolates_like_numpy() -> None:
    values = [10.0, 20.0, 30.0, 40.0]
    assert percentile(values, 50) == 25.0
    assert percentile(values, 95) == pytest.approx(38.5)
    assert percentile([7.0], 95) == 7.0
    assert percentile([], 50) is None


# ---------------------------------------------------------------------------- stage diagnosis (pure)

HIT = MissFacts(True, True, True, True, True, True, False)


@pytest.mark.parametrize(
    ("change", "stage"),
    [
        ({}, None),
        ({"in_store": False, "visible": False, "selected": False}, Stage.NOT_IN_STORE),
        ({"visible": False, "selected": False}, Stage.FILTERED_OUT),
        ({"in_floored_candidates": False, "selected": False, "cited": False}, Stage.BELOW_FLOOR),
        ({"selected": False, "cited": False}, Stage.BELOW_TOP_K),
        ({"in_unfloored_candidates": False, "in_floored_candidates": False, "selected": False}, Stage.BELOW_TOP_K),
        ({"cited": False}, Stage.NOT_CITED),
        ({"answer_failed_checks": True}, Stage.CHECK_FAILED),
    ],
)
def test_diagnose_names_the_first_lost_stage(change: dict[str, bool], stage: Stage | None) -> None:
    facts = MissFacts(**{**HIT.__dict__, **change})
    assert diagnose(facts) == stage


def test_a_later_search_that_selected_the_gold_overrides_the_floor() -> None:
    """The loop's rewrite found it: the floor did not lose it, the citation step did."""
    facts = MissFacts(True, True, True, False, True, False, False)
    assert diagnose(facts) == Stage.NOT_CITED


# ---------------------------------------------------------------------------- question file


def _line(**over: Any) -> str:
    import json

    item: dict[str, Any] = {
        "id": "q1",
        "question": "How long is the refund window?",
        "principal": {"tenant": "acme", "user": "ann", "groups": ["staff"]},
        "expect": "answer",
        "gold": [{"doc_id": "a.md", "quote": "within 30 days"}],
    }
    item.update(over)
    return json.dumps(item)


def test_question_file_skips_comments_and_blank_lines() -> None:
    questions = parse_questions(["# header", "", _line(), _line(id="q2", type="paraphrase")])
    assert [q.id for q in questions] == ["q1", "q2"]
    assert questions[0].type == "untyped" and questions[1].type == "paraphrase"


def test_question_file_errors_name_the_line() -> None:
    with pytest.raises(QuestionFileError) as err:
        parse_questions([_line(), _line(), "{not json", _line(id="q3", gold=[]), _line(id="q4", expect="maybe")])
    message = str(err.value)
    assert ":2: duplicate id 'q1'" in message
    assert ":3:" in message
    assert ":4: expect=answer needs at least one gold span" in message
    assert ":5:" in message


def test_question_file_refuses_unknown_fields() -> None:
    """A typo like "expects" must not silently turn a question into the default."""
    with pytest.raises(QuestionFileError):
        parse_questions([_line(expects="abstain")])


# ---------------------------------------------------------------------------- aggregation and gates


def _result(qid: str, qtype: str, expect: str, ranks: list[int | None], answered: bool, **kw: Any) -> QuestionResult:
    run = RunOutcome(answered, answered and expect == "answer", 1, 10.0, None, [])
    return QuestionResult(
        id=qid,
        type=qtype,
        expect=expect,
        question="?",
        gold_denied=kw.get("denied", False),
        ranks={"bm25": ranks, "dense": ranks, "fused": ranks},
        loop=run,
        single=RunOutcome(False, False, 1, 5.0, "model_abstained", []),
    )


def test_summary_counts_only_answerable_questions_in_recall_and_answer_rate() -> None:
    results = [
        _result("a", "exact", "answer", [1], True),
        _result("b", "paraphrase", "answer", [None], False),
        _result("c", "denied", "abstain", [3], False, denied=True),
        _result("d", "unanswerable", "abstain", [], True),
    ]
    summary = summarize(results)
    fused = summary["overall"]["retrieval"]["fused"]
    assert fused["n"] == 2 and fused["recall@1"] == 0.5 and fused["mrr"] == 0.5
    loop = summary["overall"]["loop"]
    assert loop["answer_rate"] == 0.5 and loop["abstain_rate"] == 0.5
    assert summary["overall"]["single"]["answer_rate"] == 0.0
    assert summary["by_type"]["exact"]["retrieval"]["fused"]["recall@1"] == 1.0
    assert summary["by_type"]["denied"]["retrieval"]["fused"]["n"] == 0


def test_gates_fail_on_any_leak_and_on_each_threshold() -> None:
    summary = summarize([_result("a", "exact", "answer", [3], True)])
    gates = Gates(k=5, min_recall=0.9, min_answer_rate=1.0, min_abstain_rate=0.5)
    rows = {g["gate"]: g["passed"] for g in check_gates(summary, leaks=0, gates=gates)}
    assert rows == {
        "leaks": True,
        "fused recall@5": True,
        "answer rate (loop)": True,
        "abstain rate (loop)": False,  # no expect=abstain question: no evidence the system abstains
    }
    assert not check_gates(summary, leaks=1, gates=Gates(k=5))[0]["passed"]
    assert not check_gates(summary, leaks=0, gates=Gates(k=1, min_recall=0.5))[1]["passed"]


# ---------------------------------------------------------------------------- the evaluator on a real store

TENANT = "acme"
STAFF = {"tenant": TENANT, "user": "ann", "groups": ["staff"]}
REFUND = "Customers may request a refund within 30 days of purchase."
SALARY = "Salary bands are reviewed every April by the compensation committee."


class AbstainingModel:
    name = "abstains"

    def decide(self, turn: ModelTurn) -> ToolCall:
        return ToolCall(TOOL_SUBMIT, {"abstain": True})


class MisquotingModel:
    """Cites the first passage with a quote that is not in it: the quote_match check must refuse."""

    name = "misquotes"

    def decide(self, turn: ModelTurn) -> ToolCall:
        pid = turn.evidence[0].passage_id
        claim = {"statement": "Refunds take 90 days.", "passage_id": pid, "quote": "refunds take ninety whole days"}
        return ToolCall(TOOL_SUBMIT, {"claims": [claim]})


@pytest.fixture
def store(tmp_path: Path) -> Any:
    lexical = SqliteLexicalIndex(tmp_path / "lexical.db")
    docs = SqliteDocStates(tmp_path / "state.db")
    passages = {
        "policy.md": [make_passage(REFUND, doc_id="policy.md", anchor="refunds-1", tenant=TENANT)],
        "hr.md": [make_passage(SALARY, doc_id="hr.md", anchor="bands-1", tenant=TENANT, acl=("group:hr",))],
        "future.md": [
            make_passage(
                "Loyalty points expire after twelve months of account inactivity.",
                doc_id="future.md",
                anchor="points-1",
                tenant=TENANT,
                effective_from=NOW + timedelta(days=3650),
            )
        ],
        "noise.md": [
            make_passage(f"A refund note number {i}: refund refund refund.", doc_id="noise.md", anchor=f"n-{i}")
            for i in range(12)
        ],
    }
    for doc_id, items in passages.items():
        lexical.upsert(items)
        docs.put(
            DocState(
                tenant=TENANT,
                doc_id=doc_id,
                applied_version=1,
                acl=items[0].acl,
                passage_ids=[p.passage_id for p in items],
            )
        )
    yield lexical, docs
    lexical.close()
    docs.close()


def _evaluate(store: Any, questions: list[EvalQuestion], model: Any = None, **settings: Any) -> dict[str, Any]:
    lexical, docs = store
    ctx = EvalContext(
        lexical=lexical,
        vector=None,
        embedder=None,
        docs=docs,
        model=model or ExtractiveModel(),
        retrieval=RetrievalSettings(**{"k": 8, **settings}),
        worker=WorkerSettings(),
    )
    results = Evaluator(ctx).evaluate(questions)
    return build_report(results, ctx, Gates(), 0.0)


def _q(qid: str, question: str, gold: list[tuple[str, str]], expect: str = "answer", **kw: Any) -> EvalQuestion:
    return EvalQuestion.model_validate(
        {
            "id": qid,
            "question": question,
            "principal": kw.pop("principal", STAFF),
            "expect": expect,
            "gold": [{"doc_id": d, "quote": q} for d, q in gold],
            **kw,
        }
    )


def _stage(report: dict[str, Any], qid: str) -> str | None:
    return next(r["stage"] for r in report["results"] if r["id"] == qid)


def test_a_grounded_answer_is_no_miss(store: Any) -> None:
    report = _evaluate(store, [_q("hit", "How many days to request a refund after purchase?", [("policy.md", REFUND)])])
    assert report["misses"] == [] and report["overall"]["loop"]["grounded_answer_rate"] == 1.0
    assert report["overall"]["retrieval"]["bm25"]["recall@20"] == 1.0


def test_each_stage_is_diagnosed_on_the_store(store: Any) -> None:
    refund_q = "How many days to request a refund after purchase?"
    questions = [
        _q("store", refund_q, [("policy.md", "refunds are instant")]),
        _q("dates", "When do loyalty points expire?", [("future.md", "expire after twelve months")]),
        _q("cite", refund_q, [("policy.md", REFUND)]),
    ]
    report = _evaluate(store, questions, model=AbstainingModel())
    assert _stage(report, "store") == Stage.NOT_IN_STORE
    assert _stage(report, "dates") == Stage.FILTERED_OUT
    assert _stage(report, "cite") == Stage.NOT_CITED
    assert report["miss_stages"] == {"not_in_store": 1, "filtered_out": 1, "not_cited": 1}

    floors = _evaluate(store, [_q("floor", refund_q, [("policy.md", REFUND)])], bm25_floor=1e9)
    assert _stage(floors, "floor") == Stage.BELOW_FLOOR
    assert "floor 1000000000.0" in floors["misses"][0]["detail"]

    topk = _evaluate(store, [_q("topk", "refund", [("policy.md", REFUND)])], k=1)
    assert _stage(topk, "topk") == Stage.BELOW_TOP_K

    checks = _evaluate(store, [_q("checks", refund_q, [("policy.md", REFUND)])], model=MisquotingModel())
    assert _stage(checks, "checks") == Stage.CHECK_FAILED
    assert "quote_match" in checks["misses"][0]["detail"]


def test_denied_gold_is_not_answerable_and_not_a_leak_when_nothing_is_retrieved(store: Any) -> None:
    question = _q("denied", "When are salary bands reviewed?", [("hr.md", SALARY)], expect="abstain")
    report = _evaluate(store, [question])
    assert report["meta"]["denied_by_design"] == 1 and report["meta"]["answerable"] == 0
    assert report["meta"]["lexical"] == "sqlite-fts5"  # the store (and engine) the figures come from
    assert report["permissions"]["leak_count"] == 0 and report["passed"]
    assert report["overall"]["loop"]["abstain_rate"] == 1.0


def test_a_store_that_ignores_the_acl_is_caught_as_a_leak(store: Any) -> None:
    """An adapter bug (the filter not applied) must fail the run, however good the answers look."""
    lexical, docs = store

    class LeakyIndex:
        name = "leaky"

        def search(self, query: str, access: Any, limit: int, floor: float) -> Any:
            from schemas.principal import AccessFilter

            everyone = AccessFilter(access.tenant, ("group:staff", "group:hr"), access.as_of)
            return lexical.search(query, everyone, limit, floor)

    question = _q("denied", "When are salary bands reviewed?", [("hr.md", SALARY)], expect="abstain")
    report = _evaluate((LeakyIndex(), docs), [question])
    leaks = report["permissions"]["leaks"]
    assert {leak["kind"] for leak in leaks} == {"acl"}
    assert any(leak["passage_id"].startswith("hr.md@") for leak in leaks)
    assert not report["passed"] and report["gates"][0]["gate"] == "leaks"


def test_as_of_is_taken_from_the_question(store: Any) -> None:
    """A question asked as of a date after the passage's effective date sees it."""
    question = _q(
        "later",
        "When do loyalty points expire?",
        [("future.md", "expire after twelve months")],
        as_of=(NOW + timedelta(days=4000)).astimezone(UTC).isoformat(),
    )
    report = _evaluate(store, [question])
    assert report["misses"] == [], report["misses"]
    assert datetime.fromisoformat(question.model_dump(mode="json")["as_of"]) > NOW


def test_a_revocation_the_store_missed_is_caught_by_design(store: Any) -> None:
    """Doc state says hr only, the stored passage still says staff: the passage ACL check cannot see it,
    the question's design (gold denied to the asker) does."""
    _, docs = store
    docs.put(DocState(tenant=TENANT, doc_id="policy.md", applied_version=2, acl=("group:hr",), passage_ids=[]))
    question = _q("revoked", "How many days to request a refund after purchase?", [("policy.md", REFUND)], "abstain")
    report = _evaluate(store, [question])
    assert {leak["kind"] for leak in report["permissions"]["leaks"]} == {"denied_gold"}
    assert not report["passed"]


def test_situation_questions_are_reported_as_their_own_type() -> None:
    """Issue 23: questions written as a user describes a situation are a type of their own in every table."""
    summary = summarize(
        [
            _result("a", "situation", "answer", [None], False),
            _result("b", "situation", "answer", [1], True),
            _result("c", "exact", "answer", [1], True),
        ]
    )
    situation = summary["by_type"]["situation"]["retrieval"]["fused"]
    assert situation["n"] == 2 and situation["recall@1"] == 0.5
    assert summary["by_type"]["exact"]["retrieval"]["fused"]["recall@1"] == 1.0


@pytest.mark.parametrize("name", ["python-manual", "git-doc", "flex-doc", "debian-handbook", "sqlite-doc"])
def test_every_committed_question_file_parses_with_known_types(name: str) -> None:
    path = Path(__file__).resolve().parents[1] / "eval" / name / "questions.jsonl"
    questions = load_questions(path)
    types = {q.type for q in questions}
    assert types <= {"exact", "paraphrase", "rule_exception", "situation", "unanswerable", "denied"}
    assert "situation" in types
    for q in questions:
        assert (q.expect == "abstain") == (q.type in {"unanswerable", "denied"}), q.id
        assert bool(q.gold) == (q.type != "unanswerable"), q.id
