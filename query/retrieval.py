"""Permission-filtered hybrid retrieval: BM25 and dense, each with its own floor, fused by RRF
(k=60), then the fused top `rerank_depth` reordered by a reranker blended with the fused order.

The reranker (the Reranker port) is the sentence reranker whenever an embedder is loaded, or a
cross-encoder when one is configured. It only reorders what the two permission-filtered rankers
returned, so it can never widen what a principal sees; it lifts paraphrased questions, whose
answer is one sentence of a longer passage. Its score is blended with the fused rank
(`rrf.blend`), never a third vote of equal weight beside the two rankers.

The two rankers run at the same time: BM25 in the calling thread, the query embedding and the
dense search in a shared worker thread (SQLite, ONNX Runtime, qdrant-edge and the HTTP clients
release the GIL while they work, and every adapter is thread-safe), so a fused search costs about
as long as the slower ranker, not the sum. While another search of the process is running (a server under
load, both cores busy) the two run one after the other in the caller's thread instead: the same lists,
without a pool hop per search that buys nothing then.

The AccessFilter goes into each store's own query; nothing here sees a passage the principal
may not read. Two more guards make a revocation or deletion effective at once, wherever a copy
lags behind:

- The deny set (indexer.deny): every candidate, fresh or cached, is dropped when an entry written
  by the worker that consumed a revocation or deletion denies it, before any store converged; the
  lookup follows the searches, so it also counts entries cleared since the query began (its mark),
  which a search may have raced.
- Cached results hold passage IDs and ranks only, never text: a cache hit is read back from the
  lexical store, the store of record, with the permission filter in the query. An entry whose
  passages are not all still readable is not served at all (the query runs fresh). So a cached
  entry can never show what the asker lost, even one written before a revocation and read while
  the generation bump that invalidates it had not happened yet (e.g. Redis came back from an
  outage before the worker's retry). Keys still carry the tenant's generation, so an ACL change
  that widens access is reflected at once too.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime

from indexer.cache import cache_key
from indexer.deny import DenyEntry, DenySet, DenyUnavailable, denies
from indexer.ports import Cache, Embedder, Hit, LexicalIndex, VectorHit, VectorIndex
from indexer.sink import embedding_text
from query.adapter import QueryAdapter
from query.ports import Reranker, RerankInput
from query.rerank import reading
from query.rrf import FUSION_WEIGHT, RRF_K, blend, fuse
from query.sentences import content_terms, sentences
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
    rerank_depth: int = 50
    """The fused candidates a reranker reorders (0: none). 50 is every candidate of one ranker; 20 lost
    paraphrases whose gold both rankers put at 20-40 (eval/README.md)."""
    fusion_weight: float = FUSION_WEIGHT
    concurrent: bool = True
    """BM25 and dense at the same time (False: one after the other, as benchmarks compare)."""
    sentence_weight: float = 0.0
    """RRF weight of the sentence list: passages by their best stored sentence's cosine (max-sim, the
    vector store's `search_sentences`, floored as dense). 0, or a store without sentence vectors: no list."""
    subquery_weight: float = 0.0
    """RRF weight of the per-sentence list: each sentence of a question of two or more (with a content
    word) searched alone, passages by their best cosine to any of them, floored as dense. 0: no list."""


@dataclass
class Ranking:
    """Every stage's list for one query: what `search` cuts to k, and what evaluation measures."""

    lexical: list[Hit]
    dense: list[Hit]
    fused: list[tuple[str, float]]  # every candidate: RRF order, the top rerank_depth reordered when reranked
    passages: dict[str, Passage]
    rrf: list[tuple[str, float]] = field(default_factory=list)  # the RRF order before reranking
    rerank_scores: dict[str, float] = field(default_factory=dict)  # the reranker's own score of each reranked one
    reranked: bool = False
    sentence: list[Hit] = field(default_factory=list)  # the sentence list (max-sim), when used
    subquery: list[Hit] = field(default_factory=list)  # the per-sentence list, best hit per passage, when used


