"""Sentence vectors beside each passage vector (VectorIndex.sentence_vectors): what is embedded per passage.

The texts are the ones the sentence reranker and the extractive model embed ("heading: sentence",
query.sentences), so a sentence vector stored at ingest is the vector the reader would compute, and one
embedding cache serves both. Which texts a passage yields is the query layer's reading, handed to the
sink by ragsync's wiring as a function (`SentenceTexts`): the indexer does not split sentences itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from indexer.ports import MAX_SENTENCE_VECTORS, Embedder, Vectors
from schemas.passages import Passage

SentenceTexts = Callable[[Passage], Sequence[str]]
"""A passage's sentence texts, in passage order (never empty: a passage without a sentence is one unit)."""


def capped_texts(passage: Passage, texts_of: SentenceTexts) -> list[str]:
    """The texts whose vectors a store keeps for the passage: the first MAX_SENTENCE_VECTORS."""
    return list(texts_of(passage))[:MAX_SENTENCE_VECTORS]


def all_texts(passages: Sequence[Passage], texts_of: SentenceTexts | None) -> list[str]:
    """Every stored sentence text of these passages (none when sentence vectors are not written)."""
    return [t for p in passages for t in capped_texts(p, texts_of)] if texts_of is not None else []


def embed_sentences(embedder: Embedder, passages: Sequence[Passage], texts_of: SentenceTexts) -> list[Vectors]:
    """Each passage's sentence vectors (rows), embedded in one call (cache hits when pre-embedded)."""
    per = [capped_texts(p, texts_of) for p in passages]
    flat = [t for texts in per for t in texts]
    rows = np.asarray(embedder.embed(flat), dtype=np.float32) if flat else np.zeros((0, embedder.dim), np.float32)
    out: list[Vectors] = []
    start = 0
    for texts in per:
        out.append(rows[start : start + len(texts)])
        start += len(texts)
    return out
