"""The leave-one-set-out protocol's replay (bench/loo_rank.py) and its selection (bench/leave_one_out.py).

The grid is measured with the numpy replay (`fast_rank`); these check it orders candidates as the
plain replay (`rank`, the steps of Retriever.rank) does under any method, and that a set's held-out
choice never looks at that set.
"""

from __future__ import annotations

import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from leave_one_out import protocol, select
from loo_harness import by_type_figures
from loo_rank import (
    Candidate,
    Figures,
    Method,
    QuestionFeatures,
    compile_question,
    fast_rank,
    rank,
)

TERMS = ["flag", "rule", "match", "start", "buffer", "scanner"]


@st.composite
def questions(draw: st.DrawFn) -> QuestionFeatures:
    n = draw(st.integers(2, 14))
    pids = [f"p{i}" for i in range(n)]
    cands = {}
    for pid in pids:
        k = draw(st.integers(1, 4))
        sims = draw(st.lists(st.floats(-0.2, 0.9), min_size=k, max_size=k))
        units = [frozenset(draw(st.lists(st.sampled_from(TERMS), max_size=3))) for _ in range(k)]
        bag = frozenset().union(*units)
        cands[pid] = Candidate(pid, (0,) if pid == "p1" else (), sims, units, bag, draw(st.floats(0.0, 0.9)))
    lex = draw(st.permutations(pids))[: draw(st.integers(0, n))]
    dense = draw(st.permutations(pids))[: draw(st.integers(0, n))]
    sent = draw(st.permutations(pids))[: draw(st.integers(0, n))]
    sub = draw(st.permutations(pids))[: draw(st.integers(0, n))]
    scored = lambda ids, top: [(pid, top - i * 0.05) for i, pid in enumerate(ids)]  # noqa: E731
    terms = sorted(set(draw(st.lists(st.sampled_from(TERMS), min_size=0, max_size=4))))
    return QuestionFeatures(
        "s",
        "q",
        "paraphrase",
        1,
        terms,
        scored(lex, 9.0),
        scored(dense, 0.7),
        scored(sent, 0.8),
        cands,
        scored(sub, 0.6),
    )


methods = st.builds(
    Method,
    dense_floor=st.sampled_from([0.0, 0.3, 0.5]),
    bm25_rel_floor=st.sampled_from([0.0, 0.95]),
    rrf_k=st.sampled_from([10, 60]),
    bm25_weight=st.sampled_from([0.5, 1.0]),
    sentence_weight=st.sampled_from([0.0, 1.0]),
    subquery_weight=st.sampled_from([0.0, 0.5, 1.0]),
    passage_meaning=st.sampled_from([0.0, 0.3]),
    fusion_weight=st.sampled_from([0.25, 0.5]),
    rerank_depth=st.sampled_from([0, 3, 50]),
)


@settings(max_examples=100, deadline=None)
@given(questions(), methods)
def test_the_numpy_replay_orders_as_the_plain_replay(q: QuestionFeatures, m: Method) -> None:
    assert fast_rank(compile_question(q), m) == rank(q, m)


def test_the_sentences_searched_one_by_one_are_a_list_of_their_own_only_when_weighted() -> None:
    cands = {
        pid: Candidate(pid, (0,) if pid == "gold" else (), [0.1], [frozenset()], frozenset(), 0.1)
        for pid in ("a", "b", "gold")
    }
    q = QuestionFeatures(
        "s", "q", "situation", 1, [], [("a", 5.0)], [("b", 0.5)], [], cands, [("gold", 0.45), ("b", 0.4)]
    )
    plain = Method(rerank_depth=0)
    assert "gold" not in rank(q, plain)
    assert rank(q, Method(rerank_depth=0, subquery_weight=1.0))[0] in {"b", "gold"}
    assert "gold" in rank(q, Method(rerank_depth=0, subquery_weight=1.0))
    assert "gold" not in rank(q, Method(rerank_depth=0, subquery_weight=1.0, dense_floor=0.5)), "floored as dense"


def _fig(fused: float) -> Figures:
    return Figures(n=1, fused=fused, mrr=fused, hard=fused, by_type={})


def test_a_sets_held_out_choice_ignores_that_set() -> None:
    a, b = Method(), Method(dense_floor=0.25)
    figs = {
        "one": {a: _fig(0.5), b: _fig(1.0)},  # "one" alone would pick b
        "two": {a: _fig(0.9), b: _fig(0.6)},
        "three": {a: _fig(0.9), b: _fig(0.7)},
    }
    report = protocol(figs, ["one", "two", "three"], [a, b])
    assert report["sets"]["one"]["held_out_method"] == a.label()  # chosen on two and three
    assert report["sets"]["one"]["fitted_to_this_set"]["method"] == b.label()
    assert report["sets"]["one"]["held_out"]["fused_recall@10"] == 0.5
    assert select(figs, ["one"], [a, b]) == b
    assert select({"x": {a: _fig(0.8), b: _fig(0.8)}}, ["x"], [b, a]) == a  # a tie keeps the defaults


def test_by_type_figures_reads_each_named_figure_of_the_types_with_retrieval() -> None:
    """One reading of the eval report for answer_rule.py and leave_one_out.py: a type with no retrieval
    figures is left out, a missing ranker or mode is None rather than a KeyError."""
    report = {
        "by_type": {
            "fact": {
                "n": 7,
                "retrieval": {"fused": {"recall@10": 0.9}, "bm25": {"recall@10": 0.8}},
                "loop": {"grounded_answer_rate": 0.7},
            },
            "abstain": {"n": 3, "loop": {"grounded_answer_rate": 0.0}},
        }
    }
    assert by_type_figures(report, ("n", "fused", "bm25", "dense", "grounded_loop", "grounded_single")) == {
        "fact": {"n": 7, "fused": 0.9, "bm25": 0.8, "dense": None, "grounded_loop": 0.7, "grounded_single": None}
    }
    assert by_type_figures(report, ("fused",)) == {"fact": {"fused": 0.9}}
