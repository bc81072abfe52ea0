"""Records, per answerable question of one evaluation set, what the ranking pipeline reads, so that
bench/loo_rank.py can replay it under any method (bench/leave_one_out.py).

Per question: BM25's top `candidates` (the lexical store's own floor, 0), dense's top `candidates`
with no floor (a floor is applied in the replay: the top n above a floor is a prefix of the top n),
and the sentence max-sim list: every passage the asker may read, ordered by its best sentence's
cosine to the question (brute force over the sentence vectors of the readable passages, the
permission filter being the stores' own: the readable set is what the vector store returns for the
asker with no floor, read back through the lexical store). Per candidate of any list: the features
`SentenceReranker.score` computes, computed the same way with the same embedder.

The replay with the default method is checked against `Retriever.rank` on every question: the
number of checked questions (every third) whose top 10 differ is reported (`replay_mismatches`); floats of a batch of
different texts can differ in the last bits, nothing else should.
"""

from __future__ import annotations

import pickle
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from loo_rank import Candidate, Method, QuestionFeatures, rank

from indexer.ports import Embedder, Hit
from query.retrieval import Retriever, _rerank_input
from query.sentences import content_terms, embedding_text, sentences
from ragsync.evaluation import load_questions
from ragsync.evaluation.metrics import matches_gold
from ragsync.evaluation.questions import EvalQuestion
from ragsync.settings import Settings
from ragsync.wiring import build_embedded
from schemas.passages import Passage
from schemas.principal import AccessFilter

CHECK_EVERY = 3
"""The replay is checked against the live Retriever on every third question (the live reranker costs
as much as the whole collection of a question)."""
ALL = 100_000
"""Limit of the no-floor vector search that lists what an asker may read (every set is far smaller)."""


def _units(passage: Passage) -> tuple[list[str], list[frozenset[str]], frozenset[str], str]:
    """SentenceReranker's texts and term sets of one passage (query/rerank.py, the same steps)."""
    p = _rerank_input(passage)
    own = sentences(p.text)
    heading = content_terms(p.heading)
    units = [frozenset(content_terms(s) | heading) for s in own] or [frozenset(content_terms(p.text) | heading)]
    texts = [embedding_text(p.heading, s) for s in own] or [embedding_text(p.heading, p.text)]
    return texts, units, frozenset(content_terms(p.text) | heading), p.dense_text or embedding_text(p.heading, p.text)


