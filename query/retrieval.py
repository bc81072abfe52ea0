"""Permission-filtered hybrid retrieval: BM25 and dense, each with its own floor, fused by RRF,
then (when a cross-encoder is configured) the fused top `rerank_depth` reordered by it.

With an embedder loaded there is a third list: the fused top `sentence_depth` candidates ordered
by their best sentence's similarity to the question (`SentenceMaxSim`), fused with the other two.
It only reorders what the two permission-filtered rankers returned, so it can never widen what a
principal sees; it lifts paraphrased questions, whose answer is one sentence of a longer passage.

The AccessFilter goes into each store's own query; nothing here sees a passage the principal
may not read. Results are cached under a key of tenant, user, sorted groups, query, as-of and
the tenant's generation, so a revocation (generation bump) makes every older entry unreachable.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from datetime import datetime

from indexer.cache import cache_key
from indexer.ports import Cache, Embedder, Hit, LexicalIndex, VectorIndex
from query.ports import Reranker, RerankInput
from query.rrf import RRF_K, fuse
from schemas.passages import Passage
from schemas.principal import AccessFilter, Principal

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RetrievalSettings:
    k: int = 8
    candidates: int = 50
    bm25_floor: float = 0.0
    """No BM25 floor, by measurement: on the three evaluation sets the weakest gold passage scores 0.97-5.4
    while unanswerable questions' best hits score 10-15, so any floor loses answers before it drops one
    unanswerable question; and BM25 scores shrink towards 0 on small corpora (FTS5 clamps idf), where a
    floor would drop everything. Unanswerable questions are separated by the answering model instead."""
    dense_floor: float = 0.30
    """Below the weakest gold passage on the Python and flex sets (0.27, 0.25); cuts one Git gold (0.24)."""
    rrf_k: int = RRF_K
    cache_ttl_s: float = 60.0
    rerank_depth: int = 20
    sentence_depth: int = 50


@dataclass
class Ranking:
    """Every stage's list for one query: what `search` cuts to k, and what evaluation measures."""

    lexical: list[Hit]
    dense: list[Hit]
    fused: list[tuple[str, float]]  # every candidate, RRF order, then reranked at the top when a reranker is set
    passages: dict[str, Passage]
    sentence: list[tuple[str, float]] = field(default_factory=list)  # the sentence list, best first
    reranked: bool = False


@dataclass
class Retrieval:
    passages: list[Passage]
    lexical_ids: list[str] = field(default_factory=list)
    dense_ids: list[str] = field(default_factory=list)
    fused: list[tuple[str, float]] = field(default_factory=list)
    cached: bool = False
    elapsed_ms: float = 0.0

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "passages": [p.model_dump(mode="json") for p in self.passages],
                "lexical_ids": self.lexical_ids,
                "dense_ids": self.dense_ids,
                "fused": self.fused,
            }
        ).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> Retrieval:
        data = json.loads(raw)
        return cls(
            passages=[Passage.model_validate(p) for p in data["passages"]],
            lexical_ids=data["lexical_ids"],
            dense_ids=data["dense_ids"],
            fused=[(i, s) for i, s in data["fused"]],
            cached=True,
        )


def _rerank_input(passage: Passage) -> RerankInput:
    return RerankInput(" > ".join(passage.heading_path) or passage.title, passage.text)


class Retriever:
    def __init__(
        self,
        lexical: LexicalIndex,
        vector: VectorIndex | None,
        embedder: Embedder | None,
        cache: Cache | None,
        settings: RetrievalSettings | None = None,
        reranker: Reranker | None = None,
        sentence_ranker: Reranker | None = None,
    ) -> None:
        self.reranker = reranker
        self.sentence_ranker = sentence_ranker if embedder is not None else None
        self.lexical = lexical
        self.vector = vector if embedder is not None else None
        self.embedder = embedder
        self.cache = cache
        self.settings = settings or RetrievalSettings()

    @property
    def dense_enabled(self) -> bool:
        return self.vector is not None and self.embedder is not None

    def lexical_hits(self, query: str, access: AccessFilter, limit: int | None = None) -> list[Hit]:
        return self.lexical.search(query, access, limit or self.settings.candidates, self.settings.bm25_floor)

    def dense_hits(self, query: str, access: AccessFilter, limit: int | None = None) -> list[Hit]:
        if self.vector is None or self.embedder is None:
            return []
        vector = self.embedder.embed_query(query)
        return self.vector.search(vector, access, limit or self.settings.candidates, self.settings.dense_floor)

    def rank(self, query: str, access: AccessFilter) -> Ranking:
        """Both rankers, the sentence list over their fused top, fusion, and the reranker over the fused top."""
        lexical = self.lexical_hits(query, access)
        dense = self.dense_hits(query, access)
        by_id: dict[str, Passage] = {}
        for h in (*lexical, *dense):
            by_id.setdefault(h.passage.passage_id, h.passage)
        lists = [[h.passage.passage_id for h in lexical], [h.passage.passage_id for h in dense]]
        fused = fuse(lists, k=self.settings.rrf_k)
        ranking = Ranking(lexical, dense, fused, by_id)
        if self.sentence_ranker is not None and fused and self.settings.sentence_depth > 0:
            top = [pid for pid, _ in fused[: self.settings.sentence_depth]]
            scores = self.sentence_ranker.score(query, [_rerank_input(by_id[pid]) for pid in top])
            ranking.sentence = sorted(zip(top, scores, strict=True), key=lambda t: -t[1])
            ranking.fused = fused = fuse([*lists, [pid for pid, _ in ranking.sentence]], k=self.settings.rrf_k)
        if self.reranker is not None and fused:
            depth = max(self.settings.rerank_depth, 1)
            head = fused[:depth]
            inputs = [_rerank_input(by_id[pid]) for pid, _ in head]
            scores = self.reranker.score(query, inputs)
            order = sorted(range(len(head)), key=lambda i: (-scores[i], i))  # ties keep the fused order
            ranking.fused = [(head[i][0], scores[i]) for i in order] + fused[depth:]
            ranking.reranked = True
        return ranking

    def search(self, principal: Principal, query: str, as_of: datetime, k: int | None = None) -> Retrieval:
        started = time.perf_counter()
        top = k or self.settings.k
        access = AccessFilter.for_principal(principal, as_of)
        key = None
        if self.cache is not None:
            key = cache_key(principal, query, access.as_of, self.cache.generation(principal.tenant), top)
            raw = self.cache.get(key)
            if raw is not None:
                hit = Retrieval.from_json(raw)
                hit.elapsed_ms = (time.perf_counter() - started) * 1000
                return hit
        ranking = self.rank(query, access)
        fused = ranking.fused[:top]
        result = Retrieval(
            passages=[ranking.passages[pid] for pid, _ in fused],
            lexical_ids=[h.passage.passage_id for h in ranking.lexical],
            dense_ids=[h.passage.passage_id for h in ranking.dense],
            fused=fused,
        )
        if self.cache is not None and key is not None:
            self.cache.set(key, result.to_json(), self.settings.cache_ttl_s)
        result.elapsed_ms = (time.perf_counter() - started) * 1000
        return result
