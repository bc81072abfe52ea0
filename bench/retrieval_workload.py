"""The synthetic corpus the retrieval benchmarks measure on: passages, their vectors and queries.

Shared by bench/retrieval.py (10k-100k, both profiles) and bench/retrieval_scale.py (a million,
streamed), so both measure the same distribution: text drawn from a Zipf-distributed vocabulary (so
BM25 posting lists have realistic skew), random unit vectors (dim 384, MiniLM's), and query vectors
that are noisy copies of stored ones, so nearest neighbours exist. No model is involved.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from schemas.passages import Passage, make_passage_id

DIM = 384
TENANT = "bench"
VOCAB = 20_000
WORDS_PER_PASSAGE = (40, 120)
STOPWORD_LIKE = 150


class StubEmbedder:
    """Returns the query's precomputed vector: the Retriever's dense path without a model."""

    model_name = "stub"
    dim = DIM

    def __init__(self, vectors: dict[str, np.ndarray]) -> None:
        self._vectors = vectors

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self._vectors[t] for t in texts]).astype(np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        return self._vectors[text]


def batches(
    n: int, rng: np.random.Generator, tiers: Sequence[tuple[int, str]] = ((10, "tenth"),), size: int = 10_000
) -> Iterator[tuple[int, list[Passage], np.ndarray]]:
    """Passages [start, start + size) and their unit vectors, streamed (bench/retrieval_scale.py loads a
    million this way). Every passage is readable by group:all; for each (every, group) of `tiers`, every
    `every`-th passage also by group:<group>, so that filter admits exactly 1/every of them."""
    words = np.array([f"w{i}" for i in range(VOCAB)])
    ranks = np.arange(1, VOCAB + 1)
    probs = (1.0 / ranks) / (1.0 / ranks).sum()
    effective = datetime(2026, 1, 1, tzinfo=UTC)
    for start in range(0, n, size):
        count = min(size, n - start)
        lengths = rng.integers(*WORDS_PER_PASSAGE, size=count)
        drawn = words[rng.choice(VOCAB, size=int(lengths.sum()), p=probs)]
        bounds = np.concatenate(([0], np.cumsum(lengths)))
        out: list[Passage] = []
        for j in range(count):
            i = start + j
            acl = ("group:all", *(f"group:{group}" for every, group in tiers if i % every == 0))
            doc_id = f"doc{i // 20}.md"
            anchor = f"s-{i % 20}"
            out.append(
                Passage(
                    passage_id=make_passage_id(doc_id, 1, anchor),
                    doc_id=doc_id,
                    version=1,
                    anchor=anchor,
                    tenant=TENANT,
                    acl=acl,
                    effective_from=effective,
                    heading_path=(f"Section {i % 20}",),
                    title=doc_id,
                    text=" ".join(drawn[bounds[j] : bounds[j + 1]]),
                    source_url=f"file:///{doc_id}",
                    chunker_version="bench",
                )
            )
        vectors = rng.standard_normal((count, DIM)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        yield start, out, vectors


def synthetic(n: int, rng: np.random.Generator) -> tuple[list[Passage], np.ndarray]:
    """n passages; every 10th one is also readable by group:tenth, so that filter admits exactly 10%."""
    passages: list[Passage] = []
    parts: list[np.ndarray] = []
    for _, out, vectors in batches(n, rng):
        passages.extend(out)
        parts.append(vectors)
    return passages, np.concatenate(parts) if parts else np.zeros((0, DIM), dtype=np.float32)


@dataclass
class Workload:
    """Synthetic passages, their vectors, and the queries every profile measures on them."""

    n: int
    passages: list[Passage]
    vectors: np.ndarray
    texts: list[str]
    qvecs: np.ndarray


def workload(n: int, queries: int, rng: np.random.Generator) -> Workload:
    passages, vectors = synthetic(n, rng)
    # Query words skip the Zipf head: real queries lose their stopwords in query_terms().
    head = {f"w{i}" for i in range(STOPWORD_LIKE)}
    words = [
        [w for w in p.text.split() if w not in head] or p.text.split()
        for p in rng.choice(np.array(passages, dtype=object), size=queries)
    ]
    texts = [" ".join(rng.choice(w, size=min(4, len(w)), replace=False)) + f" q{i}" for i, w in enumerate(words)]
    targets = rng.integers(0, n, size=queries)
    noise = rng.standard_normal((queries, DIM)).astype(np.float32) * 0.03
    qvecs = vectors[targets] + noise
    qvecs /= np.linalg.norm(qvecs, axis=1, keepdims=True)
    return Workload(n, passages, vectors, texts, qvecs)
