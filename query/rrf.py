"""Fusion of the rankers, and the blend of a reranker's scores with the fused order.

Reciprocal Rank Fusion: score(d) = sum over rankings of 1 / (k + rank(d)), ranks from 1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

RRF_K = 60
"""The product brief's constant (Cormack et al.'s): two lists, BM25 and dense. A passage both rankers
place well beats one that only one ranker likes; the reranker, not a smaller k, restores a strong
single-ranker hit when its sentences answer the question (eval/README.md)."""

FUSION_WEIGHT = 0.5
"""How much the fused order counts beside a reranker's score, both standardised (`blend`). Measured on
the three evaluation sets: recall of the top 10 is flat within one question from 0.4 to 0.6; without
the fused order (0) the reranker drops what BM25 alone knew on the Texinfo manual (eval/README.md)."""


def fuse(
    rankings: Sequence[Sequence[str]],
    k: int = RRF_K,
    top: int | None = None,
    weights: Sequence[float] | None = None,
) -> list[tuple[str, float]]:
    """Ties break by best single rank, then by ID, so the output is deterministic.

    `weights` (one per ranking, default all 1) scale each ranking's votes: weighted RRF, measured as a
    lever by bench/leave_one_out.py."""
    if weights is not None and len(weights) != len(rankings):
        raise ValueError("one weight per ranking")
    scores: dict[str, float] = {}
    best: dict[str, int] = {}
    for i, ranking in enumerate(rankings):
        w = 1.0 if weights is None else weights[i]
        for rank, item in enumerate(dict.fromkeys(ranking), start=1):
            scores[item] = scores.get(item, 0.0) + w / (k + rank)
            best[item] = min(best.get(item, rank), rank)
    ordered = sorted(scores.items(), key=lambda kv: (-kv[1], best[kv[0]], kv[0]))
    return ordered[:top] if top is not None else ordered


def _standardised(values: Sequence[float]) -> list[float]:
    """(x - mean) / standard deviation; all zeros when the values do not vary."""
    n = len(values)
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / n)
    return [(v - mean) / sd if sd > 1e-12 else 0.0 for v in values]


def blend(head: Sequence[str], scores: Sequence[float], weight: float = FUSION_WEIGHT) -> list[tuple[str, float]]:
    """Reorder the fused head (best first) by its reranker scores blended with its fused order.

        blended(d) = z(score(d)) + weight * z(1 / log2(1 + fused_rank(d)))

    Each part is standardised over the head, so the blend means the same for any reranker (a cosine,
    a cross-encoder's logits) and any question: a reranker score one standard deviation above the
    others weighs as much as a fused-rank prior `1 / weight` deviations above. The prior falls like a
    DCG discount, steep at the top, so the fused rank 1 keeps an edge the fused rank 30 does not have.
    Ties keep the fused order. Returns (id, blended score), best first.
    """
    if len(head) != len(scores):
        raise ValueError("one score per candidate")
    if not head:
        return []
    prior = _standardised([1.0 / math.log2(rank + 1) for rank in range(1, len(head) + 1)])
    own = _standardised(list(scores))
    blended = [s + weight * p for s, p in zip(own, prior, strict=True)]
    order = sorted(range(len(head)), key=lambda i: (-blended[i], i))
    return [(head[i], blended[i]) for i in order]