@dataclass
class Retrieval:
    passages: list[Passage]
    lexical_ids: list[str] = field(default_factory=list)
    dense_ids: list[str] = field(default_factory=list)
    fused: list[tuple[str, float]] = field(default_factory=list)
    cached: bool = False
    elapsed_ms: float = 0.0
    passage_ids: list[str] = field(default_factory=list)
    """Of a cached entry read back: the IDs to load from the store of record (its `passages` are empty)."""

    def to_json(self) -> bytes:
        """IDs and ranks only: a cache never holds document text (see the module docstring)."""
        return json.dumps(
            {
                "passage_ids": [p.passage_id for p in self.passages],
                "lexical_ids": self.lexical_ids,
                "dense_ids": self.dense_ids,
                "fused": self.fused,
            }
        ).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> Retrieval:
        data = json.loads(raw)
        # Entries written before caches held IDs only still name their passages; only the IDs are used.
        ids = data.get("passage_ids") or [p["passage_id"] for p in data.get("passages", [])]
        return cls(
            passages=[],
            lexical_ids=data["lexical_ids"],
            dense_ids=data["dense_ids"],
            fused=[(i, s) for i, s in data["fused"]],
            cached=True,
            passage_ids=list(ids),
        )


def _rerank_input(passage: Passage) -> RerankInput:
    return RerankInput(" > ".join(passage.heading_path) or passage.title, passage.text, embedding_text(passage))


def passage_sentence_texts(passage: Passage) -> tuple[str, ...]:
    """The sentence texts the reranker and the extractive model embed for the passage ("heading: sentence";
    the whole text as one unit when no sentence is quotable): what the stores keep sentence vectors of."""
    return reading(_rerank_input(passage))[0]


_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()
_POOL_THREADS = 8


def _pool() -> ThreadPoolExecutor:
    """One pool for the process: each fused search borrows one thread for its dense half, so at most
    `_POOL_THREADS` dense searches overlap with their BM25 halves; beyond that they queue, never deadlock
    (the BM25 half runs in the caller's own thread)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=_POOL_THREADS, thread_name_prefix="ragsync-dense")
        return _POOL


class _Searches:
    """How many fused searches of this process are running. Running a search's two rankers side by side
    buys latency only while a core is free: with another search running (a server under load), handing
    the dense half to a pool thread costs a submit, a future, a wake-up and a context copy per search
    for nothing (both cores are busy anyway), so then the two run one after the other in the caller's
    thread. The lists are the same either way; only when they are worked out differs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running = 0

    @contextlib.contextmanager
    def one(self) -> Iterator[bool]:
        """Counts this search while it runs; yields whether it is the only one."""
        with self._lock:
            self._running += 1
            alone = self._running == 1
        try:
            yield alone
        finally:
            with self._lock:
                self._running -= 1


_SEARCHES = _Searches()


