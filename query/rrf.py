"""Reciprocal Rank Fusion: score(d) = sum over rankings of 1 / (k + rank(d)), ranks from 1."""

from __future__ import annotations

from collections.abc import Sequence

RRF_K = 10
"""Measured on the evaluation sets (bm25, dense and sentence lists): k=10 keeps a strong single-list hit
in the top k where k=60 lets three middling ranks outvote it (eval/git-doc paraphrases 0.62 -> 0.76)."""


def fuse(rankings: Sequence[Sequence[str]], k: int = RRF_K, top: int | None = None) -> list[tuple[str, float]]:
    """Ties break by best single rank, then by ID, so the output is deterministic."""
    scores: dict[str, float] = {}
    best: dict[str, int] = {}
    for ranking in rankings:
        for rank, item in enumerate(dict.fromkeys(ranking), start=1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
            best[item] = min(best.get(item, rank), rank)
    ordered = sorted(scores.items(), key=lambda kv: (-kv[1], best[kv[0]], kv[0]))
    return ordered[:top] if top is not None else ordered
