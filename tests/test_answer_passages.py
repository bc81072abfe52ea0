"""bench/answer_passages.py's passage variants reorder the model's candidates by the passage's retrieval
evidence (issue 23): its fused rank, the whole passage's support of the question, the first k passages, a
margin between passages. Candidates built by hand."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from answer_passages import across

from query.extractive import Candidate
from query.ports import Evidence

FIRST = Evidence(passage_id="doc@1#first", heading="Shipping", text="Parcels ship within two days.", title="Policy")
SECOND = Evidence(passage_id="doc@1#second", heading="Refunds", text="Refunds are paid within 14 days.", title="Policy")
EVIDENCE = (FIRST, SECOND)
QUESTION = "How fast are refunds paid?"
# The second passage's sentence scores best; the first passage's is 0.2 behind.
BEST = Candidate(2.0, 0.7, 0.6, 1, SECOND, SECOND.text)
TOP = Candidate(1.8, 0.5, 0.2, 0, FIRST, FIRST.text)
RANKED = [BEST, TOP]


def _first(family: str, value: float) -> str:
    out = across(QUESTION, RANKED, EVIDENCE, family, value)
    return out[0].evidence.passage_id if out else ""


def test_main_rule_keeps_the_order() -> None:
    assert across(QUESTION, RANKED, EVIDENCE, "", 0.0) == RANKED


def test_rank_weight_moves_the_higher_ranked_passage_up_or_down() -> None:
    assert _first("rank", 0.8) == FIRST.passage_id  # 1.8 + 0.8 against 2.0 + 0.4
    assert _first("rank", -0.4) == SECOND.passage_id


def test_top_k_drops_later_passages() -> None:
    assert [c.evidence for c in across(QUESTION, RANKED, EVIDENCE, "top_k", 1)] == [FIRST]


def test_margin_prefers_the_best_ranked_passage_within_the_margin_only() -> None:
    assert _first("margin", 0.3) == FIRST.passage_id
    assert _first("margin", 0.1) == SECOND.passage_id


def test_support_prefers_the_passage_holding_the_question_words() -> None:
    out = across(QUESTION, RANKED, EVIDENCE, "support", 1.0)
    assert out[0].evidence is SECOND and out[0].score > BEST.score