class Retriever:
    def __init__(
        self,
        lexical: LexicalIndex,
        vector: VectorIndex | None,
        embedder: Embedder | None,
        cache: Cache | None,
        settings: RetrievalSettings | None = None,
        reranker: Reranker | None = None,
        deny: DenySet | None = None,
        adapter: QueryAdapter | None = None,
    ) -> None:
        self.reranker = reranker
        self.adapter = adapter
        """Moves the question's vector before the passage-vector search (query.adapter); None: unchanged."""
        self.deny = deny
        self.deny_unavailable = 0
        """Queries answered without the deny set because it could not be read (from the stores alone)."""
        self._deny_warned = 0.0
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

    def dense_hits(
        self,
        query: str,
        access: AccessFilter,
        limit: int | None = None,
        floor: float | None = None,
        lexical: Future[list[Hit]] | None = None,
    ) -> list[Hit]:
        """Nearest passages, read back from the lexical store (the vector store holds IDs only).

        The read-back applies the permission filter again, in the lexical store's own query: a
        passage the vector store still holds but the lexical store has revoked or deleted is dropped.

        `lexical`: the BM25 half of the same search (same AccessFilter, same lexical store). When it has
        finished by the time the vector store answered, the passages it returned are taken from it and
        only the others are read back (see `_read_hits`); it is never waited for.
        """
        if self.vector is None or self.embedder is None:
            return []
        vector = self.embedder.embed_query(query)
        if self.adapter is not None:
            vector = self.adapter.apply(vector)
        found = self.vector.search(
            vector, access, limit or self.settings.candidates, self.settings.dense_floor if floor is None else floor
        )
        known = lexical.result() if lexical is not None and lexical.done() and not lexical.exception() else []
        return self._read_hits(found, access, known)

    def _read_hits(self, found: list[VectorHit], access: AccessFilter, known: list[Hit] | None = None) -> list[Hit]:
        """The vector store's hits with their passages from the lexical store, under `access`.

        `known`: hits the lexical store returned to the BM25 half of this very search, under this very
        AccessFilter (its own query, its own permission filter): the lexical store already admitted
        those passages for this asker at this instant, and they are in the answer's candidates through
        the BM25 list whatever the dense list holds, so reading them again would re-check nothing the
        answer does not already show. Only the rest are read back, each re-checked by the store. Never
        hits of another search or another principal (the Retriever keeps none between searches)."""
        if not found:
            return []
        passages = {h.passage.passage_id: h.passage for h in known or ()}
        missing = [h.passage_id for h in found if h.passage_id not in passages]
        if missing:
            passages.update((p.passage_id, p) for p in self.lexical.passages(access, missing))
        return [Hit(passages[h.passage_id], h.score) for h in found if h.passage_id in passages]

    def sentence_hits(self, query: str, access: AccessFilter, limit: int | None = None) -> list[Hit]:
        """Passages by their best stored sentence (max-sim), floored as dense, read back as dense hits are;
        none when the list is off or the store keeps no sentence vectors."""
        vector_index = self.vector
        if self.settings.sentence_weight <= 0 or vector_index is None or self.embedder is None:
            return []
        if not vector_index.sentence_vectors:
            return []
        found = vector_index.search_sentences(
            self.embedder.embed_query(query), access, limit or self.settings.candidates, self.settings.dense_floor
        )
        return self._read_hits(found, access)

    def subquery_hits(self, query: str, access: AccessFilter, limit: int | None = None) -> list[Hit]:
        """Each sentence of a question of two or more searched alone (dense, floored): every passage once,
        with its best cosine to any of them, best first; none for a one-sentence question or when off."""
        if self.settings.subquery_weight <= 0 or not self.dense_enabled:
            return []
        own = [s for s in sentences(query) if content_terms(s)]
        if len(own) < 2:
            return []
        top = limit or self.settings.candidates
        best: dict[str, Hit] = {}
        for s in own:
            for h in self.dense_hits(s, access, top):
                kept = best.get(h.passage.passage_id)
                if kept is None or h.score > kept.score:
                    best[h.passage.passage_id] = h
        return sorted(best.values(), key=lambda h: (-h.score, h.passage.passage_id))[:top]

    def deny_mark(self) -> int | None:
        """The deny set's mark, taken before a query's searches (None: no deny set, or unreadable)."""
        if self.deny is None:
            return None
        try:
            return self.deny.mark()
        except DenyUnavailable:
            return None

    def deny_entries(self, access: AccessFilter, doc_ids: set[str], mark: int | None = None) -> list[DenyEntry]:
        """The deny set's entries for these documents, with those cleared since `mark` (taken before the
        searches: an entry cleared while they ran still counts, indexer.deny); none (stores alone) when
        it cannot be read.

        Without the deny set a change is effective once the stores converged (they never depend on
        it); refusing every query during a Redis outage would trade availability for a window of
        milliseconds. The count is exported for operators.
        """
        if self.deny is None or not doc_ids:
            return []
        try:
            if mark is None:
                return self.deny.lookup(access.tenant, doc_ids)
            return self.deny.lookup_since(access.tenant, doc_ids, mark)
        except DenyUnavailable as exc:
            self.deny_unavailable += 1
            now = time.monotonic()
            if now - self._deny_warned > 30.0:
                self._deny_warned = now
                log.warning("deny set unavailable (%s): answering from the stores alone", exc)
            return []

    def _allowed(self, hits: list[Hit], entries: list[DenyEntry], access: AccessFilter) -> list[Hit]:
        if not entries:
            return hits
        return [h for h in hits if not any(denies(e, h.passage, access) for e in entries)]

    def candidates(self, query: str, access: AccessFilter) -> tuple[list[Hit], list[Hit]]:
        """Both floored candidate lists, the dense one in a pool thread while BM25 runs here; one after
        the other in this thread while another search is running (see `_Searches`)."""
        if not self.settings.concurrent or not self.dense_enabled:
            return self._one_after_the_other(query, access)
        with _SEARCHES.one() as alone:
            if not alone:
                return self._one_after_the_other(query, access)
            return self._side_by_side(query, access)

    def _one_after_the_other(self, query: str, access: AccessFilter) -> tuple[list[Hit], list[Hit]]:
        lexical: Future[list[Hit]] = Future()
        lexical.set_result(self.lexical_hits(query, access))
        return lexical.result(), self.dense_hits(query, access, lexical=lexical)

    def _side_by_side(self, query: str, access: AccessFilter) -> tuple[list[Hit], list[Hit]]:
        # In a copy of this context: the dense half shares the request's embedding scope (the question
        # is embedded once for both halves, the reranker and the answering model). The BM25 half's
        # passages go to the dense half's read-back once ready (`dense_hits`: never waited for).
        lexical: Future[list[Hit]] = Future()
        dense = _pool().submit(contextvars.copy_context().run, self.dense_hits, query, access, None, None, lexical)
        try:
            hits = self.lexical_hits(query, access)
        except BaseException as exc:
            dense.cancel()
            lexical.set_exception(exc)
            raise
        lexical.set_result(hits)
        return hits, dense.result()

    def rank(self, query: str, access: AccessFilter) -> Ranking:
        """Both rankers (at the same time), the deny set over every candidate, RRF over them, and the
        reranker over the fused top blended with the fused order."""
        mark = self.deny_mark()
        lexical, dense = self.candidates(query, access)
        sentence, subquery = self.sentence_hits(query, access), self.subquery_hits(query, access)
        docs = {h.passage.doc_id for h in (*lexical, *dense, *sentence, *subquery)}
        entries = self.deny_entries(access, docs, mark)
        lexical, dense = self._allowed(lexical, entries, access), self._allowed(dense, entries, access)
        sentence, subquery = self._allowed(sentence, entries, access), self._allowed(subquery, entries, access)
        by_id: dict[str, Passage] = {}
        for h in (*lexical, *dense, *sentence, *subquery):
            by_id.setdefault(h.passage.passage_id, h.passage)
        named = [
            (lexical, 1.0),
            (dense, 1.0),
            (sentence, self.settings.sentence_weight),
            (subquery, self.settings.subquery_weight),
        ]
        used = [([h.passage.passage_id for h in hits], w) for hits, w in named if w > 0]
        fused = fuse([ids for ids, _ in used], k=self.settings.rrf_k, weights=[w for _, w in used])
        ranking = Ranking(lexical, dense, fused, by_id, rrf=fused, sentence=sentence, subquery=subquery)
        depth = self.settings.rerank_depth
        if self.reranker is not None and len(fused) > 1 and depth > 0:
            head = [pid for pid, _ in fused[:depth]]
            scores = self.reranker.score(query, [_rerank_input(by_id[pid]) for pid in head])
            ranking.rerank_scores = dict(zip(head, scores, strict=True))
            ranking.fused = blend(head, scores, self.settings.fusion_weight) + fused[depth:]
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
                hit = self._read_back(Retrieval.from_json(raw), access)
                if hit is not None:
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

    def _read_back(self, cached: Retrieval, access: AccessFilter) -> Retrieval | None:
        """The cached ranking with its passages from the store of record, or None to run fresh.

        None as soon as one passage is no longer readable by the asker (revoked, deleted, denied):
        serving the rest would be a ranking the stores would not give any more.
        """
        wanted = cached.passage_ids
        mark = self.deny_mark()
        found = {p.passage_id: p for p in self.lexical.passages(access, wanted)} if wanted else {}
        if len(found) != len(set(wanted)):
            return None
        entries = self.deny_entries(access, {p.doc_id for p in found.values()}, mark)
        if any(denies(e, p, access) for e in entries for p in found.values()):
            return None
        cached.passages = [found[pid] for pid in wanted]
        return cached
