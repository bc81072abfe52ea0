"""Reranker contract: the sentence reranker (on the real embedder) and the ONNX cross-encoder adapter
(its real loading and inference code on the small cross-encoder graph of tests/test_rerank.py).

What any reranker must do for the Retriever: one finite score per passage, in the order given,
the same scores for the same candidates however they are ordered, and nothing for nothing. It
only ever sees passages the rankers already returned for the principal, so it can only reorder.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from query.ports import RerankInput

CANDIDATES = [
    RerankInput("Revoking access", "Removing a user from a group takes effect before the next query is answered."),
    RerankInput("", "The scheduler runs each source every five minutes. It retries failed scans with backoff."),
    RerankInput("Deletion", "A deleted document leaves every store; a certificate lists each copy and when."),
    RerankInput("Search", "BM25 and dense retrieval are fused by reciprocal rank.", dense_text="Search: BM25 ..."),
]
QUESTION = "how fast does revoking a user's access take effect?"


def _sentence(tmp: Path, embedder: Any) -> Any:
    from query.rerank import SentenceReranker

    return SentenceReranker(embedder)


def _cross_encoder(tmp: Path, embedder: Any) -> Any:
    from test_rerank import passage_length_model

    from query.rerank import OnnxCrossEncoder

    return OnnxCrossEncoder(passage_length_model(tmp / "ce"), batch_size=3)  # batches split the candidates


FACTORIES: dict[str, Callable[[Path, Any], Any]] = {"sentence": _sentence, "cross-encoder": _cross_encoder}


@pytest.fixture(params=list(FACTORIES))
def reranker(request: pytest.FixtureRequest, tmp_path: Path, embedder: Any) -> Any:
    return FACTORIES[request.param](tmp_path, embedder)


def test_names_itself(reranker: Any) -> None:
    assert isinstance(reranker.name, str) and reranker.name


def test_nothing_to_score_is_no_scores(reranker: Any) -> None:
    assert reranker.score(QUESTION, []) == []


def test_one_finite_score_per_passage_in_the_order_given(reranker: Any) -> None:
    scores = reranker.score(QUESTION, CANDIDATES)
    assert len(scores) == len(CANDIDATES) and all(isinstance(s, float) and math.isfinite(s) for s in scores)
    assert reranker.score(QUESTION, CANDIDATES) == scores  # deterministic


def test_scores_follow_the_passages_not_their_positions(reranker: Any) -> None:
    scores = reranker.score(QUESTION, CANDIDATES)
    order = [2, 0, 3, 1]
    shuffled = reranker.score(QUESTION, [CANDIDATES[i] for i in order])
    assert shuffled == pytest.approx([scores[i] for i in order], abs=1e-5)


def test_passages_longer_than_the_model_reads_are_scored(reranker: Any) -> None:
    long = RerankInput("Long", " ".join(["Access is revoked before the next query."] * 80))  # ~720 tokens
    (score,) = reranker.score(QUESTION, [long])
    assert math.isfinite(score)