class _Vectors:
    """Text vectors of one set, embedded once (the embedder's cache holds them too), and each
    passage's reranker units and vectors, computed once per passage."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self.by_text: dict[str, np.ndarray] = {}
        self.by_passage: dict[str, tuple[list[frozenset[str]], frozenset[str], np.ndarray]] = {}

    def passage(self, p: Passage) -> tuple[list[frozenset[str]], frozenset[str], np.ndarray]:
        """(sentence term sets, passage terms, vectors of the sentences then of the passage's dense text)."""
        if p.passage_id not in self.by_passage:
            texts, units, bag, dense_text = _units(p)
            self.by_passage[p.passage_id] = (units, bag, self.get([*texts, dense_text]))
        return self.by_passage[p.passage_id]

    def get(self, texts: list[str]) -> np.ndarray:
        missing = [t for t in dict.fromkeys(texts) if t not in self.by_text]
        for start in range(0, len(missing), 64):
            chunk = missing[start : start + 64]
            for t, v in zip(chunk, np.asarray(self.embedder.embed(chunk), dtype=np.float32), strict=True):
                self.by_text[t] = v
        return np.stack([self.by_text[t] for t in texts]) if texts else np.zeros((0, self.embedder.dim))


LIVE_LISTS = Method(sentence_weight=1.0, subquery_weight=1.0)
"""The method the replay is also checked under against a live Retriever with both lists on (when the
home's store holds sentence vectors): the lists come from the stores, not from the replay's features."""


def _has_sentence_vectors(settings: Settings) -> bool:
    """Whether the home's vector shard holds sentence vectors, read without adding them (opened asking
    for none; the embedder gives the dimension)."""
    from indexer.qdrant_edge import EdgeVectorIndex

    components = build_embedded(settings)
    try:
        vector = components.vector
        return isinstance(vector, EdgeVectorIndex) and vector.holds_sentences
    finally:
        components.close()


def collect_set(name: str, base: Path, home: Path, model_path: Path, candidates: int = 50) -> dict[str, Any]:
    settings = Settings(home=home, embed_model_path=model_path, session_secret="loo-collect-" + "x" * 20)
    stored = _has_sentence_vectors(settings)
    components = build_embedded(settings.model_copy(update={"sentence_vectors": stored}))
    try:
        retriever = components.retriever()
        retriever = Retriever(
            retriever.lexical, retriever.vector, retriever.embedder, None, retriever.settings, retriever.reranker
        )
        both = Retriever(
            retriever.lexical,
            retriever.vector,
            retriever.embedder,
            None,
            replace(retriever.settings, sentence_weight=1.0, subquery_weight=1.0),
            retriever.reranker,
        )
        listed = Retriever(
            retriever.lexical,
            retriever.vector,
            retriever.embedder,
            None,
            replace(retriever.settings, sentence_weight=1.0, dense_floor=-1.0),
            None,
        )
        embedder = retriever.embedder
        assert embedder is not None and retriever.vector is not None, "needs the embedding model"
        vectors = _Vectors(embedder)
        readable: dict[tuple[str, ...], list[Passage]] = {}
        out: list[QuestionFeatures] = []
        mismatches: list[str] = []
        mismatches_lists: list[str] = []
        checked = 0
        for q in load_questions(base / "questions.jsonl"):
            if q.expect != "answer":
                continue
            access = AccessFilter.for_principal(q.principal, q.as_of or _now())
            from_store = _pairs(listed.sentence_hits(q.question, access, candidates)) if stored else None
            out.append(_question(name, q, access, retriever, embedder, vectors, readable, candidates, from_store))
            if len(out) % CHECK_EVERY == 1:
                checked += 1
                live = [pid for pid, _ in retriever.rank(q.question, access).fused[:10]]
                if rank(out[-1], Method())[:10] != live:
                    mismatches.append(q.id)
                if stored:
                    live_lists = [pid for pid, _ in both.rank(q.question, access).fused[:10]]
                    if rank(out[-1], LIVE_LISTS)[:10] != live_lists:
                        mismatches_lists.append(q.id)
            print(f"\r{name}: {len(out)} questions", end="", file=sys.stderr)
        print(file=sys.stderr)
        return {
            "set": name,
            "questions": out,
            "replay_mismatches": mismatches,
            "replay_checked": checked,
            "sentence_source": "store" if stored else "brute force",
            "replay_mismatches_with_lists": mismatches_lists if stored else None,
            "settings": retriever.settings,
        }
    finally:
        components.close()


def _question(
    name: str,
    q: EvalQuestion,
    access: AccessFilter,
    retriever: Retriever,
    embedder: Embedder,
    vectors: _Vectors,
    readable: dict[tuple[str, ...], list[Passage]],
    candidates: int,
    from_store: list[tuple[str, float]] | None = None,
) -> QuestionFeatures:
    """`from_store`: the sentence list the store's sentence vectors give (then `sentence`, the brute-force
    list kept as `sentence_brute`)."""
    lexical = retriever.lexical_hits(q.question, access, candidates)
    dense = retriever.dense_hits(q.question, access, candidates, floor=-1.0)
    key = (access.tenant, *access.entries, access.as_of.isoformat())
    if key not in readable:
        qv = embedder.embed_query(q.question)
        ids = [h.passage_id for h in retriever.vector.search(qv, access, ALL, -1.0)] if retriever.vector else []
        readable[key] = retriever.lexical.passages(access, ids)
    qvec = np.asarray(embedder.embed_query(q.question), dtype=np.float32)
    pool: dict[str, Passage] = {p.passage_id: p for p in readable[key]}
    sub_hits = _subquery_hits(q.question, access, retriever, candidates)
    for h in (*lexical, *dense, *sub_hits):
        pool.setdefault(h.passage.passage_id, h.passage)
    feats: dict[str, Candidate] = {}
    best: list[tuple[str, float]] = []
    for pid, p in pool.items():
        units, bag, matrix = vectors.passage(p)
        sims = [float(x) for x in matrix @ qvec]
        spans = tuple(i for i, span in enumerate(q.gold) if matches_gold(p.doc_id, p.text, span))
        feats[pid] = Candidate(pid, spans, sims[:-1], units, bag, sims[-1])
        best.append((pid, max(sims[:-1])))
    best.sort(key=lambda t: (-t[1], t[0]))
    keep = {h.passage.passage_id for h in (*lexical, *dense, *sub_hits)} | {pid for pid, _ in best[:candidates]}
    keep |= {pid for pid, _ in from_store or []}
    feats = {pid: c for pid, c in feats.items() if pid in keep}
    return QuestionFeatures(
        set=name,
        id=q.id,
        type=q.type,
        n_spans=len(q.gold),
        terms=sorted(content_terms(q.question)),
        lexical=_pairs(lexical),
        dense=_pairs(dense),
        sentence=best[:candidates] if from_store is None else from_store,
        candidates=feats,
        subquery=_best_per_passage(sub_hits)[:candidates],
        sentence_brute=best[:candidates] if from_store is not None else [],
    )


def _subquery_hits(question: str, access: AccessFilter, retriever: Retriever, candidates: int) -> list[Hit]:
    """Dense hits of each sentence of a question of two or more sentences (none for one sentence)."""
    own = [s for s in sentences(question) if content_terms(s)]
    if len(own) < 2:
        return []
    return [h for s in own for h in retriever.dense_hits(s, access, candidates, floor=-1.0)]


def _best_per_passage(hits: list[Hit]) -> list[tuple[str, float]]:
    best: dict[str, float] = {}
    for h in hits:
        best[h.passage.passage_id] = max(best.get(h.passage.passage_id, -1.0), float(h.score))
    return sorted(best.items(), key=lambda t: (-t[1], t[0]))


def _pairs(hits: list[Hit]) -> list[tuple[str, float]]:
    return [(h.passage.passage_id, float(h.score)) for h in hits]


def _now() -> Any:
    from query.worker import default_as_of

    return default_as_of()


def load_or_collect(name: str, base: Path, home: Path, model_path: Path, refresh: bool = False) -> dict[str, Any]:
    """The set's features from `base/loo-features.pkl` (a cache in the gitignored build folder), else collected."""
    cache = base / "loo-features.pkl"
    if cache.is_file() and not refresh and cache.stat().st_mtime > (home / "state.db").stat().st_mtime:
        with cache.open("rb") as f:
            data: dict[str, Any] = pickle.load(f)
        return data
    data = collect_set(name, base, home, model_path)
    with cache.open("wb") as f:
        pickle.dump(data, f)
    return data
