"""bench/answer_misses.py puts each answerable turn in one class (issue 23): grounded, retrieval's miss, one of
the answer step's gates, or a wrong sentence; and says what the best sentence is. Turns built by hand."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from answer_misses import classify, tally
from answer_rule import Rule
from answer_turns import Sentence, Turn

from query.extractive import Candidate
from query.ports import Evidence

GOLD = Evidence(passage_id="doc@1#gold", heading="Refunds", text="Refunds are paid within 14 days.", title="Policy")
OTHER = Evidence(passage_id="doc@1#other", heading="Shipping", text="Parcels ship within two days.", title="Policy")


def _turn(
    qid: str, best: Evidence, score: float, meaning: float = 0.7, *, in_top: bool = True, read: bool = True
) -> Turn:
    second = OTHER if best is GOLD else GOLD
    evidence = (best, second) if in_top else (OTHER,)
    cands = [
        Candidate(score, meaning, 0.6, 0, best, best.text),
        Candidate(score - 1.0, 0.5, 0.4, 1, second, second.text),
    ]
    rows = tuple(
        Sentence(c.order, c.evidence.passage_id, c.evidence.heading, c.sentence, c.meaning, c.coverage,
                 c.evidence is GOLD, c.evidence is GOLD)
        for c in cands
    )  # fmt: skip
    if not in_top:
        outside = Sentence(9, GOLD.passage_id, GOLD.heading, GOLD.text, 0.1, 0.1, True, True)
        cands, rows = cands[:1], (*(r for r in rows if not r.gold_passage), outside)
    question = "Within how many days are refunds paid?"
    return Turn("set", qid, "exact", False, question, question if read else None, evidence, rows, tuple(cands))


@pytest.mark.parametrize(
    ("qid", "best", "score", "meaning", "expected", "what"),
    [
        ("grounded", GOLD, 2.4, 0.7, "grounded", None),
        ("score-gate", GOLD, 1.5, 0.7, "abstain: score gate", "gold sentence"),
        ("meaning-gate", GOLD, 2.4, 0.3, "abstain: meaning gate", "gold sentence"),
        ("wrong", OTHER, 2.4, 0.7, "wrong sentence", "other passage"),
        ("gate-other", OTHER, 1.5, 0.7, "abstain: score gate", "other passage"),
    ],
)
def test_each_turn_gets_its_class(
    qid: str, best: Evidence, score: float, meaning: float, expected: str, what: str | None
) -> None:
    row = classify(_turn(qid, best, score, meaning), Rule())
    assert row["class"] == expected
    assert row.get("best") == what
    if what == "gold sentence":
        assert row["gold_rank"] == 1
    if what == "other passage":
        assert row["gold_rank"] == 2


def test_a_gold_outside_the_evidence_is_retrievals_miss_and_an_unmentioned_name_abstains() -> None:
    assert classify(_turn("not-in-top", OTHER, 2.4, in_top=False), Rule())["class"] == "gold not in top 10"
    assert classify(_turn("unnamed", GOLD, 2.4, read=False), Rule())["class"] == "abstain: unmentioned name"


def test_the_tally_counts_the_answer_steps_misses_and_a_perfect_gates_ceiling() -> None:
    turns = [_turn("t-grounded", GOLD, 2.4), _turn("t-gate", GOLD, 1.5), _turn("t-wrong", OTHER, 2.4)]
    figures = tally(turns, Rule())
    assert (figures["grounded"], figures["answer_step_misses"], figures["gold_in_top10"]) == (1, 2, 3)
    assert figures["best_sentence_from_gold_passage"] == 2  # the gate's miss could be grounded; the wrong one not
    assert figures["classes"] == {"grounded": 1, "abstain: score gate": 1, "wrong sentence": 1}
